import Courier
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// `courier prestage --queue postgresql://…`: one pre-staging run shared by every process that
/// runs the same command against the same database and staging tree (docs/scaling.md).
///
/// Each process migrates the schema, then loops:
/// - The process holding the run key's session advisory lock (`pg_try_advisory_lock`, on a
///   connection of its own, released by PostgreSQL when that connection dies) is the
///   **coordinator**. With no open run it plans one against the tree; a plan with nothing to
///   fetch inserts nothing, publishes the catalog only if it changed, and ends the process.
///   Otherwise it inserts the run (its plan) and its tasks in one transaction.
/// - Every process, coordinator or not, works on the open run with `jobs` workers over a
///   `PostgresWorkQueue` until no task of the run is waiting or claimed.
/// - Then the coordinator (or, if it died, the process that takes the lock next) publishes the
///   catalog from the recorded outcomes, once, and marks the run published. The others wait for
///   that and end with the same summary: exit 0, or 1 naming the packages that failed.
///
/// A process waiting for another (planning, or publishing) is woken by PostgreSQL notifications
/// (`RunNews`: LISTEN on the lock's connection; a run inserted, a run published, a coordinator
/// leaving) and looks again every `pollInterval` whatever it heard (a coordinator killed sends
/// nothing).
///
/// A process interrupted by SIGINT/SIGTERM hands its claimed tasks back and ends `paused` (7);
/// the run goes on with the others.
///
/// With a `signer` (`--tuf-keys`) the run is a signed one (`prestage_run.signed`): the process
/// that publishes signs the catalog it computed (`PrestageSigner`) before it marks the run
/// published, and a plan read back from the database must have been made from the upstream
/// catalog this process loaded itself (`PrestagePlan.checkUpstream`). Every process of a run
/// signs or none does: one whose keys and the open run disagree refuses to join it.
public struct PostgresPrestage: Sendable {
    public let url: PostgresURL
    let runner: PrestageRunner
    let lease: Duration
    let pollInterval: Duration
    let signer: PrestageSigner?
    let logger: Logger

    public init(
        url: PostgresURL, runner: PrestageRunner, lease: Duration = .seconds(120),
        pollInterval: Duration = .milliseconds(250), signer: PrestageSigner? = nil, logger: Logger
    ) {
        self.url = url
        self.runner = runner
        self.lease = lease
        self.pollInterval = pollInterval
        self.signer = signer
        self.logger = logger
    }

    /// The key of the run a command line joins: the staging tree and the product selection.
    /// Every machine must name the same tree the same way (the same mount path).
    public static func runKey(dest: URL, products: Set<String>?) -> String {
        var key = "dest=" + dest.standardizedFileURL.path
        if let products { key += "\nproducts=" + products.sorted().joined(separator: ",") }
        return key
    }

    /// Pooled connections per process, whatever `--jobs`: one. A process's workers already share
    /// their statements (one claim statement and one record statement at a time, `ClaimBatcher`
    /// and `RecordBatcher`), so a second connection only let a claim overlap a record, and
    /// PostgreSQL's `max_connections` (100 by default) bounds processes, not jobs. The
    /// coordinator's session lock holds one more. (16 connections instead of 4 cost PostgreSQL
    /// about 0.1 s of CPU per 500-package run here, starting backends; one instead of the two a
    /// run opened: 0.080 → 0.070 s, and the run 0.502 → 0.476 s in alternating runs, three
    /// processes as quick as before.)
    static let maximumConnections = 1

    /// The queue's statements are planned without looking at their values (`plan_cache_mode`,
    /// set when the connection starts: no round trip). Planned for a run's id, PostgreSQL's
    /// statistics, taken before that run was inserted, made every run but the first look empty:
    /// any index led by the run was then as good as the primary key, and claims and records
    /// scanned all of the run's rows (a run of 20,000 tasks in a database that held earlier ones:
    /// 15 ms per claim, 7 ms per record, twice the run's time). A generic plan counts on an
    /// average run.
    static let genericPlans = ("plan_cache_mode", "force_generic_plan")

    /// Every statement of the queue names its rows by key or by an index's leading columns, so
    /// its tables are read through their indexes, whatever PostgreSQL's statistics say. With
    /// them taken while the table was empty (a new database, or one whose old runs were just
    /// removed and vacuumed), a claim's and a record's generic plans updated their rows through a
    /// sequential scan of every task (0.76 ms per statement on a run of 500, two thirds of the
    /// statements' time in PostgreSQL); a plan made with more rows, or with this, uses the primary
    /// key. (`enable_seqscan = off` forbids nothing: a table with no usable index is still scanned,
    /// its plan then costed above any threshold.)
    static let indexScans = ("enable_seqscan", "off")

