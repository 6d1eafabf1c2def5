import Foundation

/// The seam between the update flow and the ways an update's new version can be built.
///
/// An update is a download of the queue whose `updateFrom` is set (`PaymentQueue.queueUpdate`).
/// The pipeline claims it like any download (lease, heartbeat, pause, cancel, resume) and, before
/// fetching the whole package, asks the client's `ContentUpdating` to bring it in another way:
///
/// - `WholePackageUpdate` (the default) only notices content that is already at the new version
///   (an update a kill interrupted between placing the content and recording it) and otherwise
///   answers nil: the pipeline downloads the whole package (resumable, mirrors, progress) and
///   installs it with the placer's atomic exchange, keeping the old version until the new one
///   is placed.
/// - A delta builder (`download.manifest`: fetch only changed entries, build the new version in
///   staging from unchanged installed files) answers with the placed content folder, or nil to
///   fall back to the whole package (no manifest, a mismatch, an origin without Range).
public protocol ContentUpdating: Sendable {
    /// Brings `download` (an update of installed content to `download.version`) in without the
    /// whole package, and returns the placed content folder; or returns nil to have the pipeline
    /// fetch and install the whole package. Runs under the download's lease, on the cooperative
    /// pool (blocking work belongs on a Dispatch pool). Cancelling the calling task is a pause:
    /// keep what was verified, throw `CourierError(.paused)`. Other errors fail the download as
    /// any download's do (`integrity`, `hostilePackage`, `network`, …); the installed version
    /// must then be left as it was. `progress` takes bytes fetched toward `download.length`.
    func update(_ download: DownloadRecord, progress: @escaping @Sendable (DownloadProgress) -> Void) async throws -> URL?
}

/// The default update: the whole package, through the pipeline's download and install stages.
/// Answers the content folder only when the installed content already is the update's package
/// (same version and package SHA-256: placed by a run killed before it recorded the download).
public struct WholePackageUpdate: ContentUpdating {
    public let placer: ContentPlacer

    public init(placer: ContentPlacer) {
        self.placer = placer
    }

    public func update(_ download: DownloadRecord, progress: @escaping @Sendable (DownloadProgress) -> Void) async throws -> URL? {
        guard let installed = try placer.content(download.contentIdentifier), installed.version.isIdentical(to: download.version),
            installed.sha256 == download.sha256, installed.placement == download.placement
        else { return nil }
        return installed.url
    }
}
