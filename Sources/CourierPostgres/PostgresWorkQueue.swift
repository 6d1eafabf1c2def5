import Courier
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// One pre-staging run's tasks in PostgreSQL (`prestage_task`), shared by every worker of every
/// process that joined the run (docs/scaling.md).
///
/// `claim` takes the first waiting task, or one whose lease expired, with `FOR UPDATE SKIP LOCKED`
/// so workers never wait on each other's rows, and gives it a lease of `lease`; the job renews it
/// every third of that while it stages (`renew`). `complete` records an outcome only if the row is
/// still claimed by the same worker, so a worker whose lease expired cannot overwrite the outcome
/// of the one that took over; a paused or cancelled task is handed back instead (waiting). A task
/// whose lease expired `maxAttempts` times (its workers kept dying) fails rather than loop forever.
///
/// Workers of this process that claim at the same time share one statement (`ClaimBatcher`),
/// which may also take up to `claimBatch - 1` more tasks: those wait in this process for its next
/// idle workers (each row names the worker whose statement claimed it; `complete` and `renew` use
/// that name for the worker that took the task). How many it takes ahead follows the pace of
/// this process's workers (`ClaimPace`): as many as they start in `prefetchWindow`, so short
/// tasks share statements and long ones are left for other processes. A task
/// that waited more than a third of its lease is renewed before a worker starts it, and
/// `handBackUnstarted` returns the ones no worker started (an interrupted process). Outcomes
/// recorded within `recordGather` of each other share one `UPDATE` (a staged task's record does
/// not hold its worker up; a failure's, and any when a worker runs out of tasks, go at once).
///
/// These per-task changes commit without waiting for the WAL flush (`synchronous_commit = off`
/// for their own transaction, set in the statement): a server crash may lose the last few, which
/// only hands a task back or runs an idempotent task again. A `staged` outcome is recorded only
/// once the staging tree has synced the package (`recordsOutliveProcess`). The run's plan insert
/// and its publication (`PostgresPrestage`) keep full durability.
public struct PostgresWorkQueue: PrestageWorkQueue {
    let client: PostgresClient
    public let runId: Int64
    public let lease: Duration
    let maxAttempts: Int
    let pollInterval: Duration
    let logger: Logger
    /// Wakes this process's idle workers when one of its workers records an outcome, so the end
    /// of a run is seen at once rather than at the next poll.
    let completions = CompletionSignal()
    /// Tasks claimed at most per statement (1: one per claim).
    public let claimBatch: Int
    /// How long a record waits for others to share its statement (nil: it does not wait).
    public let recordGather: Duration?
    /// Tasks claimed by a batch and not yet started, and who started which.
    let claimed = ClaimedTasks()
    /// Outcomes waiting to be recorded together.
    let records: RecordBatcher
    /// Claims of workers that ask at the same time, made together.
    let claims: ClaimBatcher
    /// The progress query idle workers (`awaitWork`) share.
    let progressQuery = CoalescedQuery<(open: Int, claimable: Int)>()
    /// The `staged` outcomes this process recorded, so `outcomes` need not read them back.
    let stagedHere = StagedOutcomes()
    /// The run's tasks this process knows (its plan's), by download id: a claim returns ids.
    let known: KnownTasks
    /// Where in the run this process's next claim starts.
    let cursor: ClaimCursor

    public init(
        client: PostgresClient, runId: Int64, lease: Duration = .seconds(120), maxAttempts: Int = 5,
        pollInterval: Duration = .milliseconds(250), claimBatch: Int = 1, prefetchWindow: Duration = .milliseconds(50),
        recordGather: Duration? = nil, tasks: [PrestageTask] = [], logger: Logger
    ) {
        let known = KnownTasks(tasks)
        self.known = known
        let cursor = ClaimCursor()
        self.cursor = cursor
        self.client = client
        self.runId = runId
        self.lease = lease
        self.maxAttempts = maxAttempts
        self.pollInterval = pollInterval
        self.claimBatch = max(1, claimBatch)
        self.recordGather = recordGather
        self.logger = logger
        self.records = RecordBatcher(client: client, runId: runId, gather: recordGather, logger: logger)
        let statement = ClaimStatement.Settings(
            runId: runId, maxAttempts: maxAttempts, leaseSeconds: Self.seconds(lease))
        self.claims = ClaimBatcher(
            claimed: claimed, completions: completions, extra: self.claimBatch - 1, window: prefetchWindow, freshFor: lease / 3
        ) { [client, logger, cursor] owner, limit in
            try await Self.claim(
                client: client, statement: statement, owner: owner, limit: limit, known: known, cursor: cursor, logger: logger)
        }
    }

    var leaseSeconds: Double { Self.seconds(lease) }

    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    public var heartbeatInterval: Duration? { lease / 3 }
    public var recordsOutliveProcess: Bool { true }

    /// A one-row `FROM` item that turns off the WAL flush wait for the statement's own
    /// transaction (`set_config(…, is_local => true)`; one round trip, no BEGIN/COMMIT).
    static let asynchronousCommit = "(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit"

    public func enqueue(_ tasks: [PrestageTask]) async throws {
        guard !tasks.isEmpty else { return }
        known.add(tasks)
        let query = try Self.insertQuery(runId: runId, tasks: tasks)
        try await perform("cannot queue the run's tasks in PostgreSQL") {
            try await client.query(query, logger: logger)
        }
    }

