import GRDB

/// The schema of delivered content. Documented in docs/packages.md ("Schema").
///
/// `delivered_content`: one row per content folder under Caches/ or Documents/.
/// `content_installation`: the intent of an install in flight, written before its staging folder
/// is renamed into place; `ContentPlacer.recover()` finishes or rolls back each one it finds.
/// `content_install_attempt`: an install from before its package is read until it ends; one that
/// outlives its process counts an interrupted install (`ContentPlacer.beginAttempt`).
/// `content_file` (v3): each regular file an install placed, with the SHA-256 hashed as it was
/// written and the `stat` identity it had once in place (device, inode, size, mtime, ctime), so
/// an update can reuse unchanged files and distrust one changed on disk. Rows belong to an
/// install (`installId`): those of an install in flight are ignored until it commits, which
/// removes the rows of the version it replaced.
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
        (
            // Additive: installs before it have no file rows, and an update of such content
            // fetches every entry (or the whole package).
            "content.v3",
            { db in
                try db.execute(
                    sql: """
                        CREATE TABLE content_file (
                            installId TEXT NOT NULL,
                            contentIdentifier TEXT NOT NULL,
                            path TEXT NOT NULL,
                            size INTEGER NOT NULL,
                            sha256 TEXT,
                            device INTEGER NOT NULL,
                            inode INTEGER NOT NULL,
                            mtimeNanoseconds INTEGER NOT NULL,
                            ctimeNanoseconds INTEGER NOT NULL,
                            PRIMARY KEY (installId, path)
                        );
                        CREATE INDEX content_file_content ON content_file (contentIdentifier);
                        """
                )
            }
        ),
        (
            // Delivery classes (issue 32, docs/delivery-classes.md): the class and preservation of
            // placed content (rows from before: essential, normal), the pins `content open` leaves
            // until `content close` (process-bound pins are lock files, `ContentPins`), and the
            // content purged for space, which `deliver` and `content open` bring back.
            "content.v4-classes",
            { db in
                try db.execute(
                    sql: """
                        ALTER TABLE delivered_content ADD COLUMN delivery TEXT NOT NULL DEFAULT 'essential';
                        ALTER TABLE delivered_content ADD COLUMN preservation TEXT NOT NULL DEFAULT 'normal';
                        CREATE TABLE content_pin (
                            contentIdentifier TEXT PRIMARY KEY NOT NULL,
                            pinnedAt DATETIME NOT NULL
                        );
                        CREATE TABLE content_purged (
                            contentIdentifier TEXT PRIMARY KEY NOT NULL,
                            productId TEXT NOT NULL,
                            purgedAt DATETIME NOT NULL
                        );
                        """
                )
            }
        ),
    ]
}
