import ArgumentParser
import Courier
import Foundation
import Logging

/// `courier agent`: the long-running client agent with its control socket.
struct AgentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: "Run the client agent: deliver queued purchases and serve Storage/agent.sock.",
        discussion: """
            At start the agent picks up every unfinished transaction. It retries downloads that \
            failed for the network with backoff (those the server refused too, at most 8 times), \
            and those paused for disk space once they fit with the reserve. It POSTs each \
            finished transaction id to the finish webhook until acknowledged. \
            SIGTERM or SIGINT checkpoints and pauses active downloads and exits within 5 seconds. \
            SIGHUP reloads the rate limits of the configuration file (transfer.maxRate, \
            backgroundMaxRate, rateSchedule) without restarting transfers; a bad file keeps the old ones. \
            `courier enqueue`, list, status, pause, resume, cancel and discard go through the \
            socket while the agent runs (protocol: docs/agent.md).
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var receiptOptions: ReceiptOptions

    @Option(help: ArgumentHelp("The catalog for enqueued receipts, a file or URL (default: the configured one).", valueName: "file|url"))
    var catalog: String?

    @Option(
        name: .customLong("catalog-root"),
        help: ArgumentHelp(
            "The publisher's TUF root.json: the catalog is then accepted only through TUF (default: catalog.trustedRoot).",
            valueName: "file"))
    var catalogRoot: String?

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
            if let catalog { configuration.catalog = AgentRequest.absoluteCatalog(catalog) }
            configuration.trustCatalogRoot(catalogRoot)
            if let webhook { configuration.queue.finishWebhook = webhook }
            var logger = global.logger("courier.agent", default: .info)
            if let level = logLevel.flatMap(Logger.Level.init(rawValue:)) { logger.logLevel = level }
            let layout = global.layout
            var clientOptions = CourierClient.Options()
            clientOptions.announcesFinishes = true
            clientOptions.webhookBackoff = retryBackoff
            // The agent's downloads and updates are background traffic (transfer.backgroundMaxRate).
            clientOptions.trafficClass = .background
            let client = try global.client(configuration: configuration, logger: logger, options: clientOptions)
            defer { client.shutdown() }
            var options = CourierAgent.Options()
            options.retryBackoff = retryBackoff
            options.checkInterval = checkInterval
            // Under systemd (Type=notify): ready once the control socket listens.
            options.onReady = { SystemdNotify.send("READY=1\nSTATUS=delivering; control socket \(layout.agentSocket.path)") }
            // SIGHUP (systemctl reload): the rate limits of the configuration file, applied live.
            let global = self.global
            let reloadLogger = logger
            let reloader = ConfigurationReloader(
                load: { try global.loadConfiguration() }, apply: { client.updateRateLimits($0) }
            ) { applied, message, details in
                let metadata = details.mapValues { Logger.MetadataValue.string($0) }
                if applied {
                    reloadLogger.info("\(message)", metadata: metadata)
                } else {
                    reloadLogger.error("\(message)", metadata: metadata)
                }
            }
            defer { reloader.stop() }
            logger.debug("rate limits", metadata: ConfigurationReloader.describe(client.rateLimits).mapValues { .string($0) })
            try await client.runAgent(options: options)
        }
    }
}
