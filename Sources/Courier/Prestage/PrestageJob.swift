import Foundation
import Logging
import Metrics
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Downloads one package for pre-staging, resumably, verifying length and SHA-256 against the
/// task's catalog entry. The production fetcher is the transfer engine (`TransferPackageFetcher`).
public protocol PackageFetcher: Sendable {
    /// Fetches `task.source` to `destination` (renamed there only once verified), keeping partial
    /// data and its journal under `workDirectory` so a later call resumes. `progress` receives
    /// the bytes of the whole file received so far. Returns the bytes fetched by this call.
    func fetch(
        _ task: PrestageTask,
        to destination: URL,
        workDirectory: URL,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> Int64
    /// As `fetch`, and also the file's bytes when this call wrote all of them and they fit in
    /// `limit` bytes (the checker then reads memory, not the file it just wrote). The default
    /// calls `fetch` and returns no bytes.
    func fetchKeepingBytes(
        _ task: PrestageTask,
        to destination: URL,
        workDirectory: URL,
        upTo limit: Int,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> (fetched: Int64, bytes: [UInt8]?)
}

extension PackageFetcher {
    public func fetchKeepingBytes(
        _ task: PrestageTask,
        to destination: URL,
        workDirectory: URL,
        upTo limit: Int,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> (fetched: Int64, bytes: [UInt8]?) {
        (try await fetch(task, to: destination, workDirectory: workDirectory, progress: progress), nil)
    }
}

/// Checks a fetched package as the client would before it is staged (ContentInfo.plist naming
/// the product and version, no hostile entries, limits), without extracting it. Returns the
/// unpacked size. The production checker is the package inspector (`InspectingPackageChecker`).
public protocol PackageChecker: Sendable {
    func check(_ file: URL, task: PrestageTask) throws -> Int64?
    /// Checks `file` as `check` does and builds the manifest published beside it (nil when the
    /// package has no manifest form), in the same pass over the package where the checker can.
    /// `file` has been verified against the task's length and SHA-256. The default calls `check`
    /// and then builds the manifest from the file.
    func checkAndDescribe(_ file: URL, task: PrestageTask) throws -> (unpackedLength: Int64?, manifest: PackageManifest?)
    /// `checkAndDescribe` given `bytes`, the whole of `file` as the download wrote it (nil: read
    /// the file). The default ignores them.
    func checkAndDescribe(_ file: URL, bytes: [UInt8]?, task: PrestageTask) throws -> (unpackedLength: Int64?, manifest: PackageManifest?)
}

extension PackageChecker {
    public func checkAndDescribe(_ file: URL, task: PrestageTask) throws -> (unpackedLength: Int64?, manifest: PackageManifest?) {
        let unpacked = try check(file, task: task)
        return (unpacked, try? PackageManifest.build(package: file, limits: PackageConfiguration()))
    }

    public func checkAndDescribe(_ file: URL, bytes: [UInt8]?, task: PrestageTask) throws -> (unpackedLength: Int64?, manifest: PackageManifest?) {
        try checkAndDescribe(file, task: task)
    }
}

/// What a pre-staging run reports as it goes (NDJSON with `--json`, a progress bar on a terminal).
public enum PrestageEvent: Sendable {
    /// The plan: packages to fetch and their bytes, packages already staged, entries refused.
    case planned(tasks: Int, bytes: Int64, unchanged: Int, refused: Int)
    case started(PrestageTask)
    /// Bytes of this package received so far (the whole file, including a resumed prefix).
    case progress(PrestageTask, received: Int64)
    case staged(PrestageTask, bytesFetched: Int64)
    case failed(PrestageTask, CourierError)
    /// The catalog was published (or left as it was, when nothing changed) with this many packages.
    case published(packages: Int, changed: Bool)
}

/// The end of a run: one row per catalog entry considered.
public struct PrestageSummary: Sendable {
    public struct Row: Sendable {
        public enum Status: String, Sendable { case staged, unchanged, failed, refused }
        public var contentIdentifier: String
        public var status: Status
        /// Bytes fetched by this run.
        public var bytesFetched: Int64
        public var error: CourierError?
    }

    public var rows: [Row]
    /// Whether a new catalog was published.
    public var catalogChanged: Bool
    /// The catalog this process published (or found already published) at the end of the run;
    /// nil when another process of a shared run published it.
    public var published: Catalog? = nil
    /// The TUF metadata this process signed for `published` (`PrestageSigner`), if it signed.
    public var signed: TUFPublisher.Published? = nil
    public var failures: [Row] { rows.filter { $0.status == .failed || $0.status == .refused } }
    public var bytesFetched: Int64 { rows.reduce(0) { $0 + $1.bytesFetched } }
}

/// Settings of the pre-staging job (`prestage` in the configuration; flags override them).
public struct PrestageConfiguration: Sendable, Codable, Equatable {
    /// Packages fetched and checked at once. Default 8.
    public var jobs: Int
    /// Seconds a package no catalog lists any more is kept before removal (clients may be resuming). Default 1 day.
    public var unlistedGrace: TimeInterval
    /// The shared work queue, `postgresql://USER@HOST:PORT/DB` (`--queue`); nil runs in one process.
    public var queue: String?
    /// Seconds a worker's claim on a task lasts without a heartbeat (renewed every third of it
    /// while the task runs); a killed worker's task is claimed again after this. Default 120.
    public var leaseSeconds: Double
    /// The prefix of this process's worker names (`<prefix>-<n>`); unique per process when many
    /// processes share a queue. Default `worker`. Not read from the configuration file.
    public var workerName: String = "worker"

    public init(
        jobs: Int = 8, unlistedGrace: TimeInterval = 86_400, queue: String? = nil, leaseSeconds: Double = 120,
        workerName: String = "worker"
    ) {
        self.jobs = jobs
        self.unlistedGrace = unlistedGrace
        self.queue = queue
        self.leaseSeconds = leaseSeconds
        self.workerName = workerName
    }

    enum CodingKeys: String, CodingKey {
        case jobs, unlistedGrace, queue, leaseSeconds
    }
}

/// The pre-staging job: fetches what the plan lists through a work queue with `jobs` workers,
/// checks each package, publishes each one as soon as it is checked and the catalog last.
///
/// One package's failure does not stop the others; the catalog then keeps that package's
/// previously published version, if any. Cancelling the calling task pauses: packages staged so
/// far are published in the catalog, partial downloads keep their journals, and `run` throws
/// `CourierError(.paused)`.
///
/// Metrics (swift-metrics; see docs/scaling.md): `courier_prestage_tasks_claimed_total`,
/// `courier_prestage_tasks_staged_total`, `courier_prestage_tasks_failed_total` (by `code`),
/// `courier_prestage_bytes_fetched_total`, `courier_prestage_leases_lost_total` and the timer
/// `courier_prestage_task_duration_seconds`.
public struct PrestageJob: Sendable {
    let tree: any StagingTree
    let fetcher: any PackageFetcher
    let checker: any PackageChecker
    let queue: any PrestageWorkQueue
    let configuration: PrestageConfiguration
    let logger: Logger
    /// The manifests this process published, shared by the jobs `with(queue:)` makes.
    let writtenManifests: WrittenManifests

    public init(
        tree: any StagingTree,
        fetcher: any PackageFetcher,
        checker: any PackageChecker,
        queue: any PrestageWorkQueue = LocalWorkQueue(),
        configuration: PrestageConfiguration = .init(),
        logger: Logger
    ) {
        self.tree = tree
        self.fetcher = fetcher
        self.checker = checker
        self.queue = queue
        self.configuration = configuration
        self.logger = logger
        writtenManifests = WrittenManifests()
    }

    private init(_ job: PrestageJob, queue: any PrestageWorkQueue) {
        tree = job.tree
        fetcher = job.fetcher
        checker = job.checker
        self.queue = queue
        configuration = job.configuration
        logger = job.logger
        writtenManifests = job.writtenManifests
    }

    /// The same job over another work queue (a shared queue's run).
    public func with(queue: any PrestageWorkQueue) -> PrestageJob {
        PrestageJob(self, queue: queue)
    }

    /// The `planned` event of `plan`.
    public static func plannedEvent(_ plan: PrestagePlan) -> PrestageEvent {
        .planned(
            tasks: plan.tasks.count,
            // Each length is at most `Catalog.Content.maxLength`; their sum saturates.
            bytes: plan.tasks.reduce(Int64(0)) { sum, task in
                let (total, overflow) = sum.addingReportingOverflow(max(0, task.content.length))
                return overflow ? .max : total
            },
            unchanged: plan.unchanged.count,
            refused: plan.refused.count
        )
    }

    public func run(_ plan: PrestagePlan, events: @escaping @Sendable (PrestageEvent) -> Void) async throws -> PrestageSummary {
        events(Self.plannedEvent(plan))
        try await queue.enqueue(plan.tasks)
        try await work(tasks: plan.tasks.count, events: events)
        let outcomes = try await queue.outcomes()
        return try publish(plan, outcomes: outcomes, events: events)
    }

    /// Runs up to `jobs` workers (no more than `tasks`) that claim, stage and complete tasks
    /// until the queue has nothing left for them or the calling task is cancelled.
    public func work(tasks: Int, events: @escaping @Sendable (PrestageEvent) -> Void) async throws {
        let downloads = tree.workDirectory.appendingPathComponent("downloads", isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
        } catch {
            throw CourierError(.io, "cannot create \(downloads.path)", cause: "\(error)")
        }
        let workers = max(1, min(configuration.jobs, tasks))
        let prefix = configuration.workerName
        // A shared queue's record outlives this machine: a package is recorded staged only once
        // a sync covers it, one `syncPublished` for every package staged meanwhile.
        let tree = self.tree
        let sync = queue.recordsOutliveProcess ? GroupSync(spacing: Self.syncSpacing) { try tree.syncPublished() } : nil
        // With leases, one loop renews every task being staged (not a sleeping task per package).
        let leases = queue.heartbeatInterval.map { _ in LeasesInFlight() }
        await withTaskGroup(of: Void.self) { keeper in
            if let interval = queue.heartbeatInterval, let leases {
                keeper.addTask { await renew(leases, every: interval) }
            }
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<workers {
                    group.addTask {
                        await work(worker: "\(prefix)-\(index)", downloads: downloads, sync: sync, leases: leases, events: events)
                    }
                }
            }
            keeper.cancelAll()
        }
    }

    /// Renews the lease of every task in `leases` each `interval` until cancelled. A task whose
    /// lease was lost is dropped from it (its stage goes on; its record will not overwrite the
    /// outcome of the worker that took it over). A missed renewal is tried again next time: the
    /// lease outlasts a few.
    private func renew(_ leases: LeasesInFlight, every interval: Duration) async {
        while true {
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
            for (task, worker) in leases.all {
                do {
                    if try await !queue.renew(task, worker: worker) {
                        leases.remove(task.downloadId)
                        logger.notice("the lease on a pre-staging task was lost", metadata: ["download-id": "\(task.downloadId)"])
                    }
                } catch is CancellationError {
                    return
                } catch {
                    logger.warning("cannot renew a pre-staging lease", metadata: ["error": "\(error)"])
                }
            }
        }
    }

    /// The summary of `plan` given its tasks' outcomes, and what the catalog would be.
    public static func summarize(_ plan: PrestagePlan, outcomes: [String: PrestageOutcome])
        -> (summary: PrestageSummary, catalog: Catalog, paused: Bool)
    {
        var staged = Set<String>()
        var unpacked: [String: Int64] = [:]
        var rows: [PrestageSummary.Row] = []
        var paused = false
        for task in plan.tasks {
            switch outcomes[task.contentIdentifier] {
            case .staged(let bytes, let unpackedLength):
                staged.insert(task.contentIdentifier)
                unpacked[task.contentIdentifier] = unpackedLength
                rows.append(.init(contentIdentifier: task.contentIdentifier, status: .staged, bytesFetched: bytes))
            case .failed(let error):
                if error.code == .paused || error.code == .cancelled { paused = true }
                rows.append(.init(contentIdentifier: task.contentIdentifier, status: .failed, bytesFetched: 0, error: error))
            case nil:
                paused = true
                let error = CourierError(.paused, "not started before the run was interrupted")
                rows.append(.init(contentIdentifier: task.contentIdentifier, status: .failed, bytesFetched: 0, error: error))
            }
        }
        rows += plan.unchanged.map { .init(contentIdentifier: $0, status: .unchanged, bytesFetched: 0) }
        rows += plan.refused.map {
            .init(contentIdentifier: $0.contentIdentifier, status: .refused, bytesFetched: 0, error: CourierError(.usage, $0.reason))
        }
        let catalog = plan.catalog(staged: staged, unpackedLengths: unpacked)
        return (PrestageSummary(rows: rows, catalogChanged: false), catalog, paused)
    }

    /// Publishes the catalog of `plan` given its tasks' outcomes (when it differs from the one
    /// published), removes unlisted packages after a complete run, and returns the summary;
    /// throws `paused` when a task was interrupted.
    public func publish(
        _ plan: PrestagePlan,
        outcomes: [String: PrestageOutcome],
        events: @escaping @Sendable (PrestageEvent) -> Void
    ) throws -> PrestageSummary {
        // What the run keeps as it is (a failed task's previous version, products not selected)
        // comes from the catalog the tree has published now, not from the plan's copy.
        let published = try tree.publishedCatalog()
        var (summary, catalog, paused) = Self.summarize(plan.keeping(published: published), outcomes: outcomes)
        catalog = PrestageManifests.attach(to: catalog, tree: tree, published: published, written: writtenManifests.all)
        let changed = published != catalog
        if changed {
            try tree.publishCatalog(catalog)
            logger.debug("published the catalog", metadata: ["packages": "\(catalog.allContent.count)"])
        } else {
            // A tree an earlier Courier published owner-only is opened to the web server anyway.
            try tree.openToReaders(catalog)
        }
        events(.published(packages: catalog.allContent.count, changed: changed))
        if !paused, changed {
            let removed = try tree.removeUnlisted(by: catalog, grace: configuration.unlistedGrace)
            if !removed.isEmpty { logger.debug("removed unlisted packages", metadata: ["count": "\(removed.count)"]) }
        }
        if paused {
            throw CourierError(.paused, "pre-staging was interrupted", hint: "run the same command again to resume")
        }
        summary.catalogChanged = changed
        summary.published = catalog
        return summary
    }

    /// Claims, stages and records tasks until none is left. With a group sync (a shared queue),
    /// a staged package's record waits for a sync that covers it while the worker goes on with
    /// its next tasks: at most `maxPendingRecords` such records are pending per worker. A record
    /// waits for at most two syncs whatever that bound (each sync covers every package published
    /// before it started), so the bound only keeps a slow sync (a busy disk) from stopping the
    /// worker after every package.
    private func work(
        worker: String, downloads: URL, sync: GroupSync?, leases: LeasesInFlight?, events: @escaping @Sendable (PrestageEvent) -> Void
    ) async {
        await withTaskGroup(of: Void.self) { pending in
            var outstanding = 0
            while !Task.isCancelled {
                let claimed: PrestageTask?
                do {
                    claimed = try await queue.claim(worker: worker)
                } catch {
                    if !Task.isCancelled { logger.error("cannot claim pre-staging work", metadata: ["error": "\(error)"]) }
                    return
                }
                guard let task = claimed else {
                    // This worker's own records first: the run may be waiting only for them.
                    sync?.flush()
                    await pending.waitForAll()
                    outstanding = 0
                    do {
                        if try await queue.awaitWork() { continue }
                    } catch where !Task.isCancelled {
                        logger.error("cannot wait for pre-staging work", metadata: ["error": "\(error)"])
                    } catch {}
                    return
                }
                PrestageMetrics.claimed.increment()
                events(.started(task))
                let started = ContinuousClock.now
                leases?.add(task, worker: worker)
                let outcome = await stageOutcome(task, downloads: downloads, events: events)
                leases?.remove(task.downloadId)
                guard let sync, case .staged = outcome else {
                    await record(task, worker: worker, outcome: outcome, started: started, events: events)
                    continue
                }
                if outstanding >= Self.maxPendingRecords {
                    await pending.next()
                    outstanding -= 1
                }
                outstanding += 1
                pending.addTask {
                    var synced = outcome
                    do {
                        try await sync.sync()
                    } catch {
                        synced = .failed((error as? CourierError) ?? CourierError(.io, "cannot sync the staging tree", cause: "\(error)"))
                    }
                    await record(task, worker: worker, outcome: synced, started: started, events: events)
                }
            }
        }
    }

    /// Packages up to this size are checked from the bytes their download wrote, kept in memory
    /// until the check, not read back from the file: at most this much per job, the size of the
    /// read buffer a check from the file allocates (`PackageConfiguration.blockSize`).
    static let checkFromMemoryLimit = 1 << 20

    /// The least time between two group syncs of a shared queue's run (a worker with nothing left
    /// to claim starts a due one at once).
    static let syncSpacing = Duration.milliseconds(10)

    /// Staged packages per worker whose record waits for a sync (with a shared queue).
    static let maxPendingRecords = 8

    /// Reports `outcome` (metrics, events) and records it in the queue.
    private func record(
        _ task: PrestageTask, worker: String, outcome: PrestageOutcome, started: ContinuousClock.Instant,
        events: @escaping @Sendable (PrestageEvent) -> Void
    ) async {
        PrestageMetrics.taskDuration.record(duration: started.duration(to: .now))
        switch outcome {
        case .staged(let bytes, _):
            PrestageMetrics.staged.increment()
            PrestageMetrics.bytesFetched.increment(by: bytes)
            events(.staged(task, bytesFetched: bytes))
        case .failed(let failure):
            PrestageMetrics.failed(failure.code).increment()
            events(.failed(task, failure))
            logger.debug("pre-staging failed", metadata: ["download-id": "\(task.downloadId)", "error": "\(failure)"])
        }
        do {
            // Recorded even when the run is being cancelled (an interrupted task is handed back).
            let queue = self.queue
            let recorded = try await Task { try await queue.complete(task, worker: worker, outcome: outcome) }.value
            if !recorded {
                PrestageMetrics.leasesLost.increment()
                logger.notice(
                    "lost the lease on a pre-staging task; the worker that took it over records its outcome",
                    metadata: ["download-id": "\(task.downloadId)", "worker": "\(worker)"])
            }
        } catch {
            logger.error("cannot record pre-staging work", metadata: ["download-id": "\(task.downloadId)", "error": "\(error)"])
        }
    }

    /// Stages `task`; its outcome (a failure is an outcome, not an error).
    private func stageOutcome(
        _ task: PrestageTask, downloads: URL, events: @escaping @Sendable (PrestageEvent) -> Void
    ) async -> PrestageOutcome {
        do {
            let (bytes, unpacked) = try await stage(task, downloads: downloads, events: events)
            return .staged(bytesFetched: bytes, unpackedLength: unpacked)
        } catch {
            return .failed((error as? CourierError) ?? CourierError(.internal, "\(error)"))
        }
    }

    /// Fetch (or reuse a verified file left by an interrupted run), check, publish.
    private func stage(
        _ task: PrestageTask,
        downloads: URL,
        events: @escaping @Sendable (PrestageEvent) -> Void
    ) async throws -> (Int64, Int64?) {
        // A task from a shared queue was checked when it was read; checked again here, since
        // its download id names a file in `downloads` and its staged path one in the tree.
        try task.check()
        let file = downloads.appendingPathComponent("\(task.downloadId).zip", isDirectory: false)
        var fetched: Int64 = 0
        var bytes: [UInt8]?
        // A verified file left by a run interrupted between the fetch and the publication is kept.
        // Usually there is none: one `stat` here (a failed one, as quick as the `unlink` below),
        // and the blocking pool only to hash a file of the right length.
        let (length, sha256) = (task.content.length, task.content.sha256)
        var status = stat()
        let present = stat(file.path, &status) == 0
        var kept = false
        if present && status.st_mode & S_IFMT == S_IFREG && Int64(status.st_size) == length {
            kept = try await BlockingWorkerPool.detached { Durable.matches(file, length: length, sha256: sha256) }
        }
        if !kept {
            if present { unlink(file.path) }
            (fetched, bytes) = try await fetcher.fetchKeepingBytes(
                task, to: file, workDirectory: downloads, upTo: Self.checkFromMemoryLimit
            ) { received in
                events(.progress(task, received: received))
            }
        }
        let checker = self.checker
        let tree = self.tree
        let written = self.writtenManifests
        // One blocking step: the check builds the manifest in its pass over the package, and the
        // manifest and the package are published together, unsynced (the catalog publish, or a
        // shared queue's group sync, makes them durable).
        let unpacked: Int64? = try await BlockingWorkerPool.detached { [bytes] in
            let checked: (unpackedLength: Int64?, manifest: PackageManifest?)
            do {
                checked = try checker.checkAndDescribe(file, bytes: bytes, task: task)
            } catch {
                // A refused package is not kept: the next run fetches it again.
                try? FileManager.default.removeItem(at: file)
                throw error
            }
            if let manifest = try PrestageManifests.publish(checked.manifest, package: file, at: task.stagedPath, in: tree) {
                written.record(manifest)
            }
            return checked.unpackedLength
        }
        return (fetched, unpacked)
    }
}

/// The pre-staging job's metrics (swift-metrics; names prefixed `courier_`, see docs/scaling.md).
public enum PrestageMetrics {
    static let claimed = Counter(label: "courier_prestage_tasks_claimed_total")
    static let staged = Counter(label: "courier_prestage_tasks_staged_total")
    static let bytesFetched = Counter(label: "courier_prestage_bytes_fetched_total")
    static let leasesLost = Counter(label: "courier_prestage_leases_lost_total")
    static let taskDuration = Metrics.Timer(label: "courier_prestage_task_duration_seconds", preferredDisplayUnit: .seconds)
    /// Tasks claimed again after their previous worker's lease expired (a shared queue counts them).
    public static let leaseExpiries = Counter(label: "courier_prestage_lease_expiries_total")

    static func failed(_ code: CourierError.Code) -> Counter {
        Counter(label: "courier_prestage_tasks_failed_total", dimensions: [("code", code.rawValue)])
    }
}

/// The tasks a job's workers are staging, with the worker of each: the leases its one heartbeat
/// renews.
final class LeasesInFlight: Sendable {
    private let tasks = Mutex<[String: (task: PrestageTask, worker: String)]>([:])

    func add(_ task: PrestageTask, worker: String) {
        tasks.withLock { $0[task.downloadId] = (task, worker) }
    }

    func remove(_ downloadId: String) {
        _ = tasks.withLock { $0.removeValue(forKey: downloadId) }
    }

    var all: [(task: PrestageTask, worker: String)] {
        tasks.withLock { Array($0.values) }
    }
}

/// The manifests a process published, by path, with the digest and length it wrote.
final class WrittenManifests: Sendable {
    private let manifests = Mutex<[String: Catalog.Manifest]>([:])

    func record(_ manifest: Catalog.Manifest) {
        manifests.withLock { $0[manifest.url] = manifest }
    }

    var all: [String: Catalog.Manifest] { manifests.withLock { $0 } }
}

/// Group commit of a blocking sync: each caller returns once a sync that started after it called
/// has completed; callers arriving while one runs share the next. Syncs run on a Dispatch thread,
/// one at a time, and each starts at least `spacing` after the previous one started until the
/// first `flush()` (the run is ending; from then on each starts at once): a shared queue's
/// workers stage packages faster than the disk flushes, and back-to-back syncs (200 per run of 500 packages) each made the disk write and
/// flush its cache for a few packages.
final class GroupSync: Sendable {
    private struct State {
        /// Syncs started so far, and whether one is running or due to start.
        var started: UInt64 = 0
        var running = false
        var due = false
        /// A flush came: the run is ending, no sync waits for the spacing any more (one asked
        /// while a sync runs starts as soon as it ends).
        var ending = false
        var lastStart: ContinuousClock.Instant?
        /// Callers waiting for the sync numbered `target` (or a later one) to complete.
        var waiters: [(target: UInt64, continuation: CheckedContinuation<Void, any Error>)] = []
    }

    private let body: @Sendable () throws -> Void
    private let spacing: Duration
    private let state = Mutex(State())

    init(spacing: Duration = .zero, _ body: @escaping @Sendable () throws -> Void) {
        self.body = body
        self.spacing = spacing
    }

    /// Returns once a sync started after this call has completed; throws its error.
    func sync() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let start: (@Sendable () -> Void)? = state.withLock { state in
                state.waiters.append((state.started + 1, continuation))
                return schedule(&state, now: false)
            }
            start?()
        }
    }

