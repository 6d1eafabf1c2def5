import CCurl
import Foundation
import Logging

/// libcurl's `HTTPTransport`: small one-shot requests (receipts, catalogs, webhooks) driven by
/// a `TransferEngine`'s network thread, never blocking Swift's cooperative pool. Each request
/// holds one of the engine's slots (`.request`: admitted ahead of waiting downloads, within a
/// small reserve) and reuses its connections.
///
/// Redirects are followed up to `maxRedirects`; TLS verification is always on; plain http is
/// refused (`.usage`) except to loopback unless `allowInsecureHTTP`. A response body larger
/// than `HTTPRequest.maxResponseBytes` fails with `.integrity`; no response at all (connection
/// refused, timeout, TLS failure) fails with `.network`. Cancelling the calling task aborts the
/// request with `.cancelled`.
public final class CurlHTTPTransport: HTTPTransport {
    private let engine: TransferEngine
    private let ownsEngine: Bool

    /// A transport with a transfer engine of its own (for a process that sends only small
    /// requests); call `shutdown()` when done (or let it go). A process that also downloads
    /// uses its engine's `httpTransport` instead.
    public init(configuration: TransferConfiguration = .init()) throws {
        self.engine = try TransferEngine(configuration: configuration, logger: Logger(label: "courier.http"))
        self.ownsEngine = true
    }

    /// A transport sharing `engine`'s network thread and slots; `owning` makes `shutdown()`
    /// end the engine too.
    package init(engine: TransferEngine, owning: Bool = false) {
        self.engine = engine
        self.ownsEngine = owning
    }

    /// Ends the network thread of a transport that owns its engine.
    public func shutdown() {
        if ownsEngine { engine.shutdown() }
    }

    deinit {
        if ownsEngine { engine.shutdown() }
    }

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        let configuration = engine.configuration
        try URLPolicy.check(request.url, allowInsecureHTTP: configuration.allowInsecureHTTP)
        let job = OneShotRequestJob(request: request, configuration: configuration)
        do {
            return try await engine.run(job, host: request.url.host ?? "", kind: .request)
        } catch let error as CourierError where error.code == .paused {
            // Cancelled while waiting for a slot: a request is cancelled, not paused.
            throw CourierError(.cancelled, "the request to \(request.url.absoluteString) was cancelled")
        }
    }
}

/// One small request with its response collected in memory (bounded).
final class OneShotRequestJob: AwaitedJob<HTTPResponse>, @unchecked Sendable {  // @unchecked: hooks run on the loop thread.
    private let request: HTTPRequest
    private let configuration: TransferConfiguration
    private var status = 0
    private var headers: [String: String] = [:]
    private var body = Data()
    private var failure: CourierError?

    init(request: HTTPRequest, configuration: TransferConfiguration) {
        self.request = request
        self.configuration = configuration
    }

    override func configure(_ easy: UnsafeMutableRawPointer) throws {
        try configureCommon(easy, url: request.url, configuration: configuration, connectTimeout: request.timeout)
        try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, Int(request.timeout * 1000)), "CURLOPT_TIMEOUT_MS")
        try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_ACCEPT_ENCODING, ""), "CURLOPT_ACCEPT_ENCODING")
        try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_USERAGENT, "courier/1"), "CURLOPT_USERAGENT")
        let method = request.method.uppercased()
        switch method {
        case "GET":
            break
        case "HEAD":
            try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_NOBODY, 1), "CURLOPT_NOBODY")
        default:
            if method != "POST" {
                try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method), "CURLOPT_CUSTOMREQUEST")
            }
        }
        if let body = request.body {
            try CurlOption.check(
                courier_easy_setopt_off_t(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)), "CURLOPT_POSTFIELDSIZE_LARGE")
            try body.withUnsafeBytes { raw in
                // COPYPOSTFIELDS copies the bytes (using the size set just above).
                if let base = raw.baseAddress, raw.count > 0 {
                    try CurlOption.check(
                        courier_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: base)),
                        "CURLOPT_COPYPOSTFIELDS")
                } else {
                    try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_COPYPOSTFIELDS, ""), "CURLOPT_COPYPOSTFIELDS")
                }
            }
            if method == "GET" {
                try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, "GET"), "CURLOPT_CUSTOMREQUEST")
            }
        }
        // No "Expect: 100-continue" round trip for small bodies.
        try setHeaders(easy, request.headers.map { "\($0): \($1)" } + ["Expect:"])
    }

    override func didReceiveHeader(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let line = HTTPHeaderLine.text(bytes)
        if let status = HTTPHeaderLine.status(line) {
            self.status = status
            headers = [:]
            if let insecure = URLPolicy.insecureRedirect(easy, allowInsecureHTTP: configuration.allowInsecureHTTP) {
                failure = insecure
                return false
            }
        } else if let (name, value) = HTTPHeaderLine.field(line) {
            headers[name] = value
        }
        return true
    }

    override func didReceive(_ bytes: UnsafeRawBufferPointer) -> Int {
        if body.count + bytes.count > request.maxResponseBytes {
            failure = CourierError(
                .integrity,
                "the response from \(request.url.absoluteString) is larger than \(request.maxResponseBytes) bytes"
            )
            return 0
        }
        body.append(contentsOf: bytes)
        return bytes.count
    }

    override func didFinish(_ result: CURLcode, stop: CurlJobStop?) {
        guard let continuation = takeContinuation() else { return }
        if let failure = setupError ?? failure {
            continuation.resume(throwing: failure)
        } else if let stop {
            let error: CourierError =
                stop == .shutdown
                ? CourierError(.network, "the HTTP transport was shut down")
                : CourierError(.cancelled, "the request to \(request.url.absoluteString) was cancelled")
            continuation.resume(throwing: error)
        } else if result == CURLE_COULDNT_CONNECT, let refused = URLPolicy.refusedRedirect(easy) {
            continuation.resume(throwing: refused)
        } else if result != CURLE_OK {
            continuation.resume(
                throwing: CourierError(
                    .network,
                    "\(request.method) \(request.url.absoluteString) failed",
                    cause: CurlGlobal.describe(result)
                )
            )
        } else {
            continuation.resume(returning: HTTPResponse(status: status, headers: headers, body: body))
        }
    }
}