    /// No JIT compilation: the queue's statements touch a few rows each. A plan whose sequential
    /// scan `indexScans` priced out but kept (no index served it) costs more than `jit_above_cost`:
    /// the removal of old runs, 0.05 ms of work, took 80-100 ms compiling itself.
    static let noJIT = ("jit", "off")

    public func run(
        catalog location: String, relativeTo base: URL, products: Set<String>?, runKey: String,
        events: @escaping @Sendable (PrestageEvent) -> Void
    ) async throws -> PrestageSummary {
        var configuration = try url.clientConfiguration
        configuration.options.maximumConnections = Self.maximumConnections
        configuration.options.additionalStartupParameters += [Self.genericPlans, Self.indexScans, Self.noJIT]
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        // The plan is made while PostgreSQL is reached, on another core: the process that turns
        // out to be the coordinator needs it, checked still current (`coordinate`); the others
        // drop it. Planning after the lock put the catalog's load and the plan (10-15 ms for
        // 500 packages) after both connections, on one core, before the first download.
        let runner = self.runner
        let early = Task { try await runner.plan(catalog: location, relativeTo: base, products: products) }
        defer { early.cancel() }
        // Not a child of this task: when SIGINT cancels the run, the workers still hand their
        // tasks back through the client before it stops.
        let pool = Task { await client.run() }
        defer { pool.cancel() }
        return try await coordinate(
            client: client, early: early, catalog: location, relativeTo: base, products: products, runKey: runKey, events: events)
    }

    private func coordinate(
        client: PostgresClient, early: Task<PrestagePlan, any Error>, catalog location: String, relativeTo base: URL,
        products: Set<String>?, runKey: String, events: @escaping @Sendable (PrestageEvent) -> Void
    ) async throws -> PrestageSummary {
        // The lock's connection starts while the pool's checks the schema: two backends at once.
        let url = self.url
        let logger = self.logger
        let connecting = Task {
            do {
                return try await PostgresConnection.connect(configuration: try url.connectionConfiguration, id: 1, logger: logger)
            } catch {
                throw PostgresErrors.wrap(error, "cannot connect to PostgreSQL at \(url)")
            }
        }
        do {
            try await PostgresSchema.migrate(client, logger: logger)
        } catch {
            connecting.cancel()
            try? await connecting.value.close()
            throw error
        }
        let lock = try await connecting.value
        let news = await RunNews.listen(on: lock, logger: logger)
        do {
            let summary = try await coordinate(
                client: client, lock: lock, news: news, early: early, catalog: location, relativeTo: base, products: products,
                runKey: runKey, events: events)
            news.stop()
            try? await lock.close()
            return summary
        } catch {
            news.stop()
            try? await lock.close()
            throw error
        }
    }

