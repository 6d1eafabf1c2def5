import Foundation

/// How urgently a download is wanted (`courier priority ID high|normal|low`). A foreground
/// `deliver` works at `high`; the agent works a purchase at `normal` and an update at `low`,
/// unless a user set the download's priority (docs/transfer.md).
public enum DownloadPriority: String, Sendable, Codable, CaseIterable, Comparable {
    case low, normal, high

    /// The download's share of a rate limit it contends for, against the others' (`PriorityShare`):
    /// a new purchase (normal) beside four updates (low) gets 20/24 (83%) of the limit, a high
    /// one beside four normal ones 400/480 (83%), beside four low ones 400/404; a low one
    /// beside a high one still gets 1/401, so it never stops.
    public var weight: Double {
        switch self {
        case .high: 400
        case .normal: 20
        case .low: 1
        }
    }

    /// 0 (high) first: the order transfers are admitted and downloads claimed in.
    var rank: Int {
        switch self {
        case .high: 0
        case .normal: 1
        case .low: 2
        }
    }

    public static func < (lhs: DownloadPriority, rhs: DownloadPriority) -> Bool { lhs.rank > rhs.rank }

    /// `high`, `normal` or `low`; anything else is a usage error naming the choices.
    public init(parsing text: String) throws {
        guard let priority = DownloadPriority(rawValue: text.lowercased()) else {
            throw CourierError(.usage, "'\(text)' is not a priority", hint: "use high, normal or low")
        }
        self = priority
    }
}

/// Weighted sharing of a rate limit between the transfers that contend for it. Pure: the caller
/// passes the time (monotonic seconds) and the limit's rate.
///
/// Each member has a credit bucket filled at its share of the rate, `rate × weight / Σweight`
/// over the members that want bytes now (asked within `dormantAfter`); a member may receive
/// while its credit lasts. The shared buckets (`RateLimiter`) still bound the sum. A member that
/// cannot use its share (its origin is slower) leaves tokens in the shared bucket: once that is
/// half full (`surplus`), anyone may take them, so the limit is used whole whatever the mix.
/// A low-priority member always earns its share, so nothing starves.
struct PriorityShare: Sendable {
    struct Member: Sendable {
        var priority: DownloadPriority
        /// The download id, to change its priority while it runs (nil: a range fetch, say).
        var downloadId: String?
        var credit: TokenBucket
        /// When it last asked for bytes or took some.
        var lastSeen: Double
        /// Until the first `rebalance` after it joined: its credit is not set up yet.
        var needsCredit = true
        /// Until when the wait it was last told lasts: a member held back still wants bytes.
        var heldUntil = -Double.infinity
        /// Its part of the budget of the priorities below the top one while the origin is the
        /// bottleneck (`OriginContention`); nil: not held back that way.
        var originCredit: TokenBucket?

        /// Counts `bytes` it received at `now`.
        mutating func received(_ bytes: Int, now: Double) {
            lastSeen = now
            credit.take(bytes, now: now)
            originCredit?.take(bytes, now: now)
        }

        /// Whether it wants bytes at `now`: it asked within `within` seconds, or waits on a limit.
        func isActive(now: Double, within: Double = PriorityShare.dormantAfter) -> Bool {
            now - max(lastSeen, heldUntil) <= within
        }
    }

    /// Seconds without asking after which a member no longer counts in the shares.
    static let dormantAfter = 0.5

    private(set) var members: [UInt64: Member] = [:]
    private var nextId: UInt64 = 0
    /// The rate and the weights the credits were last set for.
    private var sharedRate: Double = 0
    private var totalWeight: Double = 0

    /// A new member, counted from `now`.
    mutating func join(_ priority: DownloadPriority, downloadId: String?, now: Double) -> UInt64 {
        nextId += 1
        members[nextId] = Member(
            priority: priority, downloadId: downloadId, credit: TokenBucket(rate: 1, now: now), lastSeen: now)
        // The credit gets its real rate at the next `rebalance`, full: a new member may start at once.
        totalWeight = -1
        return nextId
    }

    mutating func leave(_ id: UInt64) {
        if members.removeValue(forKey: id) != nil { totalWeight = -1 }
    }

    /// Changes the priority of the members transferring `downloadId`; true if there was one.
    @discardableResult
    mutating func setPriority(_ priority: DownloadPriority, downloadId: String) -> Bool {
        var found = false
        for (id, member) in members where member.downloadId == downloadId {
            members[id]?.priority = priority
            found = true
        }
        if found { totalWeight = -1 }
        return found
    }

