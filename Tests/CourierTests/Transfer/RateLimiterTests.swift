@testable import Courier
import Foundation
import Synchronization
import Testing

/// Rates in curl's syntax, the token bucket and the limiter alone: no network, the clock passed in.
@Suite("Rate limits")
struct RateLimiterTests {
    @Test("curl's --limit-rate syntax: 1024-based suffixes, decimals, bytes")
    func parsing() throws {
        #expect(try ByteRate(parsing: "2M").bytesPerSecond == 2 << 20)
        #expect(try ByteRate(parsing: "500k").bytesPerSecond == 500 << 10)
        #expect(try ByteRate(parsing: "500K").bytesPerSecond == 500 << 10)
        #expect(try ByteRate(parsing: "1.5G").bytesPerSecond == 3 << 29)
        #expect(try ByteRate(parsing: "1T").bytesPerSecond == 1 << 40)
        #expect(try ByteRate(parsing: "65536").bytesPerSecond == 65536)
        #expect(try ByteRate(parsing: " 8M ").description == "8M")
        #expect(try ByteRate(parsing: "1536k").description == "1536k")
        #expect(try ByteRate(parsing: "1000").description == "1000")
        for bad in ["", "M", "-1M", "0", "0.5", "2X", "1e6", "0x10", "inf", "nan", "1.2.3", "2 M", "9999999999999999999999T", "2P", "+5", "١٢"] {
            #expect(throws: CourierError.self, "\(bad)") { try ByteRate(parsing: bad) }
        }
    }

