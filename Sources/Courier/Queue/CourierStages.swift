import Foundation

/// The download stage over the transfer engine: resumable, verified downloads with the
/// journal in the state database.
public struct TransferDownloadStage: ContentDownloading {
    public let engine: TransferEngine
    /// Extra request headers for the origin. Never logged.
    public let headers: [(String, String)]
    /// Per-download headers: a receipt-gated origin's credentials (`Authorization: Bearer` with
    /// the signed transaction that entitles the download). Never logged.
    public let credentials: @Sendable (DownloadRecord) -> [(String, String)]
    /// The room a download's content will take once unpacked, kept free beside the download
    /// from its first byte: the catalog's `unpackedLength`, else `placement.unpackedSizeFactor` ×
    /// the package's length (`DownloadLifecycle.SpaceRule.unpacked`).
    public let unpackedSpace: @Sendable (DownloadRecord) -> Int64

    public init(
        engine: TransferEngine,
        headers: [(String, String)] = [],
        credentials: @escaping @Sendable (DownloadRecord) -> [(String, String)] = { _ in [] },
        unpackedSpace: @escaping @Sendable (DownloadRecord) -> Int64 = { $0.unpackedLength ?? 0 }
    ) {
        self.engine = engine
        self.headers = headers
        self.credentials = credentials
        self.unpackedSpace = unpackedSpace
    }

    /// Credentials from the queue: the signed transaction of the download's transaction, sent as
    /// `Authorization: Bearer` (what `courier serve`'s receipt gate verifies). A legacy receipt's
    /// transaction has no signed form, so its downloads go without.
    public static func bearerCredentials(from queue: PaymentQueue) -> @Sendable (DownloadRecord) -> [(String, String)] {
        { download in
            guard let token = (try? queue.signedTransaction(download.transactionId)) ?? nil else { return [] }
            return [("Authorization", "Bearer \(token)")]
        }
    }

    public func download(
        _ download: DownloadRecord,
        to destination: URL,
        journal: any ResumeJournalStore,
        progress: @escaping @Sendable (DownloadProgress) -> Void
    ) async throws -> URL {
        var request = DownloadRequest(
            id: download.id, url: download.url, destination: destination,
            partialFile: URL(fileURLWithPath: download.partialPath), expectedLength: download.length,
            expectedSHA256: download.sha256, headers: headers + credentials(download), additionalSpaceNeeded: unpackedSpace(download))
        request.mirrors = download.mirrors
        request.priority = priority(of: download)
        // `PaymentQueue.installed` resets the journal in the commit that records the download
        // placed (and a failure that drops the package resets it too): no write of its own here.
        request.resetsJournalWhenPlaced = false
        // Every download names its SHA-256 and length: a journal is first written at the first
        // checkpoint, not before the first byte (`savesFirstJournalEagerly`).
        request.savesFirstJournalEagerly = false
        // The package is consumed by the install that follows, whose `syncfs` before its rename
        // flushes the package's filesystem anyway (and the package is deleted once the install
        // is recorded); a package left by a crash is hashed again before any use
        // (`DeliveryPipeline.verifiedPackage`), never trusted by its name. So no fdatasync of
        // the file or fsync of its folder here: the write-back starts at once instead.
        request.durability = .deferredToCaller
        let result = try await engine.download(request, journal: journal) { update in
            progress(
                DownloadProgress(
                    bytesReceived: update.bytesReceived, totalBytes: update.totalBytes,
                    bytesPerSecond: update.bytesPerSecond, timeRemaining: update.timeRemaining, source: update.source))
        }
        return result.file
    }

    /// The priority `download` transfers at here: the one a user set, else `high` in a
    /// foreground engine (`deliver`: someone waits at a terminal) unless it is prefetch content,
    /// else its default (`DownloadRecord.effectivePriority`: normal; low for an update or prefetch).
    public func priority(of download: DownloadRecord) -> DownloadPriority {
        download.transferPriority(in: engine.trafficClass)
    }

    public func reprioritize(_ download: DownloadRecord) {
        engine.setPriority(priority(of: download), downloadId: download.id)
    }
}

/// The unpack-and-place stage over `ContentPlacer`: staging, then an atomic rename into Caches or
/// Documents, recorded in the delivered-content table.
public struct PlacementInstallStage: ContentInstalling {
    public let placer: ContentPlacer
    /// Replace newer content with an older version (a downgrade). Default false.
    public let force: Bool

    public init(placer: ContentPlacer, force: Bool = false) {
        self.placer = placer
        self.force = force
    }

    public func install(package: URL, for download: DownloadRecord) throws -> URL {
        let delivered = try placer.install(
            package: package, contentIdentifier: download.contentIdentifier, productId: download.productId,
            version: download.version, placement: download.placement, force: force, verifiedSHA256: download.sha256)
        return placer.contentURL(delivered.contentIdentifier, placement: delivered.placement)
    }

