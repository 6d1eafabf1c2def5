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
    /// Bytes at the start of the partial file that are on disk (fsynced). Resume starts here.
    public var durableOffset: Int64

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
