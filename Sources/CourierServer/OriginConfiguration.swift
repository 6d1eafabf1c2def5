import Courier
import Foundation

/// Settings of the content origin behind `courier serve`.
public struct OriginConfiguration: Sendable {
    /// The folder `courier prestage` published: packages plus `catalog.json`.
    public var contentDirectory: URL
    /// The catalog to serve and gate with. Default `<contentDirectory>/catalog.json`; its
    /// relative package URLs are paths under `contentDirectory`.
    public var catalogFile: URL
    /// The publisher's TUF `root.json` (`serve --catalog-root`, `catalog.trustedRoot`): with it,
    /// the catalog is served only when the signed metadata beside it names its bytes.
    public var trustedCatalogRoot: Data? = nil
    /// The address to listen on; loopback by default.
    public var host: String
    /// The port; 0 asks the kernel for a free one.
    public var port: Int
    /// Bytes read from disk per chunk while streaming a package. Default 1 MiB.
    public var chunkSize: Int
    /// Seconds graceful shutdown waits for responses in flight; a connection still open after
    /// that is closed (its client resumes with a range). Default 10.
    public var shutdownGracePeriod: Double
    /// Bytes per second each package response is held to (nginx's `limit_rate`), or nil for no
    /// limit (the default).
    public var rateLimit: Int64?
    /// Seconds a client has to send a complete request head, from the connection opening and from
    /// the end of each exchange on a kept-alive connection (its request read, its response
    /// written); the connection is closed after that, so it also bounds how long a kept-alive
    /// connection waits for its next request. nil for no deadline. Default 10.
    public var requestHeadTimeout: Double?
    /// Seconds a whole request, head and body, has from its first byte; the connection is
    /// closed after that, however steadily its bytes come. nil for no deadline. Default 30.
    public var requestTimeout: Double?
    /// Bytes per second a request (head and body) must average from its first byte once 5 s have
    /// passed; a slower one's connection is closed. nil for no minimum. Default 500.
    public var minRequestRate: Int64?
    /// Seconds a connection may stay without reading a request part (a stalled body, or waiting
    /// for a request when there is no head deadline) before it is closed; a response being sent
    /// is never cut by it. nil for none. Default 30.
    public var idleTimeout: Double?
    /// Seconds a response may make no progress because its client reads nothing (the connection
    /// stays unwritable) before the connection is closed; a slow reader that keeps reading is
    /// not cut. nil for no limit. Default 30.
    public var sendTimeout: Double?
    /// Open connections at most; one beyond that gets `503` with `Connection: close` and is
    /// closed at once. nil for no cap. Default 1024.
    public var maxConnections: Int?
    /// Seconds after its `signedDate` the receipt gate still takes a signed transaction; older
    /// ones get 401 with a hint to present a fresh one. nil (the default) for no limit.
    public var maxTokenAge: Double?

    public static let defaultRequestHeadTimeout: Double = 10
    public static let defaultIdleTimeout: Double = 30
    public static let defaultMaxConnections = 1024
    public static let defaultSendTimeout: Double = 30
    public static let defaultRequestTimeout: Double = 30
    public static let defaultMinRequestRate: Int64 = 500

    public init(
        contentDirectory: URL,
        catalogFile: URL? = nil,
        host: String = "127.0.0.1",
        port: Int = 0,
        chunkSize: Int = 1 << 20,
        shutdownGracePeriod: Double = 10,
        rateLimit: Int64? = nil,
        requestHeadTimeout: Double? = OriginConfiguration.defaultRequestHeadTimeout,
        idleTimeout: Double? = OriginConfiguration.defaultIdleTimeout,
        maxConnections: Int? = OriginConfiguration.defaultMaxConnections,
        sendTimeout: Double? = OriginConfiguration.defaultSendTimeout,
        maxTokenAge: Double? = nil,
        requestTimeout: Double? = OriginConfiguration.defaultRequestTimeout,
        minRequestRate: Int64? = OriginConfiguration.defaultMinRequestRate
    ) {
        self.requestTimeout = requestTimeout
        self.minRequestRate = minRequestRate
        self.contentDirectory = contentDirectory.standardizedFileURL
        self.catalogFile = catalogFile ?? contentDirectory.appendingPathComponent("catalog.json")
        self.host = host
        self.port = port
        self.chunkSize = chunkSize
        self.shutdownGracePeriod = shutdownGracePeriod
        self.rateLimit = rateLimit
        self.requestHeadTimeout = requestHeadTimeout
        self.idleTimeout = idleTimeout
        self.maxConnections = maxConnections
        self.sendTimeout = sendTimeout
        self.maxTokenAge = maxTokenAge
    }
}

extension OriginConfiguration {
    /// The origin `courier serve` runs from its resolved settings (the configuration's `serve`
    /// section with the flags laid over it): the listener, the rate limit, the connection limits
    /// and `maxTokenAge`. The content folder and catalog file come resolved (the settings hold
    /// them as written, relative to the configuration file's folder).
    public init(_ serve: ServeConfiguration, contentDirectory: URL, catalogFile: URL? = nil) {
        self.init(
            contentDirectory: contentDirectory,
            catalogFile: catalogFile,
            host: serve.host,
            port: serve.port,
            shutdownGracePeriod: serve.shutdownGracePeriod,
            rateLimit: serve.limitRate,
            requestHeadTimeout: serve.headerTimeout,
            idleTimeout: serve.idleTimeout,
            maxConnections: serve.maxConnections,
            sendTimeout: serve.sendTimeout,
            maxTokenAge: serve.maxTokenAge,
            requestTimeout: serve.requestTimeout,
            minRequestRate: serve.minRequestRate
        )
    }
}
