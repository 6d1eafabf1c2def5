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
    /// Why this download is stalled at `now`, given its lease, or nil if it is not: the
    /// lifecycle's answer (`DownloadLifecycle.stallReason`).
    public func stallReason(lease: Lease?, now: Date = Date(), stallTimeout: Double, host: String = LeaseOwner.hostName())
        -> StallReason?
    {
        let fact: DownloadLifecycle.LeaseFact =
            lease.map { $0.isStale(now: now, host: host) ? .stale : .live(acquiredAt: $0.acquiredAt) } ?? .none
        return DownloadLifecycle(record: self).stallReason(lease: fact, now: now, stallTimeout: stallTimeout)
    }
}

/// What a review of the stalled downloads did (`PaymentQueue.reviewStalled`).
public struct StalledReview: Sendable {
    /// Downloads moved back to waiting (a pipeline picks them up).
    public var resumed: [DownloadRecord] = []
    /// Failed downloads whose next retry is due later, with when.
    public var retryAt: [String: Date] = [:]
    /// Downloads paused for space, with the free bytes each needs before it resumes.
    public var waitingForSpace: [String: Int64] = [:]

    public init() {}
}

extension PaymentQueue {
    /// The queue as `courier list` shows it, oldest transaction first: one entry per download,
    /// and one for each transaction without content. Finished transactions only when
    /// `includeFinished`. One query, so it stays fast with tens of thousands of transactions.
    public func entries(includeFinished: Bool = false, now: Date = Date()) throws -> [QueueEntry] {
        let host = leases.owner.host
        let token = leases.owner.token
        let stallTimeout = lifecycle.stallTimeout
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
                        stalled: row.download.flatMap { download in
                            let fact = Self.leaseFact(row.lease, ourToken: token) { _ in alive == true }
                            return DownloadLifecycle(record: download).stallReason(lease: fact, now: now, stallTimeout: stallTimeout)
                        }))
            }
            return entries
        }
    }

    /// Downloads that are stalled now (see `StallReason`).
    public func stalledDownloads(now: Date = Date()) throws -> [DownloadRecord] {
        try entries(now: now).filter { $0.stalled != nil }.compactMap(\.download)
    }

    /// `courier resume --stalled`: every stalled download goes back to waiting now, as the
    /// lifecycle decides for a user (`DownloadLifecycle.Trigger.user`): an active one whose owner
    /// died, a paused or failed one for a retryable reason, and an active one with a live but
    /// silent owner (its transfer is stopped: at once in this process, at its owner's next
    /// heartbeat in another).
    @discardableResult
    public func requeueStalled(now: Date = Date()) throws -> [DownloadRecord] {
        try reviewStalled(trigger: .user, now: now).resumed
    }

    /// Reviews every stalled download with the lifecycle (`DownloadLifecycle.Event.review`) and
    /// performs what it decides. `automatic` (the agent): a failed download is retried once its
    /// backoff has passed (`retries` of it so far; a `serverRejected` one at most
    /// `policy.maxRejectedRetries` times), one paused for space once `freeSpace` holds what it
    /// needs (counting the room of those resumed before it). `rerun` (`deliver` run again): every
    /// paused or failed download, stalled or not. Only downloads of `scope`. `policy` defaults
    /// to the queue's.
    public func reviewStalled(
        trigger: DownloadLifecycle.Trigger, scope: DeliveryScope = .all, policy: DownloadLifecycle.Policy? = nil,
        freeSpace: Int64? = nil, retries: (String) -> Int = { _ in 0 }, now: Date = Date()
    ) throws -> StalledReview {
        let policy = policy ?? lifecycle
        var review = StalledReview()
        var free = freeSpace
        for entry in try entries(now: now) {
            guard let download = entry.download, scope.contains(download),
                entry.stalled != nil || (trigger == .rerun && (download.state == .paused || download.state == .failed))
            else { continue }
            let input = { (lease: DownloadLifecycle.LeaseFact) in
                DownloadLifecycle.Review(
                    now: now, lease: lease, freeSpace: free, retries: retries(download.id), trigger: trigger, policy: policy)
            }
            let (record, actions) = try reviewOne(download.id, now: now, input)
            for action in actions {
                switch action {
                case .retry(let at): review.retryAt[download.id] = at
                case .resumeWhenFree(let bytes): review.waitingForSpace[download.id] = bytes
                default: break
                }
            }
            guard let record, record.state == .waiting else { continue }
            review.resumed.append(record)
            // The room it needs is taken from what the next one may count on.
            if let available = free, entry.stalled == .insufficientSpace {
                free = available - min(available, policy.space.needed(for: download))
            }
        }
        return review
    }

    /// One review in one database transaction: the lease is read with the record.
    private func reviewOne(
        _ downloadId: String, now: Date, _ input: (DownloadLifecycle.LeaseFact) -> DownloadLifecycle.Review
    ) throws -> (DownloadRecord?, [DownloadLifecycle.Action]) {
        try transition(downloadId) { db in
            .review(input(self.leaseFact(try LeaseManager.lease(db, downloadId: downloadId), now: now)))
        }
    }
}