    /// Callers waiting for a sync (tests).
    var waitingCount: Int { state.withLock { $0.waiters.count } }

    /// Starts the next sync now if one is due, and every later one without waiting for the
    /// spacing (callers wait and nothing more is coming soon: a worker with nothing left to claim,
    /// so the run is ending and the few packages still being staged should not wait).
    func flush() {
        let start: (@Sendable () -> Void)? = state.withLock { state in
            state.ending = true
            return schedule(&state, now: true)
        }
        start?()
    }

    /// What starts the next sync, when callers wait and none runs: now, or once `spacing` has
    /// passed since the last one started (nil when nothing is to be done here).
    private func schedule(_ state: inout State, now: Bool) -> (@Sendable () -> Void)? {
        guard !state.running, !state.waiters.isEmpty else { return nil }
        let clock = ContinuousClock()
        let wait = state.lastStart.map { spacing - $0.duration(to: clock.now) } ?? .zero
        if now || state.ending || wait <= .zero {
            state.due = false
            state.running = true
            state.started += 1
            state.lastStart = clock.now
            let number = state.started
            return { [self] in run(number) }
        }
        guard !state.due else { return nil }
        state.due = true
        let (seconds, attoseconds) = wait.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        return { [self] in
            DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) { [self] in
                let start: (@Sendable () -> Void)? = self.state.withLock { state in
                    state.due ? schedule(&state, now: true) : nil
                }
                start?()
            }
        }
    }

    private func run(_ number: UInt64) {
        DispatchQueue.global(qos: .utility).async { [self] in
            let result = Result { try body() }
            let (done, next): ([CheckedContinuation<Void, any Error>], (@Sendable () -> Void)?) = state.withLock { state in
                let done = state.waiters.filter { $0.target <= number }.map(\.continuation)
                state.waiters.removeAll { $0.target <= number }
                state.running = false
                return (done, schedule(&state, now: false))
            }
            for continuation in done { continuation.resume(with: result) }
            next?()
        }
    }
}
