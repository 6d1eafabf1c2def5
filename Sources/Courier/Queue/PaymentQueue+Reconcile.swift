import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// What `PaymentQueue.reconcile` changed.
public struct Reconciliation: Sendable, Equatable {
    /// Unfinished downloads now fetched from the current catalog's URLs for the same package
    /// (same SHA-256 and length): their state and the bytes already fetched are kept.
    public var relocated: [DownloadRecord] = []
    /// Unfinished downloads whose package the current catalog replaced (another SHA-256 or
    /// length): their partial data is gone and they start over.
    public var retargeted: [DownloadRecord] = []
    /// Downloads of content that was delivered once but is gone now (deleted, purged, its folder
    /// removed), queued again: a restore. Their transactions stay finished.
    public var redelivered: [DownloadRecord] = []

    public init() {}

    public var isEmpty: Bool { relocated.isEmpty && retargeted.isEmpty && redelivered.isEmpty }
}

extension PaymentQueue {
    /// Brings the stored downloads of `content`'s transactions in line with the catalog of the
    /// current run (`content`: what it entitles, resolved against its location), so a purchase
    /// first queued from a wrong or outdated catalog is never stuck with it:
    ///
    /// - a waiting, paused, failed or cancelled download of the same package (same SHA-256 and
    ///   length) takes the catalog's URL, mirrors, manifest and placement; its state, journal
    ///   and partial file are kept (the transfer resumes them from any URL serving the bytes);
    /// - one whose package changed (another SHA-256 or length) is pointed at the new package
    ///   and starts over cleanly (partial data dropped), waiting again unless it was cancelled;
    /// - with `redeliverMissing` (a restore, or the agent for content whose folder vanished), a
    ///   finished or cancelled download whose content is not in place (no record, or its folder
    ///   gone) is queued again for the catalog's package, and one the store lacks is added.
    ///   Its transaction is not touched: a finished one stays finished (finished once, announced
    ///   once), and placing the content records it like any delivery.
    ///
    /// Active downloads, downloads another live process holds and pending updates to another
    /// package are left alone. Transactions not in the store are ignored (`add` queues them).
    ///
    /// On-demand content the store has no download of is added only when `requested` names it
    /// (`CourierClient.openContent`): a restore does not fetch what nobody asked for.
    ///
    /// The lifecycle makes each of these decisions (`DownloadLifecycle.Event.reconcile`,
    /// `DownloadLifecycle.reconcileMissing`); this shell reads the facts and performs the
    /// actions, in one database transaction.
    @discardableResult
    public func reconcile(_ content: [QueuedContent], redeliverMissing: Bool, requested: Set<String> = []) throws
        -> Reconciliation
    {
        guard !content.isEmpty else { return Reconciliation() }
        // Partial data is dropped inside the database transaction, before the download waits
        // again: a worker can claim it only after the commit, so it never starts writing a
        // partial file that is then removed under it.
        return try commit { db -> (Reconciliation, [PaymentQueueEvent]) in
            var result = Reconciliation()
            let now = Date()
            for item in content {
                guard let transaction = try QueueStore.fetchTransaction(db, id: item.transactionId) else { continue }
                let id = DownloadRecord.makeId(transactionId: item.transactionId, contentIdentifier: item.contentIdentifier)
                let stored = try QueueStore.fetchDownload(db, id: id)
                // The facts; the lifecycle decides (`DownloadLifecycle.Event.reconcile`).
                var facts = DownloadLifecycle.CatalogFacts(
                    transaction: transaction.state, contentPlaced: try self.contentIsPlaced(db, item.contentIdentifier),
                    redeliverMissing: redeliverMissing, onDemand: item.delivery == .onDemand,
                    requested: requested.contains(item.contentIdentifier))
                guard var record = stored else {
                    for case .add in DownloadLifecycle.reconcileMissing(facts) {
                        let download = self.newDownload(of: item, at: now)
                        try QueueStore.insert(db, download: download)
                        result.redelivered.append(download)
                    }
                    continue
                }
                facts.lease = self.leaseFact(try LeaseManager.lease(db, downloadId: id), now: now)
                facts.samePackage = record.sha256 == item.sha256.lowercased() && record.length == item.length
                facts.pendingUpdate = record.isUpdate
                facts.changed = record.catalogChanges(to: item)
                facts.validatorApplies = TransferEngine.validatorApplies(from: record.url, to: item.url)
                var machine = DownloadLifecycle(record: record)
                for action in try machine.handle(.reconcile(facts)) {
                    switch action {
                    case .persist:
                        record.apply(machine, at: now)
                        try QueueStore.updateState(db, download: record)
                    case .clearValidator:
                        try db.execute(sql: "UPDATE downloads SET etag = NULL, lastModified = NULL WHERE id = ?", arguments: [id])
                        record.etag = nil
                        record.lastModified = nil
                    case .relocate:
                        record.url = item.url
                        record.mirrors = item.mirrors
                        record.manifest = item.manifest
                        record.placement = item.placement
                        record.unpackedLength = item.unpackedLength
                        record.delivery = item.delivery
                        record.preservation = item.preservation
                        record.source = nil
                        record.updatedAt = now
                        try QueueStore.retarget(db, download: record)
                        result.relocated.append(record)
                    case .retarget:
                        record = try self.retarget(db, record, to: item, now: now)
                        result.retargeted.append(record)
                    case .redeliver:
                        record = try self.retarget(db, record, to: item, now: now)
                        result.redelivered.append(record)
                    case .removePartialData:
                        self.removePartialData(id)
                    case .add, .stopTransfer, .takeLease, .retry, .resumeWhenFree:
                        continue  // not answers to `.reconcile`
                    }
                }
            }
            let changed = result.relocated + result.retargeted + result.redelivered
            return (result, changed.isEmpty ? [] : [.updatedDownloads(changed)])
        }
    }

