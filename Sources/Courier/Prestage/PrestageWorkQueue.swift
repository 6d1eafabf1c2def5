import Foundation

/// How one task ended.
public enum PrestageOutcome: Sendable, Equatable {
    /// Fetched, verified, inspected and published; `unpackedLength` from the inspection.
    case staged(bytesFetched: Int64, unpackedLength: Int64?)
    case failed(CourierError)
}

/// The work of a pre-staging run, shared by its workers.
///
/// One process uses `LocalWorkQueue`. Many workers on many machines would share a table in an
/// existing engine instead (PostgreSQL: `SELECT … FOR UPDATE SKIP LOCKED` to claim, a lease that
/// expires so a dead worker's task is claimed again); see docs/scaling.md. A claimed task must be
/// completed exactly once; a task claimed again after a crash resumes from its journal.
public protocol PrestageWorkQueue: Sendable {
    /// Adds tasks; a task already queued or claimed (same `downloadId`) is not added twice.
    func enqueue(_ tasks: [PrestageTask]) async throws
    /// The next task for `worker`, or nil when none is left to claim.
    func claim(worker: String) async throws -> PrestageTask?
    /// Records the outcome of a claimed task.
    func complete(_ task: PrestageTask, outcome: PrestageOutcome) async throws
    /// Every outcome recorded so far, by content identifier.
    func outcomes() async throws -> [String: PrestageOutcome]
}

/// The in-process work queue: tasks in catalog order, claimed one at a time.
public actor LocalWorkQueue: PrestageWorkQueue {
    private var waiting: [PrestageTask] = []
    private var next = 0
    private var known = Set<String>()
    private var claimed: [String: String] = [:]
    private var results: [String: PrestageOutcome] = [:]

    public init() {}

    public func enqueue(_ tasks: [PrestageTask]) {
        for task in tasks where known.insert(task.downloadId).inserted {
            waiting.append(task)
        }
    }

    public func claim(worker: String) -> PrestageTask? {
        guard next < waiting.count else { return nil }
        let task = waiting[next]
        next += 1
        claimed[task.downloadId] = worker
        return task
    }

    public func complete(_ task: PrestageTask, outcome: PrestageOutcome) {
        claimed[task.downloadId] = nil
        results[task.contentIdentifier] = outcome
    }

    public func outcomes() -> [String: PrestageOutcome] {
        results
    }
}
