import Foundation
import Logging

/// `courier prestage` assembled from a configuration: the transfer engine (running `jobs`
/// transfers at once, even against one host), the fetcher and package inspector over it, and the
/// catalog loader, around a `PrestageJob` on a staging tree. Call `shutdown()` once done.
public final class PrestageRunner: Sendable {
    let engine: TransferEngine
    let catalogLoader: CatalogLoader
    let tree: any StagingTree
    let job: PrestageJob

    public init(
        configuration: CourierConfiguration, layout: StorageLayout, tree: any StagingTree, jobs: Int,
        workerName: String = "worker", logger: Logger
    ) throws {
        // The parts come from the core, as every front end's do, with `jobs` transfers at once.
        var configuration = configuration
        configuration.transfer.maxConcurrentTransfers = jobs
        configuration.transfer.maxTransfersPerHost = jobs
        let core = CourierCore(configuration: configuration, layout: layout, logger: logger)
        engine = try core.transferEngine()
        // A stale catalog served from the cache is worth a warning even when the log is quiet.
        var catalogLogger = logger
        catalogLogger.logLevel = min(logger.logLevel, .warning)
        catalogLoader = try core.logging(to: catalogLogger).catalogLoader(transport: engine.httpTransport)
        self.tree = tree
        job = PrestageJob(
            tree: tree, fetcher: TransferPackageFetcher(engine: engine),
            checker: InspectingPackageChecker(limits: configuration.packages), configuration: PrestageConfiguration(jobs: jobs, workerName: workerName),
            logger: logger)
    }

    /// Stops the transfer engine.
    public func shutdown() {
        engine.shutdown()
    }

    /// Loads the upstream catalog at `location` (a file relative to `base`, or a URL), plans
    /// `products` (every one when nil) against what the tree has published, and runs the job.
    /// Cancelling the calling task pauses it (`paused`) once what is staged is published.
    public func run(
        catalog location: String, relativeTo base: URL, products: Set<String>?,
        events: @escaping @Sendable (PrestageEvent) -> Void
    ) async throws -> PrestageSummary {
        let plan = try await plan(catalog: location, relativeTo: base, products: products)
        return try await job.run(plan, events: events)
    }

    /// Loads the upstream catalog at `location` and plans `products` against the tree.
    public func plan(catalog location: String, relativeTo base: URL, products: Set<String>?) async throws -> PrestagePlan {
        let loaded = try await catalogLoader.load(location, relativeTo: base)
        return try PrestagePlan(upstream: loaded.catalog, upstreamLocation: loaded.url, tree: tree, products: products)
    }

    /// The upstream catalog at `location`, loaded as `plan` loads it (through TUF with a trusted root).
    public func upstreamCatalog(catalog location: String, relativeTo base: URL) async throws -> Catalog {
        try await catalogLoader.load(location, relativeTo: base).catalog
    }

    /// Whether `plan` was made against the catalog the tree has published now: a plan made a
    /// while ago still holds unless a run published since.
    public func isCurrent(_ plan: PrestagePlan) throws -> Bool {
        try plan.isCurrent(in: tree)
    }

    /// A plan another process recorded for the run of `products` over this runner's tree,
    /// checked as untrusted input (`PrestagePlan.decodeStored`).
    public func storedPlan(_ data: Data, products: Set<String>?) throws -> PrestagePlan {
        try PrestagePlan.decodeStored(data, tree: tree, products: products)
    }

    /// Packages fetched and checked at once.
    public var jobs: Int { job.configuration.jobs }

    /// The job of this runner over another work queue (a run shared through PostgreSQL).
    public func job(queue: any PrestageWorkQueue) -> PrestageJob {
        job.with(queue: queue)
    }
}
