import Courier
import Foundation
import Logging
import PostgresNIO

/// The tables Courier keeps in PostgreSQL, created and migrated by Courier itself.
///
/// Every migration is here, in order; `courier_schema_version` holds one row per migration
/// applied. Migrating takes a transaction-scoped advisory lock first, so processes starting at
/// the same moment migrate once. A database migrated by a newer Courier (a version this one does
/// not know) is refused rather than used.
public enum PostgresSchema {
    /// One migration: its version and its statements (constant SQL, no parameters).
    struct Migration {
        let version: Int
        let statements: [String]
    }

    /// The advisory lock key that serialises migrations (any constant shared by every Courier).
    static let migrationLock: Int64 = 0x436F_7572_6965_7201  // "Courier\x01"

    static let migrations: [Migration] = [
        Migration(
            version: 1,
            statements: [
                // A pre-staging run: the plan its coordinator made (so another coordinator can
                // publish it) and whether its catalog is published. One open run per key.
                """
                CREATE TABLE prestage_run (
                    run_id        bigserial   PRIMARY KEY,
                    run_key       text        NOT NULL,
                    plan          jsonb       NOT NULL,
                    state         text        NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'published')),
                    created_at    timestamptz NOT NULL DEFAULT now(),
                    published_at  timestamptz
                )
                """,
                "CREATE UNIQUE INDEX prestage_run_open ON prestage_run (run_key) WHERE state = 'running'",
                """
                CREATE TABLE prestage_task (
                    run_id             bigint      NOT NULL REFERENCES prestage_run ON DELETE CASCADE,
                    download_id        text        NOT NULL,
                    content_identifier text        NOT NULL,
                    task               jsonb       NOT NULL,
                    state              text        NOT NULL DEFAULT 'waiting'
                                                   CHECK (state IN ('waiting', 'claimed', 'staged', 'failed')),
                    worker             text,
                    lease_expires_at   timestamptz,
                    attempts           int         NOT NULL DEFAULT 0,
                    outcome            jsonb,
                    PRIMARY KEY (run_id, download_id)
                )
                """,
                "CREATE INDEX prestage_task_claimable ON prestage_task (run_id, state, lease_expires_at)",
                // The origin's App Store Server Notifications and the transactions they revoked,
                // shared by every gate (the SQLite tables of OriginStateStore, same meaning).
                """
                CREATE TABLE origin_notification (
                    notification_uuid text   PRIMARY KEY,
                    notification_type text   NOT NULL,
                    subtype           text,
                    transaction_id    text,
                    signed_date       bigint,
                    received_at       bigint NOT NULL
                )
                """,
                """
                CREATE TABLE origin_transaction_status (
                    transaction_id          text    PRIMARY KEY,
                    original_transaction_id text    NOT NULL,
                    product_id              text    NOT NULL,
                    revoked                 boolean NOT NULL,
                    notification_type       text    NOT NULL,
                    notification_uuid       text    NOT NULL,
                    signed_date             bigint  NOT NULL,
                    updated_at              bigint  NOT NULL
                )
                """,
            ]
        ),
        // The run's insert is on the critical path of every queued run: its plan (hundreds of
        // KB for 500 tasks) was parsed into jsonb while the statement was planned and compressed
        // by pglz, and each task's row held the task again as jsonb. The plan becomes the bytes
        // Courier wrote, stored as they are (EXTERNAL: no compression), and a task's document
        // is optional: a run's tasks are read from its plan, which every process holds
        // (`enqueue` still writes them, for a queue used without a plan). Old runs keep theirs.
        Migration(
            version: 2,
            statements: [
                "ALTER TABLE prestage_run ALTER COLUMN plan TYPE bytea USING convert_to(plan::text, 'UTF8')",
                "ALTER TABLE prestage_run ALTER COLUMN plan SET STORAGE EXTERNAL",
                "ALTER TABLE prestage_task ALTER COLUMN task DROP NOT NULL",
            ]
        ),
        // A claim scanned the run's waiting tasks from the first, through the index entries of
        // every task claimed before it (dead ones, until a vacuum): its cost grew with the run,
        // 1 ms per claim of 32 at the start of a run of 50,000 tasks and 7 ms at its end. Tasks
        // get their place in the run (`seq`, numbered as they are inserted: the plan's order),
        // and each process claims on from the last place it took (`ClaimStatement`), in an index
        // of the waiting tasks only. Old rows are numbered by the migration.
        //
        // The index of claimable rows becomes one of claimed rows only (leases, by run): led by
        // the run and holding every state, it served `run_id = …` alone and `state = 'waiting'`
        // too, and PostgreSQL, whose statistics know nothing of a run inserted moments ago (or
        // count no waiting task once runs are done), took such a scan for one row: it scanned
        // every row of the run (20,000, dead entries included) once per claim or record
        // statement, or sorted the run's waiting tasks for each claim. Now a statement that
        // names keys has the primary key only, and one that names waiting tasks their index.
        Migration(
            version: 3,
            statements: [
                "ALTER TABLE prestage_task ADD COLUMN seq bigint GENERATED BY DEFAULT AS IDENTITY",
                "CREATE INDEX prestage_task_waiting ON prestage_task (run_id, seq) WHERE state = 'waiting'",
                "DROP INDEX prestage_task_claimable",
                "CREATE INDEX prestage_task_claimed ON prestage_task (run_id, lease_expires_at) WHERE state = 'claimed'",
            ]
        ),
        // The foreign key from a task to its run checked every task row of a run's insert
        // against `prestage_run`, one trigger call per row: 2-3 ms of the 5-6 ms that insert
        // took for 500 tasks, on the critical path of every queued run (the first download waits
        // for it). The only writer keeps what it guarded: a run and its tasks are inserted by one
        // statement (`RunTable.insert`) and removed by one (`RunTable.removePublished`, which
        // deleted them by cascade and now names them).
        Migration(
            version: 4,
            statements: [
                "ALTER TABLE prestage_task DROP CONSTRAINT prestage_task_run_id_fkey"
            ]
        ),
        // Whether the run's catalog is published signed (`prestage --tuf-keys`): every process of
        // a run signs or none does, so a process without the keys never publishes a signed run's
        // catalog unsigned (docs/trust.md, "Distributed pre-staging").
        Migration(
            version: 5,
            statements: [
                "ALTER TABLE prestage_run ADD COLUMN signed boolean NOT NULL DEFAULT false"
            ]
        ),
    ]

