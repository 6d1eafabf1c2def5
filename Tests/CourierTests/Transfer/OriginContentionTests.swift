@testable import Courier
import Foundation
import Testing

/// Priorities when the origin is the bottleneck and no limit of ours binds (`OriginContention`
/// through `RateLimiter` and `TransferThrottle`), on a simulated clock and a simulated origin:
/// an aggregate capacity shared equally between the transfers that read (as TCP shares a
/// bottleneck link), each perhaps with a per-connection cap of its own. No network, no timing.
@Suite("Origin contention")
struct OriginContentionTests {
    final class Receiver {
        /// Made when it first reads, as a download's throttle is made when it starts.
        lazy var throttle = TransferThrottle(
            limiter: limiter, trafficClass: .background, perTransfer: nil, priority: priority, downloadId: id, now: start)
        let limiter: RateLimiter
        let id: String
        let priority: DownloadPriority
        let start: Double
        /// The most its own path carries, bytes a second (nil: only the origin's capacity).
        let cap: Double?
        var heldUntil = -Double.infinity
        var owed = 0.0
        var perSecond: [Int: Double] = [:]

        init(_ limiter: RateLimiter, _ priority: DownloadPriority, id: String, start: Double, cap: Double? = nil) {
            self.limiter = limiter
            self.id = id
            self.priority = priority
            self.start = start
            self.cap = cap
        }

        func received(from: Double, to: Double) -> Double {
            perSecond.filter { Double($0.key) >= from && Double($0.key) < to }.values.reduce(0, +)
        }
    }

    static let step = 0.005

    /// Runs until `end`: each step, the receivers the throttle lets read split the origin's
    /// capacity (`capacity(t)` bytes a second) equally, up to their own caps (water-filling).
    static func simulate(_ receivers: [Receiver], until end: Double, capacity: (Double) -> Double) {
        var now = 0.0
        while now < end {
            var reading: [Receiver] = []
            for receiver in receivers where receiver.start <= now && receiver.heldUntil <= now {
                let wait = receiver.throttle.wait(now: now)
                if wait > 0 {
                    receiver.heldUntil = now + wait
                } else {
                    reading.append(receiver)
                }
            }
            var left = capacity(now) * step
            var open = reading.sorted { ($0.cap ?? .infinity) < ($1.cap ?? .infinity) }
            while !open.isEmpty {
                let fair = left / Double(open.count)
                let receiver = open.removeFirst()
                let bytes = min(fair, (receiver.cap ?? .infinity) * step)
                left -= bytes
                receiver.owed += bytes
                receiver.perSecond[Int(now), default: 0] += bytes
            }
            // Bytes reach the write callback in whole chunks, as libcurl hands them out.
            for receiver in reading where receiver.owed >= 1 {
                let whole = Int(receiver.owed)
                receiver.owed -= Double(whole)
                receiver.throttle.take(whole, now: now)
            }
            now += step
        }
    }

    static let capacity = Double(2 << 20)

    /// Four low transfers, then one of `priority` at 10 s, against an origin of `capacity`.
    static func purchaseBesideUpdates(_ priority: DownloadPriority, until end: Double) -> (Receiver, [Receiver], RateLimiter) {
        let limiter = RateLimiter(limits: RateLimits()) { 0 }
        let updates = (0..<4).map { Receiver(limiter, .low, id: "u\($0)", start: 0) }
        let purchase = Receiver(limiter, priority, id: "p", start: 10)
        simulate(updates + [purchase], until: end) { _ in capacity }
        return (purchase, updates, limiter)
    }

