import Foundation

/// A small, complete HTTP request: catalogs, verifyReceipt calls, webhooks. Not for content
/// packages, which stream to disk through `TransferEngine`.
public struct HTTPRequest: Sendable {
    public var method: String
    public var url: URL
    /// Header fields sent as given. Values (an `Authorization` header, say) are never logged.
    public var headers: [(String, String)]
    public var body: Data?
    /// Seconds for the whole exchange.
    public var timeout: Double
    /// The largest response body accepted; a larger one fails with `integrity`.
    public var maxResponseBytes: Int

    public init(
        method: String = "GET",
        url: URL,
        headers: [(String, String)] = [],
        body: Data? = nil,
        timeout: Double = 30,
        maxResponseBytes: Int = 16 << 20
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.maxResponseBytes = maxResponseBytes
    }
}

/// The answer to an `HTTPRequest`.
public struct HTTPResponse: Sendable {
    public var status: Int
    /// Header fields with lowercased names; the last value wins for repeated names.
    public var headers: [String: String]
    public var body: Data

    public init(status: Int, headers: [String: String], body: Data) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Sends small HTTP requests. The production implementation is libcurl's (in Transfer/);
/// components that need HTTP (receipts, catalog, webhooks) take `any HTTPTransport`.
/// A transport fails with `CourierError` `.network` when no response arrives; any status code
/// that does arrive is returned, not thrown.
public protocol HTTPTransport: Sendable {
    func send(_ request: HTTPRequest) async throws -> HTTPResponse
}
