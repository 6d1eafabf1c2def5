import ArgumentParser
import Courier
import Foundation
import Logging
import ServiceLifecycle

/// `courier agent`: works the queue until SIGTERM or SIGINT, with a control socket.
struct AgentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: "Run the client agent: deliver every unfinished purchase, then keep working the queue.",
        discussion: """
            Picks up every unfinished transaction at start. Serves a control socket at \
            <storage>/agent.sock (mode 0600, JSON lines: list, status, pause, resume, cancel, discard, \
            enqueue, subscribe; see docs/queue.md). Retries downloads that failed for the network on \
            a backoff schedule, and those paused for disk space when the space is back. SIGTERM or \
            SIGINT checkpoint and pause active transfers and exit. Logs go to standard error \
            (COURIER_LOG=debug for more).
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var receiptOptions: ReceiptOptions

    @Option(help: ArgumentHelp("The catalog for enqueue requests, a file or URL (default: the configured one).", valueName: "file|url"))
    var catalog: String?

    func run() async throws {
        try await global.run { output in try await runAgent(output: output) }
    }

    private func runAgent(output: Output) async throws {
        var configuration = try global.loadConfiguration()
        receiptOptions.apply(to: &configuration)
        if let catalog { configuration.catalog = catalog }
        let runtime = try DeliveryRuntime(global: global, configuration: configuration)
        defer { runtime.shutdown() }
        var logger = Logger(label: "courier.agent")
        logger.logLevel = ProcessInfo.processInfo.environment["COURIER_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .info
        let agent = QueueAgent(
            pipeline: runtime.pipeline,
            enqueue: makeEnqueue(runtime: runtime, configuration: configuration),
            diskReserve: configuration.transfer.diskReserve,
            logger: logger)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [ServiceGroupConfiguration.ServiceConfiguration(service: agent)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        if !output.json {
            output.note("courier agent: working the queue in \(global.layout.root.path); socket \(global.layout.agentSocket.path)")
        }
        try await group.run()
    }

    /// What an `enqueue` request runs: validate, entitle in the catalog, queue.
    private func makeEnqueue(runtime: DeliveryRuntime, configuration: CourierConfiguration)
        -> (@Sendable (Data, [String]) async throws -> [TransactionRecord])?
    {
        guard configuration.catalog != nil else { return nil }
        let catalogOverride = catalog
        return { receipt, products in
            let file = try TemporaryReceipt(receipt)
            defer { file.remove() }
            return try await runtime.enqueue(
                receiptFile: file.url.path, catalogOverride: catalogOverride, products: products, restore: false,
                configuration: configuration)
        }
    }
}

/// A receipt handed over the socket, written to a private file for the validator.
private struct TemporaryReceipt {
    let url: URL

    init(_ contents: Data) throws {
        url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("courier-receipt-\(UUID().uuidString)")
        guard FileManager.default.createFile(atPath: url.path, contents: contents, attributes: [.posixPermissions: 0o600]) else {
            throw CourierError(.io, "cannot write \(url.path)")
        }
    }

    func remove() {
        try? FileManager.default.removeItem(at: url)
    }
}
