import Foundation

/// `courier serve`: the origin's settings a deployment keeps in the configuration file (`serve`
/// in `Config/courier.json`). Each has a flag of the same meaning that overrides it; a key the
/// file leaves out keeps the default below. Checked when the file is read (`validate`), so a bad
/// value stops `courier serve` before it binds anything (exit 2). docs/origin.md, "Configuration".
public struct ServeConfiguration: Sendable, Codable, Equatable {
    /// The folder `courier prestage` published (`--content`); a relative path is resolved against
    /// the configuration file's folder. nil: `--content` is required.
    public var content: String?
    /// The catalog to serve and gate with (`--catalog`; relative to the configuration file's
    /// folder). nil: `<content>/catalog.json`.
    public var catalog: String?
    /// The address to listen on (`--host`). Default `127.0.0.1`.
    public var host: String = "127.0.0.1"
    /// The port (`--port`); 0 picks a free one. Default 8080.
    public var port: Int = 8080
    /// Serve every listed package without a receipt (`--public`). Default false.
    public var `public`: Bool = false
    /// Bytes per second each package response is held to (`--limit-rate`). nil (default): no limit.
    public var limitRate: Int64?
    /// Seconds a client has to send a complete request head (`--header-timeout`). Default 10.
    public var headerTimeout: Double = 10
    /// Seconds a whole request, head and body, has from its first byte (`--request-timeout`).
    /// Default 30.
    public var requestTimeout: Double = 30
    /// Bytes per second a request must average from its first byte once 5 s have passed
    /// (`--min-request-rate`). Default 500.
    public var minRequestRate: Int64 = 500
    /// Seconds a connection may wait without a request part (`--idle-timeout`). Default 30.
    public var idleTimeout: Double = 30
    /// Seconds a response may wait for a client that reads nothing (`--send-timeout`). Default 30.
    public var sendTimeout: Double = 30
    /// Open connections at most; more get 503 (`--max-connections`). Default 1024.
    public var maxConnections: Int = 1024
    /// Seconds graceful shutdown lets responses in flight finish (no flag). Default 10.
    public var shutdownGracePeriod: Double = 10
    /// The port of the Prometheus `/metrics` endpoint (`--metrics-port`; 0 picks a free one).
    /// nil (default): no metrics.
    public var metricsPort: Int?
    /// Where refunds (App Store Server Notifications) are kept, shared by every gate:
    /// `postgresql://USER@HOST:PORT/DB` (`--state`); nil keeps them in `<storage>/origin.sqlite`.
    public var state: String?
    /// Seconds after its `signedDate` the receipt gate still takes a signed transaction
    /// (`--max-token-age`). nil (default): no limit.
    public var maxTokenAge: Double?
    /// Verified tokens the receipt gate keeps (`--token-cache-size`); 0 verifies every request's
    /// token afresh. Default 10,000.
    public var tokenCacheSize: Int = 10_000
    /// Seconds a verified token stays cached at most (no flag; a token's own end comes first).
    /// Default 600.
    public var tokenCacheLifetime: Double = 600
    /// Take App Store Server Notifications at `POST /notifications` (`--notifications` /
    /// `--no-notifications`). Default true; false for gates that only read the refunds another
    /// service records (the same storage root or `state`).
    public var notifications: Bool = true

    public init(state: String? = nil) {
        self.state = state
    }

    /// Refuses settings the origin cannot run with, naming the key (`serve.port must be
    /// 0...65535`); `CourierConfiguration.decode` asks, and `courier serve` asks again once its
    /// flags are laid over the file.
    public func validate() throws {
        func refuse(_ message: String) -> CourierError { CourierError(.usage, "serve.\(message)") }
        if let content, content.isEmpty { throw refuse("content must name a folder") }
        if let catalog, catalog.isEmpty { throw refuse("catalog must name a file") }
        if host.isEmpty { throw refuse("host must name an address") }
        for (key, value) in [("port", port), ("metricsPort", metricsPort)] {
            if let value, !(0...65535).contains(value) { throw refuse("\(key) must be 0...65535") }
        }
        if let limitRate, limitRate <= 0 { throw refuse("limitRate must be a positive number of bytes per second") }
        if minRequestRate <= 0 { throw refuse("minRequestRate must be a positive number of bytes per second") }
        let seconds = [
            ("headerTimeout", headerTimeout), ("requestTimeout", requestTimeout), ("idleTimeout", idleTimeout), ("sendTimeout", sendTimeout),
            ("tokenCacheLifetime", tokenCacheLifetime), ("maxTokenAge", maxTokenAge),
        ]
        for (key, value) in seconds {
            if let value, !(value > 0 && value.isFinite) { throw refuse("\(key) must be a positive number of seconds") }
        }
        guard shutdownGracePeriod >= 0, shutdownGracePeriod.isFinite else {
            throw refuse("shutdownGracePeriod must be a number of seconds, 0 or more")
        }
        if maxConnections < 1 { throw refuse("maxConnections must be at least 1") }
        if tokenCacheSize < 0 { throw refuse("tokenCacheSize must be 0 (no cache) or more") }
    }
}
