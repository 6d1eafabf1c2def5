import Foundation
import Synchronization

/// A token bucket: `rate` tokens (bytes) a second, at most `burst` saved up. Pure: the caller
/// passes the time (seconds on a monotonic clock).
///
/// A receiver may take more than the bucket holds (a chunk libcurl already read): the bucket
/// goes into debt and `wait` says how long until it is out of it, so over any long window the
/// bytes taken are `rate × window + burst` at most, whatever the chunk sizes.
struct TokenBucket: Sendable, Equatable {
    private(set) var rate: Double
    private(set) var burst: Double
    private(set) var tokens: Double
    private(set) var updated: Double

    /// A full bucket of `rate` bytes a second at `now`.
    init(rate: Int64, now: Double) {
        self.rate = Double(max(1, rate))
        self.burst = Self.burst(for: self.rate)
        self.tokens = burst
        self.updated = now
    }

    /// What may be saved up: an eighth of a second at the rate, at least 16 KiB (one TLS record
    /// and a few TCP segments), so a limit holds within a few percent over any second.
    static func burst(for rate: Double) -> Double {
        max(16 * 1024, rate / 8)
    }

    /// Adds the tokens earned since the last update (a clock that went back earns nothing).
    mutating func refill(now: Double) {
        guard now > updated else { return }
        tokens = min(burst, tokens + (now - updated) * rate)
        updated = now
    }

    /// Seconds until a receiver may take bytes again (0: now).
    mutating func wait(now: Double) -> Double {
        refill(now: now)
        return tokens > 0 ? 0 : (1 - tokens) / rate
    }

    /// Takes `bytes` (possibly into debt).
    mutating func take(_ bytes: Int, now: Double) {
        refill(now: now)
        tokens -= Double(max(0, bytes))
    }

    /// Changes the rate from `now` on; tokens earned so far count at the old rate, debt stays.
    mutating func setRate(_ rate: Int64, now: Double) {
        refill(now: now)
        self.rate = Double(max(1, rate))
        self.burst = Self.burst(for: self.rate)
        tokens = min(tokens, burst)
    }
}

/// Who a transfer is for: the user waiting at a terminal, or the agent and automatic updates in
/// the background (`transfer.backgroundMaxRate`).
public enum TrafficClass: String, Sendable, Codable {
    case foreground
    case background
}

/// The process-wide rate limits of a transfer engine: `transfer.maxRate` for every download of
/// the process together, `transfer.backgroundMaxRate` for the background ones together, and
/// `transfer.rateSchedule`'s windows replacing both at their times of day. Pure.
public struct RateLimits: Sendable, Equatable {
    public var maxRate: ByteRate?
    public var backgroundMaxRate: ByteRate?
    public var schedule: [RateScheduleWindow]

    public init(maxRate: ByteRate? = nil, backgroundMaxRate: ByteRate? = nil, schedule: [RateScheduleWindow] = []) {
        self.maxRate = maxRate
        self.backgroundMaxRate = backgroundMaxRate
        self.schedule = schedule
    }

    public init(_ configuration: TransferConfiguration) {
        self.init(
            maxRate: configuration.maxRate, backgroundMaxRate: configuration.backgroundMaxRate, schedule: configuration.rateSchedule)
    }

    /// The limits in force at `minute` after local midnight: the first window holding it, else
    /// the keys outside any window.
    public func effective(atMinute minute: Int) -> (maxRate: ByteRate?, backgroundMaxRate: ByteRate?) {
        if let window = schedule.first(where: { $0.contains(minute: minute) }) {
            return (window.maxRate, window.backgroundMaxRate)
        }
        return (maxRate, backgroundMaxRate)
    }

    /// Whether any limit can ever apply (otherwise transfers are not metered at all).
    public var isEmpty: Bool {
        maxRate == nil && backgroundMaxRate == nil && schedule.allSatisfy { $0.maxRate == nil && $0.backgroundMaxRate == nil }
    }
}

