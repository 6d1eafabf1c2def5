import Foundation
import Logging

/// The delta update behind the update flow's `ContentUpdating` seam: an update whose catalog
/// entry names a manifest is brought in by its changed entries (`DeltaUpdater`); one without a
/// manifest, or whose delta falls back (a mismatch, an origin without Range, …), answers nil so
/// that the pipeline fetches and installs the whole package. The fallback's reason is logged
/// at info level (`delta-fallback`) and given to `fellBack` (the client tells the queue's
/// observers: `courier update` says it on standard error).
///
/// Content already at the update's package (a run killed after placing it) is answered as
/// `WholePackageUpdate` does. Cancelling is a pause: verified entries stay in the update's work
/// folder (`DeltaUpdater.workDirectory`) and the next run fetches none of them again.
public struct DeltaContentUpdate: ContentUpdating {
    public let updater: DeltaUpdater
    /// Per-download headers (a receipt-gated origin's `Authorization`); never logged.
    public let credentials: @Sendable (DownloadRecord) -> [(String, String)]
    /// Called when an update whose catalog entry names a manifest falls back to the whole
    /// package, with the reason (one line).
    public let fellBack: @Sendable (DownloadRecord, DeltaUpdater.Fallback) -> Void
    let logger: Logger

    public init(
        updater: DeltaUpdater,
        credentials: @escaping @Sendable (DownloadRecord) -> [(String, String)] = { _ in [] },
        fellBack: @escaping @Sendable (DownloadRecord, DeltaUpdater.Fallback) -> Void = { _, _ in },
        logger: Logger
    ) {
        self.updater = updater
        self.credentials = credentials
        self.fellBack = fellBack
        self.logger = logger
    }

    public func update(_ download: DownloadRecord, progress: @escaping @Sendable (DownloadProgress) -> Void) async throws -> URL? {
        if let placed = try await WholePackageUpdate(placer: updater.placer).update(download, progress: progress) {
            return placed
        }
        var logger = self.logger
        logger[metadataKey: "download-id"] = "\(download.id)"
        guard let manifest = download.manifest else {
            logger.debug("no manifest: the whole package is fetched")
            return nil
        }
        var target = DeltaUpdater.Target(
            contentIdentifier: download.contentIdentifier, productId: download.productId, version: download.version,
            placement: download.placement, packageURL: download.url, packageSHA256: download.sha256,
            packageLength: download.length, manifestURL: manifest.url, manifestSHA256: manifest.sha256,
            manifestLength: manifest.length, headers: credentials(download),
            workDirectory: DeltaUpdater.workDirectory(
                in: updater.placer.layout, contentIdentifier: download.contentIdentifier, packageSHA256: download.sha256)
        )
        // The ranges transfer as the download, at the priority its whole package would have.
        target.downloadId = download.id
        target.priority = download.transferPriority(in: updater.engine.trafficClass)
        let started = Date()
        do {
            let outcome = try await updater.update(target) { bytes in
                let elapsed = Date().timeIntervalSince(started)
                progress(
                    DownloadProgress(
                        bytesReceived: bytes, totalBytes: download.length,
                        bytesPerSecond: elapsed > 0 ? Double(bytes) / elapsed : 0, timeRemaining: nil, source: download.url))
            }
            logger.info(
                "updated by changed entries",
                metadata: [
                    "bytes-fetched": "\(outcome.bytesFetched)", "package-length": "\(download.length)",
                    "entries-fetched": "\(outcome.entriesFetched)", "entries-reused": "\(outcome.entriesReused)",
                ])
            return outcome.content.url
        } catch let fallback as DeltaUpdater.Fallback {
            logger.info("delta update not possible: the whole package is fetched", metadata: ["delta-fallback": "\(fallback)"])
            fellBack(download, fallback)
            return nil
        }
    }
}