    /// Seconds until member `id` may receive (0: now), given the shared rate and how long until
    /// the shared buckets hold a surplus (at least half full: nobody is using them up; 0: they
    /// do now). A member without credit asks again by then, to take what the others leave.
    mutating func wait(_ id: UInt64, rate: Double, untilSurplus: Double, now: Double) -> Double {
        guard let before = members.index(forKey: id) else { return 0 }
        members.values[before].lastSeen = now
        rebalance(rate: rate, now: now)
        // Looked up again: `rebalance` may have copied the storage its index pointed into.
        guard let index = members.index(forKey: id) else { return 0 }
        let wait = members.values[index].credit.wait(now: now)
        return min(wait, max(0, untilSurplus))
    }

    /// Counts `bytes` member `id` received; its priority (nil: it left). One lookup: this runs
    /// for every chunk every transfer receives.
    @discardableResult
    mutating func take(_ id: UInt64, _ bytes: Int, now: Double) -> DownloadPriority? {
        guard let index = members.index(forKey: id) else { return nil }
        members.values[index].received(bytes, now: now)
        return members.values[index].priority
    }

    /// Member `id` was told to wait until `until` (it still wants bytes meanwhile).
    mutating func hold(_ id: UInt64, until: Double) {
        members[id]?.heldUntil = until
    }

    func priority(of id: UInt64) -> DownloadPriority? {
        members[id]?.priority
    }

    /// Seconds a member still counts in the mix of priorities after it last asked: a purchase
    /// whose disk stalls for a second keeps the others held (a member that left counts no more).
    static let mixDormantAfter = 3.0

    /// The highest priority among the members that want bytes, and the weights at and below it
    /// (nil: nobody wants bytes).
    func mix(now: Double) -> OriginContention.Mix? {
        var mix: OriginContention.Mix?
        for member in members.values where member.isActive(now: now, within: Self.mixDormantAfter) {
            let weight = member.priority.weight
            guard var current = mix else {
                mix = OriginContention.Mix(top: member.priority, topWeight: weight, belowWeight: 0)
                continue
            }
            if member.priority > current.top {
                current = OriginContention.Mix(
                    top: member.priority, topWeight: weight, belowWeight: current.belowWeight + current.topWeight)
            } else if member.priority == current.top {
                current.topWeight += weight
            } else {
                current.belowWeight += weight
            }
            mix = current
        }
        return mix
    }

    /// Seconds until member `id` may receive under the budget of the priorities below the top
    /// one (0: now, or it is at the top, or there is no budget). Its part is by weight, over the
    /// members below the top that want bytes.
    mutating func originWait(_ id: UInt64, budget: Double?, mix: OriginContention.Mix?, now: Double) -> Double {
        // In place, by index: this runs for every chunk every transfer receives.
        guard let index = members.index(forKey: id) else { return 0 }
        let priority = members.values[index].priority
        guard let budget, let mix, priority < mix.top else {
            if members.values[index].originCredit != nil { members.values[index].originCredit = nil }
            return 0
        }
        let weight = priority.weight
        let part = Int64(max(1, min(budget * weight / max(mix.belowWeight, weight), Double(Int64.max / 2))))
        if members.values[index].originCredit == nil {
            members.values[index].originCredit = TokenBucket(rate: part, now: now)
        } else if members.values[index].originCredit?.rate != Double(part) {
            members.values[index].originCredit?.setRate(part, now: now)
        }
        return members.values[index].originCredit?.wait(now: now) ?? 0
    }

    /// Sets every member's credit rate to its share when the rate or the weights of the members
    /// that want bytes changed. A dormant member keeps a share of what it weighs, not counted
    /// in the others' (it is back at once when it asks again).
    private mutating func rebalance(rate: Double, now: Double) {
        let total = members.values.reduce(0) { sum, member in
            member.isActive(now: now) ? sum + member.priority.weight : sum
        }
        guard total != totalWeight || rate != sharedRate else { return }
        totalWeight = total
        sharedRate = rate
        for (id, member) in members {
            let active = member.isActive(now: now)
            let weight = member.priority.weight
            let share = rate * weight / max(active ? total : total + weight, weight)
            let shareRate = Int64(max(1, min(share, Double(Int64.max / 2))))
            if member.needsCredit {
                // A member that just joined: a full credit at its share, so it may start at once.
                members[id]?.credit = TokenBucket(rate: shareRate, now: now)
                members[id]?.needsCredit = false
            } else {
                members[id]?.credit.setRate(shareRate, now: now)
            }
        }
    }
}
