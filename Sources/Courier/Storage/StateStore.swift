import Foundation
import GRDB

/// The state database (`Storage/state.sqlite`): SQLite in WAL mode through GRDB, owner-only,
/// with versioned migrations, created or migrated once however many processes open it at once
/// (`SchemaMigrations`). Every state change is one database transaction.
///
/// Each component registers its schema in `StateStore.migrations` (see `QueueSchema` and
/// `ContentSchema`); migrations run in list order and each runs once.
public final class StateStore: Sendable {
    /// The database pool; readers do not block the writer (WAL).
    public let pool: DatabasePool
    public let url: URL

    /// The migrations, in order: name and body. Append only; never edit a shipped one.
    static var migrations: [(String, @Sendable (Database) throws -> Void)] {
        QueueSchema.migrations + ContentSchema.migrations
    }

    /// Opens (creating if needed) the database at `url` and migrates it.
    public init(url: URL) throws {
        self.url = url
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            try db.execute(sql: "PRAGMA foreign_keys = ON")
        }
        // Created 0600 before SQLite opens it: SQLite gives the -wal and -shm files the mode of
        // the database file, so no state file is ever readable by others, not even briefly.
        try OwnerOnlyFile.create(atPath: url.path)
        // Any number of processes may open the store at once, fresh or at an older schema: one
        // migrates it, the others wait for it (`SchemaMigrations`, docs/queue.md).
        pool = try CourierError.wrapping(.io, "cannot open the state database \(url.path)") {
            try SchemaMigrations.retryingBusy {
                let pool = try DatabasePool(path: url.path, configuration: configuration)
                // GRDB turns the writer to synchronous = NORMAL when it enables WAL, after
                // prepareDatabase ran: set FULL again, so a commit is on disk when it returns.
                try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
                try Self.schema.migrate(pool)
                return pool
            }
        }
    }

    /// The state database's schema: `migrations` under `SchemaMigrations`.
    static var schema: SchemaMigrations { SchemaMigrations(migrations) }

    /// Runs `body` in one write transaction and commits it.
    ///
    /// A `durable` commit is on disk when this returns (synchronous = FULL: the WAL is synced).
    /// A lazy one (`durable: false`) reaches the disk with the next durable commit or checkpoint
    /// (synchronous = NORMAL for that commit: after a power loss the database is consistent but
    /// may lack the last lazy commits, as if they had not happened yet). Lazy commits are for
    /// what may be lost without harm and is never reported as done: progress, heartbeats,
    /// claims, lease releases, resume-journal checkpoints (the partial file is synced first, so
    /// an older journal only means fetching a few bytes again), install-attempt markers (they
    /// count process deaths, which a lazy commit survives).
    public func write<T>(durable: Bool = true, _ body: (Database) throws -> T) throws -> T {
        if durable { return try pool.write(body) }
        return try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            defer { try? db.execute(sql: "PRAGMA synchronous = FULL") }
            var value: T?
            try db.inTransaction {
                value = try body(db)
                return .commit
            }
            guard let value else { throw CourierError(.internal, "a database transaction returned no value") }
            return value
        }
    }

    /// Opens the state database of a storage layout (creating its folders).
    public convenience init(layout: StorageLayout) throws {
        try layout.prepare()
        try self.init(url: layout.stateDatabase)
    }
}
