import GRDB

/// The schema of delivered content. Documented in docs/packages.md ("Schema").
///
/// `delivered_content`: one row per content folder under Caches/ or Documents/.
/// `content_installation`: the intent of an install in flight, written before its staging folder
/// is renamed into place; `ContentPlacer.recover()` finishes or rolls back each one it finds.
/// `content_install_attempt`: an install from before its package is read until it ends; one that
/// outlives its process counts an interrupted install (`ContentPlacer.beginAttempt`).
enum ContentSchema {
    static let migrations: [(String, @Sendable (Database) throws -> Void)] = [
        (
            "content.v1",
            { db in
                try db.execute(
                    sql: """
                        CREATE TABLE delivered_content (
                            contentIdentifier TEXT PRIMARY KEY NOT NULL,
                            productId TEXT NOT NULL,
                            version TEXT NOT NULL,
                            placement TEXT NOT NULL CHECK (placement IN ('cache', 'documents')),
                            path TEXT NOT NULL,
                            size INTEGER NOT NULL,
                            sha256 TEXT NOT NULL,
                            installedAt DATETIME NOT NULL,
                            lastUsedAt DATETIME NOT NULL
                        );
                        CREATE INDEX delivered_content_lru ON delivered_content (placement, lastUsedAt);
                        CREATE TABLE content_installation (
                            id TEXT PRIMARY KEY NOT NULL,
                            contentIdentifier TEXT NOT NULL,
                            productId TEXT NOT NULL,
                            version TEXT NOT NULL,
                            placement TEXT NOT NULL,
                            previousPlacement TEXT,
                            size INTEGER NOT NULL,
                            sha256 TEXT NOT NULL,
                            stagingDevice INTEGER NOT NULL,
                            stagingInode INTEGER NOT NULL,
                            createdAt DATETIME NOT NULL
                        );
                        """
                )
            }
        ),
        (
            "content.v2",
            { db in
                try db.execute(
                    sql: """
                        CREATE TABLE content_install_attempt (
                            contentIdentifier TEXT PRIMARY KEY NOT NULL,
                            package TEXT NOT NULL,
                            lockId TEXT NOT NULL,
                            placement TEXT NOT NULL,
                            interruptions INTEGER NOT NULL,
                            startedAt DATETIME NOT NULL
                        );
                        """
                )
            }
        ),
    ]
}
