import Foundation

/// How `CourierClient.repair` mended one content.
public struct ContentRepair: Sendable, Equatable {
    public enum Method: String, Sendable {
        /// Only the missing or damaged entries, by byte ranges of the package (its manifest).
        case entries
        /// The whole package, fetched and placed over what was there.
        case package
    }

    public var contentIdentifier: String
    public var method: Method
    /// Package bytes fetched for the entries (`entries` only; a whole package is the download's).
    public var bytesFetched: Int64?
    /// The download that fetched the whole package (`package` only).
    public var downloadId: String?
}

extension CourierClient {
    /// Checks delivered content (`ContentPlacer.verify`): `name`'s (a content identifier, or a
    /// product's contents), else all that is recorded delivered. Content `name` designates that
    /// was delivered once (a finished download) but has no record any more (deleted, purged) is
    /// `missing`. Throws `notFound` when `name` designates nothing delivered. Blocking reads and
    /// hashing run on a Dispatch worker.
    public func verifyContent(_ name: String?) async throws -> [ContentCheck] {
        let placer = contentPlacer()
        let queue = self.queue
        return try await BlockingWorkerPool.detached {
            var checks = try placer.recorded(name).map { try placer.verify($0) }
            if let name {
                let recorded = Set(checks.map(\.contentIdentifier))
                var seen = Set<String>()
                for download in try queue.finishedDownloads(named: name)
                where !recorded.contains(download.contentIdentifier) && seen.insert(download.contentIdentifier).inserted {
                    checks.append(
                        ContentCheck(
                            contentIdentifier: download.contentIdentifier, productId: download.productId, version: download.version,
                            placement: download.placement,
                            path: placer.contentURL(download.contentIdentifier, placement: download.placement).path, status: .missing,
                            missingFiles: [], damagedFiles: [], filesChecked: 0))
                }
                guard !checks.isEmpty else {
                    throw CourierError(.notFound, "no delivered content \(name.debugDescription)")
                }
            }
            return checks.sorted { $0.contentIdentifier < $1.contentIdentifier }
        }
    }

    /// Starts mending `check` (not `ok`) from the package its last delivery came from
    /// (`PaymentQueue.lastDelivery`): damaged content whose package has a manifest gets only its
    /// missing and damaged entries, fetched by byte ranges and placed with the atomic swap of
    /// updates; anything else (missing, unverifiable, no manifest, a delta that cannot be
    /// trusted) has its download queued again for the whole package: run the pipeline over the
    /// returned `downloadId` to fetch and place it. The transaction stays finished. Throws
    /// `notFound` when no delivery of the content is recorded.
    public func repair(_ check: ContentCheck) async throws -> ContentRepair {
        guard let download = try queue.lastDelivery(of: check.contentIdentifier) else {
            throw CourierError(
                .notFound, "no delivery of \(check.contentIdentifier) is recorded: nothing names the package to repair it from",
                hint: "deliver it again: courier deliver --receipt FILE --restore --product \(check.productId)")
        }
        if check.status == .damaged, let manifest = download.manifest, download.version.isIdentical(to: check.version) {
            let placer = contentPlacer()
            var target = DeltaUpdater.Target(
                contentIdentifier: download.contentIdentifier, productId: download.productId, version: download.version,
                placement: check.placement, packageURL: download.url, packageSHA256: download.sha256,
                packageLength: download.length, manifestURL: manifest.url, manifestSHA256: manifest.sha256,
                manifestLength: manifest.length, headers: TransferDownloadStage.bearerCredentials(from: queue)(download),
                workDirectory: DeltaUpdater.workDirectory(
                    in: layout, contentIdentifier: download.contentIdentifier, packageSHA256: download.sha256))
            target.untrustedPaths = Set(check.missingFiles + check.damagedFiles)
            let updater = DeltaUpdater(placer: placer, engine: engine, logger: logger)
            do {
                let outcome = try await updater.update(target)
                logger.info(
                    "content repaired by entries",
                    metadata: [
                        "content-identifier": "\(check.contentIdentifier)", "entries-fetched": "\(outcome.entriesFetched)",
                        "bytes-fetched": "\(outcome.bytesFetched)",
                    ])
                return ContentRepair(
                    contentIdentifier: check.contentIdentifier, method: .entries, bytesFetched: outcome.bytesFetched, downloadId: nil)
            } catch let fallback as DeltaUpdater.Fallback {
                logger.info(
                    "repair by entries not possible: the whole package is fetched",
                    metadata: ["content-identifier": "\(check.contentIdentifier)", "delta-fallback": "\(fallback)"])
            }
        }
        let queued = try queue.redeliver(download.id)
        return ContentRepair(contentIdentifier: check.contentIdentifier, method: .package, bytesFetched: nil, downloadId: queued.id)
    }
}
