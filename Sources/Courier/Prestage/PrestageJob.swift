import Crypto
import Foundation
import Logging

/// Downloads one package for pre-staging, resumably, verifying length and SHA-256 against the
/// task's catalog entry. The production fetcher is the transfer engine (`TransferPackageFetcher`).
public protocol PackageFetcher: Sendable {
    /// Fetches `task.source` to `destination` (renamed there only once verified), keeping partial
    /// data and its journal under `workDirectory` so a later call resumes. `progress` receives
    /// the bytes of the whole file received so far. Returns the bytes fetched by this call.
    func fetch(
        _ task: PrestageTask,
        to destination: URL,
        workDirectory: URL,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> Int64
}

/// Checks a fetched package as the client would before it is staged (ContentInfo.plist naming
/// the product and version, no hostile entries, limits), without extracting it. Returns the
/// unpacked size. The production checker is the package inspector (`InspectingPackageChecker`).
public protocol PackageChecker: Sendable {
    func check(_ file: URL, task: PrestageTask) throws -> Int64?
}

/// What a pre-staging run reports as it goes (NDJSON with `--json`, a progress bar on a terminal).
public enum PrestageEvent: Sendable {
    /// The plan: packages to fetch and their bytes, packages already staged, entries refused.
    case planned(tasks: Int, bytes: Int64, unchanged: Int, refused: Int)
    case started(PrestageTask)
    /// Bytes of this package received so far (the whole file, including a resumed prefix).
    case progress(PrestageTask, received: Int64)
    case staged(PrestageTask, bytesFetched: Int64)
    case failed(PrestageTask, CourierError)
    /// The catalog was published (or left as it was, when nothing changed) with this many packages.
    case published(packages: Int, changed: Bool)
}

/// The end of a run: one row per catalog entry considered.
public struct PrestageSummary: Sendable {
    public struct Row: Sendable {
        public enum Status: String, Sendable { case staged, unchanged, failed, refused }
        public var contentIdentifier: String
        public var status: Status
        /// Bytes fetched by this run.
        public var bytesFetched: Int64
        public var error: CourierError?
    }

    public var rows: [Row]
    /// Whether a new catalog was published.
    public var catalogChanged: Bool
    public var failures: [Row] { rows.filter { $0.status == .failed || $0.status == .refused } }
    public var bytesFetched: Int64 { rows.reduce(0) { $0 + $1.bytesFetched } }
}

/// Settings of the pre-staging job.
public struct PrestageConfiguration: Sendable {
    /// Packages fetched and checked at once. Default 8.
    public var jobs: Int
    /// Seconds a package no catalog lists any more is kept before removal (clients may be resuming). Default 1 day.
    public var unlistedGrace: TimeInterval

    public init(jobs: Int = 8, unlistedGrace: TimeInterval = 86_400) {
        self.jobs = jobs
        self.unlistedGrace = unlistedGrace
    }
}

/// The pre-staging job: fetches what the plan lists through a work queue with `jobs` workers,
/// checks each package, publishes each one as soon as it is checked and the catalog last.
///
/// One package's failure does not stop the others; the catalog then keeps that package's
/// previously published version, if any. Cancelling the calling task pauses: packages staged so
/// far are published in the catalog, partial downloads keep their journals, and `run` throws
/// `CourierError(.paused)`.
public struct PrestageJob: Sendable {
    let tree: any StagingTree
    let fetcher: any PackageFetcher
    let checker: any PackageChecker
    let queue: any PrestageWorkQueue
    let configuration: PrestageConfiguration
    let logger: Logger

    public init(
        tree: any StagingTree,
        fetcher: any PackageFetcher,
        checker: any PackageChecker,
        queue: any PrestageWorkQueue = LocalWorkQueue(),
        configuration: PrestageConfiguration = .init(),
        logger: Logger
    ) {
        self.tree = tree
        self.fetcher = fetcher
        self.checker = checker
        self.queue = queue
        self.configuration = configuration
        self.logger = logger
    }

