import Foundation

/// Progress of one download, as the download stage reports it.
public struct DownloadProgress: Sendable, Equatable {
    /// Bytes of the whole file on disk so far (a resume counts its durable prefix).
    public var bytesReceived: Int64
    public var totalBytes: Int64?
    public var bytesPerSecond: Double
    /// Seconds, or nil when unknown.
    public var timeRemaining: Double?
    /// The URL the bytes are coming from (the download's own or a mirror), when known.
    public var source: URL?

    public init(bytesReceived: Int64, totalBytes: Int64?, bytesPerSecond: Double, timeRemaining: Double?, source: URL? = nil) {
        self.bytesReceived = bytesReceived
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.timeRemaining = timeRemaining
        self.source = source
    }
}

/// The download stage: fetches a download's package, resumably, and verifies its length and
/// SHA-256. The real one is `TransferEngine`.
public protocol ContentDownloading: Sendable {
    /// Downloads `download.url` into `download.partialPath`, resuming from `journal`, and returns
    /// the verified package file (`destination`). Cancelling the calling task pauses it: the
    /// partial data is checkpointed and it throws `CourierError(.paused)`.
    func download(
        _ download: DownloadRecord,
        to destination: URL,
        journal: any ResumeJournalStore,
        progress: @escaping @Sendable (DownloadProgress) -> Void
    ) async throws -> URL

    /// `download`'s priority changed while it may be running (`courier priority`, seen at a
    /// heartbeat): a running transfer's share follows, and so do a delta update's range
    /// fetches when they run in the same engine (`DeltaUpdater.Target.downloadId`). Default:
    /// nothing.
    func reprioritize(_ download: DownloadRecord)
}

extension ContentDownloading {
    public func reprioritize(_ download: DownloadRecord) {}
}

/// The unpack-and-place stage: extracts a verified package into staging and places it in Caches
/// or Documents. Blocking: the pipeline calls it on its Dispatch pool. The real one is
/// `ContentPlacer`.
public protocol ContentInstalling: Sendable {
    /// Installs `package` as the content of `download` and returns the content folder. The
    /// pipeline passes only a package whose length and SHA-256 match `download` (the transfer
    /// verified them as the bytes arrived), so the digest need not be computed again. Refuses hostile packages with `.hostilePackage` and corrupt ones with `.integrity`.
    func install(package: URL, for download: DownloadRecord) throws -> URL

    /// `install`, the content's record written in the database transaction that records the
    /// download placed: `installed` is called once the content folder is in place and must
    /// commit the download's state and `placement` together (`PaymentQueue.installed`); one
    /// durable commit, not two. Default: `install`, then `installed` with no placement record.
    func install(package: URL, for download: DownloadRecord, installed: (URL, PlacementRecord?) throws -> Void) throws

    /// `install(package:for:installed:)` as the pipeline runs it: its blocking steps on `pool`,
    /// and any wait for the disk in between suspended rather than holding a pool thread (the
    /// placer's group `syncfs`). Returns what `installed` returned. Default: the whole install
    /// as one blocking step on `pool`.
    func install<T: Sendable>(
        package: URL, for download: DownloadRecord, on pool: BlockingWorkerPool,
        installed: @escaping @Sendable (URL, PlacementRecord?) throws -> T
    ) async throws -> T
}

extension ContentInstalling {
    public func install(package: URL, for download: DownloadRecord, installed: (URL, PlacementRecord?) throws -> Void) throws {
        try installed(try install(package: package, for: download), nil)
    }

    public func install<T: Sendable>(
        package: URL, for download: DownloadRecord, on pool: BlockingWorkerPool,
        installed: @escaping @Sendable (URL, PlacementRecord?) throws -> T
    ) async throws -> T {
        try await pool.run {
            var result: T?
            try self.install(package: package, for: download) { url, placement in result = try installed(url, placement) }
            guard let result else { throw CourierError(.internal, "the installer placed nothing") }
            return result
        }
    }
}

/// The validate stage: a receipt file's contents to the transactions it proves.
public protocol TransactionValidating: Sendable {
    func validate(_ receipt: Data) async throws -> [VerifiedTransaction]
}

/// The entitle stage: verified transactions to the hosted content they unlock.
public protocol ContentEntitling: Sendable {
    func content(for transactions: [VerifiedTransaction]) async throws -> [QueuedContent]
    /// Whether the catalog lists `productId` at all (with or without hosted content). A purchase
    /// of a product it does not list is never queued, so never finished. Default: true.
    func lists(productId: String) -> Bool
}

extension ContentEntitling {
    public func lists(productId: String) -> Bool { true }
}

/// Told when a transaction finished (the origin's finish webhook, say). Retried by its caller.
public protocol FinishNotifying: Sendable {
    func transactionFinished(_ transaction: TransactionRecord) async throws
}
