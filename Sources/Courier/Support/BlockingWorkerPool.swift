import Foundation
import Synchronization

/// A bounded pool of Dispatch threads for blocking work (unpacking, placing, fsync), so it never
/// runs on Swift's cooperative pool. At most `width` bodies run at once; callers beyond that
/// wait (suspended, not blocking a thread) for a slot: the pool's backpressure.
public final class BlockingWorkerPool: Sendable {
    public let width: Int
    private let queue: DispatchQueue
    private let slots: AsyncSemaphore

    public init(label: String, width: Int) {
        self.width = max(1, width)
        self.queue = DispatchQueue(label: label, attributes: .concurrent)
        self.slots = AsyncSemaphore(value: max(1, width))
    }

    /// Runs `body` on one of the pool's threads and returns its result.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await slots.wait()
        defer { slots.signal() }
        return try await Self.detached(on: queue, body)
    }
}

extension BlockingWorkerPool {
    /// Runs `body` on `queue`, a Dispatch thread, never on Swift's cooperative pool, for callers
    /// that bound their own blocking work (hashing, checking, building): one step per prestage
    /// worker, one per delta update, a download's open and rename on its transfer worker.
    static func detached<T: Sendable>(
        on queue: DispatchQueue = .global(qos: .utility), _ body: @escaping @Sendable () throws -> T
    ) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }
}

/// The transfer engine's disk workers: a fixed set of serial queues handed out in turn, so each
/// transfer's writes stay in order on one queue and at most `count` threads hash and fsync.
final class WorkerPool: Sendable {
    private let queues: [DispatchQueue]
    private let handedOut = Atomic<Int>(0)

    init(count: Int) {
        queues = (0..<max(1, count)).map { DispatchQueue(label: "courier.transfer.worker.\($0)", qos: .utility) }
    }

    /// The next queue, round robin.
    func next() -> DispatchQueue {
        queues[handedOut.wrappingAdd(1, ordering: .relaxed).oldValue % queues.count]
    }
}

/// A counting semaphore for tasks: `wait()` suspends (never blocks a thread) until a unit is
/// free, and throws `CancellationError` if the waiting task is cancelled. Waiters are served in
/// the order they came.
public final class AsyncSemaphore: Sendable {
    private struct State {
        var value: Int
        var waiters: [(id: UInt64, continuation: CheckedContinuation<Void, any Error>)] = []
        var nextId: UInt64 = 0

        /// Removes the waiter `id` if it still waits (whoever removes it resumes it, once).
        mutating func remove(_ id: UInt64) -> CheckedContinuation<Void, any Error>? {
            guard let index = waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return waiters.remove(at: index).continuation
        }
    }

    private let state: Mutex<State>

    public init(value: Int) {
        state = Mutex(State(value: value))
    }

    public func wait() async throws {
        let id = state.withLock { state in
            state.nextId += 1
            return state.nextId
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let acquired = state.withLock { state in
                    if state.value > 0 {
                        state.value -= 1
                        return true
                    }
                    state.waiters.append((id, continuation))
                    return false
                }
                if acquired {
                    continuation.resume()
                } else if Task.isCancelled {
                    // The cancellation handler may have run before we queued.
                    state.withLock { $0.remove(id) }?.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            state.withLock { $0.remove(id) }?.resume(throwing: CancellationError())
        }
    }

    /// Tasks waiting for a unit now.
    var waiting: Int { state.withLock { $0.waiters.count } }

    public func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            if state.waiters.isEmpty {
                state.value += 1
                return nil
            }
            return state.waiters.removeFirst().continuation
        }
        waiter?.resume()
    }
}

/// Wakes one waiter early: `wait(timeout:)` returns when `ring()` is called or the timeout
/// passes, whichever is first. A ring with nobody waiting is kept for the next wait; a newer
/// wait releases an older one.
final class Doorbell: Sendable {
    private struct State {
        var rung = false
        var waiter: (id: UInt64, continuation: CheckedContinuation<Void, Never>)?
        var nextId: UInt64 = 0

        mutating func take(_ id: UInt64?) -> CheckedContinuation<Void, Never>? {
            guard let waiter, id == nil || waiter.id == id else { return nil }
            self.waiter = nil
            return waiter.continuation
        }
    }

    private let state = Mutex(State())

    /// Whether a task waits now.
    var hasWaiter: Bool { state.withLock { $0.waiter != nil } }

    func ring() {
        state.withLock { state in
            let waiter = state.take(nil)
            if waiter == nil { state.rung = true }
            return waiter
        }?.resume()
    }

    /// Waits for a ring, at most `timeout` seconds (and not past the task's cancellation).
    func wait(timeout: Double) async {
        let id = state.withLock { state in
            state.nextId += 1
            return state.nextId
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let (now, older) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
                    if state.rung || Task.isCancelled {
                        state.rung = false
                        return (true, nil)
                    }
                    let older = state.take(nil)
                    state.waiter = (id, continuation)
                    return (false, older)
                }
                older?.resume()
                if now {
                    continuation.resume()
                    return
                }
                DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                    state.withLock { $0.take(id) }?.resume()
                }
            }
        } onCancel: {
            state.withLock { $0.take(id) }?.resume()
        }
    }
}
