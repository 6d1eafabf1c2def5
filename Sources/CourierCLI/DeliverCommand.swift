import ArgumentParser
import Courier
import Foundation
import Logging

/// `courier deliver --receipt FILE`: the whole flow in the foreground.
struct DeliverCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deliver",
        abstract: "Validate a receipt, then download, verify, unpack and place its content, and finish.",
        discussion: """
            Run it again after any interruption: it continues from the journal without fetching \
            finished bytes again. After success a second run does nothing and says so. With \
            --restore, only the products named by --product are restored.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var receiptOptions: ReceiptOptions

    @OptionGroup var purchase: PurchaseOptions

    func run() async throws {
        try await global.run { output in
            var configuration = try global.loadConfiguration()
            receiptOptions.apply(to: &configuration)
            if let catalog = purchase.catalog { configuration.catalog = catalog }
            let runtime = try DeliveryRuntime(global: global, configuration: configuration)
            defer { runtime.shutdown() }
            let enqueued = try await runtime.enqueue(
                receiptFile: purchase.receiptFile, catalogOverride: purchase.catalog, products: purchase.products, restore: purchase.restore,
                configuration: configuration)
            // A purchase whose product the catalog does not list is said, and exits 3, after
            // the others are delivered; it stays unfinished.
            let notInCatalog = enqueued.notInCatalogError
            if let notInCatalog, !output.json { output.note("courier: \(notInCatalog.message)") }
            let transactions = enqueued.transactions
            let ids = Set(transactions.map(\.id))
            // Purchases of products the catalog lists without hosted content: finished with nothing to download.
            let contentless = try transactions.filter { $0.state != .finished && $0.state != .failed }
                .filter { try runtime.queue.downloads(transactionId: $0.id).isEmpty }
            if transactions.allSatisfy({ $0.state == .finished }) {
                if output.json {
                    output.emit(["event": "result", "delivered": [String](), "alreadyDelivered": transactions.map(\.id), "exitCode": 0])
                } else {
                    output.line("Nothing to do: \(transactions.count == 1 ? "this purchase was" : "these \(transactions.count) purchases were") already delivered.")
                }
                if let notInCatalog { throw notInCatalog }
                return
            }
            if let revoked = transactions.first(where: { $0.state == .failed }), transactions.allSatisfy({ $0.state == .failed }) {
                throw CourierError(revoked.errorCode ?? .notEntitled, revoked.errorMessage ?? "the transaction failed")
            }
            if !output.json {
                for transaction in contentless {
                    output.line("\(transaction.productId): no hosted content in the catalog; nothing to download, purchase finished")
                }
            }
            try await runtime.deliver(scope: .transactions(ids), output: output, retryStopped: true)
            if let notInCatalog { throw notInCatalog }
        }
    }
}

/// The real stages wired together for `deliver` and `resume`: the transfer engine, the content
/// placer and the pipeline over the payment queue of the storage.
final class DeliveryRuntime: Sendable {
    let queue: PaymentQueue
    let engine: TransferEngine
    let placer: ContentPlacer
    let pipeline: DeliveryPipeline
    let catalogLoader: CatalogLoader
    let logger: Logger

    init(global: GlobalOptions, configuration: CourierConfiguration) throws {
        let logger = global.logger("courier", default: .critical)
        self.logger = logger
        let layout = global.layout
        let store = try StateStore(layout: layout)
        queue = PaymentQueue(store: store, layout: layout, configuration: configuration.queue, logger: logger)
        engine = try TransferEngine(configuration: configuration.transfer, logger: logger)
        placer = ContentPlacer(
            layout: layout, store: store, packages: configuration.packages, placement: configuration.placement, logger: logger)
        try placer.recover()
        // A stale catalog served from the cache is worth a warning on stderr even when quiet.
        var catalogLogger = logger
        catalogLogger.logLevel = min(logger.logLevel, .warning)
        catalogLoader = CatalogLoader(transport: engine.httpTransport, layout: layout, logger: catalogLogger)
        pipeline = DeliveryPipeline(
            queue: queue, downloader: TransferDownloadStage(engine: engine, credentials: TransferDownloadStage.bearerCredentials(from: queue)), installer: PlacementInstallStage(placer: placer),
            logger: logger)
    }

    func shutdown() {
        engine.shutdown()
    }

    /// Validates the receipt in `receiptFile`, entitles its transactions in the catalog and queues
    /// them (only `products` when named; a restore of exactly those when `restore`). Throws
    /// `notEntitled` when the receipt proves none of the asked purchases, or only purchases of
    /// products the catalog does not list.
    func enqueue(
        receiptFile: String, catalogOverride: String?, products: [String], restore: Bool,
        configuration: CourierConfiguration
    ) async throws -> EnqueueResult {
        guard let location = configuration.catalog else {
            throw ValidationError("name the catalog with --catalog (or set \"catalog\" in the configuration)")
        }
        let receipt = try ReceiptValidator.readReceipt(URL(fileURLWithPath: receiptFile))
        let validator = try ReceiptValidator(
            configuration: configuration.receipts, baseDirectory: configuration.baseDirectory,
            transport: engine.httpTransport, logger: logger)
        let loaded = try await catalogLoader.load(
            location,
            relativeTo: catalogOverride == nil ? configuration.baseDirectory : URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
        let result = try await pipeline.enqueueReporting(
            receipt: receipt, validator: ReceiptValidationStage(validator: validator),
            entitlements: CatalogEntitlementStage(catalog: loaded.catalog, location: loaded.url),
            productIds: products.isEmpty ? nil : Set(products), restore: restore)
        if result.transactions.isEmpty, let notInCatalog = result.notInCatalogError { throw notInCatalog }
        guard !result.transactions.isEmpty else {
            throw CourierError(
                .notEntitled, "the receipt proves no purchase\(products.isEmpty ? "" : " of \(products.joined(separator: ", "))")")
        }
        return result
    }

    /// Runs the pipeline over `scope` in the foreground with progress (a status line on a
    /// terminal, NDJSON events with --json), pausing on SIGINT/SIGTERM (exit 7). Downloads that
    /// stopped for a retryable reason are resumed first when `retryStopped`.
    func deliver(scope: DeliveryScope, output: Output, retryStopped: Bool) async throws {
        if retryStopped {
            let stopped = try queue.entries().compactMap(\.download).filter { download in
                (download.state == .paused || download.state == .failed) && scope.contains(download)
            }
            if !stopped.isEmpty { try queue.resume(stopped.map(\.id)) }
        }
        let view = DeliveryProgressView(output: output, queue: queue, scope: scope)
        queue.addObserver(view)
        defer { queue.removeObserver(view) }
        let pipeline = self.pipeline
        let work = Task { try await pipeline.run(scope: scope) }
        let trap = SignalTrap(signals: [SIGINT, SIGTERM]) { work.cancel() }
        defer { trap.cancel() }
        let summary: DeliverySummary
        do {
            summary = try await work.value
        } catch {
            await queue.observersCaughtUp()
            view.finish()
            throw error
        }
        // Every event of the run is shown before the result.
        await queue.observersCaughtUp()
        view.finish()
        let interrupted = work.isCancelled
        let finished = try queue.entries(includeFinished: true).filter { entry in
            scope.contains(downloadId: entry.download?.id, transactionId: entry.transactionId)
        }
        if output.json {
            var result: [String: Any] = [
                "event": "result",
                "finishedDownloads": summary.finishedDownloads,
                "finishedTransactions": summary.finishedTransactions,
                "unfinished": summary.unfinished.map { ["id": $0.id, "state": $0.state.rawValue, "error": $0.errorCode?.rawValue ?? NSNull()] as [String: Any] },
            ]
            result["content"] = finished.compactMap { $0.download?.contentURL?.path }
            output.emit(result)
        } else {
            for entry in finished {
                guard let download = entry.download, download.state == .finished, let url = download.contentURL else { continue }
                if summary.finishedDownloads.contains(download.id) {
                    output.line("delivered \(download.contentIdentifier) \(download.version) to \(url.path)")
                }
            }
            for download in summary.unfinished {
                let reason = download.errorMessage.map { ": \($0)" } ?? download.pauseReason.map { " (\($0.rawValue))" } ?? ""
                output.info("courier: \(download.contentIdentifier) \(download.state.rawValue)\(reason)")
            }
        }
        if interrupted {
            throw CourierError(.paused, "interrupted; the downloads are checkpointed", hint: "run the same command again to continue")
        }
        if let error = summary.firstError { throw error }
    }
}
