import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// Content that has been delivered and placed: StoreKit's `contentURL` and its bookkeeping.
public struct DeliveredContent: Sendable, Codable, Equatable {
    /// The folder name under Caches/ or Documents/: the product id, or `<productId>.<itemId>`.
    public var contentIdentifier: String
    /// The product its ContentInfo.plist names.
    public var productId: String
    /// Its ContentInfo.plist `ContentVersion`.
    public var version: String
    public var placement: Catalog.Placement
    /// The absolute path of the content folder (ContentInfo.plist plus Contents/).
    public var path: String
    /// Unpacked bytes.
    public var size: Int64
    /// SHA-256 of the package it came from.
    public var sha256: String
    public var installedAt: Date
    /// Updated by `ContentPlacer.content(_:)`; the least recently used cache content is purged first.
    public var lastUsedAt: Date
    /// The catalog's delivery class of the download that placed it (`essential` for content
    /// placed before classes, or by `package install`).
    public var delivery: Catalog.DeliveryClass
    /// The catalog's purge order: low before normal before high (`PurgeOrder`).
    public var preservation: Catalog.Preservation

    public init(
        contentIdentifier: String, productId: String, version: String, placement: Catalog.Placement, path: String,
        size: Int64, sha256: String, installedAt: Date, lastUsedAt: Date, delivery: Catalog.DeliveryClass = .essential,
        preservation: Catalog.Preservation = .normal
    ) {
        self.delivery = delivery
        self.preservation = preservation
        self.contentIdentifier = contentIdentifier
        self.productId = productId
        self.version = version
        self.placement = placement
        self.path = path
        self.size = size
        self.sha256 = sha256
        self.installedAt = installedAt
        self.lastUsedAt = lastUsedAt
    }

    /// The content folder.
    public var url: URL { URL(fileURLWithPath: path, isDirectory: true) }
}

extension DeliveredContent: FetchableRecord, PersistableRecord {
    public static let databaseTableName = "delivered_content"
}

/// The intent of an install in flight (table `content_installation`).
struct ContentInstallation: Codable, Sendable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "content_installation"
    var id: String
    var contentIdentifier: String
    var productId: String
    var version: String
    var placement: Catalog.Placement
    var previousPlacement: Catalog.Placement?
    var size: Int64
    var sha256: String
    var stagingDevice: Int64
    var stagingInode: Int64
    var createdAt: Date
}

/// An install in progress, from before its package is read until it ends (table
/// `content_install_attempt`): a row that outlives its install lock marks an install a crash or a
/// kill interrupted. See `ContentPlacer.beginAttempt`.
struct ContentInstallAttempt: Codable, Sendable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "content_install_attempt"
    var contentIdentifier: String
    /// The package's identity (`ContentPlacer.fingerprint`): a different package starts a new count.
    var package: String
    /// The install lock `.staging/<lockId>.lock` its process holds while it runs.
    var lockId: String
    var placement: Catalog.Placement
    /// Attempts before this one, in a row, that a crash or a kill interrupted.
    var interruptions: Int
    var startedAt: Date
}

/// A regular file of delivered content as its install placed it (table `content_file`).
package struct InstalledFile: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    package static let databaseTableName = "content_file"
    /// The install that placed it (`ContentInstallation.id`).
    package var installId: String
    package var contentIdentifier: String
    /// Below the content folder, `/`-separated (e.g. `Contents/level1.dat`).
    package var path: String
    package var size: Int64
    /// Lowercase hex SHA-256 of its bytes as written; nil when it could not be hashed in one pass.
    package var sha256: String?
    package var device: Int64
    package var inode: Int64
    package var mtimeNanoseconds: Int64
    package var ctimeNanoseconds: Int64

    /// Whether `status` (an `lstat` of the file now) is the file as it was placed: a regular file
    /// with the same device, inode, size, modification and change times. Any write, truncation,
    /// replacement or `touch` changes one of them (the change time cannot be set back).
    package func isUnchanged(_ status: stat) -> Bool {
        status.st_mode & S_IFMT == S_IFREG && Int64(status.st_dev) == device && Int64(status.st_ino) == inode
            && Int64(status.st_size) == size && Self.nanoseconds(status.st_mtim) == mtimeNanoseconds
            && Self.nanoseconds(status.st_ctim) == ctimeNanoseconds
    }

    static func nanoseconds(_ time: timespec) -> Int64 {
        let (scaled, overflow) = Int64(time.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : scaled &+ Int64(time.tv_nsec)
    }
}