    /// The finished download that last placed `contentIdentifier` (the package it came from:
    /// URL, SHA-256, manifest), if the store has one.
    public func lastDelivery(of contentIdentifier: String) throws -> DownloadRecord? {
        try read { db in
            try Row.fetchOne(
                db.cachedStatement(sql: """
                    SELECT \(QueueStore.downloadColumns()) FROM downloads
                    WHERE contentIdentifier = ? AND state = 'finished' ORDER BY updatedAt DESC, id LIMIT 1
                    """),
                arguments: [contentIdentifier]
            ).map { try QueueStore.download($0) }
        }
    }

    /// The finished downloads of `name`: a content identifier, else a product's (its items').
    public func finishedDownloads(named name: String) throws -> [DownloadRecord] {
        let finished = try read { db in
            try Row.fetchAll(
                db.cachedStatement(sql: """
                    SELECT \(QueueStore.downloadColumns()) FROM downloads
                    WHERE (contentIdentifier = ? OR productId = ?) AND state = 'finished' ORDER BY updatedAt DESC, id
                    """),
                arguments: [name, name]
            ).map { try QueueStore.download($0) }
        }
        let exact = finished.filter { $0.contentIdentifier.isIdentical(to: name) }
        return exact.isEmpty ? finished : exact
    }

    /// Queues finished download `downloadId` again for the package it names (a repair of
    /// content that is damaged or gone: the whole package is fetched and placed over it). Its
    /// transaction stays finished. Returns the download, waiting.
    @discardableResult
    public func redeliver(_ downloadId: String) throws -> DownloadRecord {
        let record = try commit { db -> (DownloadRecord, [PaymentQueueEvent]) in
            guard let record = try QueueStore.fetchDownload(db, id: downloadId) else {
                throw CourierError(.notFound, "no download \(downloadId)")
            }
            guard record.state == .finished || record.state == .cancelled else {
                throw CourierError(.invalidState, "download \(downloadId) is \(record.state.rawValue), not finished")
            }
            let content = QueuedContent(
                contentIdentifier: record.contentIdentifier, productId: record.productId, transactionId: record.transactionId,
                url: record.url, sha256: record.sha256, length: record.length, version: record.version, placement: record.placement,
                unpackedLength: record.unpackedLength, mirrors: record.mirrors, manifest: record.manifest,
                delivery: record.delivery, preservation: record.preservation)
            let now = Date()
            var waiting = record
            var machine = DownloadLifecycle(record: record)
            let actions = try machine.handle(.retarget)
            if actions.contains(.persist) {
                waiting.apply(machine, at: now)
                try QueueStore.updateState(db, download: waiting)
            }
            // Before it waits again (see `reconcile`): no worker can have claimed it yet.
            if actions.contains(.removePartialData) { self.removePartialData(downloadId) }
            waiting = try self.retarget(db, waiting, to: content, now: now)
            return (waiting, [.updatedDownloads([waiting])])
        }
        return record
    }