    @Test("an origin-limited run of ten minutes: a new purchase gets >= 80% within 2 s and in every 10 s, nothing starves")
    func purchaseBesideUpdatesTenMinutes() {
        let (purchase, updates, _) = Self.purchaseBesideUpdates(.normal, until: 610)
        let all = updates + [purchase]
        func total(_ from: Double, _ to: Double) -> Double { all.map { $0.received(from: from, to: to) }.reduce(0, +) }
        // Before it, the four use the origin whole.
        #expect(total(2, 10) >= Self.capacity * 8 * 0.95)
        #expect(purchase.received(from: 10, to: 12) >= 0.8 * total(10, 12))
        for from in stride(from: 10.0, to: 610, by: 10) {
            #expect(purchase.received(from: from, to: from + 10) >= 0.8 * total(from, from + 10), "from \(from) s")
            // The origin stays used, and each update keeps moving.
            #expect(total(from, from + 10) >= Self.capacity * 10 * 0.9, "from \(from) s")
            for update in updates {
                #expect(update.received(from: from, to: from + 10) >= 16 * 1024, "from \(from) s")
            }
        }
    }

    @Test("a high purchase beside four updates: >= 80% within 2 s, the updates still move")
    func highPurchase() {
        let (purchase, updates, limiter) = Self.purchaseBesideUpdates(.high, until: 60)
        let all = updates + [purchase]
        func total(_ from: Double, _ to: Double) -> Double { all.map { $0.received(from: from, to: to) }.reduce(0, +) }
        #expect(purchase.received(from: 10, to: 12) >= 0.8 * total(10, 12))
        #expect(purchase.received(from: 12, to: 60) >= 0.9 * total(12, 60))
        #expect(updates.allSatisfy { $0.received(from: 12, to: 60) > 0 })
        if case .squeeze = limiter.contention.phase {} else { Issue.record("phase \(limiter.contention.phase)") }
    }

    @Test("a purchase whose own path is slower leaves the origin to the others (work-conserving)")
    func slowPurchaseLeavesTheRest() {
        let limiter = RateLimiter(limits: RateLimits()) { 0 }
        let updates = (0..<4).map { Receiver(limiter, .low, id: "u\($0)", start: 0) }
        let purchase = Receiver(limiter, .normal, id: "p", start: 10, cap: Self.capacity / 10)
        Self.simulate(updates + [purchase], until: 310) { _ in Self.capacity }
        let all = updates + [purchase]
        let total = all.map { $0.received(from: 10, to: 310) }.reduce(0, +)
        // Looking again now and then costs the updates a little; the origin stays 90% used.
        #expect(total >= Self.capacity * 300 * 0.9)
        // The purchase still gets all its path carries.
        #expect(purchase.received(from: 10, to: 310) >= Self.capacity / 10 * 300 * 0.95)
    }

    @Test("a slow purchase just above its fair share: the updates take the rest only while it keeps 85% of its pace")
    func slowPurchaseNearItsFairShare() {
        let limiter = RateLimiter(limits: RateLimits()) { 0 }
        let updates = (0..<4).map { Receiver(limiter, .low, id: "u\($0)", start: 0) }
        // Alone beside four others it would get a fifth of the origin; its path carries a quarter.
        let purchase = Receiver(limiter, .normal, id: "p", start: 10, cap: Self.capacity / 4)
        Self.simulate(updates + [purchase], until: 310) { _ in Self.capacity }
        let all = updates + [purchase]
        #expect(purchase.received(from: 10, to: 310) >= Self.capacity / 4 * 300 * 0.85)
        #expect(all.map { $0.received(from: 10, to: 310) }.reduce(0, +) >= Self.capacity * 300 * 0.6)
    }

    @Test("an origin that slows down: the purchase's share comes back as the estimate follows")
    func originSlowsDown() {
        let limiter = RateLimiter(limits: RateLimits()) { 0 }
        let updates = (0..<4).map { Receiver(limiter, .low, id: "u\($0)", start: 0) }
        let purchase = Receiver(limiter, .normal, id: "p", start: 10)
        Self.simulate(updates + [purchase], until: 120) { $0 < 30 ? Self.capacity * 2 : Self.capacity / 2 }
        let all = updates + [purchase]
        // The next look after the fall (within 35 s) finds the new capacity.
        for from in stride(from: 70.0, to: 120, by: 10) {
            let total = all.map { $0.received(from: from, to: from + 10) }.reduce(0, +)
            #expect(purchase.received(from: from, to: from + 10) >= 0.8 * total, "from \(from) s")
        }
    }

