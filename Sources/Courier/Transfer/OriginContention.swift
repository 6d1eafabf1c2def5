import Foundation

/// Priorities when the origin (or the path to it) is the bottleneck rather than a limit of ours.
/// Pure: the caller passes the time (monotonic seconds) and what it received.
///
/// Weights (`PriorityShare`) can only divide a rate Courier knows. With no limit of its own
/// binding, every transfer takes what TCP gives it, and a new purchase beside four updates gets a
/// fifth of the origin. So the process measures what it receives, and while transfers of more
/// than one priority want bytes, the ones below the highest priority get a *budget* together:
/// - `capacity`: what the process received a second lately, a maximum that decays by `decay` a
///   second (half-second bins, smoothed), so it follows an origin that slows down; it does not
///   decay while squeezing, when receiving less is this machine's doing, and rises by `rise` a
///   second at most (a released socket's kept bytes arrive in a burst).
/// - `squeeze`: as soon as a higher priority joins, the lower ones get their weighted share of
///   the capacity (`capacity × Σweight below / Σweight × margin`), e.g. 4/24 × 0.6 (10%) for
///   four updates beside a purchase. The room they leave is the higher one's to take. While it takes at least
///   `useRatio` of that room (the origin is the bottleneck), the squeeze holds.
/// - `yield`: once it has taken less for `probe` seconds in a row without growing by `growing`
///   a bin (a new connection's slow start grows), its own path is the bottleneck (a per-connection
///   limit, a far mirror, a limit of its own): what it receives is its *reserve*, and the lower ones get the rest. Their
///   budget then grows by `increase` of the capacity each bin while the higher ones keep at least
///   `satisfied` of their reserve, and shrinks by `backoff` each bin while they fall below
///   `crowded` of it (the lower ones crowd them out at the origin): additive increase,
///   multiplicative decrease, as TCP finds a link's rate. After `reprobe` seconds it squeezes
///   again to look, then after twice as long while the looks find nothing, up to `maxReprobe`.
///
/// The lower ones never get less than `floor` together, so nothing starves. When one of
/// Courier's own limits binds, `PriorityShare` divides that limit exactly and this stands aside.
struct OriginContention: Sendable, Equatable {
    enum Phase: Sendable, Equatable {
        /// One priority only (or nothing measured yet): nobody is held back.
        case open
        /// Lower priorities held to their share since `since`.
        case squeeze(since: Double)
        /// Lower priorities get what the higher ones leave of the capacity, the higher ones
        /// keeping `reserve` bytes a second, until `until`.
        case yield(until: Double, reserve: Double)
    }

    /// Who wants bytes now: the highest priority, and the weights at it and below it.
    struct Mix: Sendable, Equatable {
        var top: DownloadPriority
        var topWeight: Double
        var belowWeight: Double
    }

    static let bin = 0.5
    static let probe = 3.0
    static let reprobe = 10.0
    static let maxReprobe = 60.0
    static let decay = 0.9
    static let rise = 1.25
    static let useRatio = 0.6
    static let satisfied = 0.9
    static let crowded = 0.9
    static let increase = 0.02
    static let backoff = 0.75
    /// A top rate above this many times the last bin's is still growing.
    static let growing = 1.1
    static let steady = 0.15
    /// The part of their weighted share the lower ones get while squeezed: the capacity is an
    /// estimate that errs high (bursts), and what they were allowed still arrives for a while,
    /// so the higher ones would fall short of their weight's share without it.
    static let margin = 0.6
    /// The least the lower priorities get together, bytes a second.
    static let floor = 16.0 * 1024

    private(set) var phase = Phase.open
    /// Bytes a second the process can receive, as measured; nil until a bin is measured.
    private(set) var capacity: Double?
    /// Smoothed rates of the last bins: all transfers, and those at the top priority.
    private(set) var totalRate = 0.0
    private(set) var topRate = 0.0
    /// The top rate smoothed over a few seconds (a weight of `steady` per bin), and one bin
    /// earlier: a squeeze is judged on it, not on a second's dip (a disk flush, a busy core).
    private(set) var steadyTopRate = 0.0
    private var lastSteadyTopRate = 0.0
    /// What the lower priorities may receive together now (nil: no budget).
    private(set) var budget: Double?
    /// The top priority of the last `update`: what `record` counts as top.
    private(set) var top: DownloadPriority?
    private var binStart: Double?
    private var binTotal = 0.0
    private var binTop = 0.0
    private var measured = false
    /// A bin closed since the last `update` (the yield's budget moves once a bin).
    private var binClosed = false
    /// How long the next yield lasts (doubles after each look that found the origin free).
    private var nextYield = Self.reprobe
    /// Since when the higher ones have taken less than `useRatio` of their room while squeezing.
    private var shortSince: Double?