    /// Points `record` at `content` in the caller's transaction, once the lifecycle's state is
    /// persisted: the catalog's fields, no lease, no journal (the caller removes the files in the
    /// same commit: the lifecycle's `removePartialData`). Returns the record as stored.
    private func retarget(_ db: Database, _ record: DownloadRecord, to content: QueuedContent, now: Date) throws
        -> DownloadRecord
    {
        var record = record
        record.url = content.url
        record.sha256 = content.sha256.lowercased()
        record.length = content.length
        record.version = content.version
        record.placement = content.placement
        record.unpackedLength = content.unpackedLength
        record.mirrors = content.mirrors
        record.manifest = content.manifest
        record.delivery = content.delivery
        record.preservation = content.preservation
        record.updateFrom = nil
        record.source = nil
        record.updatedAt = now
        try QueueStore.retarget(db, download: record)
        try QueueStore.deleteLease(db, downloadId: record.id)
        // After the state: a download that leaves `finished` loses its progress too.
        try QueueStore.resetJournal(db, downloadId: record.id, now: now)
        return try QueueStore.fetchDownload(db, id: record.id) ?? record
    }

    /// Whether content `contentIdentifier` is in place: recorded as delivered, and its folder
    /// exists where its placement puts it.
    func contentIsPlaced(_ db: Database, _ contentIdentifier: String) throws -> Bool {
        guard let delivered = try ContentRows.delivered(db, contentIdentifier: contentIdentifier) else { return false }
        let folder = (delivered.placement == .cache ? layout.caches : layout.documents)
            .appendingPathComponent(contentIdentifier, isDirectory: true)
        return access(folder.path, F_OK) == 0
    }

    /// The content purged for space (`ContentPlacer.ensureSpace`) and not placed since: what a
    /// `deliver` brings back while it is entitled.
    public func purgedContent() throws -> Set<String> {
        try read { db in try ContentRows.purged(db) }
    }

    /// The delivered content whose folder is gone (removed behind Courier's back: a cache
    /// cleaner, a user's `rm`), by identifier: what the agent delivers again.
    public func vanishedContent() throws -> Set<String> {
        try read { db in
            let identifiers = try String.fetchAll(db, sql: "SELECT contentIdentifier FROM delivered_content ORDER BY contentIdentifier")
            return try Set(identifiers.filter { try !self.contentIsPlaced(db, $0) })
        }
    }
}

extension DownloadRecord {
    /// The fields in which `content` (the run's catalog) differs from this download, besides
    /// its package: what `reconcile` relocates.
    func catalogChanges(to content: QueuedContent) -> Set<DownloadLifecycle.CatalogField> {
        var changed: Set<DownloadLifecycle.CatalogField> = []
        if url != content.url { changed.insert(.url) }
        if mirrors != content.mirrors { changed.insert(.mirrors) }
        if manifest != content.manifest { changed.insert(.manifest) }
        if placement != content.placement { changed.insert(.placement) }
        if unpackedLength != content.unpackedLength { changed.insert(.unpackedLength) }
        if delivery != content.delivery { changed.insert(.delivery) }
        if preservation != content.preservation { changed.insert(.preservation) }
        return changed
    }
}