    @Test("one priority only: nobody is held back, however busy the origin")
    func onePriority() {
        let limiter = RateLimiter(limits: RateLimits()) { 0 }
        let updates = (0..<4).map { Receiver(limiter, .low, id: "u\($0)", start: 0) }
        Self.simulate(updates, until: 30) { _ in Self.capacity }
        #expect(limiter.contention.phase == .open)
        let received = updates.map { $0.received(from: 0, to: 30) }
        #expect(received.reduce(0, +) >= Self.capacity * 30 * 0.99)
        #expect(updates.allSatisfy { $0.heldUntil == -.infinity })
    }

    @Test("a limit of ours that binds divides itself: the contention stands aside")
    func boundLimitStandsAside() throws {
        let limiter = RateLimiter(limits: RateLimits(backgroundMaxRate: try ByteRate(bytesPerSecond: 1 << 20))) { 0 }
        let updates = (0..<4).map { Receiver(limiter, .low, id: "u\($0)", start: 0) }
        let purchase = Receiver(limiter, .normal, id: "p", start: 10)
        Self.simulate(updates + [purchase], until: 40) { _ in Self.capacity }
        #expect(limiter.contention.phase == .open)
        let total = (updates + [purchase]).map { $0.received(from: 12, to: 40) }.reduce(0, +)
        #expect(purchase.received(from: 12, to: 40) >= 0.8 * total)
        #expect(total <= Double(1 << 20) * 28 * 1.02)
    }

    // MARK: The machine alone

    static let mix = OriginContention.Mix(top: .normal, topWeight: 20, belowWeight: 4)

    /// Feeds `rate` bytes a second (`topShare` of them at the top) from `from` to `to` in 10 ms steps.
    static func feed(_ machine: inout OriginContention, from: Double, to: Double, rate: Double, topShare: Double, mix: OriginContention.Mix?) {
        var now = from
        while now < to {
            _ = machine.update(mix: mix, bound: false, now: now)
            machine.record(Int(rate * 0.01 * topShare), priority: mix?.top ?? .low, now: now)
            machine.record(Int(rate * 0.01 * (1 - topShare)), priority: .low, now: now)
            now += 0.01
        }
    }

    @Test("open until measured; a second priority squeezes the lower ones to their share of the capacity")
    func squeezeOnMix() {
        var machine = OriginContention()
        #expect(machine.update(mix: Self.mix, bound: false, now: 0) == nil)
        Self.feed(&machine, from: 0, to: 5, rate: 1_000_000, topShare: 0, mix: nil)
        #expect(machine.phase == .open)
        #expect(abs((machine.capacity ?? 0) - 1_000_000) < 20_000)
        let budget = machine.update(mix: Self.mix, bound: false, now: 5)
        #expect(machine.phase == .squeeze(since: 5))
        #expect(abs((budget ?? 0) - 1_000_000 * 4 / 24 * OriginContention.margin) < 5_000)
        // The top takes the room: the squeeze holds past the probe.
        Self.feed(&machine, from: 5, to: 20, rate: 1_000_000, topShare: 0.83, mix: Self.mix)
        #expect(machine.phase == .squeeze(since: 5))
        // A dip shorter than the probe (a disk stall, a busy core) does not give the room back.
        Self.feed(&machine, from: 20, to: 21.5, rate: 300_000, topShare: 0.4, mix: Self.mix)
        Self.feed(&machine, from: 21.5, to: 30, rate: 1_000_000, topShare: 0.83, mix: Self.mix)
        #expect(machine.phase == .squeeze(since: 5))
        // A limit of ours binds: stand aside.
        #expect(machine.update(mix: Self.mix, bound: true, now: 20) == nil)
        #expect(machine.phase == .open)
    }