    /// Inserts `tasks` into run `runId`, skipping any already there (same `downloadId`).
    static func insertQuery(runId: Int64, tasks: [PrestageTask]) throws -> PostgresQuery {
        let rows = try TaskRows(tasks)
        return """
            INSERT INTO prestage_task (run_id, download_id, content_identifier, task)
            SELECT \(runId), d, c, t::jsonb FROM unnest(\(rows.ids)::text[], \(rows.identifiers)::text[], \(rows.documents)::text[]) AS x(d, c, t)
            ON CONFLICT (run_id, download_id) DO NOTHING
            """
    }

    /// The columns of `prestage_task` rows for `tasks`, one array each (`unnest` makes the rows).
    struct TaskRows: Sendable {
        var ids: [String] = []
        var identifiers: [String] = []
        /// Each task as JSON.
        var documents: [String] = []

        /// `documents: false` leaves `documents` empty (a run's rows: its plan holds the tasks).
        init(_ tasks: [PrestageTask], documents encodesDocuments: Bool = true) throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            ids.reserveCapacity(tasks.count)
            identifiers.reserveCapacity(tasks.count)
            documents.reserveCapacity(encodesDocuments ? tasks.count : 0)
            for task in tasks {
                ids.append(task.downloadId)
                identifiers.append(task.contentIdentifier)
                guard encodesDocuments else { continue }
                do {
                    documents.append(String(decoding: try encoder.encode(task), as: UTF8.self))
                } catch {
                    throw CourierError(.internal, "cannot encode a pre-staging task", cause: "\(error)")
                }
            }
        }
    }

    public func claim(worker: String) async throws -> PrestageTask? {
        claimed.asked(by: worker)
        let task = try await nextTask(for: worker)
        if task == nil {
            // The worker is about to wait for its records (and the run for everyone's): no gather,
            // for these nor for those still to come (the run is ending: a gathering record would
            // only hold its end up).
            records.stopGathering()
        }
        return task
    }

    private func nextTask(for worker: String) async throws -> PrestageTask? {
        while let waiting = claimed.take(for: worker) {
            // Held here a while: make sure the lease is still this process's before starting it.
            if waiting.since.duration(to: .now) < lease / 3 { return waiting.task }
            if try await renew(waiting.task, worker: worker) { return waiting.task }
            claimed.finish(waiting.task.downloadId, worker: worker)
        }
        return try await perform("cannot claim a pre-staging task in PostgreSQL") { try await claims.claim(worker: worker) }
    }

    /// One claim statement: up to `limit` tasks under `owner`'s name. The statement returns
    /// download ids, their tasks come from `known` (the plan every process of the run holds);
    /// one this process does not know is read from its row.
    static func claim(
        client: PostgresClient, statement: ClaimStatement.Settings, owner: String, limit: Int, known: KnownTasks,
        cursor: ClaimCursor, logger: Logger
    ) async throws -> [PrestageTask] {
        let rows = try await client.execute(
            ClaimStatement(settings: statement, limit: limit, worker: owner, after: cursor.after), logger: logger)
        var ids: [String] = []
        for try await (id, previous, seq) in rows {
            cursor.advance(to: seq)
            if previous == "claimed" {
                PrestageMetrics.leaseExpiries.increment()
                logger.notice("took over a pre-staging task whose lease expired", metadata: ["worker": "\(owner)"])
            }
            ids.append(id)
        }
        var found = known.tasks(ids)
        let unknown = ids.filter { found[$0] == nil }
        if !unknown.isEmpty {
            let rows = try await client.query(
                """
                SELECT download_id, task::text FROM prestage_task
                WHERE run_id = \(statement.runId) AND download_id = ANY(\(unknown)::text[])
                """, logger: logger)
            let decoder = JSONDecoder()
            var read: [PrestageTask] = []
            for try await (id, stored) in rows.decode((String, String?).self) {
                do {
                    // A run's rows hold no document: its plan, which this process holds, has them all.
                    guard let document = stored else { throw CourierError(.integrity, "\(id) is in neither this process's plan nor its row") }
                    let task = try decoder.decode(PrestageTask.self, from: Data(document.utf8))
                    // A row is untrusted input: its task must be one a plan could hold.
                    try task.check()
                    guard task.downloadId == id else { throw CourierError(.integrity, "the row of \(id) holds the task of \(task.downloadId)") }
                    read.append(task)
                } catch let error as CourierError {
                    throw error
                } catch {
                    throw CourierError(.integrity, "a queued pre-staging task cannot be read", cause: "\(error)")
                }
            }
            known.add(read)
            for task in read { found[task.downloadId] = task }
        }
        return ids.compactMap { found[$0] }
    }

    /// Hands back the tasks a batch claimed that no worker of this process started (waiting
    /// again for any worker). Call once this process's workers have stopped.
    public func handBackUnstarted() async {
        records.flush()
        let unstarted = claimed.takeAll()
        guard !unstarted.isEmpty else { return }
        // Not a child of the caller: a process being interrupted still hands them back.
        await Task { await handBack(unstarted) }.value
    }

    private func handBack(_ unstarted: [ClaimedTasks.Waiting]) async {
        for waiting in unstarted {
            do {
                _ = try await updated("cannot hand a pre-staging task back in PostgreSQL") {
                    try await client.query(
                        """
                        UPDATE prestage_task SET state = 'waiting', worker = NULL, lease_expires_at = NULL,
                            attempts = greatest(attempts - 1, 0)
                        FROM \(unescaped: Self.asynchronousCommit)
                        WHERE run_id = \(runId) AND download_id = \(waiting.task.downloadId) AND state IS NOT DISTINCT FROM 'claimed'
                          AND worker = \(waiting.owner)
                        RETURNING 1
                        """, logger: logger)
                }
            } catch {
                logger.warning("cannot hand an unstarted pre-staging task back", metadata: ["error": "\(error)"])
            }
        }
    }

    @discardableResult
    public func complete(_ task: PrestageTask, worker: String, outcome: PrestageOutcome) async throws -> Bool {
        let owner = claimed.owner(of: task.downloadId, startedBy: worker)
        defer { claimed.finish(task.downloadId, worker: worker) }
        if case .failed(let error) = outcome, error.code == .paused || error.code == .cancelled {
            // Interrupted here, not failed: hand it back for another worker (or this one, later).
            return try await updated("cannot hand a pre-staging task back in PostgreSQL") {
                try await client.query(
                    """
                    UPDATE prestage_task SET state = 'waiting', worker = NULL, lease_expires_at = NULL
                    FROM \(unescaped: Self.asynchronousCommit)
                    WHERE run_id = \(runId) AND download_id = \(task.downloadId) AND state IS NOT DISTINCT FROM 'claimed' AND worker = \(owner)
                    RETURNING 1
                    """, logger: logger)
            }
        }
        let staged: Bool
        if case .staged = outcome { staged = true } else { staged = false }
        let document = try Self.encode(outcome)
        defer { completions.signal() }
        do {
            // A failure's worker waits for its record: no gather.
            let record = RecordBatcher.Record(
                downloadId: task.downloadId, worker: owner, state: staged ? "staged" : "failed", outcome: document)
            let recorded = try await records.record(record, urgent: !staged)
            if recorded && staged { stagedHere.add(task.contentIdentifier, outcome, owner: owner) }
            return recorded
        } catch {
            throw PostgresErrors.wrap(error, "cannot record a pre-staging outcome in PostgreSQL")
        }
    }

    /// (Statements on one task find it by its key: `state IS NOT DISTINCT FROM 'claimed'` is no
    /// index condition, so the index of claimed rows, whose dead entries a run's claims and
    /// records leave until a vacuum, is never scanned in its place; see `RecordStatement`.)
    public func renew(_ task: PrestageTask, worker: String) async throws -> Bool {
        let owner = claimed.owner(of: task.downloadId, startedBy: worker)
        return try await updated("cannot renew a pre-staging lease in PostgreSQL") {
            try await client.query(
                """
                UPDATE prestage_task SET lease_expires_at = now() + make_interval(secs => \(leaseSeconds))
                FROM \(unescaped: Self.asynchronousCommit)
                WHERE run_id = \(runId) AND download_id = \(task.downloadId) AND state IS NOT DISTINCT FROM 'claimed' AND worker = \(owner)
                RETURNING 1
                """, logger: logger)
        }
    }

    public func awaitWork() async throws -> Bool {
        while true {
            if claimed.hasWaiting { return true }
            // A completion recorded while the progress is read wakes the wait below at once
            // (else the last one of a run could leave an idle worker asleep for a poll interval).
            let seen = completions.generation
            // The process's idle workers share one progress query (one that started after they
            // asked), not one each per completion.
            let progress = try await progressQuery.run { try await self.progress() }
            if progress.open == 0 { return false }
            if progress.claimable > 0 || claimed.hasWaiting { return true }
            try await completions.wait(upTo: pollInterval, unlessSignalledSince: seen)
        }
    }

    /// The run's tasks: how many are not yet staged or failed, and how many can be claimed now.
    /// Fails the tasks whose lease expired `maxAttempts` times first.
    public func progress() async throws -> (open: Int, claimable: Int) {
        let exhausted = try Self.encode(
            .failed(CourierError(.internal, "its lease expired \(maxAttempts) times: the workers that claimed it stopped")))
        return try await perform("cannot read the run's progress in PostgreSQL") {
            try await client.query(
                """
                UPDATE prestage_task SET state = 'failed', outcome = \(exhausted)::jsonb, lease_expires_at = NULL
                WHERE run_id = \(runId) AND state = 'claimed' AND lease_expires_at < now() AND attempts >= \(maxAttempts)
                """, logger: logger)
            let rows = try await client.query(
                """
                SELECT count(*) FILTER (WHERE state IN ('waiting', 'claimed')),
                       count(*) FILTER (WHERE state = 'waiting' OR (state = 'claimed' AND lease_expires_at < now()))
                FROM prestage_task WHERE run_id = \(runId)
                """, logger: logger)
            for try await (open, claimable) in rows.decode((Int64, Int64).self) {
                return (Int(open), Int(claimable))
            }
            return (0, 0)
        }
    }

    /// Every recorded outcome of the run. A `staged` row this process recorded (its worker is one
    /// of this process's names, and only its own record could set that state under that name)
    /// comes back as its identifier alone, its outcome taken from `stagedHere`: in a run of one
    /// process, no outcome is read back and decoded. Failures are always read (another process's
    /// `progress` may fail a task whose lease this process lost).
    public func outcomes() async throws -> [String: PrestageOutcome] {
        let (local, owners) = stagedHere.snapshot()
        return try await perform("cannot read the run's outcomes in PostgreSQL") {
            let rows = try await client.query(
                """
                SELECT content_identifier,
                       CASE WHEN state = 'staged' AND worker = ANY(\(owners)::text[]) THEN NULL ELSE outcome::text END
                FROM prestage_task
                WHERE run_id = \(runId) AND state IN ('staged', 'failed') AND outcome IS NOT NULL
                """, logger: logger)
            var result: [String: PrestageOutcome] = [:]
            var missing: [String] = []
            let decoder = JSONDecoder()
            for try await (identifier, document) in rows.decode((String, String?).self) {
                guard let document else {
                    if let outcome = local[identifier] { result[identifier] = outcome } else { missing.append(identifier) }
                    continue
                }
                result[identifier] = try Self.decode(document, decoder: decoder)
            }
            // Not expected (every such row was recorded here); read them rather than guess.
            if !missing.isEmpty {
                let rows = try await client.query(
                    """
                    SELECT content_identifier, outcome::text FROM prestage_task
                    WHERE run_id = \(runId) AND content_identifier = ANY(\(missing)::text[]) AND outcome IS NOT NULL
                    """, logger: logger)
                for try await (identifier, document) in rows.decode((String, String).self) {
                    result[identifier] = try Self.decode(document, decoder: decoder)
                }
            }
            return result
        }
    }

    static func decode(_ document: String, decoder: JSONDecoder) throws -> PrestageOutcome {
        do {
            return try decoder.decode(PrestageOutcome.self, from: Data(document.utf8))
        } catch {
            throw CourierError(.integrity, "a recorded pre-staging outcome cannot be read", cause: "\(error)")
        }
    }

    static func encode(_ outcome: PrestageOutcome) throws -> String {
        do {
            return String(decoding: try JSONEncoder().encode(outcome), as: UTF8.self)
        } catch {
            throw CourierError(.internal, "cannot encode a pre-staging outcome", cause: "\(error)")
        }
    }

    private func updated(_ message: String, _ body: () async throws -> PostgresRowSequence) async throws -> Bool {
        try await perform(message) {
            var count = 0
            for try await _ in try await body() { count += 1 }
            return count > 0
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

/// The run's tasks by download id, as this process knows them (its plan, what it queued, what
/// it read from a row).
final class KnownTasks: Sendable {
    private let tasks = Mutex<[String: PrestageTask]>([:])

    init(_ tasks: [PrestageTask]) {
        add(tasks)
    }

    func add(_ added: [PrestageTask]) {
        tasks.withLock { tasks in
            tasks.reserveCapacity(tasks.count + added.count)
            for task in added { tasks[task.downloadId] = task }
        }
    }

    /// The known tasks among `ids`.
    func tasks(_ ids: [String]) -> [String: PrestageTask] {
        tasks.withLock { tasks in
            var found: [String: PrestageTask] = [:]
            for id in ids { found[id] = tasks[id] }
            return found
        }
    }
}

/// The `staged` outcomes this process's workers recorded, by content identifier, and the names
/// their rows hold.
final class StagedOutcomes: Sendable {
    private struct State {
        var outcomes: [String: PrestageOutcome] = [:]
        var owners = Set<String>()
    }

    private let state = Mutex(State())

    func add(_ contentIdentifier: String, _ outcome: PrestageOutcome, owner: String) {
        state.withLock {
            $0.outcomes[contentIdentifier] = outcome
            $0.owners.insert(owner)
        }
    }

    func snapshot() -> (outcomes: [String: PrestageOutcome], owners: [String]) {
        state.withLock { ($0.outcomes, $0.owners.sorted()) }
    }
}

/// Tasks a batch claimed for this process: those waiting for a worker, and which worker started
/// each one under which claiming worker's name (the name its row holds).
final class ClaimedTasks: Sendable {
    struct Waiting: Sendable {
        var task: PrestageTask
        /// The worker whose claim took it (the row's `worker`).
        var owner: String
        var since: ContinuousClock.Instant
    }

    private struct State {
        var waiting: [Waiting] = []
        /// Started tasks claimed by another worker's batch: download id → (the worker running it, the row's owner).
        var started: [String: (worker: String, owner: String)] = [:]
        var pace = ClaimPace()
    }

    private let state = Mutex(State())

    /// `worker` asks for its next task (its previous one, if any, is done).
    func asked(by worker: String) {
        state.withLock { $0.pace.asked(by: worker, at: .now) }
    }

    /// Tasks a claim may take ahead for this process's workers: as many as they start within
    /// `window` at their pace, at most `limit`.
    func ahead(within window: Duration, limit: Int) -> Int {
        state.withLock { $0.pace.ahead(within: window, limit: limit) }
    }

    /// `worker` starts `task`, claimed under `owner`'s name for several workers at once.
    func start(_ task: PrestageTask, owner: String, worker: String) {
        state.withLock {
            $0.started[task.downloadId] = owner == worker ? nil : (worker, owner)
            $0.pace.began(worker, at: .now)
        }
    }

    /// The next waiting task, now started by `worker`, if it was claimed less than `age` ago
    /// (an older one is left for `take`, whose caller renews it first).
    func takeFresh(for worker: String, within age: Duration) -> PrestageTask? {
        state.withLock { state in
            let now = ContinuousClock.now
            guard let next = state.waiting.first, next.since.duration(to: now) < age else { return nil }
            state.waiting.removeFirst()
            state.started[next.task.downloadId] = (worker, next.owner)
            state.pace.began(worker, at: now)
            return next.task
        }
    }

    func add(_ tasks: some Sequence<PrestageTask>, owner: String) {
        let now = ContinuousClock.now
        let added = tasks.map { Waiting(task: $0, owner: owner, since: now) }
        state.withLock { $0.waiting += added }
    }

    var hasWaiting: Bool {
        state.withLock { !$0.waiting.isEmpty }
    }

    /// The next waiting task, now started by `worker`.
    func take(for worker: String) -> Waiting? {
        state.withLock { state in
            guard !state.waiting.isEmpty else { return nil }
            let next = state.waiting.removeFirst()
            state.started[next.task.downloadId] = (worker, next.owner)
            state.pace.began(worker, at: .now)
            return next
        }
    }

    /// The name the row of `downloadId` holds while `worker` runs it.
    func owner(of downloadId: String, startedBy worker: String) -> String {
        state.withLock { state in
            guard let entry = state.started[downloadId], entry.worker == worker else { return worker }
            return entry.owner
        }
    }

    /// `worker` is done with `downloadId`.
    func finish(_ downloadId: String, worker: String) {
        state.withLock { state in
            if state.started[downloadId]?.worker == worker { state.started[downloadId] = nil }
        }
    }

    /// Every waiting task, no longer waiting.
    func takeAll() -> [Waiting] {
        state.withLock { state in
            defer { state.waiting.removeAll() }
            return state.waiting
        }
    }
}

/// How long this process's workers take per task, from being handed a task to asking for the
/// next (an exponentially weighted mean over every worker), and how many of them are busy: what
/// `ahead` turns into the number of tasks a claim takes ahead. Short tasks (200 KiB packages on
/// loopback: ~15 ms) then share a statement among up to `limit`; long ones (seconds) are not held
/// here while another process's workers could start them.
struct ClaimPace {
    /// When each busy worker was handed its task.
    private var busySince: [String: ContinuousClock.Instant] = [:]
    /// The mean time per task, once one task is done.
    private(set) var mean: Duration?
    /// Tasks taken ahead before any task is done.
    static let initial = 3

    mutating func asked(by worker: String, at now: ContinuousClock.Instant) {
        guard let since = busySince.removeValue(forKey: worker) else { return }
        let sample = since.duration(to: now)
        mean = mean.map { $0 * 0.75 + sample * 0.25 } ?? sample
    }

    mutating func began(_ worker: String, at now: ContinuousClock.Instant) {
        busySince[worker] = now
    }

    /// As many tasks as the busy workers start in `window` (at least one worker counted),
    /// between 0 and `limit`; `initial` (within `limit`) until a task is done.
    func ahead(within window: Duration, limit: Int) -> Int {
        let limit = max(0, limit)
        guard let mean else { return min(Self.initial, limit) }
        guard mean > .zero else { return limit }
        let tasks = window / mean * Double(max(1, busySince.count))
        return tasks >= Double(limit) ? limit : max(0, Int(tasks))
    }
}

/// Group commit of requests: one batch is processed at a time, and a request made meanwhile
/// waits for the next batch, which takes every request waiting by then. `process` resumes the
/// continuation of each request in its batch.
final class GroupedRequests<Request: Sendable, Value: Sendable>: Sendable {
    typealias Waiter = (request: Request, continuation: CheckedContinuation<Value, any Error>)

    private struct State {
        var waiting: [Waiter] = []
        /// Whether a batch is being processed (the next request then only waits).
        var running = false
        /// Whether the next batch goes without gathering (`flush`, an urgent request).
        var urgent = false
        /// Whether no batch gathers any more (`stopGathering`).
        var stopped = false
    }

    private let state = Mutex(State())
    private let process: @Sendable ([Waiter]) async -> Void
    /// How long a batch waits for more requests before it is taken (nil: it does not wait).
    private let gather: Duration?
    /// Ends a gathering wait early.
    private let woken = CompletionSignal()

    init(gather: Duration? = nil, process: @escaping @Sendable ([Waiter]) async -> Void) {
        self.gather = gather
        self.process = process
    }

    /// Adds `request` to the next batch; an `urgent` one ends that batch's gathering.
    func submit(_ request: Request, urgent: Bool = false) async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            let start: Bool = state.withLock { state in
                state.waiting.append((request, continuation))
                if urgent { state.urgent = true }
                guard !state.running else { return false }
                state.running = true
                return true
            }
            if start {
                Task { await drain() }
            } else if urgent {
                woken.signal()
            }
        }
    }

    /// Requests waiting for a batch (tests).
    var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// Takes the next batch without waiting for more requests.
    func flush() {
        state.withLock { $0.urgent = true }
        woken.signal()
    }

    /// Takes every batch from now on without waiting for more requests, the next one included.
    func stopGathering() {
        state.withLock { $0.stopped = true }
        woken.signal()
    }

    private func drain() async {
        while true {
            if let gather {
                let seen = woken.generation
                if !state.withLock({ $0.urgent || $0.stopped }) {
                    try? await woken.wait(upTo: gather, unlessSignalledSince: seen)
                }
            }
            let batch: [Waiter] = state.withLock { state in
                defer {
                    state.waiting.removeAll()
                    state.urgent = false
                }
                if state.waiting.isEmpty { state.running = false }
                return state.waiting
            }
            if batch.isEmpty { return }
            await process(batch)
        }
    }
}

