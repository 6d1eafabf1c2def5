import CSystemShims
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Atomic renames beyond `rename(2)`: swapping two paths and renaming without replacing.
enum AtomicRename {
    /// Swaps `a` and `b` in one step (both must exist, on one filesystem). Returns false when the
    /// filesystem or kernel cannot exchange (EINVAL, ENOSYS), so the caller falls back.
    static func exchange(_ a: URL, _ b: URL) throws -> Bool {
        if courier_renameat2(AT_FDCWD, a.path, AT_FDCWD, b.path, UInt32(RENAME_EXCHANGE)) == 0 { return true }
        if errno == EINVAL || errno == ENOSYS { return false }
        throw CourierError.posix("exchange \(a.path) and", path: b.path)
    }

    /// Renames `source` to `destination`, failing with EEXIST rather than replacing it.
    static func renameNoReplace(_ source: URL, _ destination: URL) throws {
        if courier_renameat2(AT_FDCWD, source.path, AT_FDCWD, destination.path, UInt32(RENAME_NOREPLACE)) == 0 { return }
        if errno == EINVAL || errno == ENOSYS {
            // No RENAME_NOREPLACE here: plain rename of a folder still refuses a non-empty target.
            if access(destination.path, F_OK) == 0 { throw CourierError.posix("rename to", path: destination.path, errno: EEXIST) }
            if rename(source.path, destination.path) == 0 { return }
        }
        throw CourierError.posix("rename \(source.path) to", path: destination.path)
    }
}

/// Flushing a whole filesystem at once (one `syncfs` instead of an fsync per file).
enum FilesystemSync {
    /// Flushes the filesystem holding `url` to disk.
    static func flush(containing url: URL) throws {
        let fd = open(url.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw CourierError.posix("open", path: url.path) }
        defer { close(fd) }
        guard courier_syncfs(fd) == 0 else { throw CourierError.posix("syncfs", path: url.path) }
    }

    /// Starts writing the file's dirty pages to disk and returns without waiting (a later
    /// `flush` then has less to wait for). Advice only: errors are left to that `flush`.
    static func startWriteback(_ fd: Int32) {
        _ = courier_start_writeback(fd)
    }
}
