import Foundation
import Synchronization

/// The engine's admission control: at most `total` transfers at once, and `perHost` per host.
/// Callers beyond the limits wait by priority (`DownloadPriority`: high first), in FIFO order
/// within one priority (a waiter for a busy host does not hold back one for a free host).
/// Cancelling a waiting caller makes it throw `.paused`.
///
/// Every exchange of the engine holds a slot: whole-file downloads and range fetches as
/// `.content`, one-shot requests (catalog, metadata, manifest, verifyReceipt, webhook) as
/// `.request`. A request may use `requestReserve` slots beyond the limits and is admitted before
/// any waiting content transfer, so a catalog or receipt check never waits for a large download
/// to finish, while the number of connections stays bounded.
final class TransferSlots: Sendable {
    /// What a slot is for.
    enum Kind: Sendable, Equatable {
        /// Bytes of content: a whole-file download or a range fetch.
        case content
        /// A small one-shot request answered in memory.
        case request
    }

    /// Slots beyond `total` (and `perHost`) that one-shot requests may use.
    static let requestReserve = 4

    private struct Waiter {
        var id: UInt64
        var host: String
        var kind: Kind
        var priority: DownloadPriority
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        let total: Int
        let perHost: Int
        var running = 0
        var runningByHost: [String: Int] = [:]
        var waiters: [Waiter] = []
        var nextId: UInt64 = 0

        func canRun(_ host: String, kind: Kind) -> Bool {
            let extra = kind == .request ? TransferSlots.requestReserve : 0
            return running < total + extra && runningByHost[host, default: 0] < perHost + extra
        }

        /// Whether a new caller of `kind` must queue behind waiters already there: a request
        /// only behind other requests, a content transfer behind requests and content
        /// transfers of its priority or higher.
        func mustQueue(_ kind: Kind, _ priority: DownloadPriority) -> Bool {
            kind == .request
                ? waiters.contains { $0.kind == .request }
                : waiters.contains { $0.kind == .request || $0.priority >= priority }
        }

        mutating func take(_ host: String) {
            running += 1
            runningByHost[host, default: 0] += 1
        }

        mutating func remove(_ id: UInt64) -> Waiter? {
            waiters.firstIndex { $0.id == id }.map { waiters.remove(at: $0) }
        }
    }

    private let state: Mutex<State>

    init(total: Int, perHost: Int) {
        state = Mutex(State(total: max(1, total), perHost: max(1, perHost)))
    }

    /// Transfers holding a slot now.
    var active: Int { state.withLock { $0.running } }

    /// Callers waiting for a slot now.
    var waiting: Int { state.withLock { $0.waiters.count } }

    func acquire(host: String, kind: Kind = .content, priority: DownloadPriority = .normal) async throws {
        let id = state.withLock { state in
            state.nextId += 1
            return state.nextId
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Admission { case refused, admitted, queued }
                let admission = state.withLock { state -> Admission in
                    if Task.isCancelled { return .refused }
                    guard !state.mustQueue(kind, priority) && state.canRun(host, kind: kind) else {
                        state.waiters.append(
                            Waiter(id: id, host: host, kind: kind, priority: priority, continuation: continuation))
                        return .queued
                    }
                    state.take(host)
                    return .admitted
                }
                switch admission {
                case .refused: continuation.resume(throwing: Self.pausedWhileWaiting)
                case .admitted: continuation.resume()
                case .queued: break
                }
            }
        } onCancel: {
            state.withLock { $0.remove(id) }?.continuation.resume(throwing: Self.pausedWhileWaiting)
        }
    }

    func release(host: String) {
        let admitted = state.withLock { state -> [Waiter] in
            state.running -= 1
            state.runningByHost[host, default: 1] -= 1
            if state.runningByHost[host] == 0 { state.runningByHost[host] = nil }
            var admitted: [Waiter] = []
            // Requests first, then content transfers by priority, each in the order they came.
            let classes: [(Kind, DownloadPriority?)] = [(.request, nil)] + DownloadPriority.allCases.sorted(by: >).map { (.content, $0) }
            for (kind, priority) in classes {
                var index = 0
                while index < state.waiters.count {
                    let waiter = state.waiters[index]
                    if waiter.kind == kind && (priority == nil || waiter.priority == priority)
                        && state.canRun(waiter.host, kind: kind)
                    {
                        state.waiters.remove(at: index)
                        state.take(waiter.host)
                        admitted.append(waiter)
                    } else {
                        index += 1
                    }
                }
            }
            return admitted
        }
        for waiter in admitted { waiter.continuation.resume() }
    }

    private static let pausedWhileWaiting = CourierError(
        .paused,
        "paused before it started",
        hint: "run the same command again to resume"
    )
}
