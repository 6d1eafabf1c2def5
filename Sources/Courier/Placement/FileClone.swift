import CSystemShims
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Copies a file's bytes into another the cheapest way the filesystem allows: a reflink clone
/// (`FICLONE`: shared extents, copy on write; Btrfs, XFS, bcachefs), else an in-kernel copy
/// (`copy_file_range`), else reads and writes. The result is the same bytes either way.
package enum FileClone {
    package enum Method: String, Sendable, Equatable {
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