    private func coordinate(
        client: PostgresClient, lock: PostgresConnection, news: RunNews, early: Task<PrestagePlan, any Error>,
        catalog location: String, relativeTo base: URL, products: Set<String>?, runKey: String,
        events: @escaping @Sendable (PrestageEvent) -> Void
    ) async throws -> PrestageSummary {
        let runs = RunTable(client: client, logger: logger)
        var coordinator = false
        // The plan made at the start serves the first look only: a process that waited for
        // another coordinator plans afresh if it takes over.
        var early: Task<PrestagePlan, any Error>? = early
        while true {
            defer { early = nil }
            try checkInterrupted()
            // Anything heard from now on wakes the wait below at once.
            let seen = news.generation
            if !coordinator { coordinator = try await runs.tryLock(runKey, on: lock) }
            var open = try await runs.openRun(runKey) { [runner] in try runner.storedPlan($0, products: products) }
            if let (_, plan, signed) = open {
                try await checkStored(plan, signed: signed, early: early, catalog: location, relativeTo: base)
            }
            if open == nil {
                guard coordinator else {
                    // Another process is planning (or just finished a run): look again when it
                    // inserts its run or leaves.
                    try await pause(news, since: seen)
                    continue
                }
                let plan = try await plan(early: early, catalog: location, relativeTo: base, products: products)
                if plan.tasks.isEmpty {
                    events(PrestageJob.plannedEvent(plan))
                    logger.debug("nothing new to stage; no run inserted")
                    let summary = try sign(try runner.job(queue: LocalWorkQueue()).publish(plan, outcomes: [:], events: events))
                    await runs.release(runKey, on: lock)
                    return summary
                }
                let runId = try await runs.insert(runKey, plan: plan, signed: signer != nil)
                events(PrestageJob.plannedEvent(plan))
                logger.debug("coordinator: planned a run", metadata: ["run": "\(runId)", "tasks": "\(plan.tasks.count)"])
                open = (runId, plan, signer != nil)
            }
            guard let (runId, plan, _) = open else { continue }
            let queue = queue(client, runId: runId, tasks: plan.tasks)
            // News (another process's last record) wakes this process's idle workers too.
            news.forward(to: queue.completions)
            let job = runner.job(queue: queue)
            try await job.work(tasks: plan.tasks.count, events: events)
            // An interrupted process's batch may hold tasks no worker started.
            await queue.handBackUnstarted()
            try checkInterrupted()
            // Every task is staged or failed; the catalog is published once, by the coordinator.
            while true {
                let seen = news.generation
                if !coordinator {
                    if try await runs.isPublished(runId) {
                        return PrestageJob.summarize(plan, outcomes: try await queue.outcomes()).summary
                    }
                    coordinator = try await runs.tryLock(runKey, on: lock)
                }
                if coordinator {
                    // Signed before the run is marked published: a publisher that dies in between
                    // leaves the run to the next one, which publishes (the same catalog) and signs.
                    let summary = try sign(try job.publish(plan, outcomes: try await queue.outcomes(), events: events))
                    try await runs.markPublished(runId)
                    // Finished runs do not pile up: those published over a week ago go, tasks and all.
                    do {
                        let removed = try await runs.removePublished()
                        if removed > 0 { logger.debug("removed old published runs", metadata: ["count": "\(removed)"]) }
                    } catch {
                        logger.warning("cannot remove old published runs", metadata: ["error": "\(error)"])
                    }
                    await runs.release(runKey, on: lock)
                    return summary
                }
                try checkInterrupted()
                // The coordinator publishes: look again when it has (or when it leaves).
                try await pause(news, since: seen)
            }
        }
    }

    /// A recorded run this process is about to work on and perhaps publish: signed exactly when
    /// this process signs, and, for a signing process, planned from the upstream catalog this
    /// process loaded (the plan made at the start, else the catalog loaded again).
    private func checkStored(
        _ plan: PrestagePlan, signed: Bool, early: Task<PrestagePlan, any Error>?, catalog location: String, relativeTo base: URL
    ) async throws {
        guard signed == (signer != nil) else {
            throw CourierError(
                .usage,
                signed
                    ? "the open pre-staging run of this tree publishes a signed catalog; this process has no --tuf-keys"
                    : "the open pre-staging run of this tree publishes an unsigned catalog; this process signs (--tuf-keys)",
                hint: "every process of a run signs or none does: give each one the same --tuf-keys and --tuf-roots (docs/trust.md)")
        }
        guard signer != nil else { return }
        let upstream =
            if let early {
                try await early.value.upstreamCatalog
            } else {
                try await runner.upstreamCatalog(catalog: location, relativeTo: base)
            }
        try plan.checkUpstream(upstream)
    }

    /// `summary` with the catalog it published signed, when this process signs.
    private func sign(_ summary: PrestageSummary) throws -> PrestageSummary {
        guard let signer else { return summary }
        guard let catalog = summary.published else { throw CourierError(.internal, "the run published no catalog to sign") }
        var signed = summary
        signed.signed = try signer.sign(catalog)
        logger.debug("signed the published catalog", metadata: ["timestamp": "\(signed.signed?.timestamp ?? 0)"])
        return signed
    }

    /// Tasks one claim statement may take for this process's workers (`PostgresWorkQueue`): one
    /// per worker, those a statement takes ahead following their pace. Outcomes gather for
    /// `recordGather` into one statement. (500 packages of 200 KiB, 16 jobs: 4 tasks at most per
    /// claim and no gather made 200 statements, 65 with these; PostgreSQL's CPU per run went
    /// from 0.110 to 0.087 s, Courier's from 0.71 to 0.67 s, the run from 0.49 to 0.46 s. Then up
    /// to two tasks per job and a 20 ms gather: PostgreSQL's CPU 0.095 → 0.080 s in alternating
    /// runs, the run unchanged; three processes of 6 jobs as balanced and as quick as before.
    /// Taking ahead stays bounded by the pace: what this process's workers start in 50 ms.)
    var claimBatch: Int { max(4, 2 * runner.jobs) }
    static let recordGather = Duration.milliseconds(20)

