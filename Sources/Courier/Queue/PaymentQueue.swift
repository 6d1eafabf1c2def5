import Foundation
import GRDB
import Logging
import Synchronization

/// The persistent transaction queue, shaped like StoreKit's `SKPaymentQueue`: verified
/// transactions go in with the downloads of the content they unlock; observers and
/// `eventStream()` hear every committed change; downloads can be paused, resumed, cancelled and
/// discarded (a pipeline starts them); a transaction is finished once all its downloads are.
///
/// Every state change is one database transaction in `Storage/state.sqlite`, durable before it is
/// reported. Many processes may open one store: a download is worked under a lease (`LeaseManager`),
/// and a pause or cancel written by one process reaches the lease owner at its next heartbeat.
public final class PaymentQueue: Sendable {
    let store: StateStore
    public let layout: StorageLayout
    public let configuration: QueueConfiguration
    /// The rules of the download lifecycle this queue applies: stall timeout, retries, space.
    public let lifecycle: DownloadLifecycle.Policy
    /// This process's leases.
    let leases: LeaseManager
    let logger: Logger
    let events: PaymentQueueEvents
    let journals: DatabaseJournalStore
    /// Rung when a change in this process makes a download claimable, so a pipeline waiting
    /// for its next poll starts on it at once.
    let workAvailable = Doorbell()
    /// Whether the claim holds background work back while the connection is metered (the agent's).
    let meteredGate = MeteredGate()

    /// Held across a commit and the publication of its events, so events arrive in commit order.
    private let commitLock = NSLock()
    /// Run inside the database transaction that finishes a transaction (see `onFinish`).
    private let finishRecorders = Mutex<[@Sendable (Database, TransactionRecord) throws -> Void]>([])
    /// The stop signals of downloads this process works, by download id (`watchStop`).
    private let stopWatchers = Mutex<[String: [ObjectIdentifier: StopSignal]]>([:])

    /// `lifecycle`: the rules of `CourierConfiguration.lifecycle`; by default the queue's stall
    /// timeout with the default retries and space rule.
    public init(
        store: StateStore, layout: StorageLayout, configuration: QueueConfiguration = .init(),
        lifecycle: DownloadLifecycle.Policy? = nil, logger: Logger
    ) {
        self.store = store
        self.layout = layout
        self.configuration = configuration
        self.lifecycle = lifecycle ?? DownloadLifecycle.Policy(stallTimeout: configuration.stallTimeout)
        self.leases = LeaseManager(duration: configuration.leaseDuration)
        self.logger = logger
        self.events = PaymentQueueEvents()
        self.journals = DatabaseJournalStore(store: store)
    }

    /// Opens the state database of `layout` and the queue over it.
    public convenience init(
        layout: StorageLayout, configuration: QueueConfiguration = .init(), lifecycle: DownloadLifecycle.Policy? = nil,
        logger: Logger
    ) throws {
        try self.init(
            store: StateStore(layout: layout), layout: layout, configuration: configuration, lifecycle: lifecycle, logger: logger)
    }

    // MARK: Observers

    /// Adds an observer (held weakly). It hears changes committed from now on.
    public func addObserver(_ observer: any PaymentQueueObserver) { events.add(observer) }

    public func removeObserver(_ observer: any PaymentQueueObserver) { events.remove(observer) }

    /// Returns once observers have been told of every change committed so far (their calls
    /// arrive asynchronously): what a caller prints after its work ends then comes last.
    public func observersCaughtUp() async { await events.drain() }

    /// Tells observers that the update `download` fetches the whole package instead of its
    /// changed entries, and why (`PaymentQueueObserver.paymentQueue(_:download:fetchesWholePackageBecause:)`).
    public func reportWholePackageUpdate(_ download: DownloadRecord, reason: String) {
        events.notify { [self] observer in observer.paymentQueue(self, download: download, fetchesWholePackageBecause: reason) }
    }

    /// The queue's events from now on, in commit order. Slow consumers lose the oldest events
    /// beyond 4,096 buffered; the store always has the current state.
    public func eventStream() -> AsyncStream<PaymentQueueEvent> { events.stream() }

