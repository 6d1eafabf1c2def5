#if canImport(Glibc)
import Glibc
#endif

/// Writes every byte of `bytes` to `descriptor`, again after EINTR and after a short write.
/// Returns nil, or the errno of the write that failed (the caller names the file).
package func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32? {
    var offset = 0
    while offset < bytes.count {
        let count = write(descriptor, bytes.baseAddress.map { $0 + offset }, bytes.count - offset)
        if count < 0 {
            if errno == EINTR { continue }
            return errno
        }
        offset += count
    }
    return nil
}
