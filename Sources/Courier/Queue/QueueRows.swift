import Foundation
import GRDB

/// Reading and writing queue rows. Every function runs inside the caller's database
/// transaction, so a state change and what depends on it commit together.
enum QueueRows {
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

    static func transaction(_ row: Row) throws -> TransactionRecord {
        let json: String = row["verified"]
        let verified: VerifiedTransaction
        do {
            verified = try decoder.decode(VerifiedTransaction.self, from: Data(json.utf8))
        } catch {
            throw CourierError(.internal, "a stored transaction is unreadable", cause: "\(error)")
        }
        let stateText: String = row["state"]
        guard let state = TransactionState(rawValue: stateText) else {
            throw CourierError(.internal, "a stored transaction has an unknown state \(stateText)")
        }
        let errorCode: String? = row["errorCode"]
        let finishedAt: Double? = row["finishedAt"]
        return TransactionRecord(
            id: row["id"], originalTransactionId: row["originalTransactionId"], productId: row["productId"],
            state: state, restored: row["restored"], verified: verified,
            errorCode: errorCode.map(CourierError.Code.init(rawValue:)), errorMessage: row["errorMessage"],
            createdAt: Date(timeIntervalSince1970: row["createdAt"]),
            updatedAt: Date(timeIntervalSince1970: row["updatedAt"]),
            finishedAt: finishedAt.map(Date.init(timeIntervalSince1970:)))
    }

    static func fetchTransaction(_ db: Database, id: String) throws -> TransactionRecord? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM transactions WHERE id = ?"), arguments: [id]).map(transaction)
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

    static func update(_ db: Database, transaction t: TransactionRecord) throws {
        try db.cachedStatement(sql: """
                UPDATE transactions SET state = ?, errorCode = ?, errorMessage = ?, updatedAt = ?, finishedAt = ?
                WHERE id = ?
                """).execute(arguments: [
                t.state.rawValue, t.errorCode?.rawValue, t.errorMessage, t.updatedAt.timeIntervalSince1970,
                t.finishedAt?.timeIntervalSince1970, t.id,
            ])
    }

    // MARK: Downloads

    static func download(_ row: Row) throws -> DownloadRecord {
        let stateText: String = row["state"]
        let placementText: String = row["placement"]
        let urlText: String = row["url"]
        guard let state = DownloadState(rawValue: stateText), let placement = Catalog.Placement(rawValue: placementText),
            let url = URL(string: urlText)
        else {
            throw CourierError(.internal, "a stored download is unreadable", cause: "state \(stateText), placement \(placementText)")
        }
        let errorCode: String? = row["errorCode"]
        let pauseReason: String? = row["pauseReason"]
        let contentPath: String? = row["contentURL"]
        let lastProgressAt: Double? = row["lastProgressAt"]
        return DownloadRecord(
            id: row["id"], transactionId: row["transactionId"], contentIdentifier: row["contentIdentifier"],
            productId: row["productId"], url: url, sha256: row["sha256"], length: row["length"],
            version: row["version"], placement: placement, unpackedLength: row["unpackedLength"], state: state,
            pauseReason: pauseReason.map(PauseReason.init(stored:)), progress: row["progress"], bytesReceived: row["bytesReceived"],
            rate: row["rate"], timeRemaining: row["timeRemaining"],
            lastProgressAt: lastProgressAt.map(Date.init(timeIntervalSince1970:)),
            errorCode: errorCode.map(CourierError.Code.init(rawValue:)), errorMessage: row["errorMessage"],
            etag: row["etag"], lastModified: row["lastModified"], totalLength: row["totalLength"],
            durableOffset: row["durableOffset"], partialPath: row["partialPath"],
            contentURL: contentPath.map { URL(fileURLWithPath: $0) },
            createdAt: Date(timeIntervalSince1970: row["createdAt"]),
            updatedAt: Date(timeIntervalSince1970: row["updatedAt"]))
    }

    static func fetchDownload(_ db: Database, id: String) throws -> DownloadRecord? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM downloads WHERE id = ?"), arguments: [id]).map(download)
    }

    static func fetchDownloads(_ db: Database, transactionId: String) throws -> [DownloadRecord] {
        try Row.fetchAll(
            db.cachedStatement(sql: "SELECT * FROM downloads WHERE transactionId = ? ORDER BY createdAt, id"), arguments: [transactionId]
        ).map(download)
    }

    static func insert(_ db: Database, download d: DownloadRecord) throws {
        try db.cachedStatement(sql: """
                INSERT INTO downloads (id, transactionId, contentIdentifier, productId, url, sha256, length, version,
                    placement, unpackedLength, state, partialPath, createdAt, updatedAt)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """).execute(arguments: [
                d.id, d.transactionId, d.contentIdentifier, d.productId, d.url.absoluteString, d.sha256, d.length,
                d.version, d.placement.rawValue, d.unpackedLength, d.state.rawValue, d.partialPath,
                d.createdAt.timeIntervalSince1970, d.updatedAt.timeIntervalSince1970,
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
}
