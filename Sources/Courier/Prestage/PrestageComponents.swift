import Foundation

/// Fetches packages with the transfer engine: resumable (journals beside the partial files in
/// the staging tree's work folder), verified against the catalog's length and SHA-256. The file
/// is left unsynced (`DownloadDurability.deferredToCaller`): the job syncs the tree once.
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
        try await fetchKeepingBytes(task, to: destination, workDirectory: workDirectory, upTo: 0, progress: progress).fetched
    }

    public func fetchKeepingBytes(
        _ task: PrestageTask,
        to destination: URL,
        workDirectory: URL,
        upTo limit: Int,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> (fetched: Int64, bytes: [UInt8]?) {
        var request = DownloadRequest(
            id: task.downloadId,
            url: task.source,
            destination: destination,
            partialFile: workDirectory.appendingPathComponent("\(task.downloadId).part", isDirectory: false),
            expectedLength: task.content.length,
            expectedSHA256: task.content.sha256.lowercased()
        )
        // The staging tree makes the run's files durable together, before the catalog names
        // them (`StagingTree.syncPublished`): no fsync per file, journal or folder here.
        request.durability = .deferredToCaller
        request.retainsBodyUpTo = limit
        let journal = FileResumeJournalStore(directory: workDirectory, syncs: false)
        let result = try await engine.download(request, journal: journal) { update in
            progress(update.bytesReceived)
        }
        return (result.bytesFetched, result.body)
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
        try checked(file, task: task).declaredUnpackedSize
    }

    /// The check, then the manifest from the same preflight: the package's digest is the one the
    /// download verified (hashed as its bytes were written), and the preflight's one libarchive
    /// pass hashes each entry for the manifest, so the file is read once after the download.
    public func checkAndDescribe(_ file: URL, task: PrestageTask) throws -> (unpackedLength: Int64?, manifest: PackageManifest?) {
        try checkAndDescribe(file, bytes: nil, task: task)
    }

    /// `checkAndDescribe`, reading `bytes` (the whole file as its download wrote it) when given.
    public func checkAndDescribe(_ file: URL, bytes: [UInt8]?, task: PrestageTask) throws -> (unpackedLength: Int64?, manifest: PackageManifest?) {
        let preflight = try checked(file, bytes: bytes, task: task, hashingEntries: true)
        let manifest = try? PackageManifest.build(
            package: file, preflight: preflight, packageDigest: task.content.sha256.lowercased(), limits: limits)
        // The manifest must also pass the default limits a client decodes it with.
        guard let manifest, (try? manifest.check(PackageConfiguration())) != nil else {
            return (preflight.declaredUnpackedSize, nil)
        }
        return (preflight.declaredUnpackedSize, manifest)
    }

    /// Every rule of `PackageInspector` (the download already verified the file's SHA-256, so it
    /// is not hashed again), and a ContentInfo.plist naming the task's product and version.
    func checked(_ file: URL, bytes: [UInt8]? = nil, task: PrestageTask, hashingEntries: Bool = false) throws -> PackagePreflight {
        let preflight = try PackageInspector.preflight(file, bytes: bytes, limits: limits, hashingEntries: hashingEntries)
        let info = preflight.info
        guard info.productId.isIdentical(to: task.productId) else {
            throw CourierError(
                .hostilePackage,
                "the package for \(task.contentIdentifier) names the product \(info.productId.debugDescription)"
            )
        }
        guard info.version.isIdentical(to: task.content.version) else {
            throw CourierError(
                .integrity,
                "the package for \(task.contentIdentifier) has version \(info.version.debugDescription), the catalog says \(task.content.version.debugDescription)"
            )
        }
        return preflight
    }
}
