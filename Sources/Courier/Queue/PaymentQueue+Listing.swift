import Foundation

/// Why a download counts as stalled (DESIGN.md, "CLI for stalled downloads").
public enum StallReason: String, Sendable, Codable {
    /// Active, but the process holding its lease died or stopped its heartbeat.
    case ownerDied
    /// Active, but no byte arrived for the stall timeout.
    case noBytes
    /// Paused when its process was stopped (SIGTERM, SIGINT, kill).
    case interrupted
    /// Failed for the network.
    case network
    /// Paused for lack of disk space.
    case insufficientSpace
    /// Failed because another process still had its partial file open (`leased`: a worker frozen
    /// past its lease); it may run once that process is gone.
    case partialFileBusy
}

/// One line of `courier list`: a transaction and one of its downloads (none when it has no
/// content), with the download's lease and whether it is stalled.
public struct QueueEntry: Sendable, Codable, Equatable {
    public var transactionId: String
    public var productId: String
    public var transactionState: TransactionState
    /// The App Store refunded or revoked the transaction (its stored copy says so).
    public var revoked: Bool
    public var transactionCreatedAt: Date
    public var download: DownloadRecord?
    public var lease: Lease?
    /// Whether the lease's owner is alive (nil without a lease).
    public var ownerAlive: Bool?
    public var stalled: StallReason?
}

extension DownloadRecord {
    /// Why this download is stalled at `now`, given its lease, or nil if it is not.
    public func stallReason(lease: Lease?, now: Date = Date(), stallTimeout: Double, host: String = LeaseOwner.hostName())
        -> StallReason?
    {
        switch state {
        case .active:
            guard let lease, !lease.isStale(now: now, host: host) else { return .ownerDied }
            let lastBytes = lastProgressAt ?? lease.acquiredAt
            return now.timeIntervalSince(lastBytes) > stallTimeout ? .noBytes : nil
        case .paused:
            switch pauseReason {
            case .interrupted?: return .interrupted
            case .insufficientSpace?: return .insufficientSpace
            case .user?, nil: return nil
            }
        case .failed:
            switch errorCode {
            // A 404 may be a CDN that has not got the package yet: retried like the network.
            case .network?, .serverRejected?: return .network
            case .leased?: return .partialFileBusy
            default: return nil
            }
        case .waiting, .finished, .cancelled:
            return nil
        }
    }
}

extension PaymentQueue {
    /// The queue as `courier list` shows it, oldest transaction first: one entry per download,
    /// and one for each transaction without content. Finished transactions only when
    /// `includeFinished`. One query, so it stays fast with tens of thousands of transactions.
    public func entries(includeFinished: Bool = false, now: Date = Date()) throws -> [QueueEntry] {
        let host = leases.owner.host
        let stallTimeout = configuration.stallTimeout
        return try read { db in
            var entries: [QueueEntry] = []
            var liveness: [String: Bool] = [:]
            try QueueStore.entries(db, includeFinished: includeFinished) { row in
                var alive: Bool?
                if let lease = row.lease {
                    let key = "\(lease.owner.host) \(lease.owner.pid) \(lease.owner.startTime ?? -1) \(lease.expiresAt <= now)"
                    if let known = liveness[key] {
                        alive = known
                    } else {
                        alive = !lease.isStale(now: now, host: host)
                        liveness[key] = alive
                    }
                }
                entries.append(
                    QueueEntry(
                        transactionId: row.transactionId, productId: row.productId,
                        transactionState: row.transactionState, revoked: row.revoked, transactionCreatedAt: row.transactionCreatedAt,
                        download: row.download, lease: row.lease, ownerAlive: alive,
                        stalled: row.download?.stallReason(lease: row.lease, now: now, stallTimeout: stallTimeout, host: host)))
            }
            return entries
        }
    }

    /// Downloads that are stalled now (see `StallReason`).
    public func stalledDownloads(now: Date = Date()) throws -> [DownloadRecord] {
        try entries(now: now).filter { $0.stalled != nil }.compactMap(\.download)
    }

    /// Moves stalled downloads back to waiting so a pipeline picks them up: an active one whose
    /// owner died, or a paused or failed one for a retryable reason. An active one with a live
    /// but silent owner is paused (its owner stops at its next heartbeat) and then waits.
    @discardableResult
    public func requeueStalled(now: Date = Date()) throws -> [DownloadRecord] {
        var moved: [DownloadRecord] = []
        for entry in try entries(now: now) {
            guard let download = entry.download, let reason = entry.stalled else { continue }
            switch reason {
            case .ownerDied:
                if let record = try transition(download.id, .ownerDied) { moved.append(record) }
            case .noBytes:
                try transition(download.id, .pause(.user))
                if let record = try transition(download.id, .resume) { moved.append(record) }
            case .interrupted, .network, .insufficientSpace, .partialFileBusy:
                if let record = try transition(download.id, .resume) { moved.append(record) }
            }
        }
        return moved
    }
}
