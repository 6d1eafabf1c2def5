import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A connected AF_UNIX stream socket carrying newline-delimited JSON: the client's end, with
/// blocking reads and writes (the agent's end is served by SwiftNIO, `AgentControlServer`).
/// Not `Sendable`: `AgentClient` keeps it behind a `Mutex`.
final class UnixSocketConnection {
    let descriptor: Int32
    private var buffer: [UInt8] = []
    /// How much of `buffer` is known to hold no newline (so a long line is scanned once).
    private var scanned = 0
    /// The longest line accepted (a receipt with many transactions fits easily).
    static let maxLineBytes = 32 << 20

    init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// Connects to the socket at `path`. Throws `notFound` when nothing listens there.
    static func connect(to path: String, timeout: Double) throws -> UnixSocketConnection {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw CourierError(.io, "cannot create a socket", cause: String(cString: strerror(errno))) }
        var address = try UnixSocketAddress(path: path)
        let result = address.withSockaddr { Glibc.connect(fd, $0, $1) }
        guard result == 0 else {
            let code = errno
            Glibc.close(fd)
            throw CourierError(.notFound, "no agent listens on \(path)", cause: String(cString: strerror(code)))
        }
        var interval = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
        return UnixSocketConnection(descriptor: fd)
    }

    /// The next line without its newline, or nil at end of stream.
    func readLine() throws -> Data? {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let newline: Int? = buffer.withUnsafeBufferPointer { bytes -> Int? in
                guard scanned < bytes.count, let base = bytes.baseAddress,
                    let found = memchr(base + scanned, 0x0A, bytes.count - scanned)
                else { return nil }
                return UnsafePointer(found.assumingMemoryBound(to: UInt8.self)) - base
            }
            if let newline {
                let line = Data(buffer[0..<newline])
                buffer.removeSubrange(0...newline)
                scanned = 0
                return line
            }
            scanned = buffer.count
            guard buffer.count <= Self.maxLineBytes else {
                throw CourierError(.usage, "a control request is longer than \(Self.maxLineBytes) bytes")
            }
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                let code = errno
                if code == EAGAIN || code == EWOULDBLOCK {
                    throw CourierError(.network, "the agent did not answer in time")
                }
                throw CourierError(.io, "cannot read from the control socket", cause: String(cString: strerror(code)))
            }
            if count == 0 { return nil }
            buffer.append(contentsOf: chunk[0..<count])
        }
    }

    /// Writes all of `data` (MSG_NOSIGNAL: a closed peer is an error, never SIGPIPE).
    func write(_ data: Data) throws {
        try data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            guard let base = raw.baseAddress else { return }
            var offset = 0
            while offset < raw.count {
                let sent = send(descriptor, base + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if sent < 0 {
                    if errno == EINTR { continue }
                    throw CourierError(.io, "cannot write to the control socket", cause: String(cString: strerror(errno)))
                }
                offset += sent
            }
        }
    }

    func close() {
        _ = Glibc.close(descriptor)
    }
}

/// Linux's `struct ucred` as SO_PEERCRED fills it (`AgentControlServer` checks its uid).
struct PeerCredentials {
    var pid: pid_t = 0
    var uid: uid_t = 0
    var gid: gid_t = 0
}

/// A `sockaddr_un` for a filesystem path, or an abstract one for a path starting with `@`
/// (as `NOTIFY_SOCKET` may name).
public struct UnixSocketAddress {
    private var storage = sockaddr_un()
    private let length: socklen_t

    public init(path: String) throws {
        var bytes = Array(path.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: storage.sun_path)
        guard bytes.count < capacity else {
            throw CourierError(
                .usage, "the socket path \(path) is longer than \(capacity - 1) bytes", hint: "use a shorter --storage path")
        }
        storage.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &storage.sun_path) { raw in raw.copyBytes(from: bytes) }
        // An abstract name is exactly its bytes; a path ends with its NUL (sockaddr_un is zeroed).
        length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
    }

    public mutating func withSockaddr<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
        let length = length
        return withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }
}

/// A listening AF_UNIX stream socket at a path, mode 0600; `AgentControlServer` hands its
/// descriptor to SwiftNIO, which accepts on it and closes it.
final class UnixSocketListener: Sendable {
    let descriptor: Int32
    let path: String

    /// Binds `path` with mode 0600. A socket file left by a dead agent is replaced; a live agent
    /// on it is refused with `leased` (the caller holds the store's `AgentLock`, so this only
    /// meets an agent of a Courier from before that lock).
    init(path: String) throws {
        if FileManager.default.fileExists(atPath: path) {
            if let live = try? UnixSocketConnection.connect(to: path, timeout: 2) {
                live.close()
                throw CourierError(
                    .leased, "an agent already listens on \(path)", hint: "stop it first, or use another --storage")
            }
            unlink(path)
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw CourierError(.io, "cannot create a socket", cause: String(cString: strerror(errno))) }
        var address = try UnixSocketAddress(path: path)
        // The socket is created 0600 (umask), so no other user can connect before the chmod.
        let previous = umask(0o177)
        let bound = address.withSockaddr { bind(fd, $0, $1) }
        let bindErrno = errno
        umask(previous)
        guard bound == 0 else {
            Glibc.close(fd)
            throw CourierError(.io, "cannot bind the control socket \(path)", cause: String(cString: strerror(bindErrno)))
        }
        chmod(path, 0o600)
        guard listen(fd, 64) == 0 else {
            let code = errno
            Glibc.close(fd)
            unlink(path)
            throw CourierError(.io, "cannot listen on \(path)", cause: String(cString: strerror(code)))
        }
        descriptor = fd
        self.path = path
    }
}