    @Test("a top that leaves the room unused: yield what it leaves, look again after 10 s, then 20 s, up to 60 s")
    func yieldAndReprobe() {
        var machine = OriginContention()
        Self.feed(&machine, from: 0, to: 5, rate: 1_000_000, topShare: 0, mix: nil)
        // The top gets 100 kB/s whatever it is left; the origin carries 1 MB/s.
        Self.feed(&machine, from: 5, to: 15.1, rate: 266_000, topShare: 100_000.0 / 266_000, mix: Self.mix)
        guard case .yield(let until, let reserve) = machine.phase else {
            Issue.record("phase \(machine.phase)")
            return
        }
        // 3 s after its steady rate stopped growing (it climbs from 0 for a few seconds), + 10 s.
        #expect(until > 20 && until < 25.1)
        #expect(abs(reserve - 100_000) < 10_000)
        // Most of what the top leaves goes back to the lower ones (not their 4/24 share).
        let capacity = machine.capacity ?? 0
        let budget = machine.budget ?? 0
        #expect(budget >= (capacity - reserve) * 0.75)
        Self.feed(&machine, from: 15.2, to: until + 10.1, rate: 1_000_000, topShare: 0.1, mix: Self.mix)
        guard case .yield(let next, _) = machine.phase else {
            Issue.record("phase \(machine.phase)")
            return
        }
        #expect(next - until > 23 && next - until < 30.1)
        // The mix ends: open again, and the next look is 10 s away once more.
        _ = machine.update(mix: nil, bound: false, now: next)
        #expect(machine.phase == .open)
    }

    @Test("yielding: the lower budget grows while the top keeps its reserve, and backs off when it is crowded")
    func yieldAIMD() {
        var machine = OriginContention()
        Self.feed(&machine, from: 0, to: 5, rate: 1_000_000, topShare: 0, mix: nil)
        Self.feed(&machine, from: 5, to: 15.1, rate: 300_000, topShare: 0.5, mix: Self.mix)
        guard case .yield = machine.phase else {
            Issue.record("phase \(machine.phase)")
            return
        }
        // The top keeps its 150 kB/s while the others take more: the budget grows.
        let start = machine.budget ?? 0
        Self.feed(&machine, from: 15.1, to: 18, rate: 150_000 + start * 1.2, topShare: 150_000 / (150_000 + start * 1.2), mix: Self.mix)
        let grown = machine.budget ?? 0
        #expect(grown > start)
        // Now the top falls to a third of its reserve: the budget shrinks each bin.
        Self.feed(&machine, from: 18, to: 20, rate: 150_000 + grown, topShare: 50_000 / (150_000 + grown), mix: Self.mix)
        #expect((machine.budget ?? .infinity) < grown * 0.5)
    }

    @Test("the lower ones never get less than the floor, and a priority change moves the top")
    func floorAndTop() {
        var machine = OriginContention()
        Self.feed(&machine, from: 0, to: 2, rate: 50_000, topShare: 0, mix: nil)
        let highBesideOne = OriginContention.Mix(top: .high, topWeight: 400, belowWeight: 1)
        #expect(machine.update(mix: highBesideOne, bound: false, now: 2) == OriginContention.floor)
        #expect(machine.top == .high)
    }

    @Test("a burst (a released socket's kept bytes) raises the capacity by 25% a second at most")
    func burstDoesNotInflate() {
        var machine = OriginContention()
        Self.feed(&machine, from: 0, to: 5, rate: 1_000_000, topShare: 0, mix: nil)
        Self.feed(&machine, from: 5, to: 5.5, rate: 3_000_000, topShare: 0, mix: nil)
        Self.feed(&machine, from: 5.5, to: 6, rate: 1_000_000, topShare: 0, mix: nil)
        #expect((machine.capacity ?? 0) <= 1_000_000 * 1.25 * 1.01)
    }

