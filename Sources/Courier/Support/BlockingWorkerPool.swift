import Foundation

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
        return try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try body() })
            }
        }
    }
}

/// A counting semaphore for tasks: `wait()` suspends until a unit is free, and throws
/// `CancellationError` if the waiting task is cancelled.
public final class AsyncSemaphore: @unchecked Sendable {  // @unchecked: mutable state is guarded by `lock`.
    private let lock = NSLock()
    private var value: Int
    private var waiters: [(id: UUID, continuation: CheckedContinuation<Void, any Error>)] = []

    public init(value: Int) {
        self.value = value
    }

    public func wait() async throws {
        let id = UUID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let acquired: Bool = lock.withLock {
                    if value > 0 {
                        value -= 1
                        return true
                    }
                    waiters.append((id, continuation))
                    return false
                }
                if acquired {
                    continuation.resume()
                } else if Task.isCancelled {
                    // The cancellation handler may have run before we queued: whoever removes
                    // the waiter resumes it, exactly once.
                    let removed: CheckedContinuation<Void, any Error>? = lock.withLock {
                        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return nil }
                        return waiters.remove(at: index).continuation
                    }
                    removed?.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let waiter: CheckedContinuation<Void, any Error>? = lock.withLock {
                guard let index = waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return waiters.remove(at: index).continuation
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    public func signal() {
        let waiter: CheckedContinuation<Void, any Error>? = lock.withLock {
            if waiters.isEmpty {
                value += 1
                return nil
            }
            return waiters.removeFirst().continuation
        }
        waiter?.resume()
    }
}

/// Wakes one waiter early: `wait(timeout:)` returns when `ring()` is called or the timeout
/// passes, whichever is first. A ring with nobody waiting is kept for the next wait.
final class Doorbell: @unchecked Sendable {  // @unchecked: mutable state is guarded by `lock`.
    private let lock = NSLock()
    private var rung = false
    private var waiter: (id: UInt64, continuation: CheckedContinuation<Void, Never>)?
    private var nextId: UInt64 = 0

    func ring() {
        let continuation: CheckedContinuation<Void, Never>? = lock.withLock {
            guard let waiter else {
                rung = true
                return nil
            }
            self.waiter = nil
            return waiter.continuation
        }
        continuation?.resume()
    }

    /// Waits for a ring, at most `timeout` seconds (and not past the task's cancellation).
    func wait(timeout: Double) async {
        let id: UInt64 = lock.withLock {
            nextId += 1
            return nextId
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now: Bool = lock.withLock {
                    if rung || Task.isCancelled {
                        rung = false
                        return true
                    }
                    waiter?.continuation.resume()  // one waiter at a time: an older one goes
                    waiter = (id, continuation)
                    return false
                }
                if now {
                    continuation.resume()
                    return
                }
                DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                    expire(id)
                }
            }
        } onCancel: {
            expire(id)
        }
    }

    private func expire(_ id: UInt64) {
        let continuation: CheckedContinuation<Void, Never>? = lock.withLock {
            guard let waiter, waiter.id == id else { return nil }
            self.waiter = nil
            return waiter.continuation
        }
        continuation?.resume()
    }
}
