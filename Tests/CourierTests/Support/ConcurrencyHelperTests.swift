import Foundation
import Synchronization
import Testing

@testable import Courier

/// The synchronisation helpers that remain (docs/architecture.md, "Concurrency"): each is driven
/// here directly, with no network and no sleeps as synchronisation (the only waits are the
/// timeouts under test, and bounded waits for a condition).
@Suite("Concurrency helpers")
struct ConcurrencyHelperTests {
    @Test("AsyncSemaphore: at most `value` holders; waiters admitted in order as units come back")
    func semaphoreBoundsAndOrder() async throws {
        let semaphore = AsyncSemaphore(value: 2)
        try await semaphore.wait()
        try await semaphore.wait()
        let admitted = Locked<[Int]>([])
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<3 {
                group.addTask {
                    try await semaphore.wait()
                    admitted.withLock { $0.append(index) }
                }
                // Each waiter queues before the next is added.
                #expect(await eventually { semaphore.waiting == index + 1 })
            }
            #expect(admitted.withLock { $0 }.isEmpty)
            semaphore.signal()
            #expect(await eventually { admitted.withLock { $0 } == [0] })
            // One unit at a time: two signals at once resume waiters 1 and 2 together, and
            // their appends may then land in either order (seen on 2 cores).
            semaphore.signal()
            #expect(await eventually { admitted.withLock { $0 } == [0, 1] })
            #expect(semaphore.waiting == 1)
            semaphore.signal()
            try await group.waitForAll()
        }
        #expect(admitted.withLock { $0 } == [0, 1, 2])
        #expect(semaphore.waiting == 0)
    }

    @Test("AsyncSemaphore: a cancelled waiter throws CancellationError and gives up its place")
    func semaphoreCancellation() async throws {
        let semaphore = AsyncSemaphore(value: 1)
        try await semaphore.wait()
        let waiter = Task { try await semaphore.wait() }
        #expect(await eventually { semaphore.waiting == 1 })
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(semaphore.waiting == 0)
        // A task cancelled before it waits never queues.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await semaphore.wait()
        }
        await #expect(throws: CancellationError.self) { try await early.value }
        // The unit is still there for the next waiter once signalled.
        semaphore.signal()
        try await semaphore.wait()
    }

    @Test("Doorbell: a ring wakes the waiter at once; a ring with nobody waiting is kept for one wait")
    func doorbellRing() async {
        let bell = Doorbell()
        bell.ring()
        let started = ContinuousClock.now
        await bell.wait(timeout: 600)  // kept ring: returns at once
        let waiting = Task { await bell.wait(timeout: 600) }
        #expect(await eventually { bell.hasWaiter })
        bell.ring()
        await waiting.value
        #expect(ContinuousClock.now - started < .seconds(60))
        #expect(!bell.hasWaiter)
    }

    @Test("Doorbell: without a ring the wait ends at its timeout; cancelling ends it at once")
    func doorbellTimeoutAndCancel() async {
        let bell = Doorbell()
        let started = ContinuousClock.now
        await bell.wait(timeout: 0.2)
        #expect(ContinuousClock.now - started >= .milliseconds(200))
        let waiting = Task { await bell.wait(timeout: 600) }
        #expect(await eventually { bell.hasWaiter })
        waiting.cancel()
        await waiting.value
        #expect(ContinuousClock.now - started < .seconds(60))
        // A newer wait releases an older one (one waiter at a time).
        let older = Task { await bell.wait(timeout: 600) }
        #expect(await eventually { bell.hasWaiter })
        let newer = Task { await bell.wait(timeout: 600) }
        await older.value
        bell.ring()
        await newer.value
        #expect(ContinuousClock.now - started < .seconds(60))
    }

    @Test("BlockingWorkerPool: runs off the cooperative pool, at most `width` bodies at once, results and errors returned")
    func workerPoolBounds() async throws {
        let pool = BlockingWorkerPool(label: "test.pool", width: 2)
        let running = Locked((now: 0, peak: 0))
        let gate = DispatchSemaphore(value: 0)
        try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<5 {
                group.addTask {
                    try await pool.run {
                        running.withLock { $0.now += 1; $0.peak = max($0.peak, $0.now) }
                        gate.wait()  // blocks a pool thread, never a cooperative one
                        running.withLock { $0.now -= 1 }
                        return index
                    }
                }
            }
            #expect(await eventually { running.withLock { $0.now } == 2 })
            for _ in 0..<5 { gate.signal() }
            var results: [Int] = []
            for try await result in group { results.append(result) }
            #expect(results.sorted() == [0, 1, 2, 3, 4])
        }
        #expect(running.withLock { $0.peak } == 2)
        await #expect(throws: CourierError.self) {
            try await pool.run { () throws -> Int in throw CourierError(.io, "refused") }
        }
    }

    @Test("WorkerPool: queues handed out in turn, none skipped or doubled under concurrent callers")
    func transferWorkers() {
        let pool = WorkerPool(count: 3)
        #expect((0..<6).map { _ in pool.next().label } == (0..<6).map { "courier.transfer.worker.\($0 % 3)" })
        let counts = Locked([String: Int]())
        DispatchQueue.concurrentPerform(iterations: 3000) { _ in
            let label = pool.next().label
            counts.withLock { $0[label, default: 0] += 1 }
        }
        #expect(counts.withLock { $0 } == ["courier.transfer.worker.0": 1000, "courier.transfer.worker.1": 1000, "courier.transfer.worker.2": 1000])
        #expect(WorkerPool(count: 0).next().label == "courier.transfer.worker.0")
    }

    @Test("ProgressThrottle: one report per interval, and the final one always")
    func progressThrottle() {
        let start = Date(timeIntervalSince1970: 1000)
        let throttle = ProgressThrottle(interval: 1, start: start)
        #expect(!throttle.shouldReport(final: false, now: start.addingTimeInterval(0.5)))
        #expect(throttle.shouldReport(final: false, now: start.addingTimeInterval(1)))
        #expect(!throttle.shouldReport(final: false, now: start.addingTimeInterval(1.5)))
        #expect(throttle.shouldReport(final: true, now: start.addingTimeInterval(1.6)))
        #expect(throttle.shouldReport(final: false, now: start.addingTimeInterval(2.6)))
    }

    @Test("RetryBook: counts attempts per download and forgets the ones no longer live")
    func retryBook() {
        let book = RetryBook()
        #expect(book.attempts("a") == 0)
        book.record("a")
        book.record("a")
        book.record("b")
        #expect(book.attempts("a") == 2 && book.attempts("b") == 1)
        book.forget(except: ["b"])
        #expect(book.attempts("a") == 0 && book.attempts("b") == 1)
    }
}