    @Test("a top transfer quiet for a second (its disk stalled) keeps the others held; one quiet for 3 s does not")
    func quietTopStillCounts() {
        var share = PriorityShare()
        let top = share.join(.normal, downloadId: "p", now: 0)
        let low = share.join(.low, downloadId: "u", now: 0)
        share.take(top, 1, now: 10)
        share.take(low, 1, now: 11)
        #expect(share.mix(now: 11)?.top == .normal)
        share.take(low, 1, now: 13.5)
        #expect(share.mix(now: 13.5)?.top == .low)
        share.leave(low)
        share.take(top, 1, now: 14)
        #expect(share.mix(now: 14) == OriginContention.Mix(top: .normal, topWeight: 20, belowWeight: 0))
    }

    // MARK: The low priority window

    @Test("a low download's socket gets the configured receive buffer; 0 leaves autotuning; the key decodes")
    func lowPriorityWindow() throws {
        #expect(LowPriorityWindow.size(0) == nil)
        #expect(LowPriorityWindow.size(-5) == nil)
        #expect(LowPriorityWindow.size(1) == 4096)
        #expect(LowPriorityWindow.size(256 << 10) == 256 << 10)
        #expect(LowPriorityWindow.size(Int.max) == Int(Int32.max / 2))
        #expect(TransferConfiguration().lowPriorityReceiveBuffer == 256 << 10)
        let decoded = try CourierConfiguration.decode(Data(#"{"transfer": {"lowPriorityReceiveBuffer": 65536}}"#.utf8))
        #expect(decoded.transfer.lowPriorityReceiveBuffer == 65536)

        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        defer { close(fd) }
        // The size is the kernel's buffer: it doubles what SO_RCVBUF is given, so half is set.
        for size in [64 << 10, 32 << 10, 256 << 10] {
            #expect(LowPriorityWindow.set(fd, size: size))
            var value: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            #expect(getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, &length) == 0)
            #expect(Int(value) == size)
        }
        // Not connected: no round trip measured.
        #expect(LowPriorityWindow.roundTrip(fd) == nil)
    }

    @Test("the low window's socket is the one connected from libcurl's local port to its peer, not merely the newest one")
    func lowWindowSocketMatch() throws {
        // Happy eyeballs: libcurl may open a socket per address family; the newest may be the one
        // that lost and was closed, its number another socket's or file's since.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) == 0 && listen(listener, 4) == 0 && getsockname(listener, $0, &length) == 0 }
        }
        try #require(bound)
        let serverPort = Int(UInt16(bigEndian: address.sin_port))
        func client() throws -> Int32 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            try #require(fd >= 0)
            var target = address
            let connected = withUnsafeMutablePointer(to: &target) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            try #require(connected == 0)
            return fd
        }
        let used = try client()
        defer { close(used) }
        let other = try client()
        defer { close(other) }
        let (usedPort, peer) = try #require(LowPriorityWindow.ports(of: used))
        #expect(peer == serverPort)
        let file = open("/dev/null", O_RDONLY)
        defer { close(file) }
        // The connection in use is found though newer candidates follow it.
        #expect(LowPriorityWindow.matching([used, other, file], local: usedPort, peer: serverPort) == used)
        #expect(LowPriorityWindow.matching([other, file], local: usedPort, peer: serverPort) == nil)
        #expect(LowPriorityWindow.ports(of: file) == nil)
        #expect(LowPriorityWindow.ports(of: listener) == nil)
    }