/// The shared buckets of one transfer engine (global, background). Transfers meter through a
/// `TransferThrottle` each; the schedule is looked at again each second, and `update` applies
/// new limits (a configuration reloaded) at once, to running transfers too.
package final class RateLimiter: Sendable {
    private struct State {
        var limits: RateLimits
        var global: TokenBucket?
        var background: TokenBucket?
        /// When the schedule was last looked at (monotonic seconds); nil: never.
        var checked: Double?
        /// The transfers' shares of the limits by priority.
        var share = PriorityShare()
        /// The lower priorities' budget when the origin is the bottleneck.
        var contention = OriginContention()
    }

    private let state: Mutex<State>
    /// Minutes after local midnight now (a parameter so tests can move the clock).
    private let minuteOfDay: @Sendable () -> Int

    package init(limits: RateLimits, minuteOfDay: @escaping @Sendable () -> Int = RateLimiter.localMinuteOfDay) {
        self.state = Mutex(State(limits: limits))
        self.minuteOfDay = minuteOfDay
    }

    /// Replaces the limits; running transfers follow from their next chunk on.
    package func update(_ limits: RateLimits) {
        state.withLock { state in
            state.limits = limits
            state.checked = nil
        }
    }

    package var limits: RateLimits { state.withLock { $0.limits } }

    /// The limits in force now (bytes per second), as the buckets hold them.
    package func current(now: Double) -> (maxRate: Int64?, backgroundMaxRate: Int64?) {
        state.withLock { state in
            refresh(&state, now: now)
            return (state.global.map { Int64($0.rate) }, state.background.map { Int64($0.rate) })
        }
    }

    /// A transfer of `priority` starts contending for the limits (`PriorityShare`); `leave` when done.
    func join(_ priority: DownloadPriority, downloadId: String?, now: Double) -> UInt64 {
        state.withLock { $0.share.join(priority, downloadId: downloadId, now: now) }
    }

    func leave(_ member: UInt64) {
        state.withLock { $0.share.leave(member) }
    }

    /// Changes the priority of the running transfers of `downloadId` (their share follows from
    /// their next chunk on); false when none runs here.
    @discardableResult
    package func setPriority(_ priority: DownloadPriority, downloadId: String) -> Bool {
        state.withLock { $0.share.setPriority(priority, downloadId: downloadId) }
    }

    /// The priority `member` contends at now (a `setPriority` since it joined included); nil
    /// once it left.
    func priority(of member: UInt64) -> DownloadPriority? {
        state.withLock { $0.share.priority(of: member) }
    }

    /// The priorities the transfers of `downloadId` running here contend at now (none: none runs).
    package func priorities(of downloadId: String) -> [DownloadPriority] {
        state.withLock { $0.share.members.values.filter { $0.downloadId == downloadId }.map(\.priority) }
    }

    /// Seconds until a transfer of `trafficClass` may receive again (0: now): the shared buckets,
    /// then (for a `member`) its share of them by priority.
    func wait(_ trafficClass: TrafficClass, member: UInt64? = nil, now: Double) -> Double {
        state.withLock { state in
            refresh(&state, now: now)
            var wait = state.global?.wait(now: now) ?? 0
            if trafficClass == .background, let background = state.background?.wait(now: now) { wait = max(wait, background) }
            guard let member else { return wait }
            let rate = Self.sharedRate(state, trafficClass)
            if let rate {
                let untilSurplus = Self.untilSurplus(state, trafficClass)
                wait = max(wait, state.share.wait(member, rate: rate, untilSurplus: untilSurplus, now: now))
            }
            // The origin as the bottleneck: the lower priorities' budget, unless a limit of ours
            // binds (its shares are exact).
            let mix = state.share.mix(now: now)
            let bound = rate.map { state.contention.totalRate >= $0 * Self.boundRatio } ?? false
            let budget = state.contention.update(mix: mix, bound: bound, now: now)
            wait = max(wait, state.share.originWait(member, budget: budget, mix: mix, now: now))
            if wait > 0 { state.share.hold(member, until: now + wait) }
            return wait
        }
    }

    /// The receive buffer for one low priority transfer now (`LowPriorityWindow.target`): the
    /// measured capacity shared by the low transfers that want bytes, over `rtt` seconds.
    func lowWindow(rtt: Double?, ceiling: Int, now: Double) -> Int {
        state.withLock { state in
            let lows = state.share.members.values.filter {
                $0.priority == .low && $0.isActive(now: now, within: PriorityShare.mixDormantAfter)
            }.count
            return LowPriorityWindow.target(capacity: state.contention.capacity, lows: lows, rtt: rtt, ceiling: ceiling)
        }
    }

    /// What a limit of ours must be used to, as measured, to count as the bottleneck.
    static let boundRatio = 0.9

    /// The contention phase, capacity and budget (for tests and `status`).
    var contention: OriginContention {
        state.withLock { $0.contention }
    }

    /// Counts `bytes` received by a transfer of `trafficClass` (and `member`'s share).
    func take(_ bytes: Int, _ trafficClass: TrafficClass, member: UInt64? = nil, now: Double) {
        state.withLock { state in
            refresh(&state, now: now)
            state.global?.take(bytes, now: now)
            if trafficClass == .background { state.background?.take(bytes, now: now) }
            if let member, let priority = state.share.take(member, bytes, now: now) {
                state.contention.record(bytes, priority: priority, now: now)
            }
        }
    }

    /// The tightest limit a transfer of `trafficClass` meets now; nil: none.
    private static func sharedRate(_ state: State, _ trafficClass: TrafficClass) -> Double? {
        let rates = [state.global?.rate, trafficClass == .background ? state.background?.rate : nil].compactMap { $0 }
        return rates.min()
    }

    /// Seconds until every shared bucket a transfer of `trafficClass` meets is at least half
    /// full if nobody takes from them (0: they are now): then the transfers with the larger
    /// shares leave tokens unused, which anyone may take. Buckets refilled by `wait` already.
    private static func untilSurplus(_ state: State, _ trafficClass: TrafficClass) -> Double {
        let buckets = [state.global, trafficClass == .background ? state.background : nil].compactMap { $0 }
        return buckets.map { max(0, ($0.burst / 2 - $0.tokens) / $0.rate) }.max() ?? 0
    }

    /// Looks at the schedule again when a second has passed: buckets appear, change rate or go.
    private func refresh(_ state: inout State, now: Double) {
        if let checked = state.checked, now - checked < 1, now >= checked { return }
        state.checked = now
        let (maxRate, backgroundMaxRate) = state.limits.effective(atMinute: state.limits.schedule.isEmpty ? 0 : minuteOfDay())
        Self.set(&state.global, to: maxRate, now: now)
        Self.set(&state.background, to: backgroundMaxRate, now: now)
    }

    private static func set(_ bucket: inout TokenBucket?, to rate: ByteRate?, now: Double) {
        guard let rate else {
            bucket = nil
            return
        }
        if bucket == nil {
            bucket = TokenBucket(rate: rate.bytesPerSecond, now: now)
        } else if bucket?.rate != Double(rate.bytesPerSecond) {
            bucket?.setRate(rate.bytesPerSecond, now: now)
        }
    }

    /// Minutes after local midnight now.
    package static let localMinuteOfDay: @Sendable () -> Int = {
        var seconds = time(nil)
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return 0 }
        return Int(parts.tm_hour) * 60 + Int(parts.tm_min)
    }

    /// Seconds on the monotonic clock.
    static func now() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1e9
    }
}

