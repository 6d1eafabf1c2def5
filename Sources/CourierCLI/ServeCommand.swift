import ArgumentParser
import Courier
import CourierPostgres
import CourierServer
import Foundation
import Logging
import ServiceLifecycle

/// `courier serve`: the receipt-gated content origin over a folder `courier prestage` published.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve staged content packages and the catalog, gated by signed transactions.",
        discussion: """
            Serves GET and HEAD with single byte ranges, strong ETags, If-Range and 416 for the \
            packages the catalog lists, the catalog itself at /catalog.json (ETag, 304) and \
            /health. A package needs `Authorization: Bearer <signed transaction>` whose purchase \
            entitles to it: 401 without a valid one, 403 when it does not entitle or was refunded. \
            With the receipt gate it takes App Store Server Notifications V2 at POST /notifications \
            (REFUND and REVOKE revoke a transaction, REFUND_REVERSED reinstates it), recorded in \
            <storage>/origin.sqlite. Prints the bound port (a `listening` event with --json); \
            SIGTERM or SIGINT stop it gracefully. Limits by default: a request head within 10 s, \
            30 s idle, 30 s for a client that reads nothing, 1024 connections. \
            GET /authorize answers nginx's auth_request (204, 401 or 403 for the path in \
            X-Original-URI); `courier origin nginx-config` prints the nginx configuration that uses \
            it. --metrics-port serves Prometheus metrics at GET /metrics on a port of its own.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Option(name: .long, help: "The folder `courier prestage` published (packages and catalog.json).")
    var content: String

    @Option(name: .long, help: "The catalog to serve and gate with (default <content>/catalog.json).")
    var catalog: String?

    @Option(name: .long, help: "The port to listen on; 0 picks a free one.")
    var port: Int = 8080

    @Option(name: .long, help: "The address to listen on.")
    var host: String = "127.0.0.1"

    @Flag(name: .long, help: "Serve every listed package without a receipt (public content, benchmarks).")
    var `public` = false

    @Option(name: .customLong("limit-rate"), help: "Hold each package response to this many bytes per second.")
    var limitRate: Int64?

    @Option(name: .customLong("header-timeout"), help: "Seconds a client has to send a complete request head (default 10).")
    var headerTimeout: Double?

    @Option(name: .customLong("idle-timeout"), help: "Seconds a connection may wait without a request part (default 30).")
    var idleTimeout: Double?

    @Option(name: .customLong("send-timeout"), help: "Seconds a response may wait for a client that reads nothing before it is cut (default 30).")
    var sendTimeout: Double?

    @Option(name: .customLong("max-connections"), help: "Open connections at most; more get 503 and are closed (default 1024).")
    var maxConnections: Int?

    @Option(name: .customLong("metrics-port"), help: "Serve Prometheus metrics at GET /metrics on this port (same host; 0 picks a free one).")
    var metricsPort: Int?

    @Option(
        name: .long,
        help: "Keep refunds in PostgreSQL, shared by every gate: postgresql://USER@HOST:PORT/DB (or serve.state in the configuration; default <storage>/origin.sqlite)."
    )
    var state: String?

    @Option(name: .customLong("max-token-age"), help: "Refuse (401) signed transactions signed longer ago than this many seconds (default: no limit).")
    var maxTokenAge: Double?

    @OptionGroup var receipts: ReceiptOptions

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0...65535") }
        if let metricsPort, !(0...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be 0...65535") }
        if let limitRate, limitRate <= 0 { throw ValidationError("--limit-rate must be positive") }
        for (name, value) in [("--header-timeout", headerTimeout), ("--idle-timeout", idleTimeout), ("--send-timeout", sendTimeout), ("--max-token-age", maxTokenAge)] {
            if let value, !(value > 0 && value.isFinite) { throw ValidationError("\(name) must be a positive number of seconds") }
        }
        if let maxConnections, maxConnections < 1 { throw ValidationError("--max-connections must be at least 1") }
    }

    func run() async throws {
        try await global.run { output in
            let contentDirectory = URL(fileURLWithPath: content, isDirectory: true).standardizedFileURL
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: contentDirectory.path, isDirectory: &isDirectory), isDirectory.boolValue
            else {
                throw CourierError(.usage, "\(contentDirectory.path) is not a folder", hint: "run `courier prestage --dest DIR` first")
            }
            var configuration = OriginConfiguration(
                contentDirectory: contentDirectory,
                catalogFile: catalog.map { URL(fileURLWithPath: $0).standardizedFileURL },
                host: host,
                port: port,
                rateLimit: limitRate
            )
            if let headerTimeout { configuration.requestHeadTimeout = headerTimeout }
            if let idleTimeout { configuration.idleTimeout = idleTimeout }
            if let sendTimeout { configuration.sendTimeout = sendTimeout }
            if let maxConnections { configuration.maxConnections = maxConnections }
            if let maxTokenAge { configuration.maxTokenAge = maxTokenAge }
            let json = global.json
            let logger = global.logger("courier.origin", default: .notice, ndjson: true)
            let accessLog = global.accessLog("courier.access")
            // swift-metrics is bootstrapped once per process, here, with a Prometheus registry that
            // GET /metrics reads; without --metrics-port nothing is counted.
            let registry = metricsPort != nil ? MetricsEndpoint.bootstrapPrometheus() : nil
            let metrics = registry != nil ? OriginMetrics() : nil
            let settings = try global.loadConfiguration()
            // With --state (or serve.state) postgresql://…, refunds live in PostgreSQL
            // (CourierPostgres), loaded before the first answer.
            var refunds: PostgresRefundStore?
            if let state = state ?? settings.serve.state, !`public` {
                refunds = try await PostgresRefundStore.open(url: PostgresURL(parsing: state), logger: logger)
            }
            let (gate, notifications) = try makeGate(configuration: settings, origin: configuration, metrics: metrics, refunds: refunds)
            let origin = ContentOrigin(
                configuration: configuration,
                gate: gate,
                notifications: notifications,
                metrics: metrics,
                logger: logger,
                accessLog: accessLog
            ) { boundPort in
                let url = "http://\(host.contains(":") ? "[\(host)]" : host):\(boundPort)"
                if json {
                    output.emit([
                        "event": "listening", "host": host, "port": boundPort, "url": url,
                        "content": contentDirectory.path, "gated": !self.public,
                    ])
                } else {
                    output.line("courier: serving \(contentDirectory.path) on \(url)\(self.public ? " (public, no receipt gate)" : "")")
                }
            }
            var services: [any Service] = [origin] + (refunds.map { [$0] } ?? [])
            if let metricsPort, let registry {
                services.append(
                    MetricsEndpoint(registry: registry, host: host, port: metricsPort, logger: logger) { boundPort in
                        let url = "http://\(host.contains(":") ? "[\(host)]" : host):\(boundPort)/metrics"
                        if json {
                            output.emit(["event": "metrics", "host": host, "port": boundPort, "url": url])
                        } else {
                            output.line("courier: metrics on \(url)")
                        }
                    }
                )
            }
            let group = ServiceGroup(
                configuration: ServiceGroupConfiguration(
                    services: services,
                    gracefulShutdownSignals: [.sigterm, .sigint],
                    logger: logger
                )
            )
            try await group.run()
            if json {
                output.emit(["event": "stopped"])
            } else {
                output.note("courier: stopped")
            }
        }
    }

    /// The receipt gate (trust roots, bundle id, environments from the configuration and the
    /// receipt options) with the notification receiver that feeds it refunds (state in the
    /// storage root), or the public gate with `--public` and no notifications.
    private func makeGate(
        configuration: CourierConfiguration,
        origin: OriginConfiguration,
        metrics: OriginMetrics?,
        refunds: PostgresRefundStore? = nil
    ) throws -> (any AccessGate, NotificationReceiver?) {
        if `public` { return (PublicAccessGate(), nil) }
        var configuration = configuration
        receipts.apply(to: &configuration)
        guard !configuration.receipts.trustRoots.isEmpty else {
            throw CourierError(
                .usage,
                "the receipt gate needs trusted root certificates",
                hint: "pass --trust-root PATH (or set receipts.trustRoots), or --public to serve without receipts"
            )
        }
        let files = configuration.receipts.trustRoots.map { configuration.resolvePath($0) }
        let verifier = SignedTransactionVerifier(
            trustedRoots: try TrustRoots.load(files),
            bundleId: configuration.receipts.bundleId,
            environments: configuration.receipts.environments,
            clockSkew: configuration.receipts.clockSkew
        )
        if let refunds {
            let gate = ReceiptAccessGate(
                verifier: verifier, revocations: refunds, maxTokenAge: origin.maxTokenAge, cache: VerifiedTokenCache(metrics: metrics))
            return (gate, NotificationReceiver(verifier: verifier, store: refunds))
        }
        let store = try OriginStateStore(directory: global.layout.root)
        // Gates on this machine may share the storage root: each sees the refunds any of them
        // recorded (docs/origin.md, "Behind nginx").
        let gate = ReceiptAccessGate(
            verifier: verifier,
            revocations: try SharedRevocations(directory: global.layout.root),
            maxTokenAge: origin.maxTokenAge,
            cache: VerifiedTokenCache(metrics: metrics)
        )
        return (gate, NotificationReceiver(verifier: verifier, store: store))
    }
}
