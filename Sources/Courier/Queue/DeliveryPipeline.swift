import Foundation
import Logging
import Synchronization

/// What a pipeline run did and where its scope stands.
public struct DeliverySummary: Sendable {
    /// Downloads this run finished and placed.
    public var finishedDownloads: [String] = []
    /// Transactions this run finished.
    public var finishedTransactions: [String] = []
    /// The downloads of the scope that are not finished when the run ended.
    public var unfinished: [DownloadRecord] = []

    public init() {}

    /// The most telling error among unfinished downloads (by exit-code precedence), if any.
    public var firstError: CourierError? {
        let errors = unfinished.compactMap { record -> CourierError? in
            if let error = record.error { return error }
            if record.state == .paused { return CourierError(.paused, "download \(record.id) is paused") }
            // A cancelled download leaves its purchase undelivered: a run that ends there failed
            // (exit 1), it did not succeed (the lines before it say how to queue it again).
            if record.state == .cancelled {
                return CourierError(.cancelled, "not delivered: \(record.contentIdentifier) was cancelled")
            }
            return nil
        }
        return errors.first { $0.code != .paused } ?? errors.first
    }
}

/// What `DeliveryPipeline.enqueueReporting` queued, and the purchases it left out.
public struct EnqueueResult: Sendable {
    /// The queued transactions' records as stored (already known ones as they are).
    public var transactions: [TransactionRecord]
    /// Verified, not revoked purchases of products the catalog does not list: not queued.
    public var notInCatalog: [VerifiedTransaction]
    /// What the run's catalog changed in downloads already queued (`PaymentQueue.reconcile`):
    /// moved to its URLs, pointed at its new packages, or (a restore) queued again because their
    /// content is gone.
    public var reconciled: Reconciliation

    public init(transactions: [TransactionRecord], notInCatalog: [VerifiedTransaction], reconciled: Reconciliation = .init()) {
        self.transactions = transactions
        self.notInCatalog = notInCatalog
        self.reconciled = reconciled
    }

    /// `notEntitled` naming each product left out ("com.example.x: not in the catalog"), or nil.
    public var notInCatalogError: CourierError? { Self.notInCatalogError(products: notInCatalog.map(\.productId)) }

    /// `notEntitled` naming each of `products` as not in the catalog, or nil when there is none.
    public static func notInCatalogError(products: [String]) -> CourierError? {
        let products = Array(Set(products)).sorted()
        guard !products.isEmpty else { return nil }
        return CourierError(
            .notEntitled, products.map { "\($0): not in the catalog" }.joined(separator: "; "),
            hint: "the purchase unlocks nothing there, so it was not finished; run again once the catalog lists it")
    }
}

/// Works the queue: download → unpack and place → record → finish → notify, on bounded stages.
///
/// A run claims downloads from the store (taking their leases), so several processes can run
/// pipelines over one store without ever working one download twice. At most
/// `maxConcurrentDownloads` transfers and `maxConcurrentInstalls` installs run at once; claiming
/// stops while `maxConcurrentDownloads + maxConcurrentInstalls` downloads are in flight
/// (backpressure). Installs run on a Dispatch pool, never on Swift's cooperative pool.
/// Cancelling the task that runs `run` checkpoints active transfers and pauses them as
/// `interrupted`; the next run picks them up.
public final class DeliveryPipeline: Sendable {
    public let queue: PaymentQueue
    let downloader: any ContentDownloading
    let installer: any ContentInstalling
    let notifier: (any FinishNotifying)?
    /// Asked first for each update (a download with `updateFrom`): see `ContentUpdating`.
    let updater: (any ContentUpdating)?
    let installPool: BlockingWorkerPool
    let downloadSlots: AsyncSemaphore
    let logger: Logger

    public init(
        queue: PaymentQueue,
        downloader: any ContentDownloading,
        installer: any ContentInstalling,
        notifier: (any FinishNotifying)? = nil,
        updater: (any ContentUpdating)? = nil,
        logger: Logger
    ) {
        self.queue = queue
        self.downloader = downloader
        self.installer = installer
        self.notifier = notifier
        self.updater = updater
        self.installPool = BlockingWorkerPool(
            label: "courier.pipeline.install", width: queue.configuration.maxConcurrentInstalls)
        self.downloadSlots = AsyncSemaphore(value: queue.configuration.maxConcurrentDownloads)
        self.logger = logger
    }

