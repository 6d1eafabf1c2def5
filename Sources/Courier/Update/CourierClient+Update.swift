import Foundation
import Logging

extension CourierClient {
    /// What `courier update` asks for.
    public struct UpdateRequest: Sendable {
        /// Only these products' content; empty: all delivered content.
        public var products: [String]
        /// The catalog (a file or URL, relative to the current directory); nil: the configured one.
        public var catalog: String?
        /// A receipt file's bytes, when given: its copies of the store's transactions count too,
        /// so a refund it carries stops the update. Transactions the store lacks are ignored.
        public var receipt: Data?

        public init(products: [String] = [], catalog: String? = nil, receipt: Data? = nil) {
            self.products = products
            self.catalog = catalog
            self.receipt = receipt
        }
    }

    /// Plans the update of delivered content against the catalog (`UpdatePlanner`): the catalog is
    /// loaded (revalidated from the cache: ETag, 304) and the store's verified transactions (plus a
    /// receipt's copies of them) decide what is still entitled. The only write: a refund the
    /// receipt shows is recorded in the store (`PaymentQueue.recordRevocations`), so that `list`
    /// shows it and the agent's updates do not try the purchase again.
    public func planUpdates(_ request: UpdateRequest, now: Date = Date()) async throws -> UpdatePlan {
        let (location, base) = try configuration.catalogLocation(request.catalog, for: "look updates up in")
        let loaded = try await catalogLoader.load(location, relativeTo: base)
        var transactions = try queue.verifiedTransactions()
        if let receipt = request.receipt {
            let known = Set(transactions.map(\.transactionId))
            let copies = try await receiptValidator().validateAllowingRevocation(receipt).filter { known.contains($0.transactionId) }
            for record in try queue.recordRevocations(copies) {
                logger.info("refund recorded", metadata: ["transaction-id": "\(record.id)", "product-id": "\(record.productId)"])
            }
            transactions += copies
        }
        return try UpdatePlanner.plan(
            installed: try contentPlacer().list(), transactions: transactions, catalog: loaded.catalog,
            catalogLocation: loaded.url, products: Set(request.products), now: now)
    }

    /// Queues the updates of `plan` (`PaymentQueue.queueUpdate`) and returns their downloads;
    /// an update a worker has active now is left to it.
    @discardableResult
    public func queueUpdates(_ plan: UpdatePlan) throws -> [DownloadRecord] {
        try plan.updates.compactMap { update in
            let record = try queue.queueUpdate(update.content, replacing: update.fromVersion)
            logger.debug(
                "update queued",
                metadata: [
                    "content-identifier": "\(update.contentIdentifier)", "from": "\(update.fromVersion)",
                    "to": "\(update.toVersion)", "download-id": "\(record?.id ?? "-")",
                ])
            return record
        }
    }

    /// The agent's automatic update: loads the configured catalog and, when it differs from
    /// `previous` (the catalog of the last check; nil at start), reconciles the downloads not
    /// delivered yet with it (`PaymentQueue.reconcile`), then plans and queues updates for
    /// it. Returns the catalog loaded, and the updates queued (empty when nothing changed).
    func checkForUpdates(since previous: Catalog?) async throws -> (catalog: Catalog, queued: [DownloadRecord]) {
        let (location, base) = try configuration.catalogLocation(nil, for: "look updates up in")
        let loaded = try await catalogLoader.load(location, relativeTo: base)
        guard loaded.catalog != previous else { return (loaded.catalog, []) }
        // Purchases not delivered yet follow the catalog as it is now (its URLs, its packages).
        let entitled = Entitlements.content(for: try queue.verifiedTransactions(), catalog: loaded.catalog, now: Date())
        try queue.reconcile(entitled.compactMap { try? QueuedContent($0, catalogLocation: loaded.url) }, redeliverMissing: false)
        let plan = try UpdatePlanner.plan(
            installed: try contentPlacer().list(), transactions: try queue.verifiedTransactions(), catalog: loaded.catalog,
            catalogLocation: loaded.url)
        for skipped in plan.skipped where skipped.reason != .notInCatalog {
            logger.info("content not updated", metadata: ["content-identifier": "\(skipped.contentIdentifier)", "why": "\(skipped.message)"])
        }
        let queued = try queueUpdates(plan)
        if !queued.isEmpty {
            logger.info("catalog changed: updates queued", metadata: ["updates": "\(queued.map(\.contentIdentifier).joined(separator: ", "))"])
        }
        return (loaded.catalog, queued)
    }

    /// A placer over this client's store (what is installed, where).
    func contentPlacer() -> ContentPlacer {
        ContentPlacer(
            layout: layout, store: queue.store, packages: configuration.packages, placement: configuration.placement,
            logger: logger)
    }
}
