import Foundation
import GRDB

extension CourierError.Code {
    /// Why a download paused when its process stopped (SIGTERM, SIGINT, shutdown): picked up
    /// again automatically by the next pipeline run, unlike a user's pause.
    public static let interrupted = CourierError.Code(rawValue: "interrupted")
}

/// Which downloads a pipeline run works.
public enum DeliveryScope: Sendable, Equatable {
    /// Every unfinished download in the store.
    case all
    case downloads(Set<String>)
    case transactions(Set<String>)

    /// Whether the scope covers `download` (of `transactionId` when given separately).
    public func contains(downloadId: String?, transactionId: String) -> Bool {
        switch self {
        case .all: return true
        case .transactions(let ids): return ids.contains(transactionId)
        case .downloads(let ids): return downloadId.map(ids.contains) ?? false
        }
    }

    /// Whether the scope covers `download`.
    public func contains(_ download: DownloadRecord) -> Bool {
        contains(downloadId: download.id, transactionId: download.transactionId)
    }

    /// `ids` as one JSON array, for `IN (SELECT value FROM json_each(?))`: the SQL text stays the
    /// same however many ids there are, so its compiled statement is reused.
    static func jsonList(_ ids: Set<String>) -> String {
        // Built by hand: JSONSerialization costs more than the query for a few hundred ids.
        // Ids are plain (hex digits, App Store numbers): joined as they are, escaped otherwise.
        let plain = ids.allSatisfy { id in
            id.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
        }
        if plain { return ids.isEmpty ? "[]" : "[\"" + ids.joined(separator: "\",\"") + "\"]" }
        var json = "["
        for (index, id) in ids.enumerated() {
            if index > 0 { json += "," }
            json += "\""
            for scalar in id.unicodeScalars {
                switch scalar {
                case "\"": json += "\\\""
                case "\\": json += "\\\\"
                case _ where scalar.value < 0x20: json += String(format: "\\u%04x", scalar.value)
                default: json.unicodeScalars.append(scalar)
                }
            }
            json += "\""
        }
        return json + "]"
    }
}

extension PaymentQueue {
    /// Takes up to `limit` downloads of `scope` that need a worker, each in its own database
    /// transaction: waiting ones, ones paused by an interruption, and active ones whose owner
    /// died (their lease is stale). Each comes back `active` under this process's lease.
    func claim(scope: DeliveryScope, limit: Int, now: Date = Date()) throws -> [DownloadRecord] {
        guard limit > 0 else { return [] }
        if case .downloads(let ids) = scope, ids.isEmpty { return [] }
        if case .transactions(let ids) = scope, ids.isEmpty { return [] }
        let candidates: [String] = try read { db in
            try QueueStore.claimCandidates(db, scope: scope, notLeasedTo: leases.owner.token, limit: limit * 4 + 8)
        }
        var claimed: [DownloadRecord] = []
        for id in candidates where claimed.count < limit {
            // Lazy: a claim lost to a power cut only leaves the download waiting.
            let record: DownloadRecord? = try commit(durable: false) { db in
                guard var record = try QueueStore.fetchDownload(db, id: id) else { return (nil, []) }
                // The lifecycle decides: a waiting download, one paused by an interruption, or
                // an active one whose owner died, once no live process holds it.
                let lease = self.leaseFact(try LeaseManager.lease(db, downloadId: id), now: now)
                var machine = DownloadLifecycle(record: record)
                // Background work waits while the connection is metered: the lifecycle pauses it
                // (`waitingForUnmetered`) instead of letting it be taken.
                if self.meteredGate.holds(record) {
                    if case .live = lease { return (nil, []) }
                    let actions = try machine.handle(.connection(metered: true, background: true))
                    guard actions.contains(.persist) else { return (nil, []) }
                    record.apply(machine, at: now)
                    try QueueStore.updateState(db, download: record)
                    return (nil, [.updatedDownloads([record])])
                }
                let actions = try machine.handle(.claim(lease))
                guard actions.contains(.takeLease) else { return (nil, []) }
                // The lease was read above and is free or stale: taken without reading it again.
                try self.leases.take(db, downloadId: id, now: now)
                record.apply(machine, at: now)
                try QueueStore.updateState(db, download: record)
                return (record, [.updatedDownloads([record])])
            }
            if let record { claimed.append(record) }
        }
        return claimed
    }