    public func run(_ plan: PrestagePlan, events: @escaping @Sendable (PrestageEvent) -> Void) async throws -> PrestageSummary {
        events(
            .planned(
                tasks: plan.tasks.count,
                bytes: plan.tasks.reduce(0) { $0 + $1.content.length },
                unchanged: plan.unchanged.count,
                refused: plan.refused.count
            )
        )
        let downloads = tree.workDirectory.appendingPathComponent("downloads", isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
        } catch {
            throw CourierError(.io, "cannot create \(downloads.path)", cause: "\(error)")
        }
        try await queue.enqueue(plan.tasks)
        let workers = max(1, min(configuration.jobs, plan.tasks.count))
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<workers {
                group.addTask {
                    await work(worker: "worker-\(index)", downloads: downloads, events: events)
                }
            }
        }
        let outcomes = try await queue.outcomes()
        var staged = Set<String>()
        var unpacked: [String: Int64] = [:]
        var rows: [PrestageSummary.Row] = []
        var paused = false
        for task in plan.tasks {
            switch outcomes[task.contentIdentifier] {
            case .staged(let bytes, let unpackedLength):
                staged.insert(task.contentIdentifier)
                unpacked[task.contentIdentifier] = unpackedLength
                rows.append(.init(contentIdentifier: task.contentIdentifier, status: .staged, bytesFetched: bytes))
            case .failed(let error):
                if error.code == .paused || error.code == .cancelled { paused = true }
                rows.append(.init(contentIdentifier: task.contentIdentifier, status: .failed, bytesFetched: 0, error: error))
            case nil:
                paused = true
                let error = CourierError(.paused, "not started before the run was interrupted")
                rows.append(.init(contentIdentifier: task.contentIdentifier, status: .failed, bytesFetched: 0, error: error))
            }
        }
        rows += plan.unchanged.map { .init(contentIdentifier: $0, status: .unchanged, bytesFetched: 0) }
        rows += plan.refused.map {
            .init(contentIdentifier: $0.contentIdentifier, status: .refused, bytesFetched: 0, error: CourierError(.usage, $0.reason))
        }
        let catalog = plan.catalog(staged: staged, unpackedLengths: unpacked)
        let changed = try tree.publishedCatalog() != catalog
        if changed {
            try tree.publishCatalog(catalog)
            logger.debug("published the catalog", metadata: ["packages": "\(catalog.allContent.count)"])
        }
        events(.published(packages: catalog.allContent.count, changed: changed))
        if !paused, changed {
            let removed = try tree.removeUnlisted(by: catalog, grace: configuration.unlistedGrace)
            if !removed.isEmpty { logger.debug("removed unlisted packages", metadata: ["count": "\(removed.count)"]) }
        }
        if paused {
            throw CourierError(.paused, "pre-staging was interrupted", hint: "run the same command again to resume")
        }
        return PrestageSummary(rows: rows, catalogChanged: changed)
    }

    private func work(worker: String, downloads: URL, events: @escaping @Sendable (PrestageEvent) -> Void) async {
        while !Task.isCancelled {
            let claimed: PrestageTask?
            do {
                claimed = try await queue.claim(worker: worker)
            } catch {
                logger.error("cannot claim pre-staging work", metadata: ["error": "\(error)"])
                return
            }
            guard let task = claimed else { return }
            events(.started(task))
            let outcome: PrestageOutcome
            do {
                let (bytes, unpacked) = try await stage(task, downloads: downloads, events: events)
                outcome = .staged(bytesFetched: bytes, unpackedLength: unpacked)
                events(.staged(task, bytesFetched: bytes))
            } catch {
                let failure = (error as? CourierError) ?? CourierError(.internal, "\(error)")
                outcome = .failed(failure)
                events(.failed(task, failure))
                logger.debug("pre-staging failed", metadata: ["download-id": "\(task.downloadId)", "error": "\(failure)"])
            }
            do {
                try await queue.complete(task, outcome: outcome)
            } catch {
                logger.error("cannot record pre-staging work", metadata: ["download-id": "\(task.downloadId)", "error": "\(error)"])
            }
        }
    }

    /// Fetch (or reuse a verified file left by an interrupted run), check, publish.
    private func stage(
        _ task: PrestageTask,
        downloads: URL,
        events: @escaping @Sendable (PrestageEvent) -> Void
    ) async throws -> (Int64, Int64?) {
        let file = downloads.appendingPathComponent("\(task.downloadId).zip")
        var fetched: Int64 = 0
        if !(try await Self.blocking { try Self.isVerified(file, task: task) }) {
            try? FileManager.default.removeItem(at: file)
            fetched = try await fetcher.fetch(task, to: file, workDirectory: downloads) { received in
                events(.progress(task, received: received))
            }
        }
        let unpacked: Int64?
        do {
            let checker = self.checker
            unpacked = try await Self.blocking { try checker.check(file, task: task) }
        } catch {
            // A refused package is not kept: the next run fetches it again.
            try? FileManager.default.removeItem(at: file)
            throw error
        }
        let tree = self.tree
        try await Self.blocking { try tree.publishPackage(file, at: task.stagedPath) }
        return (fetched, unpacked)
    }

    /// Hashing, inspecting and fsync run on Dispatch threads, never on Swift's cooperative pool;
    /// at most one per worker, so `jobs` bounds them.
    static func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .utility).async {
                continuation.resume(with: Result { try body() })
            }
        }
    }

    /// Whether `file` exists with the task's length and SHA-256 (left by a run interrupted
    /// between the fetch and the publication).
    static func isVerified(_ file: URL, task: PrestageTask) throws -> Bool {
        guard let handle = try? FileHandle(forReadingFrom: file) else { return false }
        defer { try? handle.close() }
        var hasher = SHA256()
        var length: Int64 = 0
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            hasher.update(data: chunk)
            length += Int64(chunk.count)
            if length > task.content.length { return false }
        }
        let digest = hasher.finalize().map { String(format: "%02x", $0) }.joined()
        return length == task.content.length && digest == task.content.sha256.lowercased()
    }
}