/// A value shared by the tasks of a test.
private final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<T: Sendable>(_ body: (inout Value) -> T) -> T { mutex.withLock { body(&$0) } }
}

/// Polls `condition` (every 10 ms, up to 30 s): a bounded wait for a state, not a sleep.
private func eventually(_ condition: @Sendable () -> Bool) async -> Bool {
    for _ in 0..<3000 {
        if condition() { return true }
        try? await Task.sleep(nanoseconds: 10_000_000)
    }
    return condition()
}

@Suite("Transfer slots")
struct TransferSlotsTests {
    @Test("at most `total` at once and `perHost` per host; a waiter for a busy host does not hold back a free host")
    func limits() async throws {
        let slots = TransferSlots(total: 3, perHost: 1)
        try await slots.acquire(host: "a")
        try await slots.acquire(host: "b")
        #expect(slots.active == 2)
        let secondA = Task { try await slots.acquire(host: "a") }  // host a is busy: waits
        #expect(await eventually { slots.waiting == 1 })
        let c = Task { try await slots.acquire(host: "c") }  // queued behind it (FIFO)
        #expect(await eventually { slots.waiting == 2 })
        slots.release(host: "b")  // a is still busy, so c goes first
        try await c.value
        #expect(slots.waiting == 1 && slots.active == 2)
        slots.release(host: "a")
        try await secondA.value
        #expect(slots.waiting == 0 && slots.active == 2)
        slots.release(host: "a")
        slots.release(host: "c")
        #expect(slots.active == 0)
    }

    @Test("a cancelled waiter throws paused and leaves the queue; a cancelled caller never takes a slot")
    func cancellation() async throws {
        let slots = TransferSlots(total: 1, perHost: 1)
        try await slots.acquire(host: "a")
        let waiter = Task { try await slots.acquire(host: "a") }
        #expect(await eventually { slots.waiting == 1 })
        waiter.cancel()
        await #expect { try await waiter.value } throws: { ($0 as? CourierError)?.code == .paused }
        #expect(slots.waiting == 0)
        slots.release(host: "a")
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await slots.acquire(host: "a")
        }
        await #expect { try await early.value } throws: { ($0 as? CourierError)?.code == .paused }
        #expect(slots.active == 0)
    }
}
