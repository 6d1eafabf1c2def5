import Foundation
import GRDB

/// Resume journals kept in the downloads table of the state database, so a download's
/// validator and durable offset commit with its state. `save` returns once SQLite has synced
/// (WAL, `synchronous = FULL`).
public struct DatabaseJournalStore: ResumeJournalStore {
    public let store: StateStore

    public init(store: StateStore) {
        self.store = store
    }

    public func load(downloadId: String) throws -> ResumeJournal? {
        do {
            // A row whose journal breaks an invariant (ResumeJournal.validationProblem) gives none:
            // the download starts over from byte 0.
            return try store.pool.read { db in try QueueStore.fetchDownload(db, id: downloadId)?.journal.validated() }
        } catch let error as CourierError {
            throw error
        } catch {
            throw CourierError(.io, "cannot read the journal of download \(downloadId)", cause: "\(error)")
        }
    }

    /// Records `journal` in its download's row. A download that no longer exists (discarded or
    /// removed) is not an error: there is nothing left to resume.
    public func save(_ journal: ResumeJournal) throws {
        // Lazy: the partial file was synced first; a lost checkpoint means refetching a little.
        try CourierError.wrapping(.io, "cannot save the journal of download \(journal.downloadId)") {
            try store.write(durable: false) { db in
                try db.cachedStatement(sql: """
                        UPDATE downloads SET etag = ?, lastModified = ?, totalLength = ?, durableOffset = ?,
                            bytesReceived = MAX(bytesReceived, ?), updatedAt = ?
                        WHERE id = ? AND state != 'cancelled' AND state != 'finished'
                        """).execute(arguments: [
                        journal.etag, journal.lastModified, journal.totalLength, journal.durableOffset,
                        journal.durableOffset, Date().timeIntervalSince1970, journal.downloadId,
                    ])
            }
        }
    }

    public func remove(downloadId: String) throws {
        try CourierError.wrapping(.io, "cannot reset the journal of download \(downloadId)") {
            try store.write(durable: false) { db in try QueueStore.resetJournal(db, downloadId: downloadId, now: Date()) }
        }
    }
}
