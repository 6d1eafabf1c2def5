import Foundation
import Synchronization

/// The engine's admission control: at most `total` transfers at once, and `perHost` per host.
/// Callers beyond the limits wait in FIFO order (a waiter for a busy host does not hold back
/// one for a free host). Cancelling a waiting caller makes it throw `.paused`.
final class TransferSlots: Sendable {
    private struct Waiter {
        var id: UInt64
        var host: String
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        let total: Int
        let perHost: Int
        var running = 0
        var runningByHost: [String: Int] = [:]
        var waiters: [Waiter] = []
        var nextId: UInt64 = 0

        func canRun(_ host: String) -> Bool {
            running < total && runningByHost[host, default: 0] < perHost
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

    func acquire(host: String) async throws {
        let id = state.withLock { state in
            state.nextId += 1
            return state.nextId
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Admission { case refused, admitted, queued }
                let admission = state.withLock { state -> Admission in
                    if Task.isCancelled { return .refused }
                    guard state.waiters.isEmpty && state.canRun(host) else {
                        state.waiters.append(Waiter(id: id, host: host, continuation: continuation))
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
            var index = 0
            while index < state.waiters.count && state.running < state.total {
                if state.canRun(state.waiters[index].host) {
                    let waiter = state.waiters.remove(at: index)
                    state.take(waiter.host)
                    admitted.append(waiter)
                } else {
                    index += 1
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
