import Crypto
import Foundation

/// A transaction's state, with StoreKit's names (DESIGN.md, "States").
public enum TransactionState: String, Sendable, Codable, CaseIterable {
    case purchasing, purchased, failed, restored, deferred, finished
}

/// A download's state, with StoreKit's names: `waiting -> active <-> paused -> finished | failed | cancelled`.
public enum DownloadState: String, Sendable, Codable, CaseIterable {
    case waiting, active, paused, finished, failed, cancelled

    /// Whether the download will never move again without a user's action (finished or cancelled).
    public var isSettled: Bool { self == .finished || self == .cancelled }
}

/// Why a download is paused (stored as its raw value in `downloads.pauseReason`).
public enum PauseReason: String, Sendable, Codable, CaseIterable {
    /// A user paused it (`courier pause`, the queue's `pause`): only a user's resume continues it.
    case user
    /// Its process stopped (SIGTERM, SIGINT, shutdown): the next pipeline run picks it up.
    case interrupted
    /// The disk was full: the agent resumes it once the storage has room.
    case insufficientSpace
    /// Background work while NetworkManager says the connection is metered (docs/transfer.md,
    /// "Metered networks"): the agent resumes it once the connection is not metered.
    case waitingForUnmetered

    /// The reason a stored value names; an unknown one counts as a user's pause (kept until a
    /// user resumes it).
    init(stored: String) { self = PauseReason(rawValue: stored) ?? .user }

    /// The error a download paused for this reason carries (none for a user's pause).
    var error: CourierError? {
        switch self {
        case .user: return nil
        case .interrupted: return CourierError(.interrupted, "paused: interrupted")
        case .insufficientSpace: return CourierError(.insufficientSpace, "paused: insufficientSpace")
        case .waitingForUnmetered: return CourierError(.paused, "paused: waitingForUnmetered")
        }
    }
}

extension CourierError.Code {
    /// The operation does not apply to the record's current state (finish with unfinished
    /// downloads, discard of an active download, start of a finished one).
    public static let invalidState = CourierError.Code(rawValue: "invalidState")
    /// Another live process holds the lease on this download.
    public static let leased = CourierError.Code(rawValue: "leased")
}

/// A transaction in the queue: the verified purchase and where it is in the flow.
public struct TransactionRecord: Sendable, Codable, Equatable {
    /// The App Store transaction id (unique: a transaction is queued and delivered once).
    public var id: String
    public var originalTransactionId: String
    public var productId: String
    public var state: TransactionState
    /// Whether a restore, not a purchase, put it in the queue.
    public var restored: Bool
    public var verified: VerifiedTransaction
    public var errorCode: CourierError.Code?
    public var errorMessage: String?
    public var createdAt: Date
    public var updatedAt: Date
    public var finishedAt: Date?

    public init(
        id: String, originalTransactionId: String, productId: String, state: TransactionState, restored: Bool,
        verified: VerifiedTransaction, errorCode: CourierError.Code? = nil, errorMessage: String? = nil,
        createdAt: Date, updatedAt: Date, finishedAt: Date? = nil
    ) {
        self.id = id
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.state = state
        self.restored = restored
        self.verified = verified
        self.errorCode = errorCode
        self.errorMessage = errorMessage
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.finishedAt = finishedAt
    }
}

/// Hosted content a transaction unlocks, as the queue needs it: the entitlement stage's output.
public struct QueuedContent: Sendable, Hashable {
    /// The folder name under Caches/ or Documents/: the product id, or `<productId>.<itemId>`.
    public var contentIdentifier: String
    public var productId: String
    public var transactionId: String
    /// The package's absolute URL (already resolved against the catalog's location).
    public var url: URL
    public var sha256: String
    public var length: Int64
    public var version: String
    public var placement: Catalog.Placement
    public var unpackedLength: Int64?
    /// More absolute URLs serving the same bytes, tried in order after `url`.
    public var mirrors: [URL]
    /// The package's per-entry manifest, when the catalog names one.
    public var manifest: ManifestReference?
    /// The catalog's delivery class (`essential` when it does not say).
    public var delivery: Catalog.DeliveryClass
    /// The catalog's purge order (`normal` when it does not say).
    public var preservation: Catalog.Preservation

    public init(
        contentIdentifier: String, productId: String, transactionId: String, url: URL, sha256: String,
        length: Int64, version: String, placement: Catalog.Placement, unpackedLength: Int64? = nil,
        mirrors: [URL] = [], manifest: ManifestReference? = nil, delivery: Catalog.DeliveryClass = .essential,
        preservation: Catalog.Preservation = .normal
    ) {
        self.delivery = delivery
        self.preservation = preservation
        self.mirrors = mirrors
        self.manifest = manifest
        self.contentIdentifier = contentIdentifier
        self.productId = productId
        self.transactionId = transactionId
        self.url = url
        self.sha256 = sha256
        self.length = length
        self.version = version
        self.placement = placement
        self.unpackedLength = unpackedLength
    }
}

