import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// SHA-256 of a file, computed on a Dispatch worker while the caller does something else with the
/// same file (extraction reads it too, so both are served from the page cache).
final class PackageHasher: @unchecked Sendable {  // @unchecked: `result` and `cancelled` are guarded by `lock`.
    private let lock = NSCondition()
    private var result: Result<String, CourierError>?
    private var cancelled = false

    /// Starts hashing `url` in the background.
    init(url: URL, blockSize: Int) {
        DispatchQueue.global(qos: .utility).async { [self] in
            let outcome = Self.hash(url, blockSize: blockSize) { [self] in
                lock.lock()
                defer { lock.unlock() }
                return cancelled
            }
            lock.lock()
            result = outcome
            lock.broadcast()
            lock.unlock()
        }
    }

    /// Waits for the digest (lowercase hex).
    func wait() throws -> String {
        lock.lock()
        defer { lock.unlock() }
        while result == nil { lock.wait() }
        switch result {
        case .success(let digest): return digest
        case .failure(let error): throw error
        case nil: throw CourierError(.internal, "hashing ended without a result")
        }
    }

    /// Stops hashing early and waits for the worker to let go of the file.
    func cancel() {
        lock.lock()
        cancelled = true
        while result == nil { lock.wait() }
        lock.unlock()
    }

    /// Hashes `url` in the calling thread.
    static func hash(_ url: URL, blockSize: Int, isCancelled: () -> Bool = { false }) -> Result<String, CourierError> {
        let fd = open(url.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(CourierError.posix("open", path: url.path)) }
        defer { close(fd) }
        var hasher = SHA256()
        let size = max(blockSize, 64 << 10)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            if isCancelled() { return .failure(CourierError(.cancelled, "hashing cancelled")) }
            let n = read(fd, buffer.baseAddress, size)
            if n < 0 {
                if errno == EINTR { continue }
                return .failure(CourierError.posix("read", path: url.path))
            }
            if n == 0 { break }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
        return .success(hasher.finalize().hex)
    }
}
