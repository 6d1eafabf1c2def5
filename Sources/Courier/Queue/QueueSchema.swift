import GRDB

/// The schema of the transaction queue: transactions, downloads (with their resume journal) and
/// leases. Documented in docs/queue.md.
///
/// Times are seconds since 1970 (REAL). States are the StoreKit names of DESIGN.md, stored as text.
enum QueueSchema {
    static let migrations: [(String, @Sendable (Database) throws -> Void)] = [
        ("queue.v1", createV1),
        ("agent.v1", createAgentV1),
        ("queue.v2-updates", createUpdatesV2),
        ("queue.v3-classes", createClassesV3),
        ("queue.v4-priority", createPriorityV4),
    ]

    /// Priorities (issue 30): the priority a user set (`courier priority`), NULL for the
    /// default (`DownloadRecord.effectivePriority`: normal; low for an update or prefetch content).
    private static func createPriorityV4(_ db: Database) throws {
        try db.execute(
            sql: """
                ALTER TABLE downloads ADD COLUMN priority TEXT CHECK (priority IN ('high', 'normal', 'low'));
                """
        )
    }

    /// Delivery classes (issue 32): each download's content class (`essential`, `prefetch`,
    /// `onDemand`) and preservation (`low`, `normal`, `high`); rows from before are essential
    /// and normal, what every content was then.
    private static func createClassesV3(_ db: Database) throws {
        try db.execute(
            sql: """
                ALTER TABLE downloads ADD COLUMN delivery TEXT NOT NULL DEFAULT 'essential';
                ALTER TABLE downloads ADD COLUMN preservation TEXT NOT NULL DEFAULT 'normal';
                """
        )
    }

    /// Updates and mirrors (issue 13): `updateFrom` is the installed version a download replaces
    /// (NULL for a first delivery), `mirrors` a JSON array of more URLs serving the same bytes,
    /// `source` the URL the bytes came from last (the download's own or a mirror), `manifest` the
    /// catalog's per-entry manifest of the package as JSON (`{url, sha256, length}`, URL resolved).
    private static func createUpdatesV2(_ db: Database) throws {
        try db.execute(
            sql: """
                ALTER TABLE downloads ADD COLUMN updateFrom TEXT;
                ALTER TABLE downloads ADD COLUMN mirrors TEXT;
                ALTER TABLE downloads ADD COLUMN source TEXT;
                ALTER TABLE downloads ADD COLUMN manifest TEXT;
                CREATE INDEX downloads_updates ON downloads (updateFrom) WHERE updateFrom IS NOT NULL;
                """
        )
    }

    private static func createV1(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE transactions (
                    id TEXT PRIMARY KEY NOT NULL,              -- the App Store transactionId
                    originalTransactionId TEXT NOT NULL,
                    productId TEXT NOT NULL,
                    state TEXT NOT NULL CHECK (state IN
                        ('purchasing', 'purchased', 'failed', 'restored', 'deferred', 'finished')),
                    restored INTEGER NOT NULL DEFAULT 0,       -- added by a restore
                    verified TEXT NOT NULL,                    -- VerifiedTransaction as JSON
                    errorCode TEXT,
                    errorMessage TEXT,
                    createdAt REAL NOT NULL,
                    updatedAt REAL NOT NULL,
                    finishedAt REAL
                );
                CREATE INDEX transactions_by_created ON transactions (createdAt, id);
                CREATE INDEX transactions_by_state ON transactions (state, createdAt);
                CREATE INDEX transactions_by_product ON transactions (productId);

                CREATE TABLE downloads (
                    id TEXT PRIMARY KEY NOT NULL,
                    transactionId TEXT NOT NULL REFERENCES transactions (id) ON DELETE CASCADE,
                    contentIdentifier TEXT NOT NULL,
                    productId TEXT NOT NULL,
                    url TEXT NOT NULL,
                    sha256 TEXT NOT NULL,
                    length INTEGER NOT NULL,
                    version TEXT NOT NULL,
                    placement TEXT NOT NULL CHECK (placement IN ('cache', 'documents')),
                    unpackedLength INTEGER,
                    state TEXT NOT NULL CHECK (state IN
                        ('waiting', 'active', 'paused', 'finished', 'failed', 'cancelled')),
                    pauseReason TEXT,                          -- an error code, or 'user'
                    progress REAL NOT NULL DEFAULT 0,
                    bytesReceived INTEGER NOT NULL DEFAULT 0,
                    rate REAL NOT NULL DEFAULT 0,              -- bytes per second, last measured
                    timeRemaining REAL,                        -- seconds, NULL when unknown
                    lastProgressAt REAL,                       -- when bytes last arrived
                    errorCode TEXT,
                    errorMessage TEXT,
                    etag TEXT,                                 -- resume journal
                    lastModified TEXT,
                    totalLength INTEGER,
                    durableOffset INTEGER NOT NULL DEFAULT 0,
                    partialPath TEXT NOT NULL,
                    contentURL TEXT,                           -- set once finished
                    createdAt REAL NOT NULL,
                    updatedAt REAL NOT NULL,
                    UNIQUE (transactionId, contentIdentifier)
                );
                CREATE INDEX downloads_by_transaction ON downloads (transactionId);
                CREATE INDEX downloads_by_state ON downloads (state, createdAt);

                CREATE TABLE leases (
                    downloadId TEXT PRIMARY KEY NOT NULL REFERENCES downloads (id) ON DELETE CASCADE,
                    ownerPid INTEGER NOT NULL,
                    ownerStartTime INTEGER,                    -- /proc start time, guards pid reuse
                    host TEXT NOT NULL,
                    token TEXT NOT NULL,
                    acquiredAt REAL NOT NULL,
                    heartbeatAt REAL NOT NULL,
                    expiresAt REAL NOT NULL
                );
                """
        )
    }
}