    @Test("in a configuration file: a string in curl's syntax or a number; a bad one names its key")
    func configuration() throws {
        let file = """
            {"transfer": {"maxRate": "8M", "backgroundMaxRate": 1048576, "limitRate": "100k",
             "rateSchedule": [{"from": "09:00", "to": "17:00", "maxRate": "1M"}, {"from": "22:00", "to": "6:00"}]}}
            """
        let configuration = try CourierConfiguration.decode(Data(file.utf8)).transfer
        #expect(configuration.maxRate?.bytesPerSecond == 8 << 20)
        #expect(configuration.backgroundMaxRate?.bytesPerSecond == 1 << 20)
        #expect(configuration.limitRate?.bytesPerSecond == 100 << 10)
        #expect(configuration.rateSchedule == [
            RateScheduleWindow(from: 540, to: 1020, maxRate: try ByteRate(parsing: "1M")), RateScheduleWindow(from: 1320, to: 360, maxRate: nil),
        ])
        // Written out and read back: the same.
        var whole = CourierConfiguration()
        whole.transfer = configuration
        #expect(try CourierConfiguration.decode(JSONEncoder().encode(whole)).transfer == configuration)

        for (bad, key) in [
            (#"{"transfer": {"maxRate": "fast"}}"#, "maxRate"),
            (#"{"transfer": {"backgroundMaxRate": 0}}"#, "backgroundMaxRate"),
            (#"{"transfer": {"rateSchedule": [{"from": "25:00", "to": "17:00"}]}}"#, "HH:MM"),
            (#"{"transfer": {"rateSchedule": [{"from": "09:00", "to": "09:00"}]}}"#, "must not be empty"),
        ] {
            do {
                _ = try CourierConfiguration.decode(Data(bad.utf8))
                Issue.record("accepted \(bad)")
            } catch {
                #expect("\(error)".contains(key), "\(bad): \(error)")
            }
        }
    }

    @Test("a window holds its minutes, across midnight too; the first window wins, else the keys outside")
    func schedule() throws {
        let night = RateScheduleWindow(from: 22 * 60, to: 6 * 60, maxRate: nil)
        #expect(night.contains(minute: 23 * 60) && night.contains(minute: 0) && night.contains(minute: 359))
        #expect(!night.contains(minute: 360) && !night.contains(minute: 12 * 60))
        let oneM = try ByteRate(parsing: "1M")
        let eightM = try ByteRate(parsing: "8M")
        let limits = RateLimits(
            maxRate: eightM, backgroundMaxRate: oneM,
            schedule: [RateScheduleWindow(from: 540, to: 1020, maxRate: oneM), night])
        #expect(limits.effective(atMinute: 600) == (oneM, nil))
        #expect(limits.effective(atMinute: 120) == (nil, nil))  // the night: no limit
        #expect(limits.effective(atMinute: 1100) == (eightM, oneM))
        #expect(RateScheduleWindow.minuteOfDay("24:00") == 1440)
        for bad in ["24:01", "9", "09:60", "-1:00", "09:5", "aa:bb", "123:00", ":", ""] {
            #expect(RateScheduleWindow.minuteOfDay(bad) == nil, "\(bad)")
        }
    }

    @Test("the bucket: a burst, then the rate, debt repaid before more is taken")
    func bucket() {
        var bucket = TokenBucket(rate: 1 << 20, now: 100)
        #expect(bucket.burst == Double(1 << 17))
        #expect(bucket.wait(now: 100) == 0)
        bucket.take(1 << 19, now: 100)  // 512 KiB at once: 384 KiB of debt
        let wait = bucket.wait(now: 100)
        #expect(abs(wait - 0.375) < 0.001)
        #expect(bucket.wait(now: 100.2) > 0)
        #expect(bucket.wait(now: 100 + wait) == 0)
        // Saved up for an hour: still only the burst.
        #expect(bucket.wait(now: 3700) == 0)
        #expect(bucket.tokens == bucket.burst)
        // A clock going back earns nothing.
        bucket.take(Int(bucket.burst) + 1024, now: 3700)
        #expect(bucket.wait(now: 3000) > 0)
    }

    @Test("over a long run the bytes taken are the rate times the time, plus one burst, whatever the chunks")
    func accuracy() {
        let rate: Int64 = 2 << 20
        for chunk in [1024, 16 * 1024, 100_000, 512 * 1024] {
            var bucket = TokenBucket(rate: rate, now: 0)
            var now = 0.0
            var taken = 0
            while now < 60 {
                let wait = bucket.wait(now: now)
                if wait > 0 {
                    now += wait
                    continue
                }
                bucket.take(chunk, now: now)
                taken += chunk
            }
            let expected = Double(rate) * now
            #expect(Double(taken) <= expected + bucket.burst + Double(chunk), "chunk \(chunk)")
            #expect(Double(taken) >= expected * 0.99, "chunk \(chunk)")
        }
    }

    @Test("the limiter: background transfers also meet backgroundMaxRate; a window changes the rate within a second")
    func limiter() throws {
        let minute = MinuteOfDay(600)
        let limits = RateLimits(
            maxRate: try ByteRate(parsing: "8M"), backgroundMaxRate: try ByteRate(parsing: "1M"),
            schedule: [RateScheduleWindow(from: 0, to: 60, maxRate: try ByteRate(parsing: "100k"))])
        let limiter = RateLimiter(limits: limits) { minute.value.withLock { $0 } }
        #expect(limiter.current(now: 0) == (8 << 20, 1 << 20))
        limiter.take(512 << 10, .background, now: 0)
        // 512 KiB against 1 MiB/s (background: 128 KiB saved up) and 8 MiB/s (everyone: 1 MiB).
        #expect(limiter.wait(.background, now: 0) > 0.3)
        #expect(limiter.wait(.foreground, now: 0) == 0)
        // Midnight: the window's limit, at the next look at the schedule (a second later).
        minute.value.withLock { $0 = 10 }
        #expect(limiter.current(now: 0.5) == (8 << 20, 1 << 20))
        #expect(limiter.current(now: 1.5) == (100 << 10, nil))
        // A reload applies at once.
        limiter.update(RateLimits())
        #expect(limiter.current(now: 1.6) == (nil, nil))
        #expect(limiter.wait(.background, now: 1.6) == 0)
    }

    @Test("a transfer's own limit (get --limit-rate) and the shared ones together; the buffer follows the tightest")
    func throttle() throws {
        let limiter = RateLimiter(limits: RateLimits(maxRate: try ByteRate(parsing: "4M")))
        let one = TransferThrottle(limiter: limiter, trafficClass: .foreground, perTransfer: try ByteRate(parsing: "256k"), now: 0)
        let two = TransferThrottle(limiter: limiter, trafficClass: .foreground, perTransfer: nil, now: 0)
        one.take(256 << 10, now: 0)
        #expect(one.wait(now: 0) > 0.8)  // its own bucket
        #expect(two.wait(now: 0) == 0)  // the shared one has room
        two.take(4 << 20, now: 0)
        #expect(two.wait(now: 0) > 0.9)
        #expect(one.receiveBufferSize(upTo: 512 << 10, now: 0) == 16 << 10)
        #expect(two.receiveBufferSize(upTo: 512 << 10, now: 0) == 256 << 10)
        #expect(TransferThrottle(limiter: nil, trafficClass: .foreground, perTransfer: nil).receiveBufferSize(upTo: 1 << 19) == 1 << 19)
    }
}

/// A clock's minute of the day that a test moves.
private final class MinuteOfDay: Sendable {
    let value: Mutex<Int>
    init(_ minute: Int) { value = Mutex(minute) }
}