    private func queue(_ client: PostgresClient, runId: Int64, tasks: [PrestageTask]) -> PostgresWorkQueue {
        PostgresWorkQueue(
            client: client, runId: runId, lease: lease, pollInterval: pollInterval, claimBatch: claimBatch,
            recordGather: Self.recordGather, tasks: tasks, logger: logger)
    }

    /// The plan made at the start when the tree's published catalog is still the one it was made
    /// against (a run that published since may have staged what it lists), else a new one.
    private func plan(
        early: Task<PrestagePlan, any Error>?, catalog location: String, relativeTo base: URL, products: Set<String>?
    ) async throws -> PrestagePlan {
        if let early {
            let plan = try await early.value
            if try runner.isCurrent(plan) { return plan }
            logger.debug("the staging tree's catalog changed while planning; planning again")
        }
        return try await runner.plan(catalog: location, relativeTo: base, products: products)
    }

    /// Waits for news heard since `generation`, for `pollInterval` at most.
    private func pause(_ news: RunNews, since generation: UInt64) async throws {
        do {
            try await news.signal.wait(upTo: pollInterval, unlessSignalledSince: generation)
        } catch {
            try checkInterrupted()
        }
    }

    private func checkInterrupted() throws {
        if Task.isCancelled {
            throw CourierError(
                .paused, "this worker was interrupted; the run goes on with the other workers",
                hint: "run the same command again to rejoin the run")
        }
    }
}

/// `prestage_run`: the runs, their plans and the coordinator's lock.
struct RunTable: Sendable {
    let client: PostgresClient
    let logger: Logger

    /// Takes the run key's session advisory lock on `connection` (kept until it closes).
    func tryLock(_ key: String, on connection: PostgresConnection) async throws -> Bool {
        try await perform("cannot take the coordinator's lock in PostgreSQL") {
            let rows = try await connection.query(
                "SELECT pg_try_advisory_lock(hashtextextended(\(key), 0))", logger: logger)
            for try await locked in rows.decode(Bool.self) {
                if locked { logger.debug("this process is the coordinator") }
                return locked
            }
            return false
        }
    }

    /// The open run of `key`, its plan, read by `decode` (which checks it: a row is untrusted
    /// input, `PrestagePlan.decodeStored`), and whether its catalog is published signed.
    func openRun(_ key: String, decode: (Data) throws -> PrestagePlan = PrestagePlan.decode) async throws
        -> (Int64, PrestagePlan, signed: Bool)?
    {
        let found: (Int64, ByteBuffer, Bool)? = try await perform("cannot read the open run in PostgreSQL") {
            let rows = try await client.query(
                "SELECT run_id, plan, signed FROM prestage_run WHERE run_key = \(key) AND state = 'running'", logger: logger)
            for try await row in rows.decode((Int64, ByteBuffer, Bool).self) { return row }
            return nil
        }
        guard let (runId, document, signed) = found else { return nil }
        return (runId, try decode(Data(document.readableBytesView)), signed)
    }

    /// Inserts a run and its tasks in one statement (one transaction); returns its id.
    func insert(_ key: String, plan: PrestagePlan, signed: Bool = false) async throws -> Int64 {
        // The plan goes in as the bytes encoded here (bytea: not parsed, not compressed); the
        // tasks' rows name them only, every process reading its tasks from the plan.
        let document = ByteBuffer(data: try plan.encoded())
        let rows = try PostgresWorkQueue.TaskRows(plan.tasks, documents: false)
        return try await perform("cannot insert the run in PostgreSQL") {
            // One statement (its own transaction): the run, then its tasks, which name its id.
            let inserted = try await client.query(
                """
                WITH run AS (
                    INSERT INTO prestage_run (run_key, plan, signed) VALUES (\(key), \(document), \(signed)) RETURNING run_id),
                tasks AS (
                    INSERT INTO prestage_task (run_id, download_id, content_identifier)
                    SELECT run.run_id, d, c
                    FROM run, unnest(\(rows.ids)::text[], \(rows.identifiers)::text[]) AS x(d, c)),
                news AS (SELECT pg_notify(\(RunNews.channel), 'inserted'))
                SELECT run_id FROM run, news
                """, logger: logger)
            for try await id in inserted.decode(Int64.self) { return id }
            throw CourierError(.internal, "PostgreSQL returned no run id")
        }
    }

