import Foundation
import GRDB

/// The versioned schema of one SQLite store, migrated exactly once however many processes open
/// the store at the same moment (issue 33).
///
/// A store that is current is seen with two reads and no lock (the usual start). Any other runs
/// every missing migration in one `BEGIN IMMEDIATE` transaction: SQLite lets one connection in,
/// the others wait in the busy handler, and each reads the applied list again once it holds the
/// lock, so the losers of the race run nothing. A process killed half-way leaves the store as it
/// was. The applied list is GRDB's `grdb_migrations` table (stores migrated by the
/// `DatabaseMigrator` used before stay valid); `user_version` is the number of migrations applied.
/// Foreign keys are off while migrations run and checked before the commit, as GRDB did.
///
/// GRDB's `DatabaseMigrator` read the applied list before taking the lock and ran each missing
/// migration in a transaction of its own: two processes on a fresh store both saw none applied,
/// and the second died with `table … already exists`.
package struct SchemaMigrations: Sendable {
    /// A migration's body: constant statements, run once, inside the migrating transaction.
    package typealias Body = @Sendable (Database) throws -> Void

    /// The migrations, in order: name and body. Append only; never edit a shipped one.
    package let migrations: [(name: String, body: Body)]

    package init(_ migrations: [(String, Body)]) {
        self.migrations = migrations.map { (name: $0.0, body: $0.1) }
    }

    /// The migrations applied to `db` (none when `grdb_migrations` does not exist yet).
    package static func applied(_ db: Database) throws -> Set<String> {
        guard try db.tableExists("grdb_migrations") else { return [] }
        return try String.fetchSet(db, sql: "SELECT identifier FROM grdb_migrations")
    }

    /// Brings the store behind `writer` to the last migration, or to the first `limit` ones (a
    /// test's older store). Returns how many migrations were run by this call (0 when the store
    /// was current or another process migrated it first).
    @discardableResult
    package func migrate(_ writer: some DatabaseWriter, upTo limit: Int? = nil) throws -> Int {
        let wanted = Array(migrations.prefix(limit ?? migrations.count))
        let names = wanted.map(\.name)
        return try writer.writeWithoutTransaction { db in
            // Without a lock: a current store is done (a newer Courier's extra migrations are
            // left alone, as GRDB's migrator did).
            if try Self.isCurrent(db, names: names) { return 0 }
            let foreignKeys = try Bool.fetchOne(db, sql: "PRAGMA foreign_keys") ?? false
            // PRAGMA foreign_keys is a no-op inside a transaction: switch it before BEGIN.
            if foreignKeys { try db.execute(sql: "PRAGMA foreign_keys = OFF") }
            defer { if foreignKeys { try? db.execute(sql: "PRAGMA foreign_keys = ON") } }
            var ran = 0
            try db.inTransaction(.immediate) {
                // Holding the write lock now: what another process did meanwhile is visible.
                try db.execute(sql: "CREATE TABLE IF NOT EXISTS grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
                let applied = try Self.applied(db)
                for (name, body) in wanted where !applied.contains(name) {
                    try body(db)
                    try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES (?)", arguments: [name])
                    ran += 1
                }
                if foreignKeys { try db.checkForeignKeys() }
                let version = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
                if version < wanted.count {
                    // A constant integer (PRAGMA takes no bound parameters).
                    try db.execute(sql: "PRAGMA user_version = \(wanted.count)")
                }
                return .commit
            }
            return ran
        }
    }

    /// Whether every migration in `names` is applied and `user_version` says so.
    private static func isCurrent(_ db: Database, names: [String]) throws -> Bool {
        let version = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
        guard version >= names.count else { return false }
        return try applied(db).isSuperset(of: names)
    }

    /// Runs `body` (open a store, migrate it) again while SQLite answers `SQLITE_BUSY` or
    /// `SQLITE_LOCKED`, for up to `limit` seconds, with a growing pause (`busyRetries`: 2 ms,
    /// doubling, at most 0.2 s).
    ///
    /// The busy handler (`busyMode = .timeout`) covers most waits, not all: SQLite returns
    /// `SQLITE_BUSY` at once, without calling it, to a WAL reader whose snapshot went stale
    /// while another process wrote (`SQLITE_BUSY_SNAPSHOT`), to a connection that finds another
    /// process running WAL recovery, and when switching the journal mode would deadlock.
    package static func retryingBusy<T>(limit: TimeInterval = 30, _ body: () throws -> T) throws -> T {
        let deadline = Date().addingTimeInterval(limit)
        var retry = 0
        while true {
            do {
                return try body()
            } catch let error as DatabaseError
                where [.SQLITE_BUSY, .SQLITE_LOCKED].contains(error.resultCode) && Date() < deadline
            {
                retry += 1
                usleep(UInt32(busyRetries.delay(retry: retry) * 1e6))
            }
        }
    }

    /// The schedule of `retryingBusy` (its deadline bounds it, not a count): the one retry
    /// policy of Courier, without jitter, as before.
    static let busyRetries = RetryPolicy(maxRetries: nil, backoffBase: 0.002, backoffMax: 0.2, jitter: false)
}
