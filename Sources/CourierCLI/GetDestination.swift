import Courier
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where `courier get` writes, checked before any byte is fetched, and what it leaves behind
/// when a download is refused.
enum GetDestination {
    /// The umask Courier was started with (it runs under 0077 itself: CourierCommand.main).
    static let inheritedUmask = Mutex<mode_t>(0o022)

    /// Gives a file `get` finished and verified the mode a new file gets under the user's umask
    /// (0644 under 022), as curl, wget and aria2c leave it: it is the user's download, not
    /// Courier's state. Until it is complete (the part file, the journal) it stays owner-only.
    static func applyUserMode(_ file: URL) throws {
        let mode = 0o666 & ~inheritedUmask.withLock { $0 }
        guard chmod(file.path, mode) == 0 else { throw CourierError.posix("cannot set the mode of", path: file.path) }
    }

    /// Refuses (usage, exit 2, nothing fetched) a destination that is a folder, whose folder is
    /// missing (unless `createFolders`, curl's `--create-dirs`) or not a folder, or that cannot be
    /// written there.
    static func check(file: URL, createFolders: Bool) throws {
        let manager = FileManager.default
        var isFolder: ObjCBool = false
        if manager.fileExists(atPath: file.path, isDirectory: &isFolder), isFolder.boolValue {
            throw CourierError(
                .usage, "\(file.path) is a folder; nothing was downloaded",
                hint: "name a file inside it: -o \(file.path)/NAME")
        }
        let folder = file.deletingLastPathComponent()
        if !manager.fileExists(atPath: folder.path, isDirectory: &isFolder) {
            guard createFolders else {
                throw CourierError(
                    .usage, "the folder \(folder.path) does not exist; nothing was downloaded",
                    hint: "create it, or pass --create-dirs")
            }
            do {
                try manager.createDirectory(at: folder, withIntermediateDirectories: true)
            } catch {
                throw CourierError(.io, "cannot create \(folder.path)", cause: CourierError.readFailure(path: folder.path, error: error))
            }
        } else if !isFolder.boolValue {
            throw CourierError(.usage, "\(folder.path) is not a folder; nothing was downloaded")
        }
        if access(folder.path, W_OK | X_OK) != 0 {
            let reason = String(cString: strerror(errno)).lowercased()
            throw CourierError(.usage, "cannot write in \(folder.path): \(reason); nothing was downloaded")
        }
    }

    /// Removes the partial file and journal of `request` when the partial file is empty: a
    /// download refused before its first byte (an HTTP 404, a refused connection) leaves nothing.
    /// The partial file's lock is taken first, so a file another process is writing is never
    /// removed; a partial file holding bytes is kept for the next run to resume.
    static func removeEmptyLeftovers(of request: DownloadRequest, journal: FileResumeJournalStore) {
        let descriptor = open(request.partialFile.path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else { return }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_size == 0 else { return }
        unlink(request.partialFile.path)
        try? journal.remove(downloadId: request.id)
    }

    /// Copies `file` to standard output (`get URL -o -`).
    static func copyToStandardOutput(_ file: URL) throws {
        let input = open(file.path, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw CourierError.posix("opening", path: file.path) }
        defer { close(input) }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw CourierError.posix("reading", path: file.path)
            }
            if count == 0 { return }
            if let code = buffer[..<count].withUnsafeBytes({ writeAll(STDOUT_FILENO, $0) }) {
                throw CourierError.posix("writing to standard output", errno: code)
            }
        }
    }
}
