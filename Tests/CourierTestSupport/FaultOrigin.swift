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

        public init() {}
    }

    private let lock = NSLock()
    private var content: Data
    private var etag: String
    private var behavior: Behavior
    private var responses = 0
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
        let body = content[(content.startIndex + start)...]
        if !(faulty && behavior.omitLength) {
            headers.append(("Content-Length", "\(body.count)"))
        } else {
            headers.append(("Connection", "close"))
        }
        if ranged {
            headers.append(("Content-Range", "bytes \(start)-\(content.count - 1)/\(content.count)"))
            response.head(206, headers: headers)
        } else {
            response.head(200, headers: headers)
        }
        if request.method == "HEAD" { return }

        var limit = body.count
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
            let piece = body[(body.startIndex + offset)..<(body.startIndex + end)]
            guard response.write(Data(piece)) else { return }
            lock.lock()
            sent += piece.count
            lock.unlock()
            offset = end
            if behavior.bytesPerSecond > 0 {
                Thread.sleep(forTimeInterval: Double(piece.count) / Double(behavior.bytesPerSecond))
            }
        }
        if limit < body.count || (faulty && behavior.omitLength) {
            response.close()
        }
    }

    private static let lastModified = "Wed, 21 Oct 2026 07:28:00 GMT"
}
