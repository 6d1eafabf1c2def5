import ArgumentParser
import Courier
import Foundation
import Logging
import ServiceLifecycle

/// `courier agent`: the long-running client agent with its control socket.
struct AgentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: "Run the client agent: deliver queued purchases and serve Storage/agent.sock.",
        discussion: """
            At start the agent picks up every unfinished transaction. It retries downloads that \
            failed for the network with backoff and those paused for disk space once they fit, \
            and POSTs each finished transaction id to the finish webhook until acknowledged. \
            SIGTERM or SIGINT checkpoints and pauses active downloads and exits within 5 seconds. \
            `courier enqueue`, list, status, pause, resume, cancel and discard go through the \
            socket while the agent runs (protocol: docs/agent.md).
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var receiptOptions: ReceiptOptions

    @Option(help: ArgumentHelp("The catalog for enqueued receipts, a file or URL (default: the configured one).", valueName: "file|url"))
    var catalog: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (default: COURIER_LOG, else info).")
    var logLevel: String?

    @Option(help: ArgumentHelp("POST each finished transaction id here (default: queue.finishWebhook).", valueName: "url"))
    var webhook: String?

    @Option(name: .customLong("retry-backoff"), help: "Seconds before the first retry of a download that failed for the network (doubles each time).")
    var retryBackoff: Double = 2

    @Option(name: .customLong("check-interval"), help: "Seconds between checks for retryable downloads and due webhooks.")
    var checkInterval: Double = 1

    func validate() throws {
        if let logLevel, Logger.Level(rawValue: logLevel) == nil { throw ValidationError("--log-level: unknown level \(logLevel)") }
        if retryBackoff <= 0 || checkInterval <= 0 { throw ValidationError("--retry-backoff and --check-interval must be positive") }
    }

    func run() async throws {
        try await global.run { _ in
            var configuration = try global.loadConfiguration()
            receiptOptions.apply(to: &configuration)
            // The agent's catalog: --catalog as given (a URL or a path from here), else the configured one.
            if let catalog { configuration.catalog = AgentRoute.absoluteCatalog(catalog) }
            if let webhook { configuration.queue.finishWebhook = webhook }
            let level = logLevel.flatMap { Logger.Level(rawValue: $0) } ?? global.logLevel(default: .info)
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
            let logger = Logger(label: "courier.agent")
            let layout = global.layout
            try layout.prepare()
            let store = try StateStore(layout: layout)
            let queue = PaymentQueue(store: store, layout: layout, configuration: configuration.queue, logger: logger)
            let engine = try TransferEngine(configuration: configuration.transfer, logger: logger)
            defer { engine.shutdown() }
            let placer = ContentPlacer(
                layout: layout, store: store, packages: configuration.packages, placement: configuration.placement, logger: logger)
            try placer.recover()
            var webhookNotifier: FinishWebhook?
            if let address = configuration.queue.finishWebhook {
                guard let url = URL(string: address), url.scheme == "http" || url.scheme == "https" else {
                    throw ValidationError("the finish webhook must be an http(s) URL, not \(address)")
                }
                let webhook = FinishWebhook(
                    url: url, store: store, transport: engine.httpTransport, initialBackoff: retryBackoff, logger: logger)
                webhook.attach(to: queue)
                webhookNotifier = webhook
            }
            let pipeline = DeliveryPipeline(
                queue: queue, downloader: TransferDownloadStage(engine: engine, credentials: TransferDownloadStage.bearerCredentials(from: queue)),
                installer: PlacementInstallStage(placer: placer),
                notifier: webhookNotifier, logger: logger)
            var options = CourierAgent.Options()
            options.retryBackoff = retryBackoff
            options.checkInterval = checkInterval
            // Under systemd (Type=notify): ready once the control socket listens.
            options.onReady = { SystemdNotify.send("READY=1\nSTATUS=delivering; control socket \(layout.agentSocket.path)") }
            let agentConfiguration = configuration
            let transport = engine.httpTransport
            let agent = CourierAgent(queue: queue, pipeline: pipeline, webhook: webhookNotifier, options: options, logger: logger) {
                request in
                try await Self.enqueue(
                    request, configuration: agentConfiguration, pipeline: pipeline, transport: transport, layout: layout, logger: logger)
            }
            var groupConfiguration = ServiceGroupConfiguration(
                services: [.init(service: agent)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
            groupConfiguration.maximumGracefulShutdownDuration = .seconds(4)
            let group = ServiceGroup(configuration: groupConfiguration)
            try await group.run()
        }
    }

    /// Validates an enqueued receipt with the agent's receipt settings and queues what it proves.
    static func enqueue(
        _ request: AgentRequest, configuration: CourierConfiguration, pipeline: DeliveryPipeline, transport: any HTTPTransport,
        layout: StorageLayout, logger: Logger
    ) async throws -> [TransactionRecord] {
        guard let receipt = request.receiptData, !receipt.isEmpty else {
            throw CourierError(.usage, "enqueue needs the receipt's bytes (base64)")
        }
        let configured = configuration.catalog.map { $0.contains("://") ? $0 : configuration.resolvePath($0).path }
        guard let location = request.catalog ?? configured else {
            throw CourierError(.usage, "the agent has no catalog", hint: "start it with --catalog, or name one in the request")
        }
        let validator = try ReceiptValidator(
            configuration: configuration.receipts, baseDirectory: configuration.baseDirectory, transport: transport, logger: logger)
        let loaded = try await CatalogLoader(transport: transport, layout: layout, logger: logger).load(
            location, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true))
        let products = request.products ?? []
        let transactions = try await pipeline.enqueue(
            receipt: receipt, validator: ReceiptValidationStage(validator: validator),
            entitlements: CatalogEntitlementStage(catalog: loaded.catalog, location: loaded.url),
            productIds: products.isEmpty ? nil : Set(products), restore: request.restore ?? false)
        guard !transactions.isEmpty else {
            throw CourierError(
                .notEntitled, "the receipt proves no purchase\(products.isEmpty ? "" : " of \(products.joined(separator: ", "))")")
        }
        return transactions
    }
}
