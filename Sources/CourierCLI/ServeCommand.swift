import ArgumentParser
import Courier
import CourierPostgres
import CourierServer
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// `courier serve`: the receipt-gated content origin over a folder `courier prestage` published.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve staged content packages and the catalog, gated by signed transactions.",
        discussion: """
            Serves GET and HEAD with single byte ranges, strong ETags, If-Range and 416 for the \
            packages the catalog lists and the manifests it names for them (delta updates), the \
            catalog itself at /catalog.json (ETag, 304) and /health. A package, or its manifest, \
            needs `Authorization: Bearer <signed transaction>` whose purchase entitles to the \
            package: 401 without a valid one, 403 when it does not entitle or was refunded. \
            With the receipt gate it takes App Store Server Notifications V2 at POST /notifications \
            (REFUND and REVOKE revoke a transaction, REFUND_REVERSED reinstates it), recorded in \
            <storage>/origin.sqlite. Prints the bound port (a `listening` event with --json); \
            SIGTERM or SIGINT stop it gracefully. Limits by default: a request head within 10 s, \
            a whole request within 30 s and at 500 bytes/s at least (after 5 s), 30 s idle, 30 s for a client that reads nothing, 1024 connections. \
            GET /authorize answers nginx's auth_request (204, 401 or 403 for the path in \
            X-Original-URI); `courier origin nginx-config` prints the nginx configuration that uses \
            it. --metrics-port serves Prometheus metrics at GET /metrics on a port of its own. \
            Every option has a key in the configuration's `serve` section (serve.content, \
            serve.port, serve.headerTimeout …; docs/origin.md, "Configuration"); a flag wins over it.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Option(name: .long, help: "The folder `courier prestage` published (packages and catalog.json); or serve.content.")
    var content: String?

    @Option(name: .long, help: "The catalog to serve and gate with (default <content>/catalog.json; or serve.catalog).")
    var catalog: String?

    @Option(
        name: .customLong("catalog-root"),
        help: ArgumentHelp(
            "The publisher's TUF root.json: the catalog is served only when its signed metadata names it (default: catalog.trustedRoot).",
            valueName: "file"))
    var catalogRoot: String?

    @Option(name: .long, help: "The port to listen on; 0 picks a free one (default 8080; or serve.port).")
    var port: Int?

    @Option(name: .long, help: "The address to listen on (default 127.0.0.1; or serve.host).")
    var host: String?

    @Flag(
        name: .long, inversion: .prefixedNo,
        help: "Serve every listed package without a receipt (public content, benchmarks; or serve.public).")
    var `public`: Bool?

    @Option(name: .customLong("limit-rate"), help: "Hold each package response to this many bytes per second (or serve.limitRate).")
    var limitRate: Int64?

    @Option(name: .customLong("header-timeout"), help: "Seconds a client has to send a complete request head (default 10; or serve.headerTimeout).")
    var headerTimeout: Double?

    @Option(
        name: .customLong("request-timeout"),
        help: "Seconds a whole request, head and body, has from its first byte (default 30; or serve.requestTimeout).")
    var requestTimeout: Double?

    @Option(
        name: .customLong("min-request-rate"),
        help: "Bytes per second a request must average once 5 s have passed, else it is closed (default 500; or serve.minRequestRate).")
    var minRequestRate: Int64?

    @Option(name: .customLong("idle-timeout"), help: "Seconds a connection may wait without a request part (default 30; or serve.idleTimeout).")
    var idleTimeout: Double?

    @Option(
        name: .customLong("send-timeout"),
        help: "Seconds a response may wait for a client that reads nothing before it is cut (default 30; or serve.sendTimeout).")
    var sendTimeout: Double?

    @Option(
        name: .customLong("max-connections"),
        help: "Open connections at most; more get 503 and are closed (default 1024; or serve.maxConnections).")
    var maxConnections: Int?

    @Option(
        name: .customLong("metrics-port"),
        help: "Serve Prometheus metrics at GET /metrics on this port (same host; 0 picks a free one; or serve.metricsPort).")
    var metricsPort: Int?

    @Option(
        name: .long,
        help: "Keep refunds in PostgreSQL, shared by every gate: postgresql://USER@HOST:PORT/DB (or serve.state; default <storage>/origin.sqlite)."
    )
    var state: String?

    @Option(
        name: .customLong("max-token-age"),
        help: "Refuse (401) signed transactions signed longer ago than this many seconds (default: no limit; or serve.maxTokenAge).")
    var maxTokenAge: Double?

    @Option(
        name: .customLong("token-cache-size"),
        help: "Verified tokens the receipt gate keeps; 0 verifies every request afresh (default 10000; or serve.tokenCacheSize).")
    var tokenCacheSize: Int?

    @Flag(
        name: .long, inversion: .prefixedNo,
        help: "Take App Store Server Notifications at POST /notifications (default on; or serve.notifications).")
    var notifications: Bool?

    @OptionGroup var receipts: ReceiptOptions

    func validate() throws {
        for (name, value) in [("--port", port), ("--metrics-port", metricsPort)] {
            if let value, !(0...65535).contains(value) { throw ValidationError("\(name) must be 0...65535") }
        }
        if let limitRate, limitRate <= 0 { throw ValidationError("--limit-rate must be positive") }
        if let minRequestRate, minRequestRate <= 0 { throw ValidationError("--min-request-rate must be positive") }
        for (name, value) in [("--header-timeout", headerTimeout), ("--request-timeout", requestTimeout), ("--idle-timeout", idleTimeout), ("--send-timeout", sendTimeout), ("--max-token-age", maxTokenAge)] {
            if let value, !(value > 0 && value.isFinite) { throw ValidationError("\(name) must be a positive number of seconds") }
        }
        if let maxConnections, maxConnections < 1 { throw ValidationError("--max-connections must be at least 1") }
        if let tokenCacheSize, tokenCacheSize < 0 { throw ValidationError("--token-cache-size must be 0 or more") }
    }

    /// The configuration's `serve` section with each flag given laid over it (a flag wins over
    /// the file, the file over the defaults). Paths from flags are made absolute here, against
    /// the current directory; the file's stay relative to its folder (`CourierConfiguration.resolvePath`).
    func serveSettings(over file: ServeConfiguration) -> ServeConfiguration {
        var serve = file
        let here = URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)
        if let content { serve.content = URL(fileURLWithPath: content, relativeTo: here).standardizedFileURL.path }
        if let catalog { serve.catalog = URL(fileURLWithPath: catalog, relativeTo: here).standardizedFileURL.path }
        if let host { serve.host = host }
        if let port { serve.port = port }
        if let `public` { serve.public = `public` }
        if let limitRate { serve.limitRate = limitRate }
        if let headerTimeout { serve.headerTimeout = headerTimeout }
        if let requestTimeout { serve.requestTimeout = requestTimeout }
        if let minRequestRate { serve.minRequestRate = minRequestRate }
        if let idleTimeout { serve.idleTimeout = idleTimeout }
        if let sendTimeout { serve.sendTimeout = sendTimeout }
        if let maxConnections { serve.maxConnections = maxConnections }
        if let metricsPort { serve.metricsPort = metricsPort }
        if let state { serve.state = state }
        if let maxTokenAge { serve.maxTokenAge = maxTokenAge }
        if let tokenCacheSize { serve.tokenCacheSize = tokenCacheSize }
        if let notifications { serve.notifications = notifications }
        return serve
    }

    func run() async throws {
        try await global.run { output in
            let settings = try global.loadConfiguration()
            let serve = serveSettings(over: settings.serve)
            try serve.validate()
            guard let content = serve.content else {
                throw CourierError(
                    .usage, "courier serve needs the folder to serve",
                    hint: "pass --content DIR, or set serve.content in the configuration")
            }
            let contentDirectory = settings.resolvePath(content).standardizedFileURL
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: contentDirectory.path, isDirectory: &isDirectory), isDirectory.boolValue
            else {
                throw CourierError(.usage, "\(contentDirectory.path) is not a folder", hint: "run `courier prestage --dest DIR` first")
            }
            var configuration = OriginConfiguration(
                serve, contentDirectory: contentDirectory, catalogFile: serve.catalog.map { settings.resolvePath($0).standardizedFileURL })
            // A catalog already published is loaded once before listening: one that cannot be
            // served (invalid, two contents sharing an identifier) is refused at start (exit 2),
            // not answered 503 to every request. None yet is fine: prestage may publish it later.
            if FileManager.default.fileExists(atPath: configuration.catalogFile.path) {
                let data = try CourierError.wrapping(.io, "cannot read the catalog \(configuration.catalogFile.path)") {
                    try Data(contentsOf: configuration.catalogFile)
                }
                _ = try PublishedCatalog(data: data)
            }
            if let rootFile = catalogRoot.map({ URL(fileURLWithPath: $0).standardizedFileURL }) ?? settings.resolvedCatalogTrust.trustedRoot {
                let root = try CourierError.wrapping(.usage, "cannot read the trusted root \(rootFile.path)") { try Data(contentsOf: rootFile) }
                guard (try? TUFTrustedSet(trustedRoot: root, referenceTime: .distantPast)) != nil else {
                    throw CourierError(.usage, "the trusted root \(rootFile.path) is not TUF root metadata signed by its own keys")
                }
                configuration.trustedCatalogRoot = root
            }
            let host = serve.host
            let isPublic = serve.public
            let json = global.json
            let logger = global.logger("courier.origin", default: .notice, ndjson: true)
            let accessLog = global.accessLog("courier.access")
            // swift-metrics is bootstrapped once per process, here, with a Prometheus registry that
            // GET /metrics reads; without a metrics port nothing is counted.
            let registry = serve.metricsPort != nil ? MetricsEndpoint.bootstrapPrometheus() : nil
            let metrics = registry != nil ? OriginMetrics() : nil
            // With --state (or serve.state) postgresql://…, refunds live in PostgreSQL
            // (CourierPostgres), loaded before the first answer.
            var refunds: PostgresRefundStore?
            if let state = serve.state, !isPublic {
                refunds = try await PostgresRefundStore.open(url: PostgresURL(parsing: state), logger: logger)
            }
            let (gate, notifications) = try makeGate(
                configuration: settings, serve: serve, origin: configuration, metrics: metrics, refunds: refunds)
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
                    output.emit(ListeningEvent(host: host, port: boundPort, url: url, content: contentDirectory.path, gated: !isPublic))
                } else {
                    output.line("courier: serving \(contentDirectory.path) on \(url)\(isPublic ? " (public, no receipt gate)" : "")")
                }
            }
            var services: [any Service] = [origin] + (refunds.map { [$0] } ?? [])
            if let metricsPort = serve.metricsPort, let registry {
                services.append(
                    MetricsEndpoint(registry: registry, host: host, port: metricsPort, logger: logger) { boundPort in
                        let url = "http://\(host.contains(":") ? "[\(host)]" : host):\(boundPort)/metrics"
                        if json {
                            output.emit(MetricsEvent(host: host, port: boundPort, url: url))
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
            // Said when the signal arrives ("stopping": requests in flight may take up to the
            // grace period), and "stopped" only once every listener is closed.
            let grace = configuration.shutdownGracePeriod
            let said = FirstTime()
            let watchers = [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")].map { number, name in
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler {
                    guard said.claim() else { return }
                    if json {
                        output.emit(StoppingEvent(signal: name))
                    } else {
                        output.note("courier: stopping (\(name)): finishing requests in flight, for up to \(RetryReporter.seconds(grace))")
                    }
                }
                source.resume()
                return source
            }
            defer { for watcher in watchers { watcher.cancel() } }
            try await group.run()
            for watcher in watchers { watcher.cancel() }
            if json {
                output.emit(ServeResult(content: contentDirectory.path, stopped: true))
            } else {
                output.note("courier: stopped")
            }
        }
    }

    /// The receipt gate (trust roots, bundle id, environments from the configuration and the
    /// receipt options) with the notification receiver that feeds it refunds (state in the
    /// storage root), or the public gate with `--public` and no notifications. Without
    /// notifications (`--no-notifications`) the gate still reads the refunds others record.
    private func makeGate(
        configuration: CourierConfiguration,
        serve: ServeConfiguration,
        origin: OriginConfiguration,
        metrics: OriginMetrics?,
        refunds: PostgresRefundStore? = nil
    ) throws -> (any AccessGate, NotificationReceiver?) {
        if serve.public { return (PublicAccessGate(), nil) }
        var configuration = configuration
        receipts.apply(to: &configuration)
        guard !configuration.receipts.trustRoots.isEmpty else {
            throw CourierError(
                .usage,
                "the receipt gate needs trusted root certificates",
                hint: "pass --trust-root PATH (or set receipts.trustRoots), or --public to serve without receipts"
            )
        }
        let verifier = try global.core(configuration: configuration).transactionVerifier()
        let cache =
            serve.tokenCacheSize > 0
            ? VerifiedTokenCache(capacity: serve.tokenCacheSize, lifetime: serve.tokenCacheLifetime, metrics: metrics) : nil
        if let refunds {
            let gate = ReceiptAccessGate(verifier: verifier, revocations: refunds, maxTokenAge: origin.maxTokenAge, cache: cache)
            return (gate, serve.notifications ? NotificationReceiver(verifier: verifier, store: refunds) : nil)
        }
        // Gates on this machine may share the storage root: each sees the refunds any of them
        // recorded (docs/origin.md, "Behind nginx").
        let gate = ReceiptAccessGate(
            verifier: verifier,
            revocations: try SharedRevocations(directory: global.layout.root),
            maxTokenAge: origin.maxTokenAge,
            cache: cache
        )
        guard serve.notifications else { return (gate, nil) }
        return (gate, NotificationReceiver(verifier: verifier, store: try OriginStateStore(directory: global.layout.root)))
    }
}

/// True the first time `claim` is called, false after: one "stopping" line for a SIGTERM
/// followed by a SIGINT.
private final class FirstTime: Sendable {
    private let taken = Atomic<Bool>(false)

    func claim() -> Bool {
        taken.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
    }
}
