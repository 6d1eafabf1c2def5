import Courier
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Answers the origin's requests: `/health`, `/catalog.json` (ETag, 304), the packages the
/// catalog lists (gate, then GET/HEAD with a single byte range, If-Range, If-None-Match, 416,
/// streamed from disk) and `POST /notifications` (App Store Server Notifications V2) when the
/// origin has a `NotificationReceiver`, and `/authorize` (the gate alone, for nginx's
/// `auth_request`). Writes one access-log entry per request, after its body was sent, and counts
/// it in `metrics`.
struct OriginResponder: HTTPResponder {
    typealias Context = BasicRequestContext

    let configuration: OriginConfiguration
    let catalogSource: CatalogSource
    let gate: any AccessGate
    let notifications: NotificationReceiver?
    let accessLog: Logger
    let metrics: OriginMetrics?

    /// The header nginx's `auth_request` location sets to the original request target.
    static let originalURI = HTTPField.Name("X-Original-URI")!
    /// The header nginx's `auth_request` location sets to the seconds it may cache a decision
    /// (`courier origin nginx-config --decision-cache`); absent: it caches nothing.
    static let decisionCache = HTTPField.Name("X-Courier-Decision-Cache")!
    /// nginx's own header for how long it may cache a response (it wins over `proxy_cache_valid`).
    static let accelExpires = HTTPField.Name("X-Accel-Expires")!

    init(
        configuration: OriginConfiguration,
        gate: any AccessGate,
        notifications: NotificationReceiver?,
        accessLog: Logger,
        metrics: OriginMetrics? = nil
    ) {
        self.configuration = configuration
        self.catalogSource = CatalogSource(file: configuration.catalogFile, trustedRoot: configuration.trustedCatalogRoot)
        self.gate = gate
        self.notifications = notifications
        self.accessLog = accessLog
        self.metrics = metrics
    }