/// Group claims: one claim statement at a time per process. A worker that asks while one runs
/// waits for the next, which claims for every worker waiting by then, under the first one's name
/// (`ClaimedTasks.start` tells `complete` and `renew` whose row it is), plus tasks for this
/// process's next idle workers when none waits here already (as many as they start in `window`,
/// at most `extra`): so at most `extra` tasks wait unstarted per process, and other processes
/// still share the run. A worker that finds a fresh
/// waiting task takes it without a statement. (One statement per worker that asked while another
/// ran was 273 claims for 500 tasks; PostgreSQL's CPU per run went with them.)
final class ClaimBatcher: Sendable {
    typealias Claim = @Sendable (_ owner: String, _ limit: Int) async throws -> [PrestageTask]

    private let requests: GroupedRequests<String, PrestageTask?>

    /// `extra`: tasks a statement takes ahead at most, as many as the workers start in `window`.
    init(claimed: ClaimedTasks, completions: CompletionSignal, extra: Int, window: Duration, freshFor: Duration, run: @escaping Claim) {
        let extra = max(0, extra)
        requests = GroupedRequests { batch in
            await Self.claim(
                batch, claimed: claimed, completions: completions, extra: claimed.ahead(within: window, limit: extra),
                freshFor: freshFor, run: run)
        }
    }

