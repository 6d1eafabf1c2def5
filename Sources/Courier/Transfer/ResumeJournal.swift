import Foundation

/// What a download needs to resume where it stopped: the source, its validator and how much of
/// the partial file is known to be durable (fsynced before this journal said so).
public struct ResumeJournal: Sendable, Codable, Equatable {
    /// The download this journal belongs to.
    public var downloadId: String
    public var url: URL
    /// The strong ETag of the resource when the partial data was fetched, if any.
    public var etag: String?
    /// The Last-Modified of the resource when the partial data was fetched, if any.
    public var lastModified: String?
    /// The resource's total length, once known.
    public var totalLength: Int64?
    /// Bytes at the start of the partial file that are on disk (fsynced). After a power cut the
    /// partial file is trusted up to here; after a process crash, up to its length.
    public var durableOffset: Int64
    /// Lowercase hex SHA-256 the whole file must have, when the caller said: the content's
    /// identity, which lets another URL serving the same content resume this journal.
    public var contentSHA256: String?

    public init(
        downloadId: String,
        url: URL,
        etag: String? = nil,
        lastModified: String? = nil,
        totalLength: Int64? = nil,
        durableOffset: Int64 = 0
    ) {
        self.downloadId = downloadId
        self.url = url
        self.etag = etag
        self.lastModified = lastModified
        self.totalLength = totalLength
        self.durableOffset = durableOffset
    }
}

/// Where journals are kept: a side file for `courier get`, the state database for the queue.
/// `save` must be durable when it returns.
public protocol ResumeJournalStore: Sendable {
    func load(downloadId: String) throws -> ResumeJournal?
    func save(_ journal: ResumeJournal) throws
    func remove(downloadId: String) throws
}

// MARK: Validation

extension ResumeJournal {
    /// Why this journal cannot be trusted, or nil when it holds every invariant. A journal is
    /// read back from a file or a database row that something else may have written, so none of
    /// its fields is taken on faith:
    /// - `url` is an absolute http(s) URL with a host;
    /// - `etag` and `lastModified` (sent back as `If-Range`) are at most 1024 bytes and hold no
    ///   control character (a CR or LF there would inject request headers);
    /// - `contentSHA256`, when present, is 64 lowercase hex digits;
    /// - `durableOffset` and `totalLength` lie in `0...HTTPNumber.maximum`, and the offset is
    ///   not past the total when the total is known.
    /// (That the offset is not past the partial file's length is checked where the file is:
    /// `PartialFileWriter.prepare` starts over from 0 if it is.)
    public var validationProblem: String? {
        let scheme = url.scheme?.lowercased()
        guard scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty else {
            return "the URL is not an http(s) URL"
        }
        if let etag, !Self.isSafeValidator(etag) { return "the ETag is not a safe header value" }
        if let lastModified, !Self.isSafeValidator(lastModified) { return "the Last-Modified is not a safe header value" }
        if let contentSHA256, !Self.isSHA256Hex(contentSHA256) { return "the content SHA-256 is not 64 lowercase hex digits" }
        guard (0...HTTPNumber.maximum).contains(durableOffset) else { return "the durable offset \(durableOffset) is out of range" }
        if let totalLength {
            guard (0...HTTPNumber.maximum).contains(totalLength) else { return "the total length \(totalLength) is out of range" }
            guard durableOffset <= totalLength else {
                return "the durable offset \(durableOffset) is past the total length \(totalLength)"
            }
        }
        return nil
    }

    /// This journal if it holds every invariant of `validationProblem`, else nil.
    public func validated() -> ResumeJournal? {
        validationProblem == nil ? self : nil
    }

    /// Whether `value` is a SHA-256 in lowercase hex (64 digits).
    public static func isSHA256Hex(_ value: String) -> Bool {
        value.utf8.count == 64 && value.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// Whether `value` may be sent back as a header value (`If-Range`): non-empty, at most 1024
    /// UTF-8 bytes, no control character (C0, DEL, C1: CR, LF and NUL among them).
    public static func isSafeValidator(_ value: String) -> Bool {
        !value.isEmpty && value.utf8.count <= 1024
            && !value.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// The journal held by the raw bytes of a journal file (the JSON that
    /// `FileResumeJournalStore` writes), validated. Throws `.integrity`, saying why, if the
    /// bytes do not decode, name another download than `downloadId` (when given) or break an
    /// invariant of `validationProblem`. Pure (no I/O): the fuzz entry of the journal loader.
    package static func decodeJournalFile(_ bytes: Data, downloadId: String? = nil) throws -> ResumeJournal {
        let journal = try CourierError.wrapping(.integrity, "the resume journal does not decode") {
            try JSONDecoder().decode(ResumeJournal.self, from: bytes)
        }
        if let downloadId, journal.downloadId != downloadId {
            throw CourierError(.integrity, "the resume journal belongs to another download")
        }
        if let problem = journal.validationProblem {
            throw CourierError(.integrity, "the resume journal is unusable: \(problem)")
        }
        return journal
    }
}