    /// Validates a receipt, entitles its transactions and queues them with their downloads.
    /// Throws the validator's error (`receiptInvalid`) before anything is queued. Purchases of a
    /// product the catalog does not list are left out (`notInCatalog`, logged at warning): not
    /// queued, so never finished (StoreKit's rule: finish only after delivery); running again
    /// once the catalog lists them delivers them. A product the catalog lists without hosted
    /// content is queued and finished with nothing to download. Transactions queued before
    /// are reconciled with this catalog (`PaymentQueue.reconcile`; with `restore`, content
    /// that is gone is queued again).
    public func enqueueReporting(
        receipt: Data,
        validator: any TransactionValidating,
        entitlements: any ContentEntitling,
        productIds: Set<String>? = nil,
        restore: Bool = false
    ) async throws -> EnqueueResult {
        var transactions = try await validator.validate(receipt)
        if let productIds { transactions = transactions.filter { productIds.contains($0.productId) } }
        // A revoked purchase is recorded as failed whatever the catalog says.
        let notInCatalog = transactions.filter { $0.revocationDate == nil && !entitlements.lists(productId: $0.productId) }
        if !notInCatalog.isEmpty {
            let unlisted = Set(notInCatalog.map(\.transactionId))
            transactions.removeAll { unlisted.contains($0.transactionId) }
            for transaction in notInCatalog {
                logger.warning(
                    "purchase not queued: its product is not in the catalog",
                    metadata: ["transaction-id": "\(transaction.transactionId)", "product-id": "\(transaction.productId)"])
            }
        }
        let content = try await entitlements.content(for: transactions)
        let records: [TransactionRecord]
        if restore {
            // A restore of only unlisted products restores nothing and is not a restore failure.
            records = transactions.isEmpty && !notInCatalog.isEmpty
                ? [] : try queue.restore(transactions, content: content, productIds: productIds ?? [])
        } else {
            records = try queue.add(transactions, content: content)
        }
        // Purchases queued by an earlier run follow this run's catalog (its URLs, its packages),
        // and a restore brings back content that was deleted or purged since.
        let stored = Set(records.map(\.id))
        let ours = content.filter { stored.contains($0.transactionId) }
        // Content purged for space comes back while entitled, without a restore (on-demand
        // content only when asked for: `content open`).
        let purged = restore ? [] : try queue.purgedContent()
        let returning = ours.filter { purged.contains($0.contentIdentifier) && $0.delivery != .onDemand }
        var reconciled = try queue.reconcile(
            ours.filter { restore || !purged.contains($0.contentIdentifier) }, redeliverMissing: restore)
        if !returning.isEmpty {
            let back = try queue.reconcile(returning, redeliverMissing: true)
            reconciled.relocated += back.relocated
            reconciled.retargeted += back.retargeted
            reconciled.redelivered += back.redelivered
        }
        for download in reconciled.redelivered {
            logger.info(
                "content gone: delivering it again",
                metadata: ["transaction-id": "\(download.transactionId)", "content-identifier": "\(download.contentIdentifier)"])
        }
        return EnqueueResult(transactions: records, notInCatalog: notInCatalog, reconciled: reconciled)
    }

    /// Works the downloads of `scope` until none of them can move (`untilIdle`), or until the
    /// calling task is cancelled. Picks up unfinished work first: transactions whose downloads
    /// are all placed are finished; downloads of a dead process are taken over.
    @discardableResult
    public func run(scope: DeliveryScope = .all, untilIdle: Bool = true, pollInterval: Double = 0.5) async throws
        -> DeliverySummary
    {
        let configuration = queue.configuration
        var summary = DeliverySummary()
        if configuration.autoFinish {
            for id in try queue.deliveredButUnfinished(scope: scope) {
                if let finished = try queue.finishIfDelivered(id) {
                    summary.finishedTransactions.append(finished.id)
                    await notifyFinished(finished)
                }
            }
        }
        let limit = configuration.maxConcurrentDownloads + configuration.maxConcurrentInstalls
        let outcomes = await withTaskGroup(of: WorkOutcome?.self, returning: [WorkOutcome].self) { group in
            var outcomes: [WorkOutcome] = []
            var inFlight = 0
            var ticking = false
            while !Task.isCancelled {
                var claimed: [DownloadRecord] = []
                if inFlight < limit {
                    do {
                        claimed = try queue.claim(scope: scope, limit: limit - inFlight)
                    } catch {
                        logger.error("cannot claim downloads", metadata: ["error": "\(error)"])
                    }
                    for record in claimed {
                        inFlight += 1
                        group.addTask { await self.work(record) }
                    }
                }
                if inFlight == 0 && claimed.isEmpty && untilIdle {
                    let heldElsewhere = (try? queue.hasWorkHeldElsewhere(scope: scope)) ?? false
                    if !heldElsewhere { break }
                }
                if !ticking && inFlight < limit {
                    ticking = true
                    let doorbell = queue.workAvailable
                    group.addTask {
                        await doorbell.wait(timeout: pollInterval)
                        return nil
                    }
                }
                guard let next = await group.next() else { break }
                if let outcome = next {
                    inFlight -= 1
                    outcomes.append(outcome)
                } else {
                    ticking = false
                }
            }
            // Idle (nothing in flight): only the poll timer is left, and it need not run out.
            // Cancelled: every worker checkpoints and settles before the group ends.
            if inFlight == 0 { group.cancelAll() }
            for await next in group {
                if let outcome = next { outcomes.append(outcome) }
            }
            return outcomes
        }
        for outcome in outcomes {
            if outcome.finished { summary.finishedDownloads.append(outcome.downloadId) }
            if let transaction = outcome.finishedTransaction { summary.finishedTransactions.append(transaction) }
        }
        summary.unfinished = try queue.unfinishedDownloads(scope: scope)
        return summary
    }