    /// A task for `worker`, or nil when none is claimable now.
    func claim(worker: String) async throws -> PrestageTask? {
        try await requests.submit(worker)
    }

    private static func claim(
        _ batch: [GroupedRequests<String, PrestageTask?>.Waiter], claimed: ClaimedTasks, completions: CompletionSignal, extra: Int,
        freshFor: Duration, run: Claim
    ) async {
        var batch = batch[...]
        // Tasks the previous statement claimed for idle workers go first.
        while let waiter = batch.first, let task = claimed.takeFresh(for: waiter.request, within: freshFor) {
            batch.removeFirst()
            waiter.continuation.resume(returning: task)
        }
        guard let owner = batch.first?.request else { return }
        let limit = batch.count + (claimed.hasWaiting ? 0 : extra)
        do {
            var tasks = try await run(owner, limit)[...]
            for waiter in batch {
                guard let task = tasks.popFirst() else {
                    waiter.continuation.resume(returning: nil)
                    continue
                }
                claimed.start(task, owner: owner, worker: waiter.request)
                waiter.continuation.resume(returning: task)
            }
            if !tasks.isEmpty {
                claimed.add(tasks, owner: owner)
                // Idle workers of this process (in `awaitWork`) take them.
                completions.signal()
            }
        } catch {
            for waiter in batch { waiter.continuation.resume(throwing: error) }
        }
    }
}