/// Where a package's per-entry manifest is (the catalog's `manifest`, its URL resolved against
/// the catalog's location) and what it must be: an update by changed entries reads it.
public struct ManifestReference: Sendable, Codable, Hashable {
    public var url: URL
    /// Lowercase hex SHA-256 of the manifest file.
    public var sha256: String
    /// The manifest file's length in bytes, when the catalog says.
    public var length: Int64?

    public init(url: URL, sha256: String, length: Int64? = nil) {
        self.url = url
        self.sha256 = sha256
        self.length = length
    }
}

/// A download in the queue: one content package of one transaction, its progress, its resume
/// journal and, once finished, where its content is.
public struct DownloadRecord: Sendable, Codable, Equatable {
    public var id: String
    public var transactionId: String
    public var contentIdentifier: String
    public var productId: String
    public var url: URL
    public var sha256: String
    /// The package's length in bytes (StoreKit's `contentLength`).
    public var length: Int64
    /// The package's `ContentVersion` (StoreKit's `contentVersion`).
    public var version: String
    public var placement: Catalog.Placement
    public var unpackedLength: Int64?
    public var state: DownloadState
    /// Why it is paused; nil unless paused.
    public var pauseReason: PauseReason?
    /// 0...1.
    public var progress: Double
    public var bytesReceived: Int64
    /// Bytes per second, last measured (0 when not transferring).
    public var rate: Double
    /// Seconds, or nil when unknown.
    public var timeRemaining: Double?
    /// When bytes last arrived.
    public var lastProgressAt: Date?
    /// Set only when failed (or paused for an error).
    public var errorCode: CourierError.Code?
    public var errorMessage: String?
    public var etag: String?
    public var lastModified: String?
    public var totalLength: Int64?
    public var durableOffset: Int64
    /// The partial file, under Storage/Downloads/.
    public var partialPath: String
    /// Where the content was placed; set only when finished.
    public var contentURL: URL?
    public var createdAt: Date
    public var updatedAt: Date
    /// The installed version this download replaces: set for an update (`courier update`, the
    /// agent's automatic updates), nil for a first delivery.
    public var updateFrom: String? = nil
    /// More URLs serving the same bytes (the catalog's `mirrors`), tried in order after `url`.
    public var mirrors: [URL] = []
    /// The URL the bytes came from last (`url` or one of `mirrors`), once known.
    public var source: URL? = nil
    /// The catalog's per-entry manifest of the package, when it names one (a delta update's input).
    public var manifest: ManifestReference? = nil
    /// Its content's delivery class: only `essential` downloads hold their transaction's finish.
    public var delivery: Catalog.DeliveryClass = .essential
    /// Its content's purge order once placed.
    public var preservation: Catalog.Preservation = .normal

    /// Whether this is background work: fetched after essential work, at low priority, and
    /// held while the connection is metered (`MeteredPolicy.isBackground`).
    public var isBackgroundWork: Bool { delivery == .prefetch }

    /// The priority a user set (`courier priority`); nil: the default, `effectivePriority`.
    public var priority: DownloadPriority? = nil

    /// Whether this download updates installed content (see `updateFrom`).
    public var isUpdate: Bool { updateFrom != nil }

    /// The priority the agent works it at: the one set, else `low` for an update or prefetch
    /// content (`isBackgroundWork`) and `normal` for a first delivery. A foreground `deliver`
    /// works a download without one at `high` (prefetch content at `low`).
    public var effectivePriority: DownloadPriority { priority ?? (isUpdate || isBackgroundWork ? .low : .normal) }

    /// The priority its transfers (the whole package, or a delta update's ranges) run at in an
    /// engine of `trafficClass`: the one set, else `high` in a foreground engine (`deliver`:
    /// someone waits at a terminal) unless it is prefetch content, else `effectivePriority`.
    public func transferPriority(in trafficClass: TrafficClass) -> DownloadPriority {
        priority ?? (trafficClass == .foreground && !isBackgroundWork ? .high : effectivePriority)
    }

    /// The error, when failed or paused for an error.
    public var error: CourierError? {
        errorCode.map { CourierError($0, errorMessage ?? $0.rawValue) }
    }

    /// The resume journal kept in this row.
    public var journal: ResumeJournal {
        ResumeJournal(
            downloadId: id, url: url, etag: etag, lastModified: lastModified, totalLength: totalLength,
            durableOffset: durableOffset)
    }

    /// The stable id of the download of `contentIdentifier` for `transactionId`: 16 hex digits of
    /// their SHA-256, so adding the same transaction twice names the same download.
    public static func makeId(transactionId: String, contentIdentifier: String) -> String {
        SHA256.hash(data: Data((transactionId + "\n" + contentIdentifier).utf8)).hex.prefix(16).description
    }
}

/// An event of the payment queue, in the order the store committed them (StoreKit's observer
/// callbacks, as values).
public enum PaymentQueueEvent: Sendable, Equatable {
    case updatedTransactions([TransactionRecord])
    case updatedDownloads([DownloadRecord])
    /// Transactions finished (StoreKit removes finished transactions from the queue).
    case removedTransactions([TransactionRecord])
    /// A restore queued the transactions of the chosen products.
    case restoreCompleted(productIds: [String])
    case restoreFailed(CourierError)
}