/// The metering of one transfer: its own bucket (`get --limit-rate`, curl's per-transfer
/// limit) and its engine's shared ones. Used on the network thread only, by the job it belongs
/// to (`CurlJob.throttle`): the attempts of one download, or the range requests of one delta
/// update, share one, one after the other, so a new request gets no new burst.
final class TransferThrottle: @unchecked Sendable {  // @unchecked: handed to its jobs before they are posted, then used on the loop thread only; `priority` goes through the limiter's lock.
    let limiter: RateLimiter?
    let trafficClass: TrafficClass
    private var own: TokenBucket?
    /// Its place in the limiter's shares by priority (nil without a limiter).
    private let member: UInt64?
    /// The priority it joined at.
    private let joinedAt: DownloadPriority

    init(
        limiter: RateLimiter?, trafficClass: TrafficClass, perTransfer: ByteRate?, priority: DownloadPriority = .normal,
        downloadId: String? = nil, now: Double = RateLimiter.now()
    ) {
        self.limiter = limiter
        self.trafficClass = trafficClass
        self.own = perTransfer.map { TokenBucket(rate: $0.bytesPerSecond, now: now) }
        self.member = limiter?.join(priority, downloadId: downloadId, now: now)
        self.joinedAt = priority
    }

    /// The priority it contends at now: the one it joined at, or the one `setPriority` gave its
    /// download since (the place a transfer of it waits at for a slot).
    var priority: DownloadPriority {
        member.flatMap { limiter?.priority(of: $0) } ?? joinedAt
    }

    deinit {
        if let member { limiter?.leave(member) }
    }

    /// Seconds until the transfer may receive again (0: now).
    func wait(now: Double) -> Double {
        max(own?.wait(now: now) ?? 0, limiter?.wait(trafficClass, member: member, now: now) ?? 0)
    }

    /// Counts `bytes` the transfer received.
    func take(_ bytes: Int, now: Double) {
        own?.take(bytes, now: now)
        limiter?.take(bytes, trafficClass, member: member, now: now)
    }

    /// The receive buffer for this transfer's socket while it is low (`RateLimiter.lowWindow`);
    /// the ceiling without a limiter.
    func lowWindow(rtt: Double?, ceiling: Int, now: Double) -> Int {
        limiter?.lowWindow(rtt: rtt, ceiling: ceiling, now: now) ?? ceiling
    }

    /// The receive buffer a metered transfer should use: small enough that one chunk is a
    /// short burst (a sixteenth of a second at the tightest rate), 16 KiB at least.
    func receiveBufferSize(upTo configured: Int, now: Double = RateLimiter.now()) -> Int {
        var tightest = own.map { Int64($0.rate) }
        if let current = limiter?.current(now: now) {
            for rate in [current.maxRate, trafficClass == .background ? current.backgroundMaxRate : nil].compactMap({ $0 }) {
                tightest = min(tightest ?? rate, rate)
            }
        }
        guard let tightest else { return configured }
        return min(configured, max(16 * 1024, Int(min(tightest / 16, Int64(Int32.max)))))
    }
}