/// Group commit of outcomes: a `record` that arrives while another statement runs (or within
/// `gather` of the first) waits for the next one, which records every outcome waiting by then in
/// one `UPDATE … FROM unnest(…)`.
final class RecordBatcher: Sendable {
    struct Record: Sendable {
        var downloadId: String
        /// The worker name the row must hold (a lost lease records nothing).
        var worker: String
        var state: String
        /// The outcome as JSON.
        var outcome: String
    }

    private let requests: GroupedRequests<Record, Bool>

    init(client: PostgresClient, runId: Int64, gather: Duration? = nil, logger: Logger) {
        requests = GroupedRequests(gather: gather) { batch in
            do {
                let recorded = try await Self.write(batch.map(\.request), client: client, runId: runId, logger: logger)
                for (record, continuation) in batch { continuation.resume(returning: recorded.contains(record.downloadId)) }
            } catch {
                for (_, continuation) in batch { continuation.resume(throwing: error) }
            }
        }
    }

    /// Records `record`; false when the row is no longer claimed by its worker. An `urgent` one
    /// (its worker waits) ends the gathering of its statement.
    func record(_ record: Record, urgent: Bool = false) async throws -> Bool {
        try await requests.submit(record, urgent: urgent)
    }

    /// Records what waits now, without gathering more.
    func flush() {
        requests.flush()
    }

