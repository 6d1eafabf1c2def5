import Foundation
import GRDB

/// The queue's SQL, all of it: reading and writing the rows of the tables `QueueSchema` creates
/// (transactions, downloads, leases). Every function runs inside the caller's database
/// transaction, so a state change and what depends on it commit together. Times are stored as
/// seconds since 1970 (REAL) and are `Date` everywhere outside this type.
enum QueueStore {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return decoder
    }()

    // MARK: Transactions

    /// The columns of `transactions` in the order `transaction(_:at:)` reads them: a query lists
    /// them (`transactionColumns`) and the row is read by index. (GRDB finds a column of a
    /// fetched row by name with a case-insensitive scan of every column, which cost more than
    /// the query itself for a row as wide as a download's.)
    static let transactionColumnNames = [
        "id", "originalTransactionId", "productId", "state", "restored", "verified", "errorCode", "errorMessage",
        "createdAt", "updatedAt", "finishedAt",
    ]

    /// `transactionColumnNames` as a select list, each name after `prefix` (a table alias and a dot).
    static func transactionColumns(_ prefix: String = "") -> String {
        prefix.isEmpty ? transactionSelect : transactionColumnNames.map { prefix + $0 }.joined(separator: ", ")
    }

    private static let transactionSelect = transactionColumnNames.joined(separator: ", ")

    /// The transaction in `row`, whose columns from `offset` on are `transactionColumns`.
    static func transaction(_ row: Row, at offset: Int = 0) throws -> TransactionRecord {
        let json: String = row[offset + 5]
        let verified = try CourierError.wrapping(.internal, "a stored transaction is unreadable") {
            try decoder.decode(VerifiedTransaction.self, from: Data(json.utf8))
        }
        let stateText: String = row[offset + 3]
        guard let state = TransactionState(rawValue: stateText) else {
            throw CourierError(.internal, "a stored transaction has an unknown state \(stateText)")
        }
        let errorCode: String? = row[offset + 6]
        let finishedAt: Double? = row[offset + 10]
        return TransactionRecord(
            id: row[offset], originalTransactionId: row[offset + 1], productId: row[offset + 2],
            state: state, restored: row[offset + 4], verified: verified,
            errorCode: errorCode.map(CourierError.Code.init(rawValue:)), errorMessage: row[offset + 7],
            createdAt: Date(timeIntervalSince1970: row[offset + 8]),
            updatedAt: Date(timeIntervalSince1970: row[offset + 9]),
            finishedAt: finishedAt.map(Date.init(timeIntervalSince1970:)))
    }

    static func fetchTransaction(_ db: Database, id: String) throws -> TransactionRecord? {
        try Row.fetchOne(
            db.cachedStatement(sql: "SELECT \(transactionColumns()) FROM transactions WHERE id = ?"), arguments: [id]
        ).map { try transaction($0) }
    }

    static func insert(_ db: Database, transaction t: TransactionRecord) throws {
        let json = String(decoding: try encoder.encode(t.verified), as: UTF8.self)
        try db.cachedStatement(sql: """
                INSERT INTO transactions (id, originalTransactionId, productId, state, restored, verified,
                    errorCode, errorMessage, createdAt, updatedAt, finishedAt)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """).execute(arguments: [
                t.id, t.originalTransactionId, t.productId, t.state.rawValue, t.restored, json,
                t.errorCode?.rawValue, t.errorMessage, t.createdAt.timeIntervalSince1970,
                t.updatedAt.timeIntervalSince1970, t.finishedAt?.timeIntervalSince1970,
            ])
    }

    /// Writes the state of `t` (and, with `verified`, its stored copy: a refund recorded).
    static func update(_ db: Database, transaction t: TransactionRecord, verified: Bool = false) throws {
        if verified {
            let json = String(decoding: try encoder.encode(t.verified), as: UTF8.self)
            try db.cachedStatement(sql: "UPDATE transactions SET verified = ? WHERE id = ?").execute(arguments: [json, t.id])
        }
        try db.cachedStatement(sql: """
                UPDATE transactions SET state = ?, errorCode = ?, errorMessage = ?, updatedAt = ?, finishedAt = ?
                WHERE id = ?
                """).execute(arguments: [
                t.state.rawValue, t.errorCode?.rawValue, t.errorMessage, t.updatedAt.timeIntervalSince1970,
                t.finishedAt?.timeIntervalSince1970, t.id,
            ])
    }

    // MARK: Downloads

    /// The columns of `downloads` in the order `download(_:at:)` reads them (see
    /// `transactionColumnNames`).
    static let downloadColumnNames = [
        "id", "transactionId", "contentIdentifier", "productId", "url", "sha256", "length", "version", "placement",
        "unpackedLength", "state", "pauseReason", "progress", "bytesReceived", "rate", "timeRemaining", "lastProgressAt",
        "errorCode", "errorMessage", "etag", "lastModified", "totalLength", "durableOffset", "partialPath", "contentURL",
        "createdAt", "updatedAt", "updateFrom", "mirrors", "source", "manifest", "delivery", "preservation", "priority",
    ]

    /// `downloadColumnNames` as a select list, each name after `prefix` (a table alias and a dot).
    static func downloadColumns(_ prefix: String = "") -> String {
        switch prefix {
        case "": return downloadSelect
        case "d.": return downloadSelectD
        default: return downloadColumnNames.map { prefix + $0 }.joined(separator: ", ")
        }
    }

    private static let downloadSelect = downloadColumnNames.joined(separator: ", ")
    private static let downloadSelectD = downloadColumnNames.map { "d." + $0 }.joined(separator: ", ")

    /// The download in `row`, whose columns from `offset` on are `downloadColumns`.
    static func download(_ row: Row, at offset: Int = 0) throws -> DownloadRecord {
        let stateText: String = row[offset + 10]
        let placementText: String = row[offset + 8]
        let urlText: String = row[offset + 4]
        guard let state = DownloadState(rawValue: stateText), let placement = Catalog.Placement(rawValue: placementText),
            let url = URL(string: urlText)
        else {
            throw CourierError(.internal, "a stored download is unreadable", cause: "state \(stateText), placement \(placementText)")
        }
        let pauseReason: String? = row[offset + 11]
        let lastProgressAt: Double? = row[offset + 16]
        let errorCode: String? = row[offset + 17]
        let contentPath: String? = row[offset + 24]
        var record = DownloadRecord(
            id: row[offset], transactionId: row[offset + 1], contentIdentifier: row[offset + 2],
            productId: row[offset + 3], url: url, sha256: row[offset + 5], length: row[offset + 6],
            version: row[offset + 7], placement: placement, unpackedLength: row[offset + 9], state: state,
            pauseReason: pauseReason.map(PauseReason.init(stored:)), progress: row[offset + 12],
            bytesReceived: row[offset + 13], rate: row[offset + 14], timeRemaining: row[offset + 15],
            lastProgressAt: lastProgressAt.map(Date.init(timeIntervalSince1970:)),
            errorCode: errorCode.map(CourierError.Code.init(rawValue:)), errorMessage: row[offset + 18],
            etag: row[offset + 19], lastModified: row[offset + 20], totalLength: row[offset + 21],
            durableOffset: row[offset + 22], partialPath: row[offset + 23],
            contentURL: contentPath.map { URL(fileURLWithPath: $0) },
            createdAt: Date(timeIntervalSince1970: row[offset + 25]),
            updatedAt: Date(timeIntervalSince1970: row[offset + 26]))
        record.updateFrom = row[offset + 27]
        let mirrors: String? = row[offset + 28]
        record.mirrors = mirrors.map(decodeMirrors) ?? []
        let source: String? = row[offset + 29]
        record.source = source.flatMap(URL.init(string:))
        let manifest: String? = row[offset + 30]
        record.manifest = manifest.flatMap { try? decoder.decode(ManifestReference.self, from: Data($0.utf8)) }
        // Read back like network input: an unknown value is the default, never a crash.
        let delivery: String? = row[offset + 31]
        record.delivery = delivery.flatMap(Catalog.DeliveryClass.init(rawValue:)) ?? .essential
        let preservation: String? = row[offset + 32]
        record.preservation = preservation.flatMap(Catalog.Preservation.init(rawValue:)) ?? .normal
        let priority: String? = row[offset + 33]
        record.priority = priority.flatMap(DownloadPriority.init(rawValue:))
        return record
    }

    /// A download's mirrors as stored (a JSON array of URL strings); unreadable ones are left out.
    static func decodeMirrors(_ text: String) -> [URL] {
        ((try? decoder.decode([String].self, from: Data(text.utf8))) ?? []).compactMap(URL.init(string:))
    }

    /// `mirrors` as stored: a JSON array of URL strings, or NULL for none.
    static func encodeMirrors(_ mirrors: [URL]) -> String? {
        guard !mirrors.isEmpty, let data = try? encoder.encode(mirrors.map(\.absoluteString)) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    static func encodeManifest(_ manifest: ManifestReference?) -> String? {
        guard let manifest, let data = try? encoder.encode(manifest) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    static func fetchDownload(_ db: Database, id: String) throws -> DownloadRecord? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT \(downloadColumns()) FROM downloads WHERE id = ?"), arguments: [id])
            .map { try download($0) }
    }

    static func fetchDownloads(_ db: Database, transactionId: String) throws -> [DownloadRecord] {
        try Row.fetchAll(
            db.cachedStatement(sql: "SELECT \(downloadColumns()) FROM downloads WHERE transactionId = ? ORDER BY createdAt, id"),
            arguments: [transactionId]
        ).map { try download($0) }
    }

    /// Of `transactionIds`, those without any download.
    static func transactionsWithoutDownloads(_ db: Database, ids: Set<String>) throws -> Set<String> {
        Set(
            try String.fetchAll(
                db.cachedStatement(
                    sql: "SELECT value FROM json_each(?) WHERE value NOT IN (SELECT transactionId FROM downloads)"),
                arguments: [DeliveryScope.jsonList(ids)]))
    }

    static func insert(_ db: Database, download d: DownloadRecord) throws {
        try db.cachedStatement(sql: """
                INSERT INTO downloads (id, transactionId, contentIdentifier, productId, url, sha256, length, version,
                    placement, unpackedLength, state, partialPath, createdAt, updatedAt, updateFrom, mirrors, manifest,
                    delivery, preservation, priority)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """).execute(arguments: [
                d.id, d.transactionId, d.contentIdentifier, d.productId, d.url.absoluteString, d.sha256, d.length,
                d.version, d.placement.rawValue, d.unpackedLength, d.state.rawValue, d.partialPath,
                d.createdAt.timeIntervalSince1970, d.updatedAt.timeIntervalSince1970, d.updateFrom,
                encodeMirrors(d.mirrors), encodeManifest(d.manifest), d.delivery.rawValue, d.preservation.rawValue,
                d.priority?.rawValue,
            ])
    }

    /// Writes the priority a user set on `d` (NULL: back to the default).
    static func updatePriority(_ db: Database, download d: DownloadRecord) throws {
        try db.cachedStatement(sql: "UPDATE downloads SET priority = ?, updatedAt = ? WHERE id = ?").execute(arguments: [
            d.priority?.rawValue, d.updatedAt.timeIntervalSince1970, d.id,
        ])
    }

    /// Points an existing download at new content (an update): what to fetch, from where, and
    /// the version it replaces. Its state, journal and progress are the caller's to reset.
    static func retarget(_ db: Database, download d: DownloadRecord) throws {
        try db.cachedStatement(sql: """
                UPDATE downloads SET url = ?, sha256 = ?, length = ?, version = ?, placement = ?, unpackedLength = ?,
                    updateFrom = ?, mirrors = ?, manifest = ?, source = NULL, updatedAt = ?, delivery = ?, preservation = ?
                WHERE id = ?
                """).execute(arguments: [
                d.url.absoluteString, d.sha256, d.length, d.version, d.placement.rawValue, d.unpackedLength,
                d.updateFrom, encodeMirrors(d.mirrors), encodeManifest(d.manifest), d.updatedAt.timeIntervalSince1970,
                d.delivery.rawValue, d.preservation.rawValue, d.id,
            ])
    }

    /// Writes the state columns of `d` (state, reason, error, content URL, rate when not active).
    static func updateState(_ db: Database, download d: DownloadRecord) throws {
        try db.cachedStatement(sql: """
                UPDATE downloads SET state = ?, pauseReason = ?, errorCode = ?, errorMessage = ?, contentURL = ?,
                    progress = ?, bytesReceived = ?, rate = ?, timeRemaining = ?, updatedAt = ?
                WHERE id = ?
                """).execute(arguments: [
                d.state.rawValue, d.pauseReason?.rawValue, d.errorCode?.rawValue, d.errorMessage, d.contentURL?.path,
                d.progress, d.bytesReceived, d.rate, d.timeRemaining, d.updatedAt.timeIntervalSince1970, d.id,
            ])
    }

    /// Forgets the partial data of a download: journal back to zero, and progress too unless the
    /// download is finished (its bytes went into the placed content).
    static func resetJournal(_ db: Database, downloadId: String, now: Date) throws {
        try db.cachedStatement(sql: """
                UPDATE downloads SET etag = NULL, lastModified = NULL, totalLength = NULL, durableOffset = 0,
                    bytesReceived = CASE WHEN state = 'finished' THEN bytesReceived ELSE 0 END,
                    progress = CASE WHEN state = 'finished' THEN 1 ELSE 0 END,
                    rate = 0, timeRemaining = CASE WHEN state = 'finished' THEN 0 ELSE NULL END, updatedAt = ?
                WHERE id = ?
                """).execute(arguments: [now.timeIntervalSince1970, downloadId])
    }

    // MARK: Queries of PaymentQueue

    /// The compact JWS a transaction was verified from (nil for a legacy receipt's), read without
    /// decoding the whole stored transaction.
    static func signedTransaction(_ db: Database, transactionId: String) throws -> String? {
        try String.fetchOne(
            db.cachedStatement(sql: "SELECT json_extract(verified, '$.signedTransaction') FROM transactions WHERE id = ?"),
            arguments: [transactionId])
    }

    /// Every transaction not yet finished, oldest first.
    static func unfinishedTransactions(_ db: Database) throws -> [TransactionRecord] {
        try Row.fetchAll(
            db.cachedStatement(sql: "SELECT \(transactionColumns()) FROM transactions WHERE state != 'finished' ORDER BY createdAt, id")
        ).map { try transaction($0) }
    }

    /// The downloads an id names: a download id, a transaction id (all its downloads), or an
    /// unambiguous prefix of either. Throws `notFound` or, for an ambiguous prefix, `usage`.
    static func resolve(_ db: Database, id: String) throws -> [DownloadRecord] {
        if let download = try fetchDownload(db, id: id) { return [download] }
        if try fetchTransaction(db, id: id) != nil { return try fetchDownloads(db, transactionId: id) }
        let pattern = id.replacingOccurrences(of: "%", with: "").replacingOccurrences(of: "_", with: "") + "%"
        let downloadIds = try String.fetchAll(
            db.cachedStatement(sql: "SELECT id FROM downloads WHERE id LIKE ? LIMIT 2"), arguments: [pattern])
        let transactionIds = try String.fetchAll(
            db.cachedStatement(sql: "SELECT id FROM transactions WHERE id LIKE ? LIMIT 2"), arguments: [pattern])
        if downloadIds.count + transactionIds.count > 1 {
            throw CourierError(.usage, "\(id) names more than one download or transaction", hint: "give more of the id")
        }
        if let only = downloadIds.first, let download = try fetchDownload(db, id: only) { return [download] }
        if let only = transactionIds.first { return try fetchDownloads(db, transactionId: only) }
        throw CourierError(.notFound, "no download or transaction \(id)", hint: "see `courier list --all`")
    }

    static func deleteLease(_ db: Database, downloadId: String) throws {
        try db.cachedStatement(sql: "DELETE FROM leases WHERE downloadId = ?").execute(arguments: [downloadId])
    }

    /// Drops the leases of `transactionId`'s essential downloads (its finish): a prefetch or
    /// on-demand download may still be in flight under its worker's lease.
    static func deleteLeases(_ db: Database, transactionId: String) throws {
        try db.cachedStatement(
            sql: "DELETE FROM leases WHERE downloadId IN (SELECT id FROM downloads WHERE transactionId = ? AND delivery = 'essential')"
        )
            .execute(arguments: [transactionId])
    }

    /// A SQL condition on `downloads d` selecting `scope`, and its arguments.
    private static func condition(_ scope: DeliveryScope) -> (sql: String, arguments: StatementArguments) {
        switch scope {
        case .all:
            return ("1", [])
        case .downloads(let ids):
            return ("d.id IN (SELECT value FROM json_each(?))", [DeliveryScope.jsonList(ids)])
        case .transactions(let ids):
            return ("d.transactionId IN (SELECT value FROM json_each(?))", [DeliveryScope.jsonList(ids)])
        }
    }

    /// Ids of up to `limit` downloads of `scope` a worker may claim, by priority (high first;
    /// `DownloadRecord.effectivePriority`), oldest first within one: waiting, paused
    /// by an interruption, or active (their owner may be dead), of a purchased or restored
    /// transaction, or of a finished one (an update, or content delivered again: a restore),
    /// and not leased to `token`. Only a narrowing for the index: whether each is taken is the
    /// lifecycle's `claim` decision (`PaymentQueue.claim`).
    static func claimCandidates(_ db: Database, scope: DeliveryScope, notLeasedTo token: String, limit: Int) throws -> [String] {
        let (condition, arguments) = condition(scope)
        return try String.fetchAll(
            db.cachedStatement(sql: """
                SELECT d.id FROM downloads d JOIN transactions t ON t.id = d.transactionId
                LEFT JOIN leases l ON l.downloadId = d.id
                WHERE (d.state = 'waiting' OR d.state = 'active'
                       OR (d.state = 'paused' AND d.pauseReason = 'interrupted'))
                  AND t.state IN ('purchased', 'restored', 'finished')
                  AND (l.token IS NULL OR l.token != ?)
                  AND \(condition)
                ORDER BY \(priorityOrder) d.createdAt, d.id LIMIT ?
                """),
            arguments: [token] + arguments + [limit])
    }

    /// The claim order's first key: the download's priority (`DownloadRecord.effectivePriority`:
    /// the one a user set, else low for an update or prefetch content, normal otherwise), high
    /// first. Background work (prefetch) thus comes after everything else a user did not raise.
    static let priorityOrder = """
        CASE COALESCE(d.priority, CASE WHEN d.updateFrom IS NULL AND d.delivery != 'prefetch' THEN 'normal' ELSE 'low' END)
            WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END,
        """

    /// The leases on downloads of `scope` that still need work (waiting, active or paused).
    static func leasesOnUnsettled(_ db: Database, scope: DeliveryScope) throws -> [Lease] {
        let (condition, arguments) = condition(scope)
        return try Row.fetchAll(
            db.cachedStatement(sql: """
                SELECT \(Lease.columns("l.")) FROM downloads d JOIN leases l ON l.downloadId = d.id
                WHERE d.state IN ('waiting', 'active', 'paused') AND \(condition)
                """),
            arguments: arguments
        ).map { Lease(row: $0) }
    }

    static func downloadState(_ db: Database, id: String) throws -> DownloadState? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT state FROM downloads WHERE id = ?"), arguments: [id])
            .flatMap(DownloadState.init(rawValue:))
    }

    /// Records the progress of an active download; returns whether it was active.
    static func recordProgress(_ db: Database, downloadId: String, _ progress: DownloadProgress, length: Int64, now: Date) throws -> Bool {
        let total = progress.totalBytes ?? length
        let fraction = total > 0 ? min(1, Double(progress.bytesReceived) / Double(total)) : 0
        try db.cachedStatement(sql: """
                UPDATE downloads SET progress = ?, rate = ?, timeRemaining = ?, updatedAt = ?,
                    lastProgressAt = CASE WHEN ? > bytesReceived THEN ? ELSE lastProgressAt END,
                    bytesReceived = ?, source = COALESCE(?, source)
                WHERE id = ? AND state = 'active'
                """).execute(arguments: [
                fraction, progress.bytesPerSecond, progress.timeRemaining, now.timeIntervalSince1970,
                progress.bytesReceived, now.timeIntervalSince1970, progress.bytesReceived, progress.source?.absoluteString,
                downloadId,
            ])
        return db.changesCount == 1
    }

    /// The unfinished transactions of `scope` whose downloads are all finished, plus those with
    /// no content at all.
    static func deliveredButUnfinished(_ db: Database, scope: DeliveryScope) throws -> [String] {
        let condition: String
        let arguments: StatementArguments
        switch scope {
        case .all:
            (condition, arguments) = ("1", [])
        case .transactions(let ids):
            (condition, arguments) = ("t.id IN (SELECT value FROM json_each(?))", [DeliveryScope.jsonList(ids)])
        case .downloads(let ids):
            (condition, arguments) = (
                "t.id IN (SELECT transactionId FROM downloads WHERE id IN (SELECT value FROM json_each(?)))",
                [DeliveryScope.jsonList(ids)]
            )
        }
        return try String.fetchAll(
            db.cachedStatement(sql: """
                SELECT t.id FROM transactions t
                WHERE t.state IN ('purchased', 'restored')
                  AND NOT EXISTS (SELECT 1 FROM downloads d WHERE d.transactionId = t.id AND d.state != 'finished'
                                  AND d.delivery = 'essential')
                  AND \(condition)
                ORDER BY t.createdAt
                """),
            arguments: arguments)
    }

    /// The unfinished downloads of unfinished transactions in `scope`, and those a finished
    /// transaction works again (updates, content delivered again), oldest first.
    static func unfinishedDownloads(_ db: Database, scope: DeliveryScope) throws -> [DownloadRecord] {
        let (condition, arguments) = condition(scope)
        return try Row.fetchAll(
            db.cachedStatement(sql: """
                SELECT \(downloadColumns("d.")) FROM downloads d JOIN transactions t ON t.id = d.transactionId
                WHERE d.state != 'finished' AND (t.state != 'finished' OR d.updateFrom IS NOT NULL OR d.state != 'cancelled')
                  AND \(condition)
                ORDER BY d.createdAt, d.id
                """),
            arguments: arguments
        ).map { try download($0) }
    }

    /// One row of `courier list`: a transaction, one of its downloads (none when it has no
    /// content) and the download's lease.
    struct EntryRow {
        var transactionId: String
        var productId: String
        var transactionState: TransactionState
        var revoked: Bool
        var transactionCreatedAt: Date
        var download: DownloadRecord?
        var lease: Lease?
    }

    /// The queue as `courier list` shows it, oldest transaction first, in one query (fast with
    /// tens of thousands of transactions); finished transactions only when `includeFinished`, or
    /// for a download they work again (an update, content delivered again).
    static func entries(_ db: Database, includeFinished: Bool, _ body: (EntryRow) throws -> Void) throws {
        let rows = try Row.fetchCursor(
            db.cachedStatement(sql: """
                SELECT t.id, t.productId, t.state, t.createdAt,
                    json_extract(t.verified, '$.revocationDate') IS NOT NULL,
                    \(Lease.columns("l.")), \(downloadColumns("d."))
                FROM transactions t
                LEFT JOIN downloads d ON d.transactionId = t.id
                LEFT JOIN leases l ON l.downloadId = d.id
                \(includeFinished ? "" : "WHERE t.state != 'finished' OR d.state NOT IN ('finished', 'cancelled')")
                ORDER BY t.createdAt, t.id, d.createdAt, d.id
                """))
        // Columns: the transaction's 5, the lease's (NULL without one), then the download's (NULL
        // for a transaction without content).
        let downloadOffset = 5 + Lease.columnNames.count
        while let row = try rows.next() {
            let stateText: String = row[2]
            let leaseId: String? = row[5]
            let downloadId: String? = row[downloadOffset]
            try body(
                EntryRow(
                    transactionId: row[0], productId: row[1],
                    transactionState: TransactionState(rawValue: stateText) ?? .failed, revoked: row[4],
                    transactionCreatedAt: Date(timeIntervalSince1970: row[3]),
                    download: downloadId == nil ? nil : try download(row, at: downloadOffset),
                    lease: leaseId == nil ? nil : Lease(row: row, at: 5)))
        }
    }
}
