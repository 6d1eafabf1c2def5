import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Resume journals as side files in one folder (`<id>.courier-journal`, JSON), for
/// `courier get`, whose journal lives beside the file it downloads.
///
/// `save` is durable when it returns: the journal is written to a temporary file, fsynced,
/// renamed over the old one, and the folder is fsynced.
public struct FileResumeJournalStore: ResumeJournalStore {
    public let directory: URL

    public init(directory: URL) {
        self.directory = directory
    }

    /// The side file of `downloadId` (the id with anything but letters, digits, `.`, `-`, `_`
    /// percent-encoded).
    public func journalFile(downloadId: String) -> URL {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: ".-_")
        let name = downloadId.addingPercentEncoding(withAllowedCharacters: allowed) ?? downloadId
        return directory.appendingPathComponent(name + ".courier-journal")
    }

    public func load(downloadId: String) throws -> ResumeJournal? {
        let file = journalFile(downloadId: downloadId)
        guard FileManager.default.fileExists(atPath: file.path) else { return nil }
        do {
            let journal = try JSONDecoder().decode(ResumeJournal.self, from: Data(contentsOf: file))
            return journal.downloadId == downloadId ? journal : nil
        } catch {
            // A damaged journal is not fatal: the download starts over.
            return nil
        }
    }

    public func save(_ journal: ResumeJournal) throws {
        let file = journalFile(downloadId: journal.downloadId)
        let temporary = file.appendingPathExtension("tmp")
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data: Data
        do {
            data = try encoder.encode(journal)
        } catch {
            throw CourierError(.internal, "cannot encode the journal of \(journal.downloadId)", cause: "\(error)")
        }
        let fd = open(temporary.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CourierError.posix("open", path: temporary.path) }
        var written = 0
        let failed: Int32? = data.withUnsafeBytes { raw in
            while written < raw.count {
                let count = write(fd, raw.baseAddress.map { $0 + written }, raw.count - written)
                if count < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                written += count
            }
            return fsync(fd) == 0 ? nil : errno
        }
        close(fd)
        if let failed {
            unlink(temporary.path)
            throw CourierError.posix("write", path: temporary.path, errno: failed)
        }
        guard rename(temporary.path, file.path) == 0 else {
            throw CourierError.posix("rename", path: file.path)
        }
        let folder = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if folder >= 0 {
            fsync(folder)
            close(folder)
        }
    }

    public func remove(downloadId: String) throws {
        let file = journalFile(downloadId: downloadId)
        if unlink(file.path) != 0 && errno != ENOENT {
            throw CourierError.posix("remove", path: file.path)
        }
    }
}