    func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
        let started = ContinuousClock.now
        var entry = AccessEntry(method: request.method.rawValue, target: request.uri.path, range: request.headers[.range])
        var response = await route(request, context: context, entry: &entry)
        if request.method == .head {
            response = Response(status: response.status, headers: response.headers, body: ResponseBody())
        }
        let status = response.status.code
        let log = accessLog
        let metrics = metrics
        guard response.body.contentLength ?? 0 > 0 else {
            entry.write(to: log, status: status, bytes: 0, started: started, failure: nil)
            metrics?.recordResponse(status: status, bytes: 0)
            return response
        }
        // Log when the body has been handed to the connection (or failed part way).
        let body = response.body
        let finished = entry
        response.body = ResponseBody(contentLength: body.contentLength) { writer in
            let count = CountingWriter.Count()
            do {
                try await body.write(CountingWriter(inner: writer, count: count))
                finished.write(to: log, status: status, bytes: count.value, started: started, failure: nil)
                metrics?.recordResponse(status: status, bytes: count.value)
            } catch {
                finished.write(to: log, status: status, bytes: count.value, started: started, failure: "\(error)")
                metrics?.recordResponse(status: status, bytes: count.value)
                throw error
            }
        }
        return response
    }

    private func route(_ request: Request, context: BasicRequestContext, entry: inout AccessEntry) async -> Response {
        if request.uri.path == "/notifications", let notifications {
            return await notification(request, receiver: notifications, entry: &entry)
        }
        guard request.method == .get || request.method == .head else {
            var response = Self.error(.methodNotAllowed, code: "methodNotAllowed", "only GET and HEAD are served")
            response.headers[.allow] = "GET, HEAD"
            return response
        }
        guard let path = PublishedCatalog.requestPath(request.uri.path) else {
            return Self.error(.badRequest, code: "badRequest", "the request target is not a path")
        }
        if path == "/authorize" {
            return await authorizeOnly(request, entry: &entry)
        }
        if path == "/health" {
            let catalogReady = (try? catalogSource.current()) != nil
            return Self.json(.ok, ["status": "ok", "catalog": catalogReady ? "published" : "missing"])
        }
        if let name = Self.trustFileName(path) {
            // The catalog's TUF repository (docs/trust.md): public, like the catalog it signs.
            guard let file = StaticFile.lookup(path: configuration.contentDirectory.path + path) else {
                return Self.error(.notFound, code: "notFound", "\(path) is not published")
            }
            return fileResponse(file, request: request, context: context, contentType: name.hasSuffix(".json") ? "application/json" : "application/octet-stream")
        }
        let published: PublishedCatalog
        do {
            published = try catalogSource.current()
        } catch let error as CourierError {
            return Self.error(.serviceUnavailable, code: "noCatalog", error.message)
        } catch {
            return Self.error(.serviceUnavailable, code: "noCatalog", "\(error)")
        }
        if path == "/catalog.json" {
            return catalogResponse(published, request: request)
        }
        guard let served = published.index[path] else {
            return Self.error(.notFound, code: "notFound", "\(path) is not in the catalog")
        }
        entry.contentIdentifier = served.contentIdentifier
        switch await answer(bearer: Self.bearer(request), content: served, catalog: published.catalog).decision {
        case .unauthorized(let reason, _):
            var response = Self.error(.unauthorized, code: CourierError.Code.serverRejected.rawValue, reason)
            response.headers[.wwwAuthenticate] = "Bearer realm=\"courier\""
            return response
        case .forbidden(let reason, _):
            return Self.error(.forbidden, code: CourierError.Code.notEntitled.rawValue, reason)
        case .allowed(let subject, _):
            entry.subject = subject
        }
        let filePath = configuration.contentDirectory.path + path
        guard let file = StaticFile.lookup(path: filePath) else {
            accessLog.error("a package the catalog lists is missing", metadata: ["file": "\(filePath)"])
            return Self.error(.notFound, code: "notFound", "\(path) is listed but not staged")
        }
        let contentType = served.kind == .manifest ? "application/json" : "application/zip"
        return fileResponse(file, request: request, context: context, contentType: contentType)
    }

    /// Asks the gate for its decision and how long it holds, timing and counting it.
    private func answer(bearer: String?, content: ServedContent, catalog: Catalog) async -> GateAnswer {
        let started = ContinuousClock.now
        let answer = await gate.answer(bearer: bearer, content: content, catalog: catalog)
        metrics?.recordDecision(answer.decision, duration: ContinuousClock.now - started)
        return answer
    }

    /// `GET /authorize`: the gate's decision about the request nginx's `auth_request` is holding,
    /// whose target is in `X-Original-URI` and whose `Authorization` header is forwarded. 204
    /// allowed, 401 (with `WWW-Authenticate`) no or bad token, 403 not entitled, revoked, not a
    /// package the catalog lists, no catalog, or no canonical target; never a body (nginx would
    /// drop it). `/catalog.json` is public: 204. The target must be a canonical absolute path
    /// (no percent-encoding, dot segments or repeated slashes; a query is ignored), so the path
    /// the gate judges is byte for byte the file nginx serves.
    ///
    /// With `X-Courier-Decision-Cache: N` (nginx caches decisions, docs/origin.md) the answer says
    /// how long nginx may reuse it (`X-Accel-Expires`, `Cache-Control: max-age`): N seconds, at
    /// most `GateAnswer.maximumCacheWindow`, and for an allow never past the token's own end
    /// (`GateAnswer.cacheSeconds`); without it, `Cache-Control: no-store`.
    private func authorizeOnly(_ request: Request, entry: inout AccessEntry) async -> Response {
        let decision: GateDecision
        var validUntil: Date?
        let original = request.headers[Self.originalURI]
        entry.original = original
        if let original, let path = RequestTarget.canonicalPath(original) {
            if path == "/catalog.json" || Self.trustFileName(path) != nil {
                decision = .allowed(subject: "public", reason: .publicContent)
            } else if let published = try? catalogSource.current() {
                if let served = published.index[path] {
                    entry.contentIdentifier = served.contentIdentifier
                    let answer = await answer(bearer: Self.bearer(request), content: served, catalog: published.catalog)
                    decision = answer.decision
                    validUntil = answer.validUntil
                } else {
                    decision = .forbidden(reason: "\(path) is not in the catalog", code: .notInCatalog)
                    metrics?.recordDecision(decision, duration: .zero)
                }
            } else {
                decision = .forbidden(reason: "no catalog is published", code: .noCatalog)
                metrics?.recordDecision(decision, duration: .zero)
            }
        } else {
            decision = .forbidden(reason: "X-Original-URI is missing or not a canonical path", code: .badTarget)
            metrics?.recordDecision(decision, duration: .zero)
        }
        var headers = HTTPFields()
        let window = request.headers[Self.decisionCache].flatMap { Int($0) }
        if let seconds = GateAnswer(decision: decision, validUntil: validUntil).cacheSeconds(window: window, now: Date()), seconds > 0 {
            headers[Self.accelExpires] = String(seconds)
            headers[.cacheControl] = "max-age=\(seconds)"
        } else {
            if window != nil { headers[Self.accelExpires] = "0" }
            headers[.cacheControl] = "no-store"
        }
        switch decision {
        case .allowed(let subject, _):
            entry.subject = subject
            return Response(status: .noContent, headers: headers)
        case .unauthorized:
            headers[.wwwAuthenticate] = "Bearer realm=\"courier\""
            return Response(status: .unauthorized, headers: headers, body: ResponseBody())
        case .forbidden:
            return Response(status: .forbidden, headers: headers, body: ResponseBody())
        }
    }

    /// `POST /notifications`: reads at most `ServerNotification.maximumBodyLength` bytes and
    /// hands them to the receiver (413 beyond that).
    private func notification(_ request: Request, receiver: NotificationReceiver, entry: inout AccessEntry) async -> Response {
        guard request.method == .post else {
            var response = Self.error(.methodNotAllowed, code: "methodNotAllowed", "notifications are POSTed")
            response.headers[.allow] = "POST"
            return response
        }
        let limit = ServerNotification.maximumBodyLength
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limit {
            return Self.error(.contentTooLarge, code: "tooLarge", "a notification body is at most \(limit) bytes")
        }
        var body = Data()
        do {
            for try await buffer in request.body {
                guard body.count + buffer.readableBytes <= limit else {
                    return Self.error(.contentTooLarge, code: "tooLarge", "a notification body is at most \(limit) bytes")
                }
                body.append(contentsOf: buffer.readableBytesView)
            }
        } catch {
            return Self.error(.badRequest, code: "badRequest", "the notification body could not be read")
        }
        let answer = await receiver.receive(body: body)
        entry.subject = answer.transactionId
        return Self.json(HTTPResponse.Status(code: answer.status), answer.body)
    }

    private func catalogResponse(_ published: PublishedCatalog, request: Request) -> Response {
        var headers = HTTPFields()
        headers[.eTag] = published.etag
        headers[.cacheControl] = "no-cache"
        headers[.contentType] = "application/json"
        if Self.matches(ifNoneMatch: request.headers[values: .ifNoneMatch], etag: published.etag) {
            return Response(status: .notModified, headers: headers)
        }
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: published.data)))
    }

    private func fileResponse(_ file: StaticFile, request: Request, context: BasicRequestContext, contentType: String) -> Response {
        var headers = HTTPFields()
        let etag = file.etag
        let lastModified = file.lastModified.httpDate
        headers[.eTag] = etag
        headers[.lastModified] = lastModified
        headers[.acceptRanges] = "bytes"
        headers[.contentType] = contentType
        if Self.matches(ifNoneMatch: request.headers[values: .ifNoneMatch], etag: etag) {
            return Response(status: .notModified, headers: headers)
        }
        var range = ByteRangeRequest(header: request.headers[.range], length: file.length)
        if range != .whole, let ifRange = request.headers[.ifRange] {
            // If-Range: the range only if the representation is still the one the client holds.
            let stillValid = ifRange.hasPrefix("\"") ? ifRange == etag : ifRange == lastModified
            if !stillValid { range = .whole }
        }
        let bytes: ClosedRange<Int64>?
        let status: HTTPResponse.Status
        switch range {
        case .unsatisfiable:
            var response = Self.error(.rangeNotSatisfiable, code: "rangeNotSatisfiable", "the range is outside the file")
            response.headers[.contentRange] = "bytes */\(file.length)"
            response.headers[.eTag] = etag
            response.headers[.lastModified] = lastModified
            response.headers[.acceptRanges] = "bytes"
            return response
        case .partial(let partial):
            headers[.contentRange] = "bytes \(partial.lowerBound)-\(partial.upperBound)/\(file.length)"
            bytes = partial
            status = .partialContent
        case .whole:
            bytes = file.length > 0 ? 0...(file.length - 1) : nil
            status = .ok
        }
        guard let bytes else {
            return Response(status: status, headers: headers, body: ResponseBody())
        }
        let chunkSize = configuration.chunkSize
        let rateLimit = configuration.rateLimit
        let allocator = ByteBufferAllocator()
        let body = ResponseBody(contentLength: Int(bytes.count)) { writer in
            try await file.stream(range: bytes, chunkSize: chunkSize, rateLimit: rateLimit, allocator: allocator) { chunk in
                try await writer.write(chunk)
            }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }

    /// The file name of a request for the catalog's TUF repository: `/metadata/NAME` or
    /// `/targets/NAME`, one plain name (letters, digits, `.`, `_`, `-`, not starting with a dot),
    /// as `courier prestage` publishes them; nil for any other path.
    static func trustFileName(_ path: String) -> String? {
        for folder in ["/metadata/", "/targets/"] where path.hasPrefix(folder) {
            let name = path.dropFirst(folder.count)
            guard !name.isEmpty, name.count <= 255, !name.hasPrefix("."),
                name.utf8.allSatisfy({ byte in
                    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: ".")
                        || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
                })
            else { return nil }
            return String(name)
        }
        return nil
    }

    /// The token of `Authorization: Bearer <token>`, nil when absent or another scheme.
    static func bearer(_ request: Request) -> String? {
        guard let value = request.headers[.authorization] else { return nil }
        return RequestTarget.bearer(value)
    }

    static func matches(ifNoneMatch values: [String], etag: String) -> Bool {
        for value in values {
            for candidate in value.split(separator: ",") {
                let tag = candidate.trimmingCharacters(in: .whitespaces)
                if tag == "*" || tag == etag || tag == "W/" + etag { return true }
            }
        }
        return false
    }

    static func json(_ status: HTTPResponse.Status, _ object: [String: String]) -> Response {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// A JSON error body: `{"error": code, "message": text, "status": n}`.
    static func error(_ status: HTTPResponse.Status, code: String, _ message: String) -> Response {
        json(status, ["error": code, "message": message, "status": "\(status.code)"])
    }
}

