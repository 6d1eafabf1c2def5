import Foundation
import Logging

/// The client core: every part of a delivery assembled once from a configuration, a storage
/// layout and a logger. It owns the state store and payment queue, the transfer engine, the
/// content placer (its recovery of interrupted installs runs here, before anything else), the
/// catalog loader, the finish webhook (when it announces finishes) and the pipeline over them.
/// Every front end goes through it: `courier deliver`, `enqueue` and `resume` in the foreground,
/// and the agent (`agent(options:)`), which answers its control socket with `control`.
///
/// Call `shutdown()` once done with it: it stops the transfer engine's thread.
public final class CourierClient: Sendable {
    /// What the core does beyond delivering.
    public struct Options: Sendable {
        /// Announce each finished transaction to `queue.finishWebhook` through the outbox. The
        /// agent does; a foreground run does not (docs/agent.md). Default false.
        public var announcesFinishes = false
        /// First delay before a webhook POST is retried; doubles per attempt. Default 2 s.
        public var webhookBackoff: Double = 2
        /// Hears each retry of a download as the transfer engine schedules it (before its
        /// delay): `deliver` says it on standard error. The client also logs it at info, with
        /// the `download-id` (the agent's log). Default nil.
        public var onTransferRetry: (@Sendable (TransferRetry) -> Void)?
        /// Who the client's downloads are for: the agent's are `.background`
        /// (`transfer.backgroundMaxRate`). Default `.foreground`.
        public var trafficClass: TrafficClass = .foreground

        public init() {}
    }

    public let configuration: CourierConfiguration
    public let layout: StorageLayout
    public let queue: PaymentQueue
    public let pipeline: DeliveryPipeline
    /// The parts that need no engine, from the same configuration, layout and logger.
    public let core: CourierCore
    let engine: TransferEngine
    let catalogLoader: CatalogLoader
    let webhook: FinishWebhook?
    let logger: Logger

    public init(configuration: CourierConfiguration, layout: StorageLayout, logger: Logger, options: Options = .init())
        throws
    {
        var webhookURL: URL?
        if options.announcesFinishes, let address = configuration.queue.finishWebhook {
            guard let url = URL(string: address), url.scheme == "http" || url.scheme == "https" else {
                throw CourierError(.usage, "the finish webhook must be an http(s) URL, not \(address)")
            }
            webhookURL = url
        }
        self.configuration = configuration
        self.layout = layout
        self.logger = logger
        let core = CourierCore(configuration: configuration, layout: layout, logger: logger)
        self.core = core
        let store = try StateStore(layout: layout)
        let queue = core.paymentQueue(store: store)
        let onTransferRetry = options.onTransferRetry
        let engine = try core.transferEngine(trafficClass: options.trafficClass) { [logger] retry in
            onTransferRetry?(retry)
            let count = retry.maxRetries > 0 ? "retry \(retry.retry) of \(retry.maxRetries)" : "retry \(retry.retry)"
            let cause = retry.error.cause.map { " (\($0))" } ?? ""
            logger.info(
                "download failed: \(retry.error.message)\(cause); \(count) in \(String(format: "%.2f", retry.delay)) s",
                metadata: ["download-id": "\(retry.id)", "retry": "\(retry.retry)", "code": "\(retry.error.code)"])
        }
        self.queue = queue
        self.engine = engine
        let placer: ContentPlacer
        do {
            placer = try core.contentPlacer(store: store, recover: true)
        } catch {
            engine.shutdown()
            throw error
        }
        // A stale catalog served from the cache is worth a warning even when the log is quiet.
        var catalogLogger = logger
        catalogLogger.logLevel = min(logger.logLevel, .warning)
        catalogLoader = try core.logging(to: catalogLogger).catalogLoader(transport: engine.httpTransport)
        let webhook = webhookURL.map { url in
            FinishWebhook(
                url: url,
                store: store,
                transport: engine.httpTransport,
                initialBackoff: options.webhookBackoff,
                logger: logger
            )
        }
        webhook?.attach(to: queue)
        self.webhook = webhook
        pipeline = DeliveryPipeline(
            queue: queue,
            downloader: TransferDownloadStage(
                engine: engine,
                credentials: TransferDownloadStage.bearerCredentials(from: queue),
                // The lifecycle's space rule: the transfer keeps what the agent's resume counts.
                unpackedSpace: { [space = configuration.lifecycle.space] download in
                    space.unpacked(length: download.length, unpackedLength: download.unpackedLength)
                }
            ),
            installer: PlacementInstallStage(placer: placer),
            notifier: webhook,
            updater: DeltaContentUpdate(
                updater: DeltaUpdater(placer: placer, engine: engine, logger: logger),
                credentials: TransferDownloadStage.bearerCredentials(from: queue),
                fellBack: { [queue] download, fallback in queue.reportWholePackageUpdate(download, reason: fallback.description) },
                logger: logger),
            logger: logger
        )
    }