    // MARK: Adding

    /// Queues verified transactions and the downloads of `content` (matched by transaction id).
    /// A transaction already in the queue is left as it is, so one purchase is never queued or
    /// delivered twice. Returns the transactions' records as stored.
    ///
    /// All of them in one durable commit (one WAL sync, not one per purchase: a receipt of 200
    /// purchases was 200 syncs in a row before the first download could start); observers hear
    /// the same events, in the same order, once it is on disk.
    @discardableResult
    public func add(_ transactions: [VerifiedTransaction], content: [QueuedContent], restored: Bool = false) throws
        -> [TransactionRecord]
    {
        guard !transactions.isEmpty else { return [] }
        let contentByTransaction = Dictionary(grouping: content, by: \.transactionId)
        let added = try commit { db -> ([(record: TransactionRecord, downloads: Int, inserted: Bool)], [PaymentQueueEvent]) in
            var added: [(record: TransactionRecord, downloads: Int, inserted: Bool)] = []
            var events: [PaymentQueueEvent] = []
            let now = Date()
            for verified in transactions {
                if let existing = try QueueStore.fetchTransaction(db, id: verified.transactionId) {
                    added.append((existing, 0, false))
                    continue
                }
                var machine = TransactionStateMachine(state: .purchasing)
                let actions =
                    verified.revocationDate != nil
                    ? try machine.handle(.failed(CourierError(.notEntitled, "the App Store revoked this transaction")))
                    : try machine.handle(.verified(restored: restored))
                let record = TransactionRecord(
                    id: verified.transactionId, originalTransactionId: verified.originalTransactionId,
                    productId: verified.productId, state: machine.state, restored: restored, verified: verified,
                    errorCode: machine.error?.code, errorMessage: machine.error?.message, createdAt: now, updatedAt: now)
                try QueueStore.insert(db, transaction: record)
                var downloads: [DownloadRecord] = []
                if actions.contains(.queueDownloads) {
                    // On-demand content is fetched only when asked (`CourierClient.openContent`).
                    for item in contentByTransaction[verified.transactionId] ?? [] where item.delivery != .onDemand {
                        let download = self.newDownload(of: item, at: now)
                        try QueueStore.insert(db, download: download)
                        downloads.append(download)
                    }
                }
                events.append(.updatedTransactions([record]))
                if !downloads.isEmpty { events.append(.updatedDownloads(downloads)) }
                added.append((record, downloads.count, true))
            }
            return (added, events)
        }
        for (record, downloads, inserted) in added where inserted {
            logger.debug("queued transaction", metadata: ["transaction-id": "\(record.id)", "downloads": "\(downloads)"])
        }
        return added.map(\.record)
    }

    /// Restores the completed transactions of the chosen products only (never everything by
    /// default): those of `transactions` whose product is in `productIds` are queued as
    /// `restored`. Observers then hear `restoreCompleted`, or `restoreFailed` with the error.
    /// A transaction this store already finished is not delivered again.
    @discardableResult
    public func restore(_ transactions: [VerifiedTransaction], content: [QueuedContent], productIds: Set<String>) throws
        -> [TransactionRecord]
    {
        do {
            guard !productIds.isEmpty else {
                throw CourierError(
                    .usage, "a restore needs the products to restore", hint: "name them with --product ID")
            }
            let chosen = transactions.filter { productIds.contains($0.productId) && $0.revocationDate == nil }
            let records = try add(chosen, content: content, restored: true)
            publish([.restoreCompleted(productIds: productIds.sorted())])
            return records
        } catch {
            let failure = error as? CourierError ?? CourierError(.internal, "the restore failed", cause: "\(error)")
            publish([.restoreFailed(failure)])
            throw failure
        }
    }

    // MARK: Reading

    public func transaction(_ id: String) throws -> TransactionRecord? {
        try read { db in try QueueStore.fetchTransaction(db, id: id) }
    }

    public func download(_ id: String) throws -> DownloadRecord? {
        try read { db in try QueueStore.fetchDownload(db, id: id) }
    }