    private struct WorkOutcome: Sendable {
        var downloadId: String
        var finished: Bool
        var finishedTransaction: String?
    }

    /// Works one claimed download under this process's lease, then releases the lease.
    private func work(_ record: DownloadRecord) async -> WorkOutcome {
        var logger = self.logger
        logger[metadataKey: "download-id"] = "\(record.id)"
        logger[metadataKey: "transaction-id"] = "\(record.transactionId)"
        var outcome = WorkOutcome(downloadId: record.id, finished: false)
        // Finishing the transaction drops its leases in the same database transaction.
        defer { if outcome.finishedTransaction == nil { queue.releaseLease(record.id) } }
        let throttle = ProgressThrottle(interval: queue.configuration.progressInterval)
        let queue = self.queue
        let package = queue.packageFile(forDownload: record.id)
        let downloader = self.downloader
        let slots = downloadSlots
        let report: @Sendable (DownloadProgress) -> Void = { progress in
            if throttle.shouldReport(final: progress.totalBytes.map { progress.bytesReceived >= $0 } ?? false) {
                queue.recordProgress(record.id, progress, length: record.length)
            }
        }
        let transfer: @Sendable () async throws -> URL = {
            // A package verified by an earlier run that stopped before installing it is used as is.
            if let file = try await self.installPool.run({ Self.verifiedPackage(at: package, for: record) }) {
                return file
            }
            try await slots.wait()
            defer { slots.signal() }
            return try await downloader.download(record, to: package, journal: queue.journals, progress: report)
        }
        do {
            logger.debug("download started", metadata: ["url": "\(record.url.absoluteString)", "resume-from": "\(record.durableOffset)"])
            // An update may come in without the whole package (already placed, or a delta).
            var placed: URL?
            if record.isUpdate, let updater {
                placed = try await supervised(record.id, stoppable: true) { try await updater.update(record, progress: report) }
            }
            let autoFinish = queue.configuration.autoFinish
            let content: URL
            let finished: TransactionRecord?
            if let placed {
                content = placed
                // Its transaction finished (automatic finish) if this was its last download.
                finished = try queue.installed(record.id, transactionId: record.transactionId, contentURL: placed, finish: autoFinish)
            } else {
                let file = try await supervised(record.id, stoppable: true, transfer)
                if try queue.downloadState(record.id) == .cancelled {
                    throw CourierError(.cancelled, "cancelled")
                }
                let installer = self.installer
                let installPool = self.installPool
                // Placed, its content recorded and (automatic finish) its transaction finished if
                // this was its last download: one durable commit, made while the install holds
                // its lock (a kill before it leaves the install's intent to recovery).
                // The installer runs its blocking steps on the install pool and waits for the
                // disk off it (`ContentInstalling.install(package:for:on:installed:)`).
                (content, finished) = try await supervised(record.id, stoppable: false) {
                    try await installer.install(package: file, for: record, on: installPool) { url, placement in
                        let finished = try queue.installed(
                            record.id, transactionId: record.transactionId, contentURL: url, placement: placement, finish: autoFinish)
                        return (url, finished)
                    }
                }
            }
            outcome.finished = true
            // Each delivery at info: an agent's log (journald) shows what it delivered.
            logger.info(
                "download delivered",
                metadata: [
                    "content-identifier": "\(record.contentIdentifier)", "version": "\(record.version)",
                    "bytes": "\(record.length)", "content": "\(content.path)",
                ])
            if let finished {
                outcome.finishedTransaction = finished.id
                await notifyFinished(finished)
            }
        } catch {
            var failure = error as? CourierError ?? CourierError(.internal, "\(error)")
            if error is CancellationError { failure = CourierError(.paused, "paused") }
            let interrupted = Task.isCancelled || failure.code == .interrupted
            do {
                // A worker that lost its lease (it stalled and another process took over) must
                // not touch the download any more.
                guard try queue.holdsLease(record.id) else {
                    logger.debug("lease lost; leaving the download to its new owner")
                    return outcome
                }
                // The lifecycle decides: an interruption pauses an active download, a failure
                // fails or pauses it, and a download someone else moved keeps their state.
                try queue.transition(record.id, interrupted ? .interrupted : .failed(failure))
            } catch {
                logger.error("cannot record the end of a download", metadata: ["error": "\(error)"])
            }
            logger.debug("download stopped", metadata: ["code": "\(failure.code)", "error": "\(failure.message)"])
        }
        return outcome
    }