    /// The newest schema version this Courier knows.
    public static var currentVersion: Int { migrations.last?.version ?? 0 }

    /// Creates or migrates the schema; returns the version the database is at.
    @discardableResult
    public static func migrate(_ client: PostgresClient, logger: Logger) async throws -> Int {
        do {
            return try await client.withConnection { connection in try await migrate(connection: connection, logger: logger) }
        } catch {
            throw PostgresErrors.wrap(error, "cannot create or migrate Courier's tables in PostgreSQL")
        }
    }

    /// `migrate` on one connection. A database already at `currentVersion` is seen in one
    /// statement (no transaction, no lock: every process of a run starts with this); any other
    /// goes through the locked migration, which looks again.
    @discardableResult
    public static func migrate(connection: PostgresConnection, logger: Logger) async throws -> Int {
        try await migrate(connection: connection, upTo: currentVersion, logger: logger)
    }

    /// `migrate`, stopping at `target` (a test's older database).
    static func migrate(connection: PostgresConnection, upTo target: Int, logger: Logger) async throws -> Int {
        do {
            if let version = try await recordedVersion(connection, logger: logger), version >= target {
                try refuseNewer(version)
                return version
            }
            return try await connection.withTransaction(logger: logger) { connection in
                try await connection.query("SELECT pg_advisory_xact_lock(\(migrationLock))", logger: logger)
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS courier_schema_version (
                        version    int         PRIMARY KEY,
                        applied_at timestamptz NOT NULL DEFAULT now()
                    )
                    """,
                    logger: logger)
                // The table exists now (another process may have migrated meanwhile): look again.
                let version = try await recordedVersion(connection, logger: logger) ?? 0
                try refuseNewer(version)
                for migration in migrations where migration.version > version && migration.version <= target {
                    for statement in migration.statements {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                    try await connection.query(
                        "INSERT INTO courier_schema_version (version) VALUES (\(migration.version))", logger: logger)
                    logger.debug("migrated the PostgreSQL schema", metadata: ["version": "\(migration.version)"])
                }
                return max(version, target)
            }
        } catch let error as CourierError {
            throw error
        } catch {
            throw PostgresErrors.wrap(error, "cannot create or migrate Courier's tables in PostgreSQL")
        }
    }

    /// The newest migration recorded, or nil when `courier_schema_version` does not exist yet.
    private static func recordedVersion(_ connection: PostgresConnection, logger: Logger) async throws -> Int? {
        do {
            var version = 0
            for try await value in try await connection.query(
                "SELECT coalesce(max(version), 0) FROM courier_schema_version", logger: logger
            ).decode(Int.self) {
                version = value
            }
            return version
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "42P01" {  // undefined_table
            return nil
        }
    }

    private static func refuseNewer(_ version: Int) throws {
        guard version <= currentVersion else {
            throw CourierError(
                .usage,
                "the PostgreSQL schema is at version \(version), newer than this courier knows (\(currentVersion))",
                hint: "run a courier at least as new as the one that migrated the database")
        }
    }
}

/// PostgreSQL errors as `CourierError`s: a connection that cannot be made or is lost is
/// `network` (exit 5); anything the server refused is `io` with the server's message.
enum PostgresErrors {
    static func wrap(_ error: any Error, _ message: String) -> CourierError {
        if let error = error as? CourierError { return error }
        if let error = error as? PSQLError {
            if let server = error.serverInfo {
                let text = [server[.sqlState], server[.message], server[.detail]].compactMap { $0 }.joined(separator: ": ")
                return CourierError(.io, message, cause: text)
            }
            switch error.code {
            case .connectionError, .serverClosedConnection, .uncleanShutdown, .sslUnsupported, .failedToAddSSLHandler:
                return CourierError(
                    .network, message, cause: "\(error.code)\(error.underlying.map { ": \($0)" } ?? "")",
                    hint: "check that PostgreSQL is running and reachable at the URL given")
            default:
                return CourierError(.io, message, cause: "\(error.code)")
            }
        }
        if error is CancellationError { return CourierError(.paused, message, cause: "cancelled") }
        return CourierError(.network, message, cause: "\(error)")
    }
}
