import Foundation
import GRDB

extension PaymentQueue {
    /// Queues the update of installed content to `content` (a newer version the catalog lists),
    /// replacing `installedVersion`, as a download of the transaction that entitles it
    /// (`content.transactionId`, which must be in the store). The transaction stays finished: an
    /// update is not a second delivery, and finishing is never announced twice.
    ///
    /// The download is the transaction's own row for that content when there is one (a finished
    /// delivery, or an earlier update), pointed at the new content; else a new row. An update
    /// already queued for the same package is left as it is (waiting, paused or failed: it keeps
    /// its partial data and its state). Returns the download, or nil when it is active now (a
    /// worker has it; the next update or catalog change retargets it).
    @discardableResult
    public func queueUpdate(_ content: QueuedContent, replacing installedVersion: String) throws -> DownloadRecord? {
        let id = DownloadRecord.makeId(transactionId: content.transactionId, contentIdentifier: content.contentIdentifier)
        let (record, removeFiles) = try commit { db -> ((DownloadRecord?, Bool), [PaymentQueueEvent]) in
            guard try QueueStore.fetchTransaction(db, id: content.transactionId) != nil else {
                throw CourierError(.notFound, "no transaction \(content.transactionId) to update \(content.contentIdentifier) for")
            }
            let now = Date()
            guard var record = try QueueStore.fetchDownload(db, id: id) else {
                let download = self.newDownload(of: content, updateFrom: installedVersion, at: now)
                try QueueStore.insert(db, download: download)
                return ((download, false), [.updatedDownloads([download])])
            }
            if record.isUpdate, record.state != .finished, record.sha256 == content.sha256.lowercased() {
                return ((record, false), [])  // already queued
            }
            var machine = DownloadLifecycle(record: record)
            let actions: [DownloadLifecycle.Action]
            do {
                actions = try machine.handle(.retarget)
            } catch let error as CourierError where error.code == .invalidState {
                // The lifecycle refuses while it is active: its worker ends the old one first.
                return ((nil, false), [])
            }
            record.url = content.url
            record.sha256 = content.sha256.lowercased()
            record.length = content.length
            record.version = content.version
            record.placement = content.placement
            record.unpackedLength = content.unpackedLength
            record.updateFrom = installedVersion
            record.mirrors = content.mirrors
            record.manifest = content.manifest
            record.delivery = content.delivery
            record.preservation = content.preservation
            record.source = nil
            record.updatedAt = now
            try QueueStore.retarget(db, download: record)
            record.apply(machine, at: now)
            try QueueStore.updateState(db, download: record)
            // The old package's partial data is worthless now. A stale lease goes with it; a
            // live one (a process between its claim and its work) drops the data itself.
            var removeFiles = actions.contains(.removePartialData)
            if removeFiles, let lease = try LeaseManager.lease(db, downloadId: id), lease.owner.token != self.leases.owner.token {
                if lease.isStale(host: self.leases.owner.host) {
                    try QueueStore.deleteLease(db, downloadId: id)
                } else {
                    removeFiles = false
                }
            }
            try QueueStore.resetJournal(db, downloadId: id, now: now)
            record = try QueueStore.fetchDownload(db, id: id) ?? record
            return ((record, removeFiles), [.updatedDownloads([record])])
        }
        if removeFiles { removePartialData(id) }
        return record
    }

    /// Records the refunds that `copies` show (copies of stored transactions read later, such as
    /// a fresh receipt's): a stored transaction whose copy is not revoked takes the revoked copy,
    /// which entitlement checks (`verifiedTransactions`: `courier update`, the agent's updates)
    /// and `list` (`QueueEntry.revoked`) read from then on. Its state is left as it is: a finished
    /// purchase stays finished, and its content stays where it is. Copies of transactions the
    /// store lacks, and copies that are not revoked, are ignored. Returns the transactions
    /// recorded revoked now.
    @discardableResult
    public func recordRevocations(_ copies: [VerifiedTransaction]) throws -> [TransactionRecord] {
        let revoked = VerifiedTransaction.latestCopies(copies).filter { $0.revocationDate != nil }
        guard !revoked.isEmpty else { return [] }
        return try commit { db -> ([TransactionRecord], [PaymentQueueEvent]) in
            var records: [TransactionRecord] = []
            for copy in revoked {
                guard var record = try QueueStore.fetchTransaction(db, id: copy.transactionId),
                    record.verified.revocationDate == nil
                else { continue }
                record.verified = copy
                record.updatedAt = Date()
                try QueueStore.update(db, transaction: record, verified: true)
                records.append(record)
            }
            return (records, records.isEmpty ? [] : [.updatedTransactions(records)])
        }
    }

    /// Every verified transaction in the store, finished or not (a revoked one as recorded):
    /// what an update checks entitlements against.
    public func verifiedTransactions() throws -> [VerifiedTransaction] {
        try read { db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT \(QueueStore.transactionColumns()) FROM transactions ORDER BY createdAt, id"))
                .map { try QueueStore.transaction($0).verified }
        }
    }

    /// The updates that are not finished (waiting, active, paused, failed), oldest first.
    public func pendingUpdates() throws -> [DownloadRecord] {
        try read { db in
            try Row.fetchAll(
                db.cachedStatement(sql: """
                    SELECT \(QueueStore.downloadColumns()) FROM downloads
                    WHERE updateFrom IS NOT NULL AND state NOT IN ('finished', 'cancelled')
                    ORDER BY createdAt, id
                    """)
            ).map { try QueueStore.download($0) }
        }
    }
}