    public func install(package: URL, for download: DownloadRecord, installed: (URL, PlacementRecord?) throws -> Void) throws {
        let url = placer.contentURL(download.contentIdentifier, placement: download.placement)
        _ = try placer.install(
            package: package, contentIdentifier: download.contentIdentifier, productId: download.productId,
            version: download.version, placement: download.placement, force: force, verifiedSHA256: download.sha256,
            recording: { placement in try installed(url, placement) })
    }

    /// The install in three steps (`ContentPlacer.prepareInstall`): unpacking on `pool`, then
    /// the wait for a `syncfs` shared with the other installs that wait at the same time
    /// (suspended, off the pool, so the pool unpacks the next packages meanwhile), then the
    /// swap and the record on `pool`. `installed` runs only once the content is on disk and in
    /// place, as in `install(package:for:installed:)`.
    public func install<T: Sendable>(
        package: URL, for download: DownloadRecord, on pool: BlockingWorkerPool,
        installed: @escaping @Sendable (URL, PlacementRecord?) throws -> T
    ) async throws -> T {
        let (placer, force) = (self.placer, self.force)
        let prepared = try await pool.run {
            try placer.prepareInstall(
                package: package, contentIdentifier: download.contentIdentifier, productId: download.productId,
                version: download.version, placement: download.placement, force: force, verifiedSHA256: download.sha256)
        }
        do {
            try await placer.flush(prepared)
            let url = placer.contentURL(download.contentIdentifier, placement: download.placement)
            return try await pool.run {
                var result: T?
                _ = try placer.completeInstall(prepared) { placement in result = try installed(url, placement) }
                guard let result else { throw CourierError(.internal, "the installer placed nothing") }
                return result
            }
        } catch {
            // Not completed (a failed flush, or cancelled while waiting for the pool): its
            // staging goes and the old version stays. (A completion that failed ended it.)
            _ = try? await BlockingWorkerPool.detached { placer.abandon(prepared) }
            throw error
        }
    }
}

/// The validate stage over `ReceiptValidator`.
public struct ReceiptValidationStage: TransactionValidating {
    public let validator: ReceiptValidator

    public init(validator: ReceiptValidator) {
        self.validator = validator
    }

    public func validate(_ receipt: Data) async throws -> [VerifiedTransaction] {
        try await validator.validate(receipt)
    }
}

/// The entitle stage over a catalog: the content each verified transaction unlocks, with its URL
/// resolved against the catalog's own location.
public struct CatalogEntitlementStage: ContentEntitling {
    public let catalog: Catalog
    /// Where the catalog came from (a file or http(s) URL), for relative content URLs.
    public let location: URL?

    public init(catalog: Catalog, location: URL?) {
        self.catalog = catalog
        self.location = location
    }

    public func lists(productId: String) -> Bool { catalog.product(productId) != nil }

    public func content(for transactions: [VerifiedTransaction]) async throws -> [QueuedContent] {
        try Entitlements.content(for: transactions, catalog: catalog, now: Date()).map { entitled in
            try QueuedContent(entitled, catalogLocation: location)
        }
    }
}

extension QueuedContent {
    /// The queue's view of entitled content, its URL resolved against the catalog's location.
    public init(_ entitled: EntitledContent, catalogLocation: URL?) throws {
        guard let url = Catalog.resolve(entitled.content.url, relativeTo: catalogLocation) else {
            throw CourierError(.usage, "the catalog's URL \(entitled.content.url) for \(entitled.productId) is not usable")
        }
        // Local files are read only for a catalog that is itself a local file: a catalog fetched
        // from an origin names no file of this machine.
        if url.isFileURL && catalogLocation?.isFileURL != true {
            throw CourierError(
                .usage, "the catalog names a local file for \(entitled.productId): \(url.absoluteString)",
                hint: "a catalog fetched over http(s) must name http(s) packages")
        }
        self.init(
            contentIdentifier: entitled.contentIdentifier, productId: entitled.productId,
            transactionId: entitled.transactionId, url: url, sha256: entitled.content.sha256,
            length: entitled.content.length, version: entitled.content.version, placement: entitled.content.placement,
            unpackedLength: entitled.content.unpackedLength, mirrors: (entitled.content.mirrors ?? []).compactMap(URL.init(string:)),
            manifest: entitled.content.manifest.flatMap { manifest in
                Catalog.resolve(manifest.url, relativeTo: catalogLocation).map {
                    ManifestReference(url: $0, sha256: manifest.sha256.lowercased(), length: manifest.length)
                }
            }, delivery: entitled.content.deliveryClass, preservation: entitled.content.preservationPriority)
    }
}