    /// Replaces the rate limits of this client's transfers (a configuration reloaded on
    /// SIGHUP): running transfers follow from their next chunk on, without a restart.
    public func updateRateLimits(_ limits: RateLimits) {
        engine.updateRateLimits(limits)
    }

    /// The rate limits in force (as configured or last reloaded).
    public var rateLimits: RateLimits { engine.rateLimiter.limits }

    /// Stops the transfer engine. Nothing may run on the client afterwards.
    public func shutdown() {
        engine.shutdown()
    }

    /// Every queue command, performed here on the store (enqueue included).
    public var control: LocalQueueControl { LocalQueueControl(client: self) }

    /// The long-running agent over this client (a `Service`: run it in a `ServiceGroup`).
    public func agent(options: CourierAgent.Options = .init()) -> CourierAgent {
        CourierAgent(client: self, options: options)
    }

    /// A receipt validator with the configured trust roots, bundle id and environments, fetching
    /// over the engine's connections (legacy receipts, revocation lists).
    public func receiptValidator() throws -> ReceiptValidator {
        try core.receiptValidator(transport: engine.httpTransport)
    }

    /// Validates `purchase`'s receipt, entitles its transactions in the catalog (its own, else the
    /// configured one) and queues them (only `products` when named; a restore of exactly those
    /// with `restore`). Purchases of products the catalog does not list are left out
    /// (`notInCatalog`). Throws `notEntitled` when nothing was queued, `usage` without a catalog.
    public func enqueue(_ purchase: Purchase) async throws -> EnqueueResult {
        guard !purchase.receipt.isEmpty else { throw CourierError(.usage, "enqueue needs the receipt's bytes") }
        let location: String
        let base: URL
        if let catalog = purchase.catalog {
            (location, base) = (catalog, URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true))
        } else if let configured = configuration.catalog {
            (location, base) = (configured, configuration.baseDirectory)
        } else {
            throw CourierError(
                .usage, "no catalog to look the purchase up in",
                hint: "name one with --catalog FILE|URL, or set \"catalog\" in the configuration")
        }
        let validator = try receiptValidator()
        let loaded = try await catalogLoader.load(location, relativeTo: base)
        let products = purchase.products
        let result = try await pipeline.enqueueReporting(
            receipt: purchase.receipt, validator: ReceiptValidationStage(validator: validator),
            entitlements: CatalogEntitlementStage(catalog: loaded.catalog, location: loaded.url),
            productIds: products.isEmpty ? nil : Set(products), restore: purchase.restore)
        guard result.transactions.isEmpty else { return result }
        throw result.notInCatalogError
            ?? CourierError(
                .notEntitled, "the receipt proves no purchase\(products.isEmpty ? "" : " of \(products.joined(separator: ", "))")")
    }

    /// Delivers `scope` in the foreground until nothing in it can move, and returns where it
    /// stands. With `retryStopped`, its paused and failed downloads wait again first (the
    /// lifecycle's review by a `rerun`). `observer`
    /// hears every queue event of the run (not the retries), and has heard them all when this
    /// returns or throws. Downloads of `scope` another live process works are waited for (and
    /// taken over if it dies): `observer` is told who works them, then hears their changes with
    /// their owner (`updatedDownloads(_:workedBy:)`), as that process records them and writes
    /// their partial files, read every `followInterval` s. Cancelling the calling task checkpoints
    /// active downloads and pauses them as `interrupted`.
    public func deliver(
        scope: DeliveryScope,
        retryStopped: Bool = false,
        observer: (any PaymentQueueObserver)? = nil,
        followInterval: Double = 0.25
    ) async throws -> DeliverySummary {
        // The lifecycle's review of a re-run, as the agent and `resume --stalled` ask theirs.
        if retryStopped { _ = try queue.reviewStalled(trigger: .rerun, scope: scope) }
        if let observer { queue.addObserver(observer) }
        defer { if let observer { queue.removeObserver(observer) } }
        do {
            let summary = try await withThrowingTaskGroup(of: DeliverySummary?.self) { group in
                group.addTask { try await self.pipeline.run(scope: scope) }
                if let observer {
                    group.addTask {
                        await self.followOtherOwners(scope: scope, observer: observer, interval: followInterval)
                        return nil
                    }
                }
                // The pipeline answers first (the follower runs until cancelled).
                for try await case let summary? in group {
                    group.cancelAll()
                    return summary
                }
                throw CancellationError()
            }
            await queue.observersCaughtUp()
            return summary
        } catch {
            await queue.observersCaughtUp()
            throw error
        }
    }

    /// Reports to `observer` the downloads of `scope` another live process works: its owner once,
    /// then each change of their records with that owner (read every `interval` seconds, and once
    /// more when cancelled: the state the run ended on) until this process holds one. The bytes
    /// of an active one are its partial file's length when that is ahead of the record (the
    /// owner writes the file continuously, its record every `queue.progressInterval`).
    private func followOtherOwners(scope: DeliveryScope, observer: any PaymentQueueObserver, interval: Double) async {
        let queue = self.queue
        var shown: [String: DownloadRecord] = [:]
        /// The owner each followed download was last seen leased to.
        var ownerOf: [String: LeaseOwner] = [:]
        var owners: Set<String> = []
        func poll() {
            let seen = try? queue.workedElsewhere(scope: scope, following: Array(shown.keys))
            guard let (held, followed) = seen else { return }
            for (token, group) in Dictionary(grouping: held, by: { $0.owner.token }) where owners.insert(token).inserted {
                let (downloads, owner) = (group.map(\.download), group[0].owner)
                queue.events.deliver { observer.paymentQueue(queue, downloads: downloads, workedBy: owner) }
            }
            for (download, owner) in held { ownerOf[download.id] = owner }
            let records = (followed + held.map { $0.download }).map { ($0.id, Self.withPartialLength($0)) }
            let current = Dictionary(records) { _, held in held }
            ownerOf = ownerOf.filter { current[$0.key] != nil }
            let changed = current.values.filter { shown[$0.id] != $0 }.sorted { $0.id < $1.id }
            shown = current
            for group in Dictionary(grouping: changed, by: { ownerOf[$0.id]?.token }).values {
                if let owner = ownerOf[group[0].id] {
                    queue.events.deliver { observer.paymentQueue(queue, updatedDownloads: group, workedBy: owner) }
                } else {
                    queue.events.deliver { observer.paymentQueue(queue, updatedDownloads: group) }
                }
            }
        }
        repeat { poll() } while (try? await Task.sleep(nanoseconds: UInt64(interval * 1e9))) != nil
        poll()
    }

    /// `record` with the bytes its owner has written to the partial file so far, when it is an
    /// active download (not an update, whose file holds changed entries) and the file is ahead
    /// of the record; its progress and time remaining follow (at the owner's recorded rate).
    static func withPartialLength(_ record: DownloadRecord) -> DownloadRecord {
        guard record.state == .active, !record.isUpdate, record.length > 0,
            let size = (try? FileManager.default.attributesOfItem(atPath: record.partialPath))?[.size] as? NSNumber
        else { return record }
        let bytes = min(record.length, size.int64Value)
        guard bytes > record.bytesReceived else { return record }
        var record = record
        record.bytesReceived = bytes
        record.progress = Double(bytes) / Double(record.length)
        if record.rate > 0 { record.timeRemaining = Double(record.length - bytes) / record.rate }
        return record
    }
}