    /// The lifecycle's view of `lease` at `now`: none, this process's, a live process's, or stale
    /// (expired, or its owner on this host is gone: `/proc` is read here, not in the machine).
    func leaseFact(_ lease: Lease?, now: Date) -> DownloadLifecycle.LeaseFact {
        Self.leaseFact(lease, ourToken: leases.owner.token) { !$0.isStale(now: now, host: self.leases.owner.host) }
    }

    /// `lease` as a fact: this process's (`ourToken`), else live or stale as `alive` says.
    static func leaseFact(_ lease: Lease?, ourToken: String, alive: (Lease) -> Bool) -> DownloadLifecycle.LeaseFact {
        guard let lease else { return .none }
        if lease.owner.token == ourToken { return .ours(acquiredAt: lease.acquiredAt) }
        return alive(lease) ? .live(acquiredAt: lease.acquiredAt) : .stale
    }

    /// Whether some download of `scope` still needs work but another live process holds it.
    func hasWorkHeldElsewhere(scope: DeliveryScope, now: Date = Date()) throws -> Bool {
        if case .all = scope { return false }
        return try !workedElsewhere(scope: scope, now: now).held.isEmpty
    }

    /// One read of the downloads of `scope` that another live process works now (`held`, with
    /// the owner of each), and the records of `following` (downloads seen held before) that this
    /// process does not hold: how a run follows another process's work from the store.
    func workedElsewhere(scope: DeliveryScope, following: some Collection<String> = [String](), now: Date = Date()) throws
        -> (held: [(download: DownloadRecord, owner: LeaseOwner)], followed: [DownloadRecord])
    {
        let token = leases.owner.token
        return try read { db in
            let held = try QueueStore.leasesOnUnsettled(db, scope: scope).filter { lease in
                lease.owner.token != token && !lease.isStale(now: now, host: self.leases.owner.host)
            }.compactMap { lease in try QueueStore.fetchDownload(db, id: lease.downloadId).map { ($0, lease.owner) } }
            let followed = try following.filter { id in
                try LeaseManager.lease(db, downloadId: id)?.owner.token != token
            }.compactMap { try QueueStore.fetchDownload(db, id: $0) }
            return (held, followed)
        }
    }

    /// Renews this process's lease on `downloadId`; returns false when the lease was lost or
    /// the download is no longer active (another process paused or cancelled it).
    func heartbeat(_ downloadId: String, now: Date = Date()) throws -> Bool {
        try commit(durable: false) { db in
            let held = try self.leases.heartbeat(db, downloadId: downloadId, now: now)
            return (try held && QueueStore.downloadState(db, id: downloadId) == .active, [])
        }
    }

    /// Gives up this process's lease on `downloadId`.
    func releaseLease(_ downloadId: String) {
        _ = try? commit(durable: false) { db in
            try self.leases.release(db, downloadId: downloadId)
            return ((), [])
        }
    }

    /// Records the progress of an active download and tells observers.
    func recordProgress(_ downloadId: String, _ progress: DownloadProgress, length: Int64, now: Date = Date()) {
        _ = try? commit(durable: false) { db -> (Void, [PaymentQueueEvent]) in
            guard try QueueStore.recordProgress(db, downloadId: downloadId, progress, length: length, now: now),
                let record = try QueueStore.fetchDownload(db, id: downloadId)
            else { return ((), []) }
            return ((), [.updatedDownloads([record])])
        }
    }

    /// The unfinished transactions of `scope` whose downloads are all finished (a process died
    /// between placing the last one and finishing), plus those with no content at all.
    func deliveredButUnfinished(scope: DeliveryScope) throws -> [String] {
        try read { db in try QueueStore.deliveredButUnfinished(db, scope: scope) }
    }

    /// The unfinished downloads of unfinished transactions in `scope`, oldest first.
    func unfinishedDownloads(scope: DeliveryScope) throws -> [DownloadRecord] {
        try read { db in try QueueStore.unfinishedDownloads(db, scope: scope) }
    }

    /// The state of `downloadId` alone, nil when there is no such download (what the pipeline
    /// checks between its stages: one column, not the whole record).
    func downloadState(_ downloadId: String) throws -> DownloadState? {
        try read { db in try QueueStore.downloadState(db, id: downloadId) }
    }

    /// Whether this process holds the lease on `downloadId`.
    func holdsLease(_ downloadId: String) throws -> Bool {
        try lease(downloadId)?.owner.token == leases.owner.token
    }
}
