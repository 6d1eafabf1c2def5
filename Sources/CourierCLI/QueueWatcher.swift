import Courier
import Foundation

/// What `status --watch` and `top` know between two readings of the queue: each active
/// download's bytes over a moving window (its rate, measured here rather than taken from the
/// store, so a download that stopped shows a falling rate and a paused one none), and the
/// plain line each download had last, for output that is not a terminal (a line per change).
struct QueueWatcher {
    private(set) var rates = RateWindow()
    /// When the last reading was taken (seconds on the monotonic clock).
    private(set) var now: Double = 0
    /// How many readings were observed.
    private(set) var refreshes = 0
    private var lastKeys: [String: String] = [:]

    static var monotonicNow: Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// Takes a reading of the queue at `time`: active downloads add a sample to their rate,
    /// any other (or one gone) is forgotten.
    mutating func observe(_ entries: [QueueEntry], at time: Double = QueueWatcher.monotonicNow) {
        now = time
        refreshes += 1
        var seen = Set<String>()
        for case let d? in entries.map(\.download) {
            seen.insert(d.id)
            if d.state == .active {
                rates.record(d.id, bytes: d.bytesReceived, at: time)
            } else {
                rates.remove(d.id)
            }
        }
        for id in rates.ids where !seen.contains(id) { rates.remove(id) }
    }

    /// The rate (bytes per second, nil while unknown) of download `id` at the last reading.
    func rate(_ id: String) -> Double? { rates.rate(id, now: now) }

    /// The plain lines of the downloads of `entries` whose line changed (state, whole percent,
    /// error, owner) since the last call; with `detailed`, in `top`'s form.
    mutating func changedLines(_ entries: [QueueEntry], detailed: Bool = false) -> [String] {
        var lines: [String] = []
        for entry in entries {
            let key = entry.download?.id ?? entry.transactionId
            let parts = Self.parts(entry, rate: entry.download.flatMap { rate($0.id) }, detailed: detailed)
            let identity = parts.fixed.joined(separator: "  ")
            guard lastKeys[key] != identity else { continue }
            lastKeys[key] = identity
            lines.append((parts.fixed + parts.moving).joined(separator: "  "))
        }
        return lines
    }

    /// A download's state as a word: "paused (interrupted)" names a reason other than the user's.
    static func stateText(_ entry: QueueEntry) -> String {
        guard let d = entry.download else { return entry.transactionState.rawValue + (entry.revoked ? " (revoked)" : "") }
        var state = d.state.rawValue
        if d.state == .paused, let reason = d.pauseReason, reason != .user { state += " (\(reason.rawValue))" }
        if let stalled = entry.stalled, d.state == .active { state += " (stalled: \(stalled.rawValue))" }
        return state
    }

    /// A plain line in two parts: what identifies its change (`fixed`: id, name, state, percent,
    /// amount, owner, error) and what moves every second (`moving`: the rate and ETA of an
    /// active download; nothing for a paused or waiting one, whose figures would be stale).
    static func parts(_ entry: QueueEntry, rate: Double?, detailed: Bool) -> (fixed: [String], moving: [String]) {
        guard let d = entry.download else {
            let fixed = (detailed ? [entry.transactionId] : []) + [entry.productId, stateText(entry)]
            return (fixed, [])
        }
        let received = min(d.length, max(0, d.bytesReceived))
        let fraction = d.state == .finished ? 1 : d.length > 0 ? Double(received) / Double(d.length) : d.progress
        var fixed = (detailed ? [d.id] : []) + [
            d.contentIdentifier, stateText(entry), "\(Int(min(1, max(0, fraction)) * 100))%",
            "\(QueueFormat.bytes(received))/\(QueueFormat.bytes(d.length))",
        ]
        if detailed, let lease = entry.lease {
            fixed.append("owner \(lease.owner.pid)@\(lease.owner.host)" + (entry.ownerAlive == true ? "" : " (dead)"))
        }
        let error = QueueFormat.errorText(d)
        if error != "-" { fixed.append("error \(error)") }
        guard d.state == .active, d.length == 0 || received < d.length else { return (fixed, []) }
        return (fixed, [ProgressLayout.rate(rate), ProgressLayout.eta(d.length - received, at: rate)])
    }
}
