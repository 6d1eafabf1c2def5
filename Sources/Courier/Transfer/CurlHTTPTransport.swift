import CCurl
import Foundation

/// libcurl's `HTTPTransport`: small one-shot requests (receipts, catalogs, webhooks) driven by
/// a curl multi loop thread, never blocking Swift's cooperative pool.
///
/// Redirects are followed up to `maxRedirects`; TLS verification is always on; plain http is
/// refused (`.usage`) except to loopback unless `allowInsecureHTTP`. A response body larger
/// than `HTTPRequest.maxResponseBytes` fails with `.integrity`; no response at all (connection
/// refused, timeout, TLS failure) fails with `.network`. Cancelling the calling task aborts the
/// request with `.cancelled`.
public final class CurlHTTPTransport: HTTPTransport {
    private let configuration: TransferConfiguration
    private let loop: CurlMultiLoop
    private let ownsLoop: Bool

    /// A transport with its own network thread; call `shutdown()` when done (or let it go).
    public init(configuration: TransferConfiguration = .init()) throws {
        self.configuration = configuration
        self.loop = try CurlMultiLoop(name: "courier.http", maxConnections: 8)
        self.ownsLoop = true
    }

    /// A transport sharing an engine's network thread.
    init(configuration: TransferConfiguration, loop: CurlMultiLoop) {
        self.configuration = configuration
        self.loop = loop
        self.ownsLoop = false
    }

    /// Ends the network thread of a transport that owns one.
    public func shutdown() {
        if ownsLoop { loop.shutdown() }
    }

    deinit {
        if ownsLoop { loop.shutdown() }
    }

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        try URLPolicy.check(request.url, allowInsecureHTTP: configuration.allowInsecureHTTP)
        return try await loop.run(OneShotRequestJob(request: request, configuration: configuration))
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
