import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A Unix stream socket speaking JSON lines, for the agent's control protocol (docs/queue.md).
///
/// The socket file is created mode 0600 (under a umask of 0177, so there is no window where it
/// is wider) and every connection's peer credentials are checked: a process of another user is
/// refused even if the file mode were changed. One thread per connection; each request line
/// gets `handler`'s reply lines; a handler may keep streaming (subscribe) until the peer leaves.
public final class ControlSocketServer: @unchecked Sendable {  // @unchecked: mutable state is guarded by `lock`.
    /// Writes one reply line to the peer; returns false once the peer has gone.
    public typealias Reply = @Sendable ([String: Any]) -> Bool
    public typealias Handler = @Sendable ([String: Any], _ reply: @escaping Reply) -> Void

    public let path: URL
    private let listener: Int32
    private let handler: Handler
    private let lock = NSLock()
    private var stopped = false
    private var connections: Set<Int32> = []

    /// Binds `path` (replacing a stale socket file left by a dead agent) and starts accepting.
    /// Throws `usage` if another agent is already listening there.
    public init(path: URL, handler: @escaping Handler) throws {
        self.path = path
        self.handler = handler
        if Self.isListening(path) {
            throw CourierError(.usage, "an agent is already running on \(path.path)")
        }
        unlink(path.path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw CourierError.posix("socket", path: path.path) }
        var address = try Self.address(path)
        let previous = umask(0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(previous)
        guard bound == 0, chmod(path.path, 0o600) == 0, listen(fd, 64) == 0 else {
            let error = CourierError.posix("bind", path: path.path)
            close(fd)
            throw error
        }
        listener = fd
        let thread = Thread { [self] in self.acceptLoop() }
        thread.name = "courier.agent.control"
        thread.start()
    }

    deinit { stop() }

    /// Stops accepting, closes every connection and removes the socket file.
    public func stop() {
        let open: Set<Int32>? = lock.withLock {
            if stopped { return nil }
            stopped = true
            return connections
        }
        guard let open else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for fd in open { shutdown(fd, Int32(SHUT_RDWR)) }
        unlink(path.path)
    }

    /// Whether something accepts connections on the socket at `path`.
    public static func isListening(_ path: URL) -> Bool {
        guard let connection = try? connect(path) else { return false }
        close(connection)
        return true
    }

    /// Connects to the socket at `path`; the caller closes the descriptor.
    public static func connect(_ path: URL) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw CourierError.posix("socket", path: path.path) }
        var address = try address(path)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else {
            let error = CourierError.posix("connect", path: path.path)
            close(fd)
            throw error
        }
        return fd
    }

    private static func address(_ path: URL) throws -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else {
            throw CourierError(.usage, "the socket path \(path.path) is longer than \(capacity - 1) bytes")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                return
            }
            let admitted: Bool = lock.withLock {
                if stopped { return false }
                connections.insert(fd)
                return true
            }
            guard admitted else {
                close(fd)
                return
            }
            let thread = Thread { [self] in self.serve(fd) }
            thread.name = "courier.agent.connection"
            thread.start()
        }
    }

    private func serve(_ fd: Int32) {
        defer {
            lock.withLock { _ = connections.remove(fd) }
            close(fd)
        }
        // struct ucred { pid_t pid; uid_t uid; gid_t gid; } (Glibc hides it behind _GNU_SOURCE).
        var credentials = [UInt32](repeating: UInt32.max, count: 3)
        var length = socklen_t(MemoryLayout<UInt32>.size * 3)
        let read = credentials.withUnsafeMutableBytes { getsockopt(fd, SOL_SOCKET, SO_PEERCRED, $0.baseAddress, &length) }
        guard read == 0, credentials[1] == geteuid() else {
            _ = Self.write(fd, ["ok": false, "code": "denied", "message": "only the agent's own user may control it"])
            return
        }
        let writeLock = NSLock()
        let reply: Reply = { object in writeLock.withLock { Self.write(fd, object) } }
        var buffer = Data()
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            while let newline = buffer.firstIndex(of: 0x0A) {
                let line = buffer[buffer.startIndex..<newline]
                buffer.removeSubrange(buffer.startIndex...newline)
                guard !line.isEmpty else { continue }
                guard let request = (try? JSONSerialization.jsonObject(with: Data(line))) as? [String: Any] else {
                    _ = reply(["ok": false, "code": "usage", "message": "a request is one JSON object per line"])
                    continue
                }
                handler(request, reply)
            }
            let count = recv(fd, &chunk, chunk.count, 0)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { return }
            buffer.append(contentsOf: chunk[0..<count])
            if buffer.count > 16 << 20 { return }
        }
    }

    @discardableResult
    static func write(_ fd: Int32, _ object: [String: Any]) -> Bool {
        guard var data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        else { return false }
        data.append(0x0A)
        return data.withUnsafeBytes { raw -> Bool in
            var sent = 0
            while sent < raw.count {
                guard let base = raw.baseAddress else { return false }
                let n = send(fd, base + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
                if n < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                sent += n
            }
            return true
        }
    }
}
