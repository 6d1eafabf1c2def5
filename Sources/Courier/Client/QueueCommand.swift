import Foundation

/// A purchase handed to the queue: the receipt's bytes and what to take from it.
public struct Purchase: Sendable, Equatable {
    /// The receipt file's bytes (JWS signed transactions, one per line, or a legacy receipt).
    public var receipt: Data
    /// The catalog (a file path relative to the current folder, or a URL) instead of the
    /// configured one.
    public var catalog: String?
    /// Only these products (all the receipt proves when empty).
    public var products: [String]
    /// Restore the completed transactions of `products`.
    public var restore: Bool

    public init(receipt: Data, catalog: String? = nil, products: [String] = [], restore: Bool = false) {
        self.receipt = receipt
        self.catalog = catalog
        self.products = products
        self.restore = restore
    }
}

/// The downloads a queue command applies to.
public enum QueueTarget: Sendable, Equatable {
    /// Download ids, transaction ids (all their downloads) or unambiguous prefixes of either.
    case ids([String])
    /// Every download the command applies to (pause: waiting and active; resume: paused and
    /// failed; cancel: every unfinished one).
    case all
    /// Every stalled download (resume only).
    case stalled

    public static func id(_ id: String) -> QueueTarget { .ids([id]) }
}

/// Every command on the queue as a value: the CLI builds one, a `QueueControl` performs it on
/// the store (`LocalQueueControl`) or through a running agent (`AgentQueueControl`).
public enum QueueCommand: Sendable, Equatable {
    /// Unfinished transactions (finished ones too with `includeFinished`), or only the stalled
    /// downloads with `stalledOnly`.
    case list(includeFinished: Bool = false, stalledOnly: Bool = false)
    /// The entries of one download or transaction id (or prefix); `notFound` when it names none.
    case status(String)
    case pause(QueueTarget)
    case resume(QueueTarget)
    case cancel(QueueTarget)
    /// Drops partial data (ids only); refused while a download is active.
    case discard(QueueTarget)
    /// Sets the priority of unfinished downloads (ids only).
    case priority(QueueTarget, DownloadPriority)
    /// Validates the receipt, entitles it in the catalog and queues what it proves.
    case enqueue(Purchase)
}

/// What a queue command answers.
public struct QueueResult: Sendable, Equatable {
    /// `list`, `status`: the queue's lines.
    public var entries: [QueueEntry]
    /// `pause`, `resume`, `cancel`, `discard`, `priority`: the downloads that changed. `enqueue`: the
    /// queued transactions' downloads.
    public var downloads: [DownloadRecord]
    /// `enqueue`: the queued transactions as stored.
    public var transactions: [TransactionRecord]
    /// `enqueue`: products of verified purchases the catalog does not list, left unqueued while
    /// the others were queued.
    public var notInCatalog: [String]

    public init(
        entries: [QueueEntry] = [], downloads: [DownloadRecord] = [], transactions: [TransactionRecord] = [],
        notInCatalog: [String] = []
    ) {
        self.entries = entries
        self.downloads = downloads
        self.transactions = transactions
        self.notInCatalog = notInCatalog
    }

    /// The `notEntitled` error naming `notInCatalog` (exit 3 once the rest is reported), or nil.
    public var notInCatalogError: CourierError? { EnqueueResult.notInCatalogError(products: notInCatalog) }
}

/// Performs queue commands. Both implementations answer the same command with the same result
/// and the same `CourierError`: with one named download a refusal is the answer; with several
/// (a transaction, `all`) downloads the command does not apply to are skipped.
public protocol QueueControl: Sendable {
    func perform(_ command: QueueCommand) async throws -> QueueResult
}
