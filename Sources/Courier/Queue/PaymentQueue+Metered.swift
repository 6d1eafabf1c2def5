import Foundation
import Synchronization

/// Which downloads are background work that waits for an unmetered connection (docs/transfer.md,
/// "Metered networks"): the single predicate the agent, the pipeline's claim and its check ask.
public struct MeteredPolicy: Sendable {
    /// Whether this process's downloads are background work (the agent's: purchases it
    /// delivers, automatic updates, prefetch content) rather than a foreground run the user
    /// started and answered for.
    public var backgroundProcess: Bool
    /// `transfer.allowMetered` (or `--allow-metered`): nothing waits.
    public var allowMetered: Bool

    public init(backgroundProcess: Bool, allowMetered: Bool) {
        self.backgroundProcess = backgroundProcess
        self.allowMetered = allowMetered
    }

    /// Whether `download` waits while the connection is metered: every download of a
    /// background process does, and prefetch content (`DownloadRecord.isBackgroundWork`,
    /// docs/delivery-classes.md) wherever it runs.
    public func isBackground(_ download: DownloadRecord) -> Bool {
        !allowMetered && (backgroundProcess || download.isBackgroundWork)
    }
}

/// What the queue's claim asks before it takes a download: whether the connection is metered
/// now and which downloads wait then (set by the agent; none in a foreground run).
final class MeteredGate: Sendable {
    private let rule = Mutex<(policy: MeteredPolicy, isMetered: @Sendable () -> Bool)?>(nil)

    func set(policy: MeteredPolicy, isMetered: @escaping @Sendable () -> Bool) { rule.withLock { $0 = (policy, isMetered) } }

    /// Whether `download` must wait for an unmetered connection now.
    func holds(_ download: DownloadRecord) -> Bool {
        guard let rule = rule.withLock({ $0 }) else { return false }
        return rule.policy.isBackground(download) && rule.isMetered()
    }
}

extension PaymentQueue {
    /// Makes this queue's claim pause, rather than take, a download `policy` calls background
    /// while `isMetered()` says so (the agent, over its `NetworkMeter`).
    public func holdBackgroundWork(_ policy: MeteredPolicy, whileMetered isMetered: @escaping @Sendable () -> Bool) {
        meteredGate.set(policy: policy, isMetered: isMetered)
    }

    /// The bytes the unfinished downloads of `scope` still have to fetch (what `deliver` says
    /// before it uses a metered connection). Saturating: lengths come from a catalog.
    public func remainingBytes(scope: DeliveryScope) throws -> Int64 {
        try unfinishedDownloads(scope: scope).reduce(Int64(0)) { sum, download in
            let left = max(download.length, 0) - min(max(download.durableOffset, 0), max(download.length, 0))
            let (total, overflow) = sum.addingReportingOverflow(left)
            return overflow ? .max : total
        }
    }

    /// Tells the lifecycle of every unfinished download what the connection is (`metered`), each
    /// in its own database transaction: background work pauses as `waitingForUnmetered` (this
    /// process's running transfers stop), and once not metered what waited for it waits for a
    /// worker again. A download another live process works is left to it (a foreground run the
    /// user answered for). Returns the downloads that moved.
    @discardableResult
    public func applyConnection(metered: Bool, policy: MeteredPolicy, now: Date = Date()) throws -> [DownloadRecord] {
        var moved: [DownloadRecord] = []
        for download in try unfinishedDownloads(scope: .all) {
            let background = policy.isBackground(download)
            // The lifecycle says which downloads the connection moves, asked first on the record
            // read here: one it leaves alone costs no database transaction.
            var probe = DownloadLifecycle(record: download)
            let before = probe
            guard (try? probe.handle(.connection(metered: metered, background: background))) != nil, probe != before else {
                continue
            }
            let (record, _) = try transition(download.id) { db -> DownloadLifecycle.Event in
                switch self.leaseFact(try LeaseManager.lease(db, downloadId: download.id), now: now) {
                case .live:
                    // Another process's work: its own rules apply (the event changes nothing).
                    return .connection(metered: false, background: false)
                case .none, .ours, .stale:
                    return .connection(metered: metered, background: background)
                }
            }
            if let record { moved.append(record) }
        }
        return moved
    }
}