    /// Counts `bytes` received by a transfer of `priority`.
    mutating func record(_ bytes: Int, priority: DownloadPriority, now: Double) {
        roll(now: now)
        let bytes = Double(max(0, bytes))
        binTotal += bytes
        if top.map({ priority >= $0 }) ?? true { binTop += bytes }
    }

    /// The budget of the transfers below `mix.top` now (nil: nobody is held back), after the
    /// phase has followed the mix, the rates and the clock. `bound`: one of Courier's own limits
    /// binds (its shares are `PriorityShare`'s to divide).
    mutating func update(mix: Mix?, bound: Bool, now: Double) -> Double? {
        roll(now: now)
        let closed = binClosed
        binClosed = false
        if mix?.top != top {
            // A new top priority: what the old one received says nothing of it.
            topRate = 0
            steadyTopRate = 0
            lastSteadyTopRate = 0
            binTop = 0
            top = mix?.top
        }
        guard let mix, mix.belowWeight > 0, !bound, let capacity else {
            phase = .open
            budget = nil
            nextYield = Self.reprobe
            return nil
        }
        let share = max(Self.floor, capacity * mix.belowWeight / (mix.topWeight + mix.belowWeight) * Self.margin)
        switch phase {
        case .open:
            phase = .squeeze(since: now)
            shortSince = now
            budget = share
        case .squeeze(let since):
            budget = share
            if steadyTopRate >= (capacity - share) * Self.useRatio {
                // The higher ones take the room: the origin is the bottleneck.
                shortSince = nil
                if now - since >= Self.probe { nextYield = Self.reprobe }
                break
            }
            // Still growing (a new connection's slow start): not yet a verdict on its path.
            let short = steadyTopRate > lastSteadyTopRate * Self.growing ? now : shortSince ?? now
            shortSince = short
            if now - short >= Self.probe {
                // They have not taken it for `probe` seconds: give the rest back, look again later.
                phase = .yield(until: now + nextYield, reserve: steadyTopRate)
                nextYield = min(Self.maxReprobe, nextYield * 2)
                budget = max(share, capacity - steadyTopRate)
                shortSince = nil
            }
        case .yield(let until, let reserve):
            if now >= until {
                phase = .squeeze(since: now)
                shortSince = now
                budget = share
                break
            }
            if topRate > reserve { phase = .yield(until: until, reserve: topRate) }
            guard closed else { break }
            var next = budget ?? share
            if topRate < reserve * Self.crowded {
                next *= Self.backoff
            } else if topRate >= reserve * Self.satisfied {
                // Grow, but not far past what the lower ones manage to receive.
                let lower = max(0, totalRate - topRate)
                next = min(next + capacity * Self.increase, max(next, lower * 1.25 + share))
            }
            budget = max(share, next)
        }
        return budget
    }

    /// Closes the bin when it is `bin` seconds old: the smoothed rates and the capacity follow.
    /// A bin much longer (nobody asked for a while) measures idleness, not the origin: dropped.
    private mutating func roll(now: Double) {
        guard let start = binStart, now >= start else {
            binStart = now
            return
        }
        let elapsed = now - start
        guard elapsed >= Self.bin else { return }
        defer {
            binStart = now
            binTotal = 0
            binTop = 0
        }
        guard elapsed <= 4 * Self.bin else { return }
        binClosed = true
        let total = binTotal / elapsed
        let topBytes = binTop / elapsed
        lastSteadyTopRate = steadyTopRate
        steadyTopRate += (topBytes - steadyTopRate) * Self.steady
        if measured {
            totalRate = (totalRate + total) / 2
            topRate = (topRate + topBytes) / 2
        } else {
            totalRate = total
            topRate = topBytes
            measured = true
        }
        // While squeezing, receiving less is ours to cause: the estimate only rises then.
        let squeezing = if case .squeeze = phase { true } else { false }
        let decayed = (capacity ?? 0) * (squeezing ? 1 : pow(Self.decay, elapsed))
        // It rises by `rise` a second at most: bytes a held transfer's socket kept come in a
        // burst when it is let go, far above what the origin gives.
        let raised = capacity.map { min(totalRate, $0 * pow(Self.rise, elapsed)) } ?? totalRate
        capacity = max(raised, decayed) > 0 ? max(raised, decayed) : nil
    }
}