    /// Records what waits now and every later record at once, without gathering.
    func stopGathering() {
        requests.stopGathering()
    }

    /// One statement for every record; returns the download ids recorded.
    private static func write(_ records: [Record], client: PostgresClient, runId: Int64, logger: Logger) async throws -> Set<String> {
        let rows = try await client.execute(RecordStatement(runId: runId, records: records), logger: logger)
        var recorded = Set<String>()
        for try await id in rows { recorded.insert(id) }
        return recorded
    }
}

/// The claim of `PostgresWorkQueue.claim`, prepared once per connection: a claim is neither parsed
/// nor planned again (both were a third of its time in PostgreSQL's statement log).
///
/// Waiting tasks are taken in the run's order from the place this process took last (`after`,
/// `ClaimCursor`), in the index of waiting tasks: the entries of tasks claimed before that place
/// (dead ones, left until a vacuum) are never visited again. From the start of the run (a task
/// handed back, or claimed ahead by another process and then handed back) and expired leases
/// come next, each scanned only when the scans before it find too few: at the end of a run.
/// (Scanning the waiting tasks from the first made each claim visit the entries of every task
/// claimed before it: 1 ms per claim of 32 tasks at the start of a run of 50,000 and 7 ms at its
/// end; with the place, 0.75 ms all along. One `state = 'waiting' OR (…)` condition was planned
/// as a bitmap scan, which never marks those entries dead: 0.72 ms per claim on 500 tasks.)
///
/// The rows taken are then updated by their key (`download_id = ANY`), not joined to the
/// scans: planned while PostgreSQL's statistics had a run at a few rows, that join scanned all
/// of the run's rows once per task taken (202 ms for one claim of 18 in a database holding
/// earlier runs of 20,000 tasks).
struct ClaimStatement: PostgresPreparedStatement {
    /// The name PostgresNIO's default gives it, written out: the default computes it with
    /// `String(reflecting:)` on every execution: type metadata and conformance lookups on the
    /// pool's hot path, for a constant.
    static let name = "CourierPostgres.ClaimStatement"
    static let sql = """
        WITH ahead AS (
            SELECT download_id, seq, state AS previous FROM prestage_task
            WHERE run_id = $1 AND state = 'waiting' AND seq > $6
            ORDER BY seq
            LIMIT $3
            FOR UPDATE SKIP LOCKED),
        behind AS (
            SELECT download_id, seq, state AS previous FROM prestage_task
            WHERE run_id = $1 AND state = 'waiting' AND seq <= $6
            ORDER BY seq
            LIMIT $3
            FOR UPDATE SKIP LOCKED),
        expired AS (
            SELECT download_id, seq, state AS previous FROM prestage_task
            WHERE run_id = $1 AND state = 'claimed' AND lease_expires_at < now() AND attempts < $2
            LIMIT $3
            FOR UPDATE SKIP LOCKED),
        next AS (SELECT * FROM ahead UNION ALL SELECT * FROM behind UNION ALL SELECT * FROM expired LIMIT $3),
        claimed AS (
            UPDATE prestage_task AS t
            SET state = 'claimed', worker = $4, attempts = t.attempts + 1,
                lease_expires_at = now() + make_interval(secs => $5)
            FROM \(PostgresWorkQueue.asynchronousCommit)
            WHERE t.run_id = $1 AND t.download_id = ANY(ARRAY(SELECT download_id FROM next))
            RETURNING t.download_id, t.seq)
        SELECT claimed.download_id, next.previous, claimed.seq
        FROM claimed JOIN next USING (download_id)
        ORDER BY claimed.seq
        """
    typealias Row = (String, String, Int64)

