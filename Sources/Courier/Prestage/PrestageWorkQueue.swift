import Foundation

/// How one task ended.
public enum PrestageOutcome: Sendable, Equatable {
    /// Fetched, verified, inspected and published; `unpackedLength` from the inspection.
    case staged(bytesFetched: Int64, unpackedLength: Int64?)
    case failed(CourierError)
}

extension PrestageOutcome: Codable {
    private enum CodingKeys: String, CodingKey {
        case status, bytesFetched, unpackedLength, code, message, cause, hint
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        switch try container.decode(String.self, forKey: .status) {
        case "staged":
            // Read back from a shared queue (untrusted): sizes are summed and published.
            let bytesFetched = try container.decode(Int64.self, forKey: .bytesFetched)
            let unpackedLength = try container.decodeIfPresent(Int64.self, forKey: .unpackedLength)
            for (key, value) in [(CodingKeys.bytesFetched, bytesFetched), (.unpackedLength, unpackedLength)] {
                guard let value, !(0...Catalog.Content.maxLength).contains(value) else { continue }
                throw DecodingError.dataCorruptedError(
                    forKey: key, in: container, debugDescription: "\(key.stringValue) \(value) is not between 0 and \(Catalog.Content.maxLength)")
            }
            self = .staged(bytesFetched: bytesFetched, unpackedLength: unpackedLength)
        case "failed":
            // Printed in the summary on a terminal: no control characters (escape sequences), bounded.
            self = .failed(
                CourierError(
                    try container.decode(CourierError.Code.self, forKey: .code),
                    Self.printable(try container.decode(String.self, forKey: .message)),
                    cause: try container.decodeIfPresent(String.self, forKey: .cause).map(Self.printable),
                    hint: try container.decodeIfPresent(String.self, forKey: .hint).map(Self.printable)
                )
            )
        case let other:
            throw DecodingError.dataCorruptedError(forKey: .status, in: container, debugDescription: "unknown status \(other)")
        }
    }

    /// The most characters of a recorded message, cause or hint that are kept.
    static let maxTextLength = 2_000

    /// `text` read back from a shared queue, as it may be printed: a line feed or tab becomes a
    /// space and every other control character (C0, DEL, C1: what a terminal takes as an escape
    /// sequence, a carriage return, a bell) U+FFFD, and at most `maxTextLength` characters are
    /// kept (then `…`).
    static func printable(_ text: String) -> String {
        var scalars = String.UnicodeScalarView()
        var count = 0
        for scalar in text.unicodeScalars {
            if count == maxTextLength {
                scalars.append("…")
                break
            }
            switch scalar {
            case "\n", "\t": scalars.append(" ")
            case _ where scalar.properties.generalCategory == .control: scalars.append("\u{FFFD}")
            default: scalars.append(scalar)
            }
            count += 1
        }
        return String(scalars)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .staged(let bytes, let unpacked):
            try container.encode("staged", forKey: .status)
            try container.encode(bytes, forKey: .bytesFetched)
            try container.encodeIfPresent(unpacked, forKey: .unpackedLength)
        case .failed(let error):
            try container.encode("failed", forKey: .status)
            try container.encode(error.code, forKey: .code)
            try container.encode(error.message, forKey: .message)
            try container.encodeIfPresent(error.cause, forKey: .cause)
            try container.encodeIfPresent(error.hint, forKey: .hint)
        }
    }
}

/// The work of a pre-staging run, shared by its workers.
///
/// One process uses `LocalWorkQueue`. Many workers on many machines share a table in PostgreSQL
/// instead (`PostgresWorkQueue` in CourierPostgres: `SELECT … FOR UPDATE SKIP LOCKED` to claim,
/// a lease renewed by heartbeats that expires so a dead worker's task is claimed again); see
/// docs/scaling.md. A task claimed again after a crash resumes from its journal.
public protocol PrestageWorkQueue: Sendable {
    /// Adds tasks; a task already queued or claimed (same `downloadId`) is not added twice.
    func enqueue(_ tasks: [PrestageTask]) async throws
    /// The next task for `worker`, or nil when none is left to claim now.
    func claim(worker: String) async throws -> PrestageTask?
    /// Records the outcome of a task `worker` claimed. Returns false, recording nothing, when the
    /// task is no longer claimed by `worker` (its lease expired and another worker took it over).
    /// A `paused` or `cancelled` failure may instead hand the task back for another worker.
    @discardableResult
    func complete(_ task: PrestageTask, worker: String, outcome: PrestageOutcome) async throws -> Bool
    /// Extends `worker`'s lease on `task`; false when it no longer holds it.
    func renew(_ task: PrestageTask, worker: String) async throws -> Bool
    /// How often a worker renews its lease while it stages a task; nil when leases never expire.
    var heartbeatInterval: Duration? { get }
    /// Whether recorded outcomes outlive this process and machine (a shared queue): a `staged`
    /// outcome is then recorded only once the tree has made the package durable, since the
    /// coordinator that publishes the catalog trusts it. False for the in-process queue, whose
    /// outcomes die with it (the catalog publish syncs the tree first).
    var recordsOutliveProcess: Bool { get }
    /// Called by a worker that found nothing to claim: waits until a task may be claimable again
    /// (another worker's lease expired) and returns true, or returns false once no task of the
    /// run will ever be claimable (every one is staged or failed).
    func awaitWork() async throws -> Bool
    /// Every outcome recorded so far, by content identifier.
    func outcomes() async throws -> [String: PrestageOutcome]
}

extension PrestageWorkQueue {
    public func renew(_ task: PrestageTask, worker: String) async throws -> Bool { true }
    public var heartbeatInterval: Duration? { nil }
    public var recordsOutliveProcess: Bool { false }
    public func awaitWork() async throws -> Bool { false }
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

    @discardableResult
    public func complete(_ task: PrestageTask, worker: String, outcome: PrestageOutcome) -> Bool {
        guard claimed[task.downloadId] == worker else { return false }
        claimed[task.downloadId] = nil
        results[task.contentIdentifier] = outcome
        return true
    }

    public func outcomes() -> [String: PrestageOutcome] {
        results
    }
}