/// The SQL of one install's records, as statements compiled once per connection and rows read
/// by column index: an install reads and writes these rows several times, and GRDB's record
/// methods (SQL built per call, Codable, columns found by name) cost several times the SQL.
/// Dates are bound and read as GRDB's `Date` values, the form its Codable records store.
enum ContentRows {
    static func delivered(_ db: Database, contentIdentifier: String) throws -> DeliveredContent? {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: """
                    SELECT contentIdentifier, productId, version, placement, path, size, sha256, installedAt, lastUsedAt,
                        delivery, preservation
                    FROM delivered_content WHERE contentIdentifier = ?
                    """),
                arguments: [contentIdentifier])
        else { return nil }
        let placementText: String = row[3]
        guard let placement = Catalog.Placement(rawValue: placementText) else {
            throw CourierError(.internal, "delivered content \(contentIdentifier) has an unknown placement \(placementText)")
        }
        let delivery: String = row[9]
        let preservation: String = row[10]
        return DeliveredContent(
            contentIdentifier: row[0], productId: row[1], version: row[2], placement: placement, path: row[4],
            size: row[5], sha256: row[6], installedAt: row[7], lastUsedAt: row[8],
            delivery: Catalog.DeliveryClass(rawValue: delivery) ?? .essential,
            preservation: Catalog.Preservation(rawValue: preservation) ?? .normal)
    }

    /// Sets the class and preservation of placed content `contentIdentifier` (from the download
    /// that placed it, in the same database transaction as its record).
    static func setClass(
        _ db: Database, contentIdentifier: String, delivery: Catalog.DeliveryClass, preservation: Catalog.Preservation
    ) throws {
        try db.cachedStatement(sql: "UPDATE delivered_content SET delivery = ?, preservation = ? WHERE contentIdentifier = ?")
            .execute(arguments: [delivery.rawValue, preservation.rawValue, contentIdentifier])
    }

    /// Records that `contentIdentifier` was purged for space (not deleted by a user): a
    /// `deliver` or `content open` brings it back while it is entitled.
    static func recordPurge(_ db: Database, contentIdentifier: String, productId: String, at date: Date) throws {
        try db.cachedStatement(sql: """
                INSERT INTO content_purged (contentIdentifier, productId, purgedAt) VALUES (?, ?, ?)
                ON CONFLICT (contentIdentifier) DO UPDATE SET productId = excluded.productId, purgedAt = excluded.purgedAt
                """).execute(arguments: [contentIdentifier, productId, date])
    }

    static func forgetPurge(_ db: Database, contentIdentifier: String) throws {
        try db.cachedStatement(sql: "DELETE FROM content_purged WHERE contentIdentifier = ?").execute(arguments: [contentIdentifier])
    }

    /// The content purged for space and not placed again since.
    static func purged(_ db: Database) throws -> Set<String> {
        Set(try String.fetchAll(db.cachedStatement(sql: "SELECT contentIdentifier FROM content_purged")))
    }

    /// Inserts `delivered`, or replaces the row of its content identifier: one statement.
    static func upsert(_ db: Database, _ d: DeliveredContent) throws {
        try db.cachedStatement(sql: """
                INSERT INTO delivered_content (contentIdentifier, productId, version, placement, path, size, sha256, installedAt, lastUsedAt)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (contentIdentifier) DO UPDATE SET productId = excluded.productId, version = excluded.version,
                    placement = excluded.placement, path = excluded.path, size = excluded.size, sha256 = excluded.sha256,
                    installedAt = excluded.installedAt, lastUsedAt = excluded.lastUsedAt
                """).execute(arguments: [
                d.contentIdentifier, d.productId, d.version, d.placement.rawValue, d.path, d.size, d.sha256, d.installedAt,
                d.lastUsedAt,
            ])
    }

    static func insert(_ db: Database, _ i: ContentInstallation) throws {
        try db.cachedStatement(sql: """
                INSERT INTO content_installation (id, contentIdentifier, productId, version, placement, previousPlacement, size,
                    sha256, stagingDevice, stagingInode, createdAt)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """).execute(arguments: [
                i.id, i.contentIdentifier, i.productId, i.version, i.placement.rawValue, i.previousPlacement?.rawValue, i.size,
                i.sha256, i.stagingDevice, i.stagingInode, i.createdAt,
            ])
    }

    static func insert(_ db: Database, _ f: InstalledFile) throws {
        try db.cachedStatement(sql: """
                INSERT INTO content_file (installId, contentIdentifier, path, size, sha256, device, inode, mtimeNanoseconds,
                    ctimeNanoseconds)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """).execute(arguments: [
                f.installId, f.contentIdentifier, f.path, f.size, f.sha256, f.device, f.inode, f.mtimeNanoseconds,
                f.ctimeNanoseconds,
            ])
    }

    static func deleteInstallation(_ db: Database, id: String) throws {
        try db.cachedStatement(sql: "DELETE FROM content_installation WHERE id = ?").execute(arguments: [id])
    }

    /// Drops the file records of `contentIdentifier` that another install than `installId` wrote.
    static func deleteFiles(_ db: Database, contentIdentifier: String, otherThan installId: String) throws {
        try db.cachedStatement(sql: "DELETE FROM content_file WHERE contentIdentifier = ? AND installId <> ?")
            .execute(arguments: [contentIdentifier, installId])
    }

    /// The attempt row of `contentIdentifier`: its package, lock id, placement and interruptions.
    static func attempt(_ db: Database, contentIdentifier: String) throws
        -> (package: String, lockId: String, placement: Catalog.Placement, interruptions: Int)?
    {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: """
                    SELECT package, lockId, placement, interruptions FROM content_install_attempt WHERE contentIdentifier = ?
                    """),
                arguments: [contentIdentifier])
        else { return nil }
        let placementText: String = row[2]
        guard let placement = Catalog.Placement(rawValue: placementText) else {
            throw CourierError(.internal, "the install attempt of \(contentIdentifier) has an unknown placement \(placementText)")
        }
        return (row[0], row[1], placement, row[3])
    }

    static func upsert(_ db: Database, _ a: ContentInstallAttempt) throws {
        try db.cachedStatement(sql: """
                INSERT INTO content_install_attempt (contentIdentifier, package, lockId, placement, interruptions, startedAt)
                VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (contentIdentifier) DO UPDATE SET package = excluded.package, lockId = excluded.lockId,
                    placement = excluded.placement, interruptions = excluded.interruptions, startedAt = excluded.startedAt
                """).execute(arguments: [a.contentIdentifier, a.package, a.lockId, a.placement.rawValue, a.interruptions, a.startedAt])
    }

    static func deleteAttempt(_ db: Database, contentIdentifier: String) throws {
        try db.cachedStatement(sql: "DELETE FROM content_install_attempt WHERE contentIdentifier = ?").execute(arguments: [contentIdentifier])
    }

    static func deleteAttempt(_ db: Database, contentIdentifier: String, lockId: String) throws {
        try db.cachedStatement(sql: "DELETE FROM content_install_attempt WHERE contentIdentifier = ? AND lockId = ?")
            .execute(arguments: [contentIdentifier, lockId])
    }
}

/// Orders `ContentVersion` strings: dot- or dash-separated parts, numerically where both parts
/// are numbers ("1.10" > "1.9"), else by text; missing parts count as zero ("1.0" == "1").
public enum ContentVersion {
    public static func compare(_ a: String, _ b: String) -> ComparisonResult {
        let separators: (Character) -> Bool = { $0 == "." || $0 == "-" || $0 == "_" }
        let left = a.split(whereSeparator: separators)
        let right = b.split(whereSeparator: separators)
        for index in 0..<max(left.count, right.count) {
            let l = index < left.count ? String(left[index]) : "0"
            let r = index < right.count ? String(right[index]) : "0"
            if let ln = UInt64(l), let rn = UInt64(r) {
                if ln != rn { return ln < rn ? .orderedAscending : .orderedDescending }
            } else if l != r {
                return l < r ? .orderedAscending : .orderedDescending
            }
        }
        return .orderedSame
    }
}
