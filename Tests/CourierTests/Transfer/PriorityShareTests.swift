@testable import Courier
import Foundation
import Synchronization
import Testing

/// Shares of a rate limit by priority (`PriorityShare` through `RateLimiter` and
/// `TransferThrottle`), on a simulated clock: greedy receivers that take a chunk whenever the
/// throttle lets them, as the curl loop's write callback does. No network, no timing.
@Suite("Priority shares")
struct PriorityShareTests {
    /// One simulated transfer: its throttle, when it may ask next, what it received, and (for
    /// an origin slower than the limit) the most it can receive a second.
    final class Receiver {
        /// Made when it first asks, as a download's throttle is made when it starts.
        lazy var throttle = TransferThrottle(
            limiter: limiter, trafficClass: .background, perTransfer: nil, priority: priority, downloadId: id, now: start)
        let limiter: RateLimiter
        let priority: DownloadPriority
        let id: String
        var next: Double
        var received = 0
        /// Bytes received per second of the simulation, by whole second.
        var perSecond: [Int: Int] = [:]
        let originRate: Double?
        let start: Double
        var stop: Double = .infinity

        init(_ limiter: RateLimiter, _ priority: DownloadPriority, id: String, start: Double, originRate: Double? = nil) {
            self.limiter = limiter
            self.priority = priority
            self.id = id
            next = start
            self.start = start
            self.originRate = originRate
        }

        func received(from: Double, to: Double) -> Int {
            perSecond.filter { Double($0.key) >= from && Double($0.key) < to }.values.reduce(0, +)
        }
    }

    /// Runs `receivers` from 0 to `end` seconds in chunks of `chunk` bytes; `events` may change
    /// something at a given time (a priority, say).
    static func simulate(
        _ receivers: [Receiver], until end: Double, chunk: Int = 16 * 1024, events: [(Double, () -> Void)] = []
    ) {
        var events = events.sorted { $0.0 < $1.0 }
        while true {
            let live = receivers.filter { $0.next <= $0.stop }
            guard let receiver = live.min(by: { $0.next < $1.next }), receiver.next < end else { return }
            let now = receiver.next
            while let event = events.first, event.0 <= now {
                event.1()
                events.removeFirst()
            }
            let wait = receiver.throttle.wait(now: now)
            if wait > 0 {
                receiver.next = now + wait
                continue
            }
            receiver.throttle.take(chunk, now: now)
            receiver.received += chunk
            receiver.perSecond[Int(now), default: 0] += chunk
            // The network hands the next chunk a little later, or at the origin's pace.
            receiver.next = now + max(0.001, receiver.originRate.map { Double(chunk) / $0 } ?? 0)
        }
    }

    static let rate: Int64 = 1 << 20

    static func limiter() throws -> RateLimiter {
        RateLimiter(limits: RateLimits(backgroundMaxRate: try ByteRate(bytesPerSecond: rate))) { 0 }
    }

    @Test("weights 400/20/1; a priority parses from its name only")
    func weights() throws {
        #expect(DownloadPriority.high.weight / (DownloadPriority.high.weight + 4 * DownloadPriority.normal.weight) >= 0.8)
        #expect(DownloadPriority.normal.weight / (DownloadPriority.normal.weight + 4 * DownloadPriority.low.weight) >= 0.8)
        #expect(DownloadPriority.high > .normal && DownloadPriority.normal > .low)
        #expect(try DownloadPriority(parsing: "HIGH") == .high)
        for bad in ["", "urgent", "1", "hi"] {
            #expect(throws: CourierError.self) { try DownloadPriority(parsing: bad) }
        }
    }

    @Test("four low transfers saturate the limit; a high one then gets at least 80% within 2 s, and the low ones go on")
    func newPurchaseBesideUpdates() throws {
        let limiter = try Self.limiter()
        let updates = (0..<4).map { Receiver(limiter, .low, id: "u\($0)", start: 0) }
        let purchase = Receiver(limiter, .high, id: "p", start: 10)
        Self.simulate(updates + [purchase], until: 600)
        let all = updates + [purchase]
        // Before it: the four share the limit evenly and use it whole.
        let before = updates.map { $0.received(from: 2, to: 10) }
        #expect(Double(before.reduce(0, +)) >= Double(Self.rate) * 8 * 0.95)
        #expect(before.allSatisfy { Double($0) >= Double(before.max() ?? 0) * 0.8 })
        // The first 2 s after it came, then every second of the run.
        let total = all.map { $0.received(from: 10, to: 12) }.reduce(0, +)
        #expect(Double(purchase.received(from: 10, to: 12)) >= 0.8 * Double(total))
        for second in 10..<600 {
            let inSecond = all.map { $0.perSecond[second] ?? 0 }.reduce(0, +)
            #expect(Double(purchase.perSecond[second] ?? 0) >= 0.8 * Double(inSecond), "second \(second)")
        }
        // Nothing starves: each low one still gets about its 1/404 in every 10 s of the run.
        for update in updates {
            for from in stride(from: 10, to: 600, by: 10) {
                #expect(Double(update.received(from: Double(from), to: Double(from + 10))) >= Double(Self.rate) * 10 / 404 * 0.5)
            }
        }
        // And the limit holds overall.
        #expect(Double(all.map(\.received).reduce(0, +)) <= Double(Self.rate) * 600 * 1.01)
    }

