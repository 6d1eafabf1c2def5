import Foundation

/// The engine's admission control: at most `total` transfers at once, and `perHost` per host.
/// Callers beyond the limits wait in FIFO order (a waiter for a busy host does not hold back
/// one for a free host). Cancelling a waiting caller makes it throw `.paused`.
final class TransferSlots: @unchecked Sendable {  // @unchecked: all mutable state is guarded by `lock`.
    private struct Waiter {
        var id: UInt64
        var host: String
        var continuation: CheckedContinuation<Void, any Error>
    }

    private let total: Int
    private let perHost: Int
    private let lock = NSLock()
    private var running = 0
    private var runningByHost: [String: Int] = [:]
    private var waiters: [Waiter] = []
    private var nextId: UInt64 = 0

    init(total: Int, perHost: Int) {
        self.total = max(1, total)
        self.perHost = max(1, perHost)
    }

    /// Transfers holding a slot now.
    var active: Int {
        lock.lock()
        defer { lock.unlock() }
        return running
    }

    func acquire(host: String) async throws {
        let id = lock.withLock {
            nextId += 1
            return nextId
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                lock.lock()
                if Task.isCancelled {
                    lock.unlock()
                    continuation.resume(throwing: Self.pausedWhileWaiting)
                } else if waiters.isEmpty && canRun(host) {
                    take(host)
                    lock.unlock()
                    continuation.resume()
                } else {
                    waiters.append(Waiter(id: id, host: host, continuation: continuation))
                    lock.unlock()
                }
            }
        } onCancel: {
            lock.lock()
            let index = waiters.firstIndex { $0.id == id }
            let waiter = index.map { waiters.remove(at: $0) }
            lock.unlock()
            waiter?.continuation.resume(throwing: Self.pausedWhileWaiting)
        }
    }

    func release(host: String) {
        lock.lock()
        running -= 1
        runningByHost[host, default: 1] -= 1
        if runningByHost[host] == 0 { runningByHost[host] = nil }
        var admitted: [Waiter] = []
        var index = 0
        while index < waiters.count && running < total {
            if canRun(waiters[index].host) {
                let waiter = waiters.remove(at: index)
                take(waiter.host)
                admitted.append(waiter)
            } else {
                index += 1
            }
        }
        lock.unlock()
        for waiter in admitted { waiter.continuation.resume() }
    }

    private func canRun(_ host: String) -> Bool {
        running < total && runningByHost[host, default: 0] < perHost
    }

    private func take(_ host: String) {
        running += 1
        runningByHost[host, default: 0] += 1
    }

    private static let pausedWhileWaiting = CourierError(
        .paused,
        "paused before it started",
        hint: "run the same command again to resume"
    )
}
