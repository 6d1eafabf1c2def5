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

    public init(
        contentIdentifier: String, productId: String, version: String, placement: Catalog.Placement, path: String,
        size: Int64, sha256: String, installedAt: Date, lastUsedAt: Date
    ) {
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