    /// What every claim of a run binds alike.
    struct Settings: Sendable {
        var runId: Int64
        var maxAttempts: Int
        var leaseSeconds: Double
    }

    var settings: Settings
    var limit: Int
    var worker: String
    /// The place in the run this process claimed last (0: none yet).
    var after: Int64

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings()
        bindings.append(settings.runId)
        bindings.append(settings.maxAttempts)
        bindings.append(limit)
        bindings.append(worker)
        bindings.append(settings.leaseSeconds)
        bindings.append(after)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(Row.self)
    }
}

/// The place in its run a process has claimed up to: the highest `seq` of a task it claimed. Its
/// next claim takes waiting tasks after it first. Any place is correct (a claim also scans from
/// the start when too few are ahead); a late one only costs that claim a longer scan.
final class ClaimCursor: Sendable {
    private let place = Atomic<Int64>(0)

    var after: Int64 { place.load(ordering: .relaxed) }

    func advance(to seq: Int64) {
        _ = place.max(seq, ordering: .relaxed)
    }
}

/// The grouped record of `RecordBatcher`, prepared once per connection. Returns the download ids
/// recorded (rows still claimed by the record's worker). When no other task of the run is left
/// open, it tells the processes waiting for the run to end (`RunNews`, "done"): their idle
/// workers would otherwise see it at their next poll. (Two processes recording their last
/// tasks at the same moment may each see the other's as open: then the poll sees it.)
///
/// Written so that PostgreSQL's plan does not depend on its statistics of the moment, in a run
/// of tens of thousands of tasks whose claimed and recorded rows leave dead index entries until
/// a vacuum. Each row is found by its key (`download_id = ANY`; `IS NOT DISTINCT FROM` is not an
/// index condition, so the index of claimed rows is not scanned) and takes its values from the
/// arrays at its position, with no join: joined to `unnest(…)` and planned while few rows were
/// claimed, the statement scanned the claimed rows and unnested the arrays again for each, 4.6 ms
/// per statement of about 85 records in a run of 20,000 tasks, 1.4 ms now. An open task is
/// looked up from the end of each index, the newest waiting task and the latest lease, where the
/// live entries are (`ORDER BY … LIMIT 1`, which an `EXISTS` would drop, keeps the index and its
/// direction); as a `NOT EXISTS` it was planned as a sequential scan once most rows were open.
struct RecordStatement: PostgresPreparedStatement {
    /// Written out, as `ClaimStatement.name`.
    static let name = "CourierPostgres.RecordStatement"
    static let sql = """
        WITH recorded AS (
            UPDATE prestage_task AS t
            SET state = ($3::text[])[array_position($1::text[], t.download_id)],
                outcome = (($4::text[])[array_position($1::text[], t.download_id)])::jsonb,
                lease_expires_at = NULL
            FROM \(PostgresWorkQueue.asynchronousCommit)
            WHERE t.run_id = $5 AND t.download_id = ANY($1::text[]) AND t.state IS NOT DISTINCT FROM 'claimed'
              AND t.worker = ($2::text[])[array_position($1::text[], t.download_id)]
            RETURNING t.download_id),
        news AS (
            SELECT pg_notify('\(RunNews.channel)', 'done') AS sent
            WHERE EXISTS (SELECT 1 FROM recorded)
              AND (SELECT seq FROM prestage_task
                   WHERE run_id = $5 AND state = 'waiting'
                   ORDER BY seq DESC LIMIT 1) IS NULL
              AND (SELECT download_id FROM prestage_task
                   WHERE run_id = $5 AND state = 'claimed' AND download_id <> ALL($1::text[])
                   ORDER BY lease_expires_at DESC LIMIT 1) IS NULL)
        SELECT recorded.download_id FROM recorded LEFT JOIN news ON true
        """
    typealias Row = String

