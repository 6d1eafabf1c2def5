import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A small HTTP/1.1 server on 127.0.0.1, port 0, for the tests' misbehaving origins and protocol
/// stubs (the fault-injecting origin, the verifyReceipt service). One thread per connection,
/// keep-alive, and a handler that writes raw bytes, so a test can break HTTP on purpose: close
/// after N bytes, lie in Content-Length, stall, answer 200 to a Range.
public final class LoopbackHTTPServer: @unchecked Sendable {  // @unchecked: mutable state is guarded by `lock`.
    /// One parsed request.
    public struct Request: Sendable {
        public var method: String
        /// The request target, e.g. `/file.bin?x=1`.
        public var target: String
        /// Header fields with lowercased names.
        public var headers: [String: String]
        public var body: Data
        /// The request head exactly as received (request line and header lines, CRLFs included,
        /// without the blank line that ends it), so a test can see injected header lines.
        public var rawHead: String = ""

        public var path: String { String(target.split(separator: "?", maxSplits: 1).first ?? "") }
    }

    /// What a handler writes to. `close()` drops the connection at once (no more responses).
    public final class Response: @unchecked Sendable {  // @unchecked: used by one connection thread only.
        fileprivate let fd: Int32
        fileprivate(set) var closed = false
        /// Bytes written so far on this response (head and body).
        public private(set) var bytesWritten = 0

        fileprivate init(fd: Int32) { self.fd = fd }

        /// Writes the status line and headers (a Content-Length or Connection header is the caller's).
        public func head(_ status: Int, _ reason: String = "", headers: [(String, String)]) {
            var text = "HTTP/1.1 \(status) \(reason.isEmpty ? Self.reason(status) : reason)\r\n"
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            text += "\r\n"
            write(Data(text.utf8))
        }

        /// Writes raw bytes; returns false when the peer has gone.
        @discardableResult
        public func write(_ data: Data) -> Bool {
            guard !closed else { return false }
            var sent = 0
            let ok = data.withUnsafeBytes { raw -> Bool in
                while sent < raw.count {
                    let n = Glibc.send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
                    if n < 0 {
                        if errno == EINTR { continue }
                        return false
                    }
                    sent += n
                }
                return true
            }
            bytesWritten += sent
            if !ok { closed = true }
            return ok
        }

        /// A complete response with a body and its Content-Length.
        public func send(_ status: Int, headers: [(String, String)] = [], body: Data = Data()) {
            head(status, headers: headers + [("Content-Length", "\(body.count)")])
            write(body)
        }

        /// Drops the connection now (a reset from the client's point of view if data is pending).
        public func close() {
            guard !closed else { return }
            closed = true
            shutdown(fd, Int32(SHUT_RDWR))
        }

        static func reason(_ status: Int) -> String {
            switch status {
            case 200: return "OK"
            case 206: return "Partial Content"
            case 304: return "Not Modified"
            case 401: return "Unauthorized"
            case 403: return "Forbidden"
            case 404: return "Not Found"
            case 408: return "Request Timeout"
            case 416: return "Range Not Satisfiable"
            case 429: return "Too Many Requests"
            case 500: return "Internal Server Error"
            case 503: return "Service Unavailable"
            default: return "Status"
            }
        }
    }

    public typealias Handler = @Sendable (Request, Response) -> Void

    public let port: Int
    private let listener: Int32
    private let handler: Handler
    private let lock = NSLock()
    private var stopped = false
    private var connections: Set<Int32> = []
    private var requests: [Request] = []

    /// Binds 127.0.0.1 on a port the kernel chooses and starts accepting.
    public init(handler: @escaping Handler) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 128) == 0 else {
            let code = errno
            Glibc.close(fd)
            throw POSIXError(.init(rawValue: code) ?? .EIO)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.port = Int(UInt16(bigEndian: address.sin_port))
        self.listener = fd
        self.handler = handler
        let thread = Thread { [self] in self.acceptLoop() }
        thread.name = "LoopbackHTTPServer.accept"
        thread.start()
    }

    /// The URL of `path` on this server.
    public func url(_ path: String) -> URL {
        let trimmed = path.hasPrefix("/") ? String(path.dropFirst()) : path
        return URL(string: "http://127.0.0.1:\(port)/\(trimmed)")!
    }

    /// Every request received so far, in order.
    public var receivedRequests: [Request] {
        lock.lock()
        defer { lock.unlock() }
        return requests
    }

    /// Stops accepting and closes every open connection.
    public func stop() {
        lock.lock()
        let wasStopped = stopped
        stopped = true
        let open = connections
        lock.unlock()
        guard !wasStopped else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
        for fd in open { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    deinit { stop() }

    private func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                return
            }
            lock.lock()
            if stopped {
                lock.unlock()
                Glibc.close(fd)
                return
            }
            connections.insert(fd)
            lock.unlock()
            let thread = Thread { [self] in self.serve(fd) }
            thread.name = "LoopbackHTTPServer.connection"
            thread.start()
        }
    }

    private func serve(_ fd: Int32) {
        defer {
            lock.lock()
            connections.remove(fd)
            lock.unlock()
            Glibc.close(fd)
        }
        var buffer = Data()
        while let request = Self.readRequest(fd, buffer: &buffer) {
            lock.lock()
            requests.append(request)
            lock.unlock()
            let response = Response(fd: fd)
            handler(request, response)
            if response.closed || request.headers["connection"]?.lowercased() == "close" { return }
        }
    }

    /// Reads one request (head and Content-Length body) from `fd`; nil at end of stream.
    private static func readRequest(_ fd: Int32, buffer: inout Data) -> Request? {
        let separator = Data("\r\n\r\n".utf8)
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while buffer.range(of: separator) == nil {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return nil }
            buffer.append(contentsOf: chunk[0..<n])
            if buffer.count > 1 << 20 { return nil }
        }
        guard let end = buffer.range(of: separator) else { return nil }
        let headText = String(decoding: buffer[buffer.startIndex..<end.lowerBound], as: UTF8.self)
        buffer.removeSubrange(buffer.startIndex..<end.upperBound)
        var lines = headText.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count >= 2 else { return nil }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            headers[name] = value
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        while buffer.count < length {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return nil }
            buffer.append(contentsOf: chunk[0..<n])
        }
        let body = Data(buffer.prefix(length))
        buffer.removeFirst(length)
        return Request(
            method: String(requestLine[0]), target: String(requestLine[1]), headers: headers, body: body, rawHead: headText)
    }
}