    /// Deletes the runs published more than `retention` ago, with their tasks (one statement,
    /// one transaction: no task outlives its run); returns how many runs. A published run is
    /// read only by the processes that were waiting for it, at once; what is kept is for
    /// inspection.
    func removePublished() async throws -> Int {
        try await perform("cannot remove old published runs in PostgreSQL") {
            let rows = try await client.query(
                """
                WITH runs AS (
                    DELETE FROM prestage_run WHERE state = 'published' AND published_at < now() - \(unescaped: Self.retention)
                    RETURNING run_id),
                tasks AS (DELETE FROM prestage_task WHERE run_id IN (SELECT run_id FROM runs))
                SELECT run_id FROM runs
                """, logger: logger)
            var count = 0
            for try await _ in rows.decode(Int64.self) { count += 1 }
            return count
        }
    }

    /// How long a published run and its tasks are kept (a constant SQL interval).
    static let retention = "interval '7 days'"

    /// Marks run `runId` published, and tells the processes waiting for it (`RunNews`).
    func markPublished(_ runId: Int64) async throws {
        try await perform("cannot mark the run published in PostgreSQL") {
            try await client.query(
                """
                WITH published AS (
                    UPDATE prestage_run SET state = 'published', published_at = now()
                    WHERE run_id = \(runId) AND state = 'running' RETURNING run_id)
                SELECT pg_notify(\(RunNews.channel), 'published') FROM published
                """, logger: logger)
        }
    }

    /// Gives the coordinator's lock up and tells the processes waiting for it (`RunNews`), so one
    /// of them takes it at once rather than when this connection closes and it next looks.
    /// A failure only leaves that to the connection's close.
    func release(_ key: String, on connection: PostgresConnection) async {
        do {
            try await connection.query(
                "SELECT pg_advisory_unlock(hashtextextended(\(key), 0)), pg_notify(\(RunNews.channel), 'released')", logger: logger)
        } catch {
            logger.debug("cannot release the coordinator's lock", metadata: ["error": "\(error)"])
        }
    }

    func isPublished(_ runId: Int64) async throws -> Bool {
        try await perform("cannot read the run's state in PostgreSQL") {
            let rows = try await client.query("SELECT state FROM prestage_run WHERE run_id = \(runId)", logger: logger)
            for try await state in rows.decode(String.self) { return state == "published" }
            return true
        }
    }

    @discardableResult
    private func perform<T>(_ message: String, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw PostgresErrors.wrap(error, message)
        }
    }
}

/// What other processes did to runs, heard on one connection: `LISTEN courier_prestage`, which
/// `RunTable` notifies when it inserts a run, publishes one, or gives the coordinator's lock up,
/// and `RecordStatement` when it records the last open tasks of a run. Every notification wakes
/// every waiting process of every run of the database (each then looks at its own run: one
/// query).
final class RunNews: Sendable {
    static let channel = "courier_prestage"

    /// Signalled at each notification.
    let signal = CompletionSignal()
    private let listener = Mutex<Task<Void, Never>?>(nil)
    /// Signalled too (the idle workers of the run this process works on).
    private let forward = Mutex<CompletionSignal?>(nil)

    /// Notifications heard so far (for `CompletionSignal.wait(upTo:unlessSignalledSince:)`).
    var generation: UInt64 { signal.generation }

    /// Starts listening on `connection`; returns once PostgreSQL confirmed the LISTEN, or it
    /// failed (waits then end at their timeout only).
    static func listen(on connection: PostgresConnection, logger: Logger) async -> RunNews {
        let news = RunNews()
        let ready = CompletionSignal()
        let seen = ready.generation
        let task = Task {
            do {
                try await connection.listen(on: channel) { notifications in
                    ready.signal()
                    for try await _ in notifications { news.heard() }
                }
            } catch where !Task.isCancelled {
                logger.debug("cannot listen for other processes' runs", metadata: ["error": "\(error)"])
            } catch {}
            ready.signal()
        }
        news.listener.withLock { $0 = task }
        try? await ready.wait(upTo: .seconds(10), unlessSignalledSince: seen)
        return news
    }

    /// Also signals `other` at each notification from now on (instead of the previous one).
    func forward(to other: CompletionSignal) {
        forward.withLock { $0 = other }
    }

    private func heard() {
        signal.signal()
        forward.withLock { $0 }?.signal()
    }

    /// Stops listening.
    func stop() {
        listener.withLock { $0?.cancel() }
    }
}
