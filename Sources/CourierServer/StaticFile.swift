import Courier
import Foundation
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// A regular file as the origin serves it: its identity when the headers were made, its
/// validators (strong ETag, Last-Modified) and a streaming reader for a byte range.
///
/// The body is read from a descriptor opened when the body is written, and that descriptor must
/// still name the file the headers described (same device, inode, size and modification time);
/// otherwise the connection is dropped rather than sending bytes the headers do not describe.
/// Reads run on NIO's blocking thread pool, one chunk ahead of the socket.
struct StaticFile: Sendable {
    let path: String
    let device: UInt64
    let inode: UInt64
    let length: Int64
    let modifiedSeconds: Int
    let modifiedNanoseconds: Int

    /// Stats `path`; nil when it is missing or not a regular file.
    static func lookup(path: String) -> StaticFile? {
        var info = Glibc.stat()
        guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return StaticFile(path: path, info: info)
    }

    private init(path: String, info: Glibc.stat) {
        self.path = path
        self.device = UInt64(info.st_dev)
        self.inode = UInt64(info.st_ino)
        self.length = Int64(info.st_size)
        self.modifiedSeconds = info.st_mtim.tv_sec
        self.modifiedNanoseconds = info.st_mtim.tv_nsec
    }

    /// A strong validator: changes whenever the file is replaced (inode) or rewritten (size,
    /// nanosecond modification time). Staged files are never rewritten in place.
    var etag: String {
        "\"\(String(length, radix: 16))-\(String(modifiedSeconds, radix: 16)).\(String(modifiedNanoseconds, radix: 16))-\(String(inode, radix: 16))\""
    }

    var lastModified: Date { Date(timeIntervalSince1970: TimeInterval(modifiedSeconds)) }

    func sameFile(as other: StaticFile) -> Bool {
        device == other.device && inode == other.inode && length == other.length
            && modifiedSeconds == other.modifiedSeconds && modifiedNanoseconds == other.modifiedNanoseconds
    }

    /// Streams `range` (inclusive bounds) to `write`, reading `chunkSize` bytes at a time on the
    /// thread pool with one read in flight while the previous chunk is written.
    func stream(
        range: ClosedRange<Int64>,
        chunkSize: Int,
        rateLimit: Int64? = nil,
        allocator: ByteBufferAllocator,
        write: (ByteBuffer) async throws -> Void
    ) async throws {
        let chunkSize = rateLimit.map { max(1024, min(chunkSize, Int($0 / 8))) } ?? chunkSize
        let started = ContinuousClock.now
        let pool = NIOThreadPool.singleton
        let eventLoop = MultiThreadedEventLoopGroup.singleton.any()
        let descriptor = try await pool.runIfActive { () throws -> Int32 in
            let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard fd >= 0 else { throw CourierError.posix("open", path: path) }
            var info = Glibc.stat()
            guard fstat(fd, &info) == 0, StaticFile(path: path, info: info).sameFile(as: self) else {
                close(fd)
                throw CourierError(.io, "\(path) changed while it was being served")
            }
            _ = posix_fadvise(fd, off_t(range.lowerBound), off_t(range.count), POSIX_FADV_SEQUENTIAL)
            return fd
        }
        let end = range.upperBound + 1
        func read(at offset: Int64) -> EventLoopFuture<ByteBuffer> {
            let count = Int(min(Int64(chunkSize), end - offset))
            return pool.runIfActive(eventLoop: eventLoop) { () throws -> ByteBuffer in
                var buffer = allocator.buffer(capacity: count)
                var filled = 0
                while filled < count {
                    let n = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count - filled) { raw in
                        pread(descriptor, raw.baseAddress, count - filled, off_t(offset) + off_t(filled))
                    }
                    if n < 0 {
                        if errno == EINTR { continue }
                        throw CourierError.posix("read", path: path)
                    }
                    if n == 0 { throw CourierError(.io, "\(path) ended early while it was being served") }
                    filled += n
                }
                return buffer
            }
        }
        var offset = range.lowerBound
        var pending: EventLoopFuture<ByteBuffer>? = read(at: offset)
        do {
            while let current = pending {
                let chunk = try await current.get()
                offset += Int64(chunk.readableBytes)
                pending = offset < end ? read(at: offset) : nil
                try await write(chunk)
                if let rateLimit, rateLimit > 0 {
                    // Hold the response to the limit: sleep until the bytes sent so far are due.
                    let due = started + .milliseconds((offset - range.lowerBound) * 1000 / rateLimit)
                    if due > ContinuousClock.now { try await Task.sleep(until: due) }
                }
            }
        } catch {
            // Never close the descriptor under a read still running on the pool.
            _ = try? await pending?.get()
            close(descriptor)
            throw error
        }
        close(descriptor)
    }
}

extension Date {
    /// The IMF-fixdate form of HTTP (`Sun, 06 Nov 1994 08:49:37 GMT`).
    var httpDate: String {
        var seconds = time_t(timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        var buffer = [Int8](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
