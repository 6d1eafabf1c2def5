import CSystemShims
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Copies a file's bytes into another the cheapest way the filesystem allows: a reflink clone
/// (`FICLONE`: shared extents, copy on write; Btrfs, XFS, bcachefs), else an in-kernel copy
/// (`copy_file_range`), else reads and writes. The result is the same bytes either way.
///
/// Where the source may be shared outright (its old name is discarded once the new one is in
/// place), `link(_:matching:into:name:)` makes a hard link instead: the same inode, no data.
package enum FileClone {
    package enum Method: String, Sendable, Equatable {
        /// A hard link to the source's inode: no data was copied, and none needs syncing.
        case link
        /// Shared extents: no data was copied.
        case reflink
        /// The bytes were copied.
        case copy
    }

    /// Fills `destination` (open for writing, empty) with the `size` bytes of `source` (open for
    /// reading), trying a reflink first when `allowReflink`. Throws `io` (or `insufficientSpace`
    /// when the disk is full) if the bytes cannot be copied, or if `source` is shorter than `size`.
    package static func clone(from source: Int32, to destination: Int32, size: Int64, allowReflink: Bool = true) throws -> Method {
        if allowReflink && courier_ficlone(destination, source) == 0 {
            return .reflink
        }
        // EOPNOTSUPP, EINVAL (ext4, tmpfs), EXDEV (another filesystem): copy.
        var copied: Int64 = 0
        var kernelCopy = true
        var inputOffset: Int64 = 0
        var outputOffset: Int64 = 0
        while copied < size && kernelCopy {
            let chunk = UInt(min(size - copied, 1 << 30))
            let n = courier_copy_file_range(source, &inputOffset, destination, &outputOffset, chunk, 0)
            if n < 0 {
                if errno == EINTR { continue }
                if errno == ENOSPC { throw full() }
                // EXDEV on older kernels, ENOSYS, EOPNOTSUPP, EINVAL: read and write instead.
                kernelCopy = false
                break
            }
            if n == 0 { throw CourierError(.io, "a file to copy is shorter than its recorded \(size) bytes") }
            copied += Int64(n)
        }
        if copied < size {
            try copyByReading(from: source, to: destination, offset: copied, size: size)
        }
        return .copy
    }

    /// The `linkat(2)` used by `link`; tests inject failures (`EXDEV`, `EPERM`) through it.
    package typealias Linker = @Sendable (_ oldPath: String, _ newDirectory: Int32, _ newName: String) -> Int32

    package static let systemLinker: Linker = { oldPath, directory, name in
        Glibc.linkat(AT_FDCWD, oldPath, directory, name, 0)
    }

    /// Makes `name` in the folder `directory` a hard link to the file at `path`, which must be
    /// the file `source` describes (an `fstat` of the descriptor the caller opened and checked):
    /// after the link, the new name must show the same device, inode, size and mtime (the ctime
    /// moves with the link count). Returns false, leaving no name behind, when the link cannot
    /// be made (`EXDEV`: another filesystem; `EPERM`, `EOPNOTSUPP`: no hard links there;
    /// `EMLINK`; `EEXIST`; anything else) or shows another file (the path was replaced after
    /// `source` was taken): the caller then creates the file and clones or copies its bytes
    /// from the descriptor it checked.
    package static func link(_ path: String, matching source: stat, into directory: Int32, name: String, linker: Linker = systemLinker) -> Bool {
        guard linker(path, directory, name) == 0 else { return false }
        var status = stat()
        guard fstatat(directory, name, &status, AT_SYMLINK_NOFOLLOW) == 0, status.st_mode & S_IFMT == S_IFREG,
            status.st_dev == source.st_dev, status.st_ino == source.st_ino, status.st_size == source.st_size,
            status.st_mtim.tv_sec == source.st_mtim.tv_sec, status.st_mtim.tv_nsec == source.st_mtim.tv_nsec
        else {
            unlinkat(directory, name, 0)
            return false
        }
        return true
    }

    private static func copyByReading(from source: Int32, to destination: Int32, offset start: Int64, size: Int64) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var offset = start
        while offset < size {
            let n = pread(source, buffer.baseAddress, Int(min(Int64(buffer.count), size - offset)), off_t(offset))
            if n < 0 {
                if errno == EINTR { continue }
                throw CourierError.posix("read")
            }
            if n == 0 { throw CourierError(.io, "a file to copy is shorter than its recorded \(size) bytes") }
            var done = 0
            while done < n {
                let w = pwrite(destination, buffer.baseAddress! + done, n - done, off_t(offset) + off_t(done))
                if w < 0 {
                    if errno == EINTR { continue }
                    if errno == ENOSPC { throw full() }
                    throw CourierError.posix("write")
                }
                done += w
            }
            offset += Int64(n)
        }
    }

    private static func full() -> CourierError {
        CourierError(.insufficientSpace, "the disk filled up while copying unchanged content", hint: "free some space and try again")
    }
}