    /// Runs `body` (a transfer or an install) in one task group beside the tasks that keep the
    /// download's lease (a heartbeat every `heartbeatInterval`) and, when `stoppable`, watch for
    /// a stop: the body is cancelled once the lease is lost or the download leaves `active` (a
    /// pause or cancel in this process fires its stop signal as it commits, one from another
    /// process is seen at the next heartbeat). The lifecycle's `stopTransfer` action fires the
    /// stop signal (`PaymentQueue.perform`); the body stops here. Nothing outlives the body;
    /// cancelling the caller cancels it all.
    private func supervised<T: Sendable>(
        _ id: String, stoppable: Bool, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let queue = self.queue
        let downloader = self.downloader
        // Watched before the state is first checked, so no stop falls between the two.
        let stop = stoppable ? queue.watchStop(id) : nil
        defer { if let stop { queue.unwatchStop(id, stop) } }
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                let interval = UInt64(queue.configuration.heartbeatInterval * 1e9)
                var priority = (try? queue.download(id))?.priority
                while (try? await Task.sleep(nanoseconds: interval)) != nil {
                    if (try? queue.heartbeat(id)) != true { return nil }
                    // A priority set meanwhile (`courier priority`, here or in another process).
                    if let record = try? queue.download(id), record.priority != priority {
                        priority = record.priority
                        downloader.reprioritize(record)
                    }
                }
                return nil
            }
            if let stop {
                group.addTask {
                    if let state = try? queue.downloadState(id), state != .active { return nil }
                    await stop.wait()
                    return nil
                }
            }
            // The body answers last: a stop cancels it, and it ends with its own error (or
            // with its result, if it was done already).
            while let next = try await group.next() {
                if let value = next {
                    group.cancelAll()
                    return value
                }
                if stoppable { group.cancelAll() }
            }
            throw CancellationError()
        }
    }

    /// The package file of `record` if an earlier run left it complete and verified at `file`.
    static func verifiedPackage(at file: URL, for record: DownloadRecord) -> URL? {
        Durable.matches(file, length: record.length, sha256: record.sha256) ? file : nil
    }

    private func notifyFinished(_ transaction: TransactionRecord) async {
        logger.info("transaction finished", metadata: ["transaction-id": "\(transaction.id)", "product-id": "\(transaction.productId)"])
        guard let notifier else { return }
        let policy = RetryPolicy(maxRetries: 4, backoffBase: 0.2, backoffMax: 3.2, jitter: false)
        // The policy alone bounds the attempts: 1 + maxRetries.
        var attempt = 1
        while true {
            do {
                try await notifier.transactionFinished(transaction)
                return
            } catch {
                logger.warning(
                    "finish notification failed",
                    metadata: ["transaction-id": "\(transaction.id)", "attempt": "\(attempt)", "error": "\(error)"])
                if Task.isCancelled || !policy.allows(retry: attempt) { return }
                try? await Task.sleep(nanoseconds: UInt64(policy.delay(retry: attempt) * 1e9))
                attempt += 1
            }
        }
    }
}

/// Lets one progress report through per interval (and the final one), so the store sees a
/// few writes per second per download however often the transfer reports.
final class ProgressThrottle: Sendable {
    private let interval: Double
    private let last: Mutex<Date>

    /// The first report passes `interval` after `start` (the claim already told observers the
    /// download started), so a download shorter than that is written once, at its end.
    init(interval: Double, start: Date = Date()) {
        self.interval = interval
        self.last = Mutex(start)
    }

    func shouldReport(final: Bool, now: Date = Date()) -> Bool {
        last.withLock { last in
            guard final || now.timeIntervalSince(last) >= interval else { return false }
            last = now
            return true
        }
    }
}