    @Test("a new purchase at its default (normal) beside four updates (low): at least 80% from its first 2 s")
    func purchaseBesideUpdatesAtDefaults() throws {
        let limiter = try Self.limiter()
        let updates = (0..<4).map { Receiver(limiter, .low, id: "u\($0)", start: 0) }
        let purchase = Receiver(limiter, .normal, id: "p", start: 5)
        Self.simulate(updates + [purchase], until: 65)
        for from in stride(from: 5, to: 65, by: 2) {
            let total = (updates + [purchase]).map { $0.received(from: Double(from), to: Double(from + 2)) }.reduce(0, +)
            #expect(Double(purchase.received(from: Double(from), to: Double(from + 2))) >= 0.8 * Double(total), "from \(from) s")
        }
        #expect(updates.allSatisfy { $0.received(from: 5, to: 65) > 0 })
    }

    @Test("beside four normal transfers a high one gets at least 80% (400/480)")
    func besideNormal() throws {
        let limiter = try Self.limiter()
        let others = (0..<4).map { Receiver(limiter, .normal, id: "n\($0)", start: 0) }
        let purchase = Receiver(limiter, .high, id: "p", start: 5)
        Self.simulate(others + [purchase], until: 30)
        let total = (others + [purchase]).map { $0.received(from: 5, to: 30) }.reduce(0, +)
        #expect(Double(purchase.received(from: 5, to: 30)) >= 0.8 * Double(total))
        #expect(Double(total) >= Double(Self.rate) * 25 * 0.95)
    }

    @Test("a high transfer whose origin is slower leaves the rest of the limit to the others")
    func workConserving() throws {
        let limiter = try Self.limiter()
        let others = (0..<4).map { Receiver(limiter, .low, id: "l\($0)", start: 0) }
        let slow = Receiver(limiter, .high, id: "p", start: 0, originRate: Double(Self.rate) / 10)
        Self.simulate(others + [slow], until: 60)
        let total = (others + [slow]).map { $0.received(from: 5, to: 60) }.reduce(0, +)
        #expect(Double(total) >= Double(Self.rate) * 55 * 0.9)
        #expect(Double(slow.received(from: 5, to: 60)) >= Double(Self.rate) * 55 / 10 * 0.9)
    }

    @Test("a priority changed while transfers run moves the shares from then on")
    func changeWhileRunning() throws {
        let limiter = try Self.limiter()
        let a = Receiver(limiter, .low, id: "a", start: 0)
        let b = Receiver(limiter, .low, id: "b", start: 0)
        Self.simulate([a, b], until: 40, events: [(20, { limiter.setPriority(.high, downloadId: "b") })])
        #expect(Double(a.received(from: 2, to: 20)) >= Double(b.received(from: 2, to: 20)) * 0.8)
        #expect(Double(b.received(from: 21, to: 40)) >= Double(a.received(from: 21, to: 40)) * 50)
        #expect(!limiter.setPriority(.high, downloadId: "unknown"))
    }

    @Test("a transfer that stops asking (its origin went quiet) holds nobody back; one that ends leaves")
    func dormantAndLeaving() throws {
        let limiter = try Self.limiter()
        let low = Receiver(limiter, .low, id: "low", start: 0)
        var high: Receiver? = Receiver(limiter, .high, id: "high", start: 0)
        high?.stop = 10
        Self.simulate([low, high].compactMap { $0 }, until: 30)
        #expect(Double(low.received(from: 11, to: 30)) >= Double(Self.rate) * 19 * 0.95)
        high = nil
        #expect(limiter.setPriority(.normal, downloadId: "high") == false)
    }

    @Test("no limit: no waiting, whatever the priority")
    func unlimited() {
        let limiter = RateLimiter(limits: RateLimits())
        let low = TransferThrottle(limiter: limiter, trafficClass: .background, perTransfer: nil, priority: .low, now: 0)
        let high = TransferThrottle(limiter: limiter, trafficClass: .background, perTransfer: nil, priority: .high, now: 0)
        high.take(100 << 20, now: 0)
        low.take(100 << 20, now: 0)
        #expect(low.wait(now: 0) == 0 && high.wait(now: 0) == 0)
    }

    @Test("slots: waiting transfers are admitted high first, in arrival order within a priority")
    func slotOrder() async throws {
        let slots = TransferSlots(total: 1, perHost: 4)
        try await slots.acquire(host: "a")
        let order = OrderBook()
        var tasks: [Task<Void, any Error>] = []
        for (name, priority) in [("low", DownloadPriority.low), ("normal1", .normal), ("high", .high), ("normal2", .normal)] {
            let queued = slots.waiting
            tasks.append(
                Task {
                    try await slots.acquire(host: "a", priority: priority)
                    order.append(name)
                    slots.release(host: "a")
                })
            #expect(try await eventually { slots.waiting == queued + 1 })
        }
        slots.release(host: "a")
        for task in tasks { try await task.value }
        #expect(order.names == ["high", "normal1", "normal2", "low"])
    }
}

private final class OrderBook: Sendable {
    private let list = Mutex<[String]>([])
    func append(_ name: String) { list.withLock { $0.append(name) } }
    var names: [String] { list.withLock { $0 } }
}
