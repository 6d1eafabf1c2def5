import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A misbehaving content origin on 127.0.0.1 for the transfer tests, built on
/// `LoopbackHTTPServer`: serves one resource with ETag, Last-Modified and byte ranges (If-Range
/// honoured), and injects the faults of `Behavior` into its first responses.
public final class FaultOrigin: @unchecked Sendable {  // @unchecked: mutable state is guarded by `lock`.
    /// What goes wrong, and for how many responses.
    public struct Behavior: Sendable {
        /// Answer 200 with the whole body even to a Range request.
        public var ignoreRanges = false
        /// Close the connection after this many body bytes.
        public var dropAfterBytes: Int?
        /// Stop sending for `stallSeconds` after this many body bytes (then close).
        public var stallAfterBytes: Int?
        public var stallSeconds: Double = 30
        /// Answer this status (503, 404, ...) with an empty body.
        public var status: Int?
        /// The Retry-After sent with `status`.
        public var retryAfter: String?
        /// Announce the full Content-Length but send only this many body bytes, then close.
        public var shortBodyBytes: Int?
        /// Send no Content-Length (close-delimited body), so the client cannot know the size.
        public var omitLength = false
        /// How many responses the faults above apply to (later ones are well behaved).
        public var faultyResponses = 1
        /// Body bytes per second, for every response (0: unlimited).
        public var bytesPerSecond = 0
        /// Send the body with `Transfer-Encoding: chunked` (no Content-Length), so its end is
        /// known only when it comes.
        public var chunked = false
        /// Send this many bytes (0xEE) after the resource's bytes: a body longer than the file.
        public var extraBodyBytes = 0
        /// Header fields that replace (by name, case-insensitively) or join those of a 200 or
        /// 206 answer: a lying Content-Length, an impossible Content-Range.
        public var replaceHeaders: [(String, String)] = []

        public init() {}
    }

    private let lock = NSLock()
    private var content: Data
    private var etag: String
    private var behavior: Behavior
    private var responses = 0
    private var completed = 0
    private var sent = 0
    private var server: LoopbackHTTPServer?

    public init(content: Data, etag: String = "\"v1\"", behavior: Behavior = Behavior()) throws {
        self.content = content
        self.etag = etag
        self.behavior = behavior
        server = try LoopbackHTTPServer { [weak self] request, response in
            guard let self else { return response.close() }
            self.serve(request, response)
        }
    }

    /// The resource's URL (any path serves it).
    public func url(_ path: String = "/file.bin") -> URL {
        server?.url(path) ?? URL(fileURLWithPath: "/")
    }

    /// Replaces the resource (a new version with a new ETag).
    public func setContent(_ data: Data, etag: String) {
        lock.lock()
        content = data
        self.etag = etag
        lock.unlock()
    }

    public func setBehavior(_ behavior: Behavior) {
        lock.lock()
        self.behavior = behavior
        responses = 0
        lock.unlock()
    }

    /// Body bytes written to clients so far (over all responses).
    public var bodyBytesSent: Int {
        lock.lock()
        defer { lock.unlock() }
        return sent
    }

    /// Responses whose handler has returned (so `bodyBytesSent` counts all they will send).
    public var responsesCompleted: Int {
        lock.lock()
        defer { lock.unlock() }
        return completed
    }

    /// The requests received so far.
    public var requests: [LoopbackHTTPServer.Request] { server?.receivedRequests ?? [] }

    /// The first byte asked for by each request (0 when no Range was sent).
    public var requestedOffsets: [Int] {
        requests.map { request in
            guard let range = request.headers["range"], range.hasPrefix("bytes=") else { return 0 }
            return Int(range.dropFirst(6).split(separator: "-").first ?? "") ?? 0
        }
    }

    public func stop() {
        server?.stop()
    }

    private func serve(_ request: LoopbackHTTPServer.Request, _ response: LoopbackHTTPServer.Response) {
        defer {
            lock.lock()
            completed += 1
            lock.unlock()
        }
        lock.lock()
        responses += 1
        let faulty = responses <= behavior.faultyResponses
        let behavior = self.behavior
        let content = self.content
        let etag = self.etag
        lock.unlock()

        if faulty, let status = behavior.status {
            var headers: [(String, String)] = []
            if let retryAfter = behavior.retryAfter { headers.append(("Retry-After", retryAfter)) }
            response.send(status, headers: headers)
            return
        }
        var start = 0
        var ranged = false
        if let range = request.headers["range"], range.hasPrefix("bytes="), !(faulty && behavior.ignoreRanges) {
            let ifRange = request.headers["if-range"]
            if ifRange == nil || ifRange == etag || ifRange == Self.lastModified {
                start = Int(range.dropFirst(6).split(separator: "-").first ?? "") ?? 0
                ranged = true
            }
        }
        if ranged && start >= content.count {
            response.send(416, headers: [("Content-Range", "bytes */\(content.count)"), ("ETag", etag)])
            return
        }
        var headers: [(String, String)] = [("ETag", etag), ("Last-Modified", Self.lastModified), ("Accept-Ranges", "bytes")]
        let chunked = faulty && behavior.chunked
        let extra = faulty ? behavior.extraBodyBytes : 0
        let body = content[(content.startIndex + start)...]
        if chunked {
            headers.append(("Transfer-Encoding", "chunked"))
        } else if !(faulty && behavior.omitLength) {
            headers.append(("Content-Length", "\(body.count)"))
        } else {
            headers.append(("Connection", "close"))
        }
        if ranged {
            headers.append(("Content-Range", "bytes \(start)-\(content.count - 1)/\(content.count)"))
        }
        if faulty {
            for (name, value) in behavior.replaceHeaders {
                headers.removeAll { $0.0.lowercased() == name.lowercased() }
                headers.append((name, value))
            }
        }
        response.head(ranged ? 206 : 200, headers: headers)
        if request.method == "HEAD" { return }

        let total = body.count + extra
        var limit = total
        if faulty, let drop = behavior.dropAfterBytes { limit = min(limit, drop) }
        if faulty, let short = behavior.shortBodyBytes { limit = min(limit, short) }
        let stallAt = faulty ? behavior.stallAfterBytes : nil
        var offset = 0
        let chunk = 16 * 1024
        while offset < limit {
            if let stallAt, offset >= stallAt {
                Thread.sleep(forTimeInterval: behavior.stallSeconds)
                response.close()
                return
            }
            var end = min(limit, offset + chunk)
            if let stallAt, offset < stallAt { end = min(end, stallAt) }
            var piece = Data()
            if offset < body.count {
                piece.append(body[(body.startIndex + offset)..<(body.startIndex + min(end, body.count))])
            }
            if end > body.count {
                piece.append(Data(repeating: 0xEE, count: end - max(offset, body.count)))
            }
            let framed = chunked ? Data("\(String(piece.count, radix: 16))\r\n".utf8) + piece + Data("\r\n".utf8) : piece
            guard response.write(framed) else { return }
            lock.lock()
            sent += piece.count
            lock.unlock()
            offset = end
            if behavior.bytesPerSecond > 0 {
                Thread.sleep(forTimeInterval: Double(piece.count) / Double(behavior.bytesPerSecond))
            }
        }
        if limit < total || (faulty && behavior.omitLength && !chunked) {
            response.close()
        } else if chunked {
            response.write(Data("0\r\n\r\n".utf8))
        }
    }

    private static let lastModified = "Wed, 21 Oct 2026 07:28:00 GMT"
}
