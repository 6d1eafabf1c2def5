import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Resume journals as side files in one folder (`<id>.courier-journal`, JSON), for
/// `courier get`, whose journal lives beside the file it downloads.
///
/// `save` is durable when it returns: the journal is written to a temporary file, fsynced,
/// renamed over the old one, and the folder is fsynced. A store made with `syncs: false` (the
/// pre-staging job's, which syncs its tree's filesystem at once) skips both fsyncs: a journal
/// lost or older after a power cut costs a refetch, never a wrong byte, because a journal's
/// `durableOffset` is only ever raised after the data up to it was fsynced (a checkpoint). Such a
/// store also keeps no journal that records no durable byte (it removes the file instead): a
/// download killed before its first checkpoint starts over, and a small file that completes
/// before one costs no journal file at all.
///
/// The side files are never followed through a symlink (`O_NOFOLLOW`): a symlink planted at the
/// journal reads as no journal and is replaced (the rename replaces the link, not its target),
/// and one planted at the temporary file is removed before it is created afresh. A journal that
/// does not decode or breaks an invariant of `ResumeJournal.validationProblem` is discarded
/// (logged at debug) and the download starts over.
public struct FileResumeJournalStore: ResumeJournalStore {
    public let directory: URL
    private let logger: Logger?
    /// Whether `save` fsyncs the journal and its folder (and keeps a journal with no durable
    /// byte). Default true.
    public let syncs: Bool

    /// The largest journal file read; a bigger one is not a journal this store wrote.
    static let maximumFileSize = 64 << 10

    /// `directory.path`, taken once: every load, save and removal names a file in it.
    private let directoryPath: String

    public init(directory: URL, logger: Logger? = nil, syncs: Bool = true) {
        self.directory = directory
        directoryPath = directory.path
        self.logger = logger
        self.syncs = syncs
    }

    /// The side file of `downloadId` (the id with anything but letters, digits, `.`, `-`, `_`
    /// percent-encoded).
    public func journalFile(downloadId: String) -> URL {
        URL(fileURLWithPath: journalPath(downloadId: downloadId), isDirectory: false)
    }

    /// The path of `journalFile(downloadId:)`, built as a string: each download asks for it up to
    /// four times (a URL built and turned back into a path each time cost 2% of a prestage run).
    func journalPath(downloadId: String) -> String {
        // Usually every byte is allowed and the name is the id: no CharacterSet work (built per
        // call, it and the encoding cost 40 µs a download).
        let plain = downloadId.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"):
                return true
            default:
                return false
            }
        }
        let name = plain ? downloadId : downloadId.addingPercentEncoding(withAllowedCharacters: Self.allowed) ?? downloadId
        return directoryPath + "/" + name + ".courier-journal"
    }

    private static let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: ".-_"))

    public func load(downloadId: String) throws -> ResumeJournal? {
        let file = journalPath(downloadId: downloadId)
        let fd = open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { return nil }
            // ELOOP: a symlink. Anything else unreadable: a damaged journal is not fatal either.
            discard(file, downloadId: downloadId, reason: String(cString: strerror(code)))
            return nil
        }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            discard(file, downloadId: downloadId, reason: "not a regular file")
            return nil
        }
        var bytes = [UInt8](repeating: 0, count: Self.maximumFileSize + 1)
        var count = 0
        while count < bytes.count {
            let read = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + count, $0.count - count, off_t(count)) }
            if read < 0 && errno == EINTR { continue }
            guard read > 0 else { break }
            count += read
        }
        guard count <= Self.maximumFileSize else {
            discard(file, downloadId: downloadId, reason: "larger than \(Self.maximumFileSize) bytes")
            return nil
        }
        do {
            return try ResumeJournal.decodeJournalFile(Data(bytes[0..<count]), downloadId: downloadId)
        } catch {
            // A damaged or tampered journal is not fatal: the download starts over.
            discard(file, downloadId: downloadId, reason: "\(error)")
            return nil
        }
    }

    private func discard(_ file: String, downloadId: String, reason: String) {
        logger?.debug(
            "resume journal discarded: the download starts over",
            metadata: ["download-id": "\(downloadId)", "file": "\(file)", "reason": "\(reason)"])
    }

    public func save(_ journal: ResumeJournal) throws {
        let file = journalPath(downloadId: journal.downloadId)
        if !syncs && journal.durableOffset == 0 {
            // Nothing durable to resume from: no journal, and none of an earlier response.
            if unlink(file) != 0 && errno != ENOENT { throw CourierError.posix("remove", path: file) }
            return
        }
        let temporary = file + ".tmp"
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try CourierError.wrapping(.internal, "cannot encode the journal of \(journal.downloadId)") {
            try encoder.encode(journal)
        }
        // A fresh file, never one reached through a planted symlink: whatever is at the temporary
        // name (a stale file of a crashed run, a symlink) goes first, and O_EXCL | O_NOFOLLOW
        // refuse anything that appears there meanwhile.
        if unlink(temporary) != 0 && errno != ENOENT {
            throw CourierError.posix("remove", path: temporary)
        }
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CourierError.posix("open", path: temporary) }
        let failed = data.withUnsafeBytes { writeAll(fd, $0) } ?? (!syncs || fsync(fd) == 0 ? nil : errno)
        close(fd)
        if let failed {
            unlink(temporary)
            throw CourierError.posix("write", path: temporary, errno: failed)
        }
        guard rename(temporary, file) == 0 else {
            throw CourierError.posix("rename", path: file)
        }
        guard syncs else { return }
        let folder = open(directoryPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if folder >= 0 {
            fsync(folder)
            close(folder)
        }
    }

    public func remove(downloadId: String) throws {
        let file = journalPath(downloadId: downloadId)
        if unlink(file) != 0 && errno != ENOENT {
            throw CourierError.posix("remove", path: file)
        }
    }
}
