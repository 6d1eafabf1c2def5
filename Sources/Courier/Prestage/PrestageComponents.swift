import Foundation

/// Fetches packages with the transfer engine: resumable (journals beside the partial files in
/// the staging tree's work folder), verified against the catalog's length and SHA-256.
public struct TransferPackageFetcher: PackageFetcher {
    let engine: TransferEngine

    public init(engine: TransferEngine) {
        self.engine = engine
    }

    public func fetch(
        _ task: PrestageTask,
        to destination: URL,
        workDirectory: URL,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> Int64 {
        let request = DownloadRequest(
            id: task.downloadId,
            url: task.source,
            destination: destination,
            partialFile: workDirectory.appendingPathComponent("\(task.downloadId).part"),
            expectedLength: task.content.length,
            expectedSHA256: task.content.sha256.lowercased()
        )
        let journal = FileResumeJournalStore(directory: workDirectory)
        let result = try await engine.download(request, journal: journal) { update in
            progress(update.bytesReceived)
        }
        return result.bytesFetched
    }
}

/// Checks packages with `PackageInspector`, as the client would before extracting: every entry
/// rule and limit, and a ContentInfo.plist naming the task's product and version.
public struct InspectingPackageChecker: PackageChecker {
    let limits: PackageConfiguration

    public init(limits: PackageConfiguration) {
        self.limits = limits
    }

    public func check(_ file: URL, task: PrestageTask) throws -> Int64? {
        let info = try PackageInspector.inspect(file, limits: limits)
        guard info.productId == task.productId else {
            throw CourierError(
                .hostilePackage,
                "the package for \(task.contentIdentifier) names the product \(info.productId.debugDescription)"
            )
        }
        guard info.version == task.content.version else {
            throw CourierError(
                .integrity,
                "the package for \(task.contentIdentifier) has version \(info.version.debugDescription), the catalog says \(task.content.version.debugDescription)"
            )
        }
        return info.unpackedSize
    }
}