    /// The compact JWS a transaction was verified from (nil for a legacy receipt's), read
    /// without decoding the whole stored transaction: the download stage asks for it per download.
    public func signedTransaction(_ transactionId: String) throws -> String? {
        try read { db in try QueueStore.signedTransaction(db, transactionId: transactionId) }
    }

    /// The downloads of `transactionId`, oldest first.
    public func downloads(transactionId: String) throws -> [DownloadRecord] {
        try read { db in try QueueStore.fetchDownloads(db, transactionId: transactionId) }
    }

    /// Of `transactionIds`, those with no download (products the catalog lists without hosted
    /// content), in one read.
    public func withoutDownloads(_ transactionIds: Set<String>) throws -> Set<String> {
        try read { db in try QueueStore.transactionsWithoutDownloads(db, ids: transactionIds) }
    }

    /// Every transaction not yet finished, oldest first: what a process picks up at start.
    public func unfinished() throws -> [TransactionRecord] {
        try read { db in try QueueStore.unfinishedTransactions(db) }
    }

    /// The lease on `downloadId`, if any.
    public func lease(_ downloadId: String) throws -> Lease? {
        try read { db in try LeaseManager.lease(db, downloadId: downloadId) }
    }

    /// The downloads an id names: a download id, a transaction id (all its downloads), or an
    /// unambiguous prefix of either. Throws `notFound` or, for an ambiguous prefix, `usage`.
    public func resolve(_ id: String) throws -> [DownloadRecord] {
        try read { db in try QueueStore.resolve(db, id: id) }
    }

    // MARK: Controlling downloads

    /// Pauses downloads. An active one stops at once when this process works it, or at its
    /// owner's next heartbeat when another process does; its partial data is kept.
    @discardableResult
    public func pause(_ downloadIds: [String]) throws -> [DownloadRecord] {
        try downloadIds.compactMap { id in try transition(id, .pause(.user)) }
    }

    /// Resumes paused or failed downloads: they wait for a worker again, from their journal.
    @discardableResult
    public func resume(_ downloadIds: [String]) throws -> [DownloadRecord] {
        try downloadIds.compactMap { id in try transition(id, .resume) }
    }

    /// Sets the priority of downloads that are not finished or cancelled: the order they are
    /// claimed and admitted in, and their share of the rate limits. A running one follows at
    /// once in this process (`onPriority`), at its owner's next heartbeat in another.
    @discardableResult
    public func setPriority(_ priority: DownloadPriority, _ downloadIds: [String], now: Date = Date()) throws -> [DownloadRecord] {
        try downloadIds.compactMap { id in
            try commit { db -> (DownloadRecord?, [PaymentQueueEvent]) in
                guard var record = try QueueStore.fetchDownload(db, id: id) else {
                    throw CourierError(.notFound, "no download \(id)")
                }
                guard record.state != .finished && record.state != .cancelled else {
                    throw CourierError(
                        .invalidState, "download \(id) is \(record.state.rawValue): its priority no longer matters",
                        hint: "give the id of a download that is not finished or cancelled")
                }
                if record.priority == priority { return (nil, []) }
                record.priority = priority
                record.updatedAt = now
                try QueueStore.updatePriority(db, download: record)
                return (record, [.updatedDownloads([record])])
            }
        }
    }

    /// Cancels downloads and drops their partial data.
    @discardableResult
    public func cancel(_ downloadIds: [String]) throws -> [DownloadRecord] {
        try downloadIds.compactMap { id in try transition(id, .cancel) }
    }

    /// Drops a download's partial data, keeping its state: a later resume starts from zero.
    /// Refused while the download is active or another live process holds its lease.
    @discardableResult
    public func discard(_ downloadId: String) throws -> DownloadRecord? {
        try transition(downloadId, .discard, requireLease: true)
    }

    /// Finishes a transaction: refused (`invalidState`) while any of its essential downloads is
    /// waiting, active, paused or failed (prefetch and on-demand ones do not count); idempotent once finished. Returns the record and whether this
    /// call finished it.
    @discardableResult
    public func finish(_ transactionId: String) throws -> (transaction: TransactionRecord, finishedNow: Bool) {
        let recorders = finishRecorders.withLock { $0 }
        return try commit { db in
            guard let record = try QueueStore.fetchTransaction(db, id: transactionId) else {
                throw CourierError(.notFound, "no transaction \(transactionId)")
            }
            let downloads = try QueueStore.fetchDownloads(db, transactionId: transactionId).filter { $0.delivery == .essential }
            return try Self.applyFinish(db, record, downloads: downloads, recorders: recorders)
        }
    }