    var runId: Int64
    var records: [RecordBatcher.Record]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings()
        bindings.append(records.map(\.downloadId))
        bindings.append(records.map(\.worker))
        bindings.append(records.map(\.state))
        bindings.append(records.map(\.outcome))
        bindings.append(runId)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(String.self)
    }
}

/// Idle workers waiting for a completion in this process, or for a timeout.
final class CompletionSignal: Sendable {
    private struct State {
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        /// Waits ended (timeout, cancellation) before their continuation was registered.
        var ended = Set<UInt64>()
        var next: UInt64 = 0
        /// Signals sent so far.
        var generation: UInt64 = 0
    }

    private let state = Mutex(State())

    /// How many signals were sent so far (for `wait(upTo:unlessSignalledSince:)`).
    var generation: UInt64 { state.withLock { $0.generation } }

    /// Resumes every waiter.
    func signal() {
        let resumed = state.withLock { state in
            state.generation += 1
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in resumed { waiter.resume() }
    }

    /// Returns at the next `signal()` or after `timeout`, whichever comes first, and at once when
    /// a signal was sent since `generation` (a `generation` read before); throws when cancelled.
    func wait(upTo timeout: Duration, unlessSignalledSince generation: UInt64? = nil) async throws {
        let id: UInt64? = state.withLock { state in
            if let generation, state.generation != generation { return nil }
            state.next += 1
            return state.next
        }
        guard let id else { return try Task.checkCancellation() }
        let timer = Task {
            do {
                try await Task.sleep(for: timeout)
                self.end(id)
            } catch {}
        }
        defer {
            timer.cancel()
            state.withLock { _ = $0.ended.remove(id) }
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let early = state.withLock { state in
                    if state.ended.contains(id) { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if early { continuation.resume() }
            }
        } onCancel: {
            self.end(id)
        }
        try Task.checkCancellation()
    }

    /// Ends wait `id`: resumes it, or marks it so it returns as soon as it registers.
    private func end(_ id: UInt64) {
        let waiter: CheckedContinuation<Void, Never>? = state.withLock { state in
            if let waiter = state.waiters.removeValue(forKey: id) { return waiter }
            state.ended.insert(id)
            return nil
        }
        waiter?.resume()
    }
}

/// One query shared by concurrent callers: each caller gets the result of a run that started
/// after it called (as fresh as its own would be); callers arriving while one runs share the next.
final class CoalescedQuery<Value: Sendable>: Sendable {
    private struct State {
        var running = false
        /// Callers waiting for the next run.
        var waiting: [CheckedContinuation<Value, any Error>] = []
    }

    private let state = Mutex(State())

    /// Callers waiting for the next run (tests).
    var waitingCallers: Int { state.withLock { $0.waiting.count } }

    /// The result of a run of `body` that started after this call (one caller's `body` serves
    /// every caller waiting when it starts).
    func run(_ body: @escaping @Sendable () async throws -> Value) async throws -> Value {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
            let start = state.withLock { state in
                state.waiting.append(continuation)
                guard !state.running else { return false }
                state.running = true
                return true
            }
            if start { Task { await self.drain(body) } }
        }
    }

    /// Runs `body` for the callers waiting, again while more arrived meanwhile.
    private func drain(_ body: @Sendable () async throws -> Value) async {
        while true {
            let callers: [CheckedContinuation<Value, any Error>] = state.withLock { state in
                defer { state.waiting = [] }
                if state.waiting.isEmpty { state.running = false }
                return state.waiting
            }
            guard !callers.isEmpty else { return }
            let result: Result<Value, any Error>
            do {
                result = .success(try await body())
            } catch {
                result = .failure(error)
            }
            for caller in callers { caller.resume(with: result) }
        }
    }
}