/// What the access log records about one request; the token is never among it.
struct AccessEntry: Sendable {
    var method: String
    var target: String
    var range: String?
    var contentIdentifier: String?
    var subject: String?
    /// `X-Original-URI` of an `/authorize` request.
    var original: String?

    func write(to logger: Logger, status: Int, bytes: Int64, started: ContinuousClock.Instant, failure: String?) {
        let elapsed = ContinuousClock.now - started
        let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        var metadata: Logger.Metadata = [
            "http.method": "\(method)",
            "http.target": "\(target)",
            "http.status": "\(status)",
            "http.bytes": "\(bytes)",
            "duration-ms": "\(String(format: "%.1f", milliseconds))",
        ]
        if let range { metadata["http.range"] = "\(range)" }
        if let original { metadata["http.original-uri"] = "\(original)" }
        if let contentIdentifier { metadata["content-id"] = "\(contentIdentifier)" }
        if let subject { metadata["transaction-id"] = "\(subject)" }
        if let failure { metadata["error"] = "\(failure)" }
        logger.info("access", metadata: metadata)
    }
}

/// Passes body chunks on and counts their bytes, for the access log.
struct CountingWriter: ResponseBodyWriter {
    /// A counter the body closure and the logger share; used by one request's task at a time.
    final class Count: @unchecked Sendable {  // @unchecked: mutated only by the writing task, read after it.
        var value: Int64 = 0
    }
    var inner: any ResponseBodyWriter
    let count: Count

    mutating func write(_ buffer: ByteBuffer) async throws {
        try await inner.write(buffer)
        count.value += Int64(buffer.readableBytes)
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        try await inner.finish(trailingHeaders)
    }
}