    /// The pipeline's automatic finish: finishes `transactionId` in one database transaction if
    /// every one of its essential downloads is finished (none cancelled) and it is purchased or
    /// restored. Prefetch and on-demand downloads never hold a finish (docs/delivery-classes.md).
    /// Returns the record when this call finished it.
    func finishIfDelivered(_ transactionId: String) throws -> TransactionRecord? {
        let recorders = finishRecorders.withLock { $0 }
        return try commit { db in try Self.finishIfDelivered(db, transactionId, recorders: recorders) }
    }

    private static func finishIfDelivered(
        _ db: Database, _ transactionId: String, recorders: [@Sendable (Database, TransactionRecord) throws -> Void]
    ) throws -> (TransactionRecord?, [PaymentQueueEvent]) {
        let downloads = try QueueStore.fetchDownloads(db, transactionId: transactionId).filter { $0.delivery == .essential }
        guard downloads.allSatisfy({ $0.state == .finished }),
            let record = try QueueStore.fetchTransaction(db, id: transactionId),
            record.state == .purchased || record.state == .restored
        else { return (nil, []) }
        let ((finished, now), events) = try applyFinish(db, record, downloads: downloads, recorders: recorders)
        return (now ? finished : nil, events)
    }

    /// The finish of `record` inside the caller's database transaction: the state machine's
    /// verdict, the finish time, the recorders (the webhook outbox) and the leases dropped.
    private static func applyFinish(
        _ db: Database, _ transaction: TransactionRecord, downloads: [DownloadRecord],
        recorders: [@Sendable (Database, TransactionRecord) throws -> Void]
    ) throws -> ((TransactionRecord, Bool), [PaymentQueueEvent]) {
        var record = transaction
        var machine = TransactionStateMachine(state: record.state)
        let actions = try machine.handle(.finish(downloads: downloads.map(\.state)))
        guard actions.contains(.markFinished) else { return ((record, false), []) }
        // As stored (seconds since 1970), so the record returned equals the one read back.
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970)
        record.state = machine.state
        record.updatedAt = now
        record.finishedAt = now
        try QueueStore.update(db, transaction: record)
        for recorder in recorders { try recorder(db, record) }
        try QueueStore.deleteLeases(db, transactionId: record.id)
        return ((record, true), [.updatedTransactions([record]), .removedTransactions([record])])
    }

    /// Registers `recorder` to run inside the database transaction that finishes a transaction,
    /// so what it writes (the finish webhook's outbox row) commits with the finish or not at all:
    /// a crash can lose neither alone. A recorder that throws rolls the finish back.
    func onFinish(_ recorder: @escaping @Sendable (Database, TransactionRecord) throws -> Void) {
        finishRecorders.withLock { $0.append(recorder) }
    }

    // MARK: Internals shared with the pipeline

    /// The partial file of a download, under Storage/Downloads/.
    func partialFile(forDownload id: String) -> URL {
        layout.downloads.appendingPathComponent("\(id).part")
    }

    /// Where a download's verified package lands before it is installed.
    func packageFile(forDownload id: String) -> URL {
        layout.downloads.appendingPathComponent("\(id).zip")
    }

    /// A new waiting download of `content`; `updateFrom`: the installed version an update replaces.
    func newDownload(of content: QueuedContent, updateFrom: String? = nil, at now: Date) -> DownloadRecord {
        let id = DownloadRecord.makeId(transactionId: content.transactionId, contentIdentifier: content.contentIdentifier)
        return DownloadRecord(
            id: id, transactionId: content.transactionId, contentIdentifier: content.contentIdentifier,
            productId: content.productId, url: content.url, sha256: content.sha256.lowercased(), length: content.length,
            version: content.version, placement: content.placement, unpackedLength: content.unpackedLength, state: .waiting,
            progress: 0, bytesReceived: 0, rate: 0, durableOffset: 0, partialPath: partialFile(forDownload: id).path,
            createdAt: now, updatedAt: now, updateFrom: updateFrom, mirrors: content.mirrors, manifest: content.manifest,
            delivery: content.delivery, preservation: content.preservation)
    }

    /// Applies `event` to a download in one database transaction and performs its actions.
    /// Returns the record after the move, or nil if nothing changed.
    @discardableResult
    func transition(_ downloadId: String, _ event: DownloadLifecycle.Event, requireLease: Bool = false) throws
        -> DownloadRecord?
    {
        try transition(downloadId, requireLease: requireLease) { _ in event }.0
    }

    /// `transition` with the event made inside the database transaction (from facts read there,
    /// such as the lease); also returns the lifecycle's actions besides `persist`.
    func transition(
        _ downloadId: String, requireLease: Bool = false, _ event: (Database) throws -> DownloadLifecycle.Event
    ) throws -> (DownloadRecord?, [DownloadLifecycle.Action]) {
        let (record, actions) = try commit { db -> ((DownloadRecord?, [DownloadLifecycle.Action]), [PaymentQueueEvent]) in
            let (record, actions, events) = try self.applyTransition(db, downloadId, try event(db), requireLease: requireLease)
            return ((record, actions), events)
        }
        perform(actions, downloadId)
        return (record, actions)
    }

    /// Records `downloadId` as placed at `contentURL` (with `placement`, the content's own
    /// record) and, with `finish`, finishes its transaction when that was its last download: one
    /// durable commit for all, then the events in that order. Returns the transaction if it was
    /// finished now.
    func installed(
        _ downloadId: String, transactionId: String, contentURL: URL, placement: PlacementRecord? = nil, finish: Bool
    ) throws -> TransactionRecord? {
        let recorders = finishRecorders.withLock { $0 }
        let (finished, actions) = try commit { db -> ((TransactionRecord?, [DownloadLifecycle.Action]), [PaymentQueueEvent]) in
            try placement?.record(db)
            let (record, actions, events) = try self.applyTransition(
                db, downloadId, .installed(contentURL: contentURL), requireLease: false)
            if let record {
                try ContentRows.setClass(
                    db, contentIdentifier: record.contentIdentifier, delivery: record.delivery, preservation: record.preservation)
            }
            guard finish else { return ((nil, actions), events) }
            let (finished, finishEvents) = try Self.finishIfDelivered(db, transactionId, recorders: recorders)
            return ((finished, actions), events + finishEvents)
        }
        perform(actions, downloadId)
        return finished
    }

    /// The database half of `transition`: asks the lifecycle about `event` inside the caller's
    /// transaction and carries out `persist` there. Returns the actions left for after the commit
    /// (`perform`): `stopTransfer`, and `removePartialData` only when this process may drop the
    /// data (it holds the lease, or takes a free or stale one).
    private func applyTransition(_ db: Database, _ downloadId: String, _ event: DownloadLifecycle.Event, requireLease: Bool) throws
        -> (DownloadRecord?, [DownloadLifecycle.Action], [PaymentQueueEvent])
    {
        guard var record = try QueueStore.fetchDownload(db, id: downloadId) else {
            throw CourierError(.notFound, "no download \(downloadId)")
        }
        var machine = DownloadLifecycle(record: record)
        var actions = try machine.handle(event)
        // Partial data may be dropped only by the lease holder: take the lease if it is free
        // or stale; a live owner drops it itself when it sees the new state.
        if actions.contains(.removePartialData) || requireLease {
            let existing = try LeaseManager.lease(db, downloadId: downloadId)
            let ours = existing?.owner.token == self.leases.owner.token
            if existing == nil || ours || existing?.isStale(host: self.leases.owner.host) == true {
                if !ours { try QueueStore.deleteLease(db, downloadId: downloadId) }
            } else {
                actions.removeAll { $0 == .removePartialData }
                if requireLease, let existing {
                    throw CourierError(
                        .leased,
                        "download \(downloadId) is held by process \(existing.owner.pid) on \(existing.owner.host)",
                        hint: "pause it there first, or wait for its lease to expire")
                }
            }
        }
        let removeFiles = actions.contains(.removePartialData)
        guard actions.contains(.persist) || removeFiles else { return (nil, actions, []) }
        let now = Date()
        record.apply(machine, at: now)
        try QueueStore.updateState(db, download: record)
        if removeFiles {
            try QueueStore.resetJournal(db, downloadId: downloadId, now: now)
            record = try QueueStore.fetchDownload(db, id: downloadId) ?? record
        }
        return (record, actions.filter { $0 != .persist }, [.updatedDownloads([record])])
    }

    /// Carries out the lifecycle's actions on `downloadId` that follow a commit: `stopTransfer`
    /// fires the stop signal of this process's worker (one in another process sees the new state
    /// at its next heartbeat), `removePartialData` deletes its files. Nothing is inferred from
    /// the state: a download leaves `active` without stopping its worker when the worker itself
    /// recorded the move.
    func perform(_ actions: [DownloadLifecycle.Action], _ downloadId: String) {
        for action in actions {
            switch action {
            case .stopTransfer: stopWorker(downloadId)
            case .removePartialData: removePartialData(downloadId)
            case .persist, .takeLease, .retry, .resumeWhenFree: continue
            // `reconcile`'s, performed in its own transaction.
            case .relocate, .clearValidator, .retarget, .redeliver, .add: continue
            }
        }
    }

    /// Deletes the partial file and any verified package of a download.
    func removePartialData(_ downloadId: String) {
        for file in [partialFile(forDownload: downloadId), packageFile(forDownload: downloadId)] {
            try? FileManager.default.removeItem(at: file)
        }
    }

    /// Runs `body` in one database transaction, then tells observers its events. `durable`:
    /// on disk before this returns (see `StateStore.write(durable:)` for the lazy kind).
    func commit<T>(durable: Bool = true, _ body: (Database) throws -> (T, [PaymentQueueEvent])) throws -> T {
        try commitLock.withLock {
            let (value, events): (T, [PaymentQueueEvent])
            do {
                (value, events) = try store.write(durable: durable) { db in try body(db) }
            } catch let error as CourierError {
                throw error
            } catch {
                throw CourierError(.io, "the state database refused a change", cause: "\(error)")
            }
            self.events.publish(events, from: self)
            // New claimable work (queued, resumed) wakes a pipeline waiting for its next poll. (A
            // worker is stopped by the `stopTransfer` action, `perform`, not from the state.)
            var claimable = false
            for case .updatedDownloads(let records) in events where records.contains(where: { $0.state == .waiting }) {
                claimable = true
            }
            if claimable { workAvailable.ring() }
            return value
        }
    }

    /// A signal fired when this process performs the lifecycle's `stopTransfer` for
    /// `downloadId` (a pause, a cancel, a user's review of a silent transfer); pass it to
    /// `unwatchStop` once the work it guards is over.
    func watchStop(_ downloadId: String) -> StopSignal {
        let signal = StopSignal()
        stopWatchers.withLock { $0[downloadId, default: [:]][ObjectIdentifier(signal)] = signal }
        return signal
    }

    func unwatchStop(_ downloadId: String, _ signal: StopSignal) {
        stopWatchers.withLock { watchers in
            watchers[downloadId]?[ObjectIdentifier(signal)] = nil
            if watchers[downloadId]?.isEmpty == true { watchers[downloadId] = nil }
        }
    }

    private func stopWorker(_ downloadId: String) {
        let signals = stopWatchers.withLock { $0[downloadId].map { Array($0.values) } ?? [] }
        for signal in signals { signal.fire() }
    }

    func publish(_ events: [PaymentQueueEvent]) {
        commitLock.withLock { self.events.publish(events, from: self) }
    }

    func read<T>(_ body: (Database) throws -> T) throws -> T {
        do {
            return try store.pool.read { db in try body(db) }
        } catch let error as CourierError {
            throw error
        } catch {
            throw CourierError(.io, "cannot read the state database", cause: "\(error)")
        }
    }
}