    @Test("the low window is twice the low downloads' part of the capacity over a round trip, within 32 KiB and the ceiling")
    func lowWindowTarget() {
        let ceiling = 256 << 10
        // Nothing measured yet: the ceiling.
        #expect(LowPriorityWindow.target(capacity: nil, lows: 4, rtt: 0.05, ceiling: ceiling) == ceiling)
        #expect(LowPriorityWindow.target(capacity: .nan, lows: 4, rtt: 0.05, ceiling: ceiling) == ceiling)
        #expect(LowPriorityWindow.target(capacity: 0, lows: 4, rtt: 0.05, ceiling: ceiling) == ceiling)
        // 8 MiB/s, four lows, 40 ms: 2 × 2 MiB/s × 0.04 s = 167,772 bytes.
        #expect(LowPriorityWindow.target(capacity: Double(8 << 20), lows: 4, rtt: 0.04, ceiling: ceiling) == 167_772)
        // One low takes the link alone: its window covers twice the capacity's round trip.
        #expect(LowPriorityWindow.target(capacity: Double(1 << 20), lows: 1, rtt: 0.1, ceiling: ceiling) == 209_715)
        // 1 MiB/s shared by four over 50 ms needs 26 KiB each: the floor.
        #expect(LowPriorityWindow.target(capacity: Double(1 << 20), lows: 4, rtt: 0.05, ceiling: ceiling) == 32 << 10)
        // A fast far origin: the ceiling bounds it.
        #expect(LowPriorityWindow.target(capacity: Double(100 << 20), lows: 2, rtt: 0.2, ceiling: ceiling) == ceiling)
        // A ceiling below the floor wins; no lows counted is one; an unknown round trip is 0.1 s;
        // the round trip is taken within 5 ms and 1 s.
        #expect(LowPriorityWindow.target(capacity: Double(1 << 20), lows: 4, rtt: 0.05, ceiling: 16 << 10) == 16 << 10)
        #expect(LowPriorityWindow.target(capacity: Double(1 << 20), lows: 0, rtt: 0.1, ceiling: ceiling) == 209_715)
        #expect(LowPriorityWindow.target(capacity: Double(1 << 20), lows: 1, rtt: nil, ceiling: ceiling) == 209_715)
        #expect(LowPriorityWindow.target(capacity: Double(8 << 20), lows: 1, rtt: 0.000_1, ceiling: ceiling) == 83_886)
        #expect(LowPriorityWindow.target(capacity: Double(64 << 10), lows: 1, rtt: 30, ceiling: ceiling) == 128 << 10)
    }

    @Test("the limiter sizes a low window from its measured capacity and the low transfers that want bytes")
    func limiterLowWindow() {
        let limiter = RateLimiter(limits: RateLimits())
        let ceiling = 256 << 10
        let lows = (0..<4).map { _ in TransferThrottle(limiter: limiter, trafficClass: .background, perTransfer: nil, priority: .low, now: 0) }
        // Nothing measured: the ceiling.
        #expect(lows[0].lowWindow(rtt: 0.05, ceiling: ceiling, now: 0) == ceiling)
        // 4 MiB/s measured over two seconds.
        var now = 0.0
        while now < 2 {
            for low in lows {
                _ = low.wait(now: now)
                low.take(64 << 10, now: now)
            }
            now += 0.0625
        }
        let capacity = limiter.contention.capacity ?? 0
        #expect(capacity > 3.5 * Double(1 << 20) && capacity < 4.5 * Double(1 << 20), "\(capacity)")
        #expect(lows[0].lowWindow(rtt: 0.05, ceiling: ceiling, now: now) == LowPriorityWindow.target(capacity: capacity, lows: 4, rtt: 0.05, ceiling: ceiling))
        // Two of them stop asking: after the mix's 3 s, the other two share the capacity.
        for _ in 0..<56 {
            for low in lows.prefix(2) {
                _ = low.wait(now: now)
                low.take(128 << 10, now: now)
            }
            now += 0.0625
        }
        let later = limiter.contention.capacity ?? 0
        #expect(lows[0].lowWindow(rtt: 0.05, ceiling: ceiling, now: now) == LowPriorityWindow.target(capacity: later, lows: 2, rtt: 0.05, ceiling: ceiling))
        // Without a limiter: the ceiling.
        let alone = TransferThrottle(limiter: nil, trafficClass: .background, perTransfer: nil, priority: .low, now: 0)
        #expect(alone.lowWindow(rtt: 0.05, ceiling: ceiling, now: 0) == ceiling)
    }
}
