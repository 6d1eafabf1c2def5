import Foundation

/// What an update run would do: which installed content moves to a newer version, which is
/// current, and which is left as it is and why.
public struct UpdatePlan: Sendable {
    /// Installed content the catalog has a newer version of, which the user is entitled to.
    public struct Update: Sendable {
        public var contentIdentifier: String
        public var productId: String
        /// The installed version.
        public var fromVersion: String
        /// The catalog's version.
        public var toVersion: String
        /// The new package, as the queue takes it (of the transaction that entitles it).
        public var content: QueuedContent
    }

    /// Installed content that is not updated.
    public struct Skipped: Sendable {
        public enum Reason: String, Sendable {
            /// The catalog's version is older than the installed one: a downgrade is refused.
            case downgrade
            /// The catalog has a newer version, but no purchase in the store entitles it any more
            /// (refunded or revoked, an expired subscription, no purchase at all).
            case notEntitled
            /// The catalog does not list the content any more.
            case notInCatalog
        }

        public var contentIdentifier: String
        public var productId: String
        public var installedVersion: String
        public var catalogVersion: String?
        public var reason: Reason
        /// One plain sentence for the user.
        public var message: String
    }

    public var updates: [Update] = []
    /// Installed content at the catalog's version already.
    public var upToDate: [DeliveredContent] = []
    public var skipped: [Skipped] = []

    public init() {}
}

/// Decides which delivered content to update from the catalog and the stored purchases.
///
/// - Only content the catalog lists with a newer `version` (`ContentVersion.compare`) is updated;
///   an older one is a refused downgrade, the same one is up to date.
/// - Only content the purchases still entitle is updated, by the rules of `Entitlements` (a
///   refunded or revoked purchase unlocks nothing; an auto-renewable subscription's plain
///   content only while a period is active; a magazine's issues stay unlocked by the period that
///   unlocked them). The update belongs to the transaction that entitles the content now.
public enum UpdatePlanner {
    /// The plan for `installed` content against `catalog` (at `catalogLocation`, for relative URLs),
    /// given every verified copy of the store's transactions (`transactions`; newer copies, a
    /// refund read from a fresh receipt, win as `VerifiedTransaction.latestCopies` says).
    /// `products`, when not empty, limits the plan to their content.
    public static func plan(
        installed: [DeliveredContent],
        transactions: [VerifiedTransaction],
        catalog: Catalog,
        catalogLocation: URL?,
        products: Set<String> = [],
        now: Date = Date()
    ) throws -> UpdatePlan {
        var plan = UpdatePlan()
        let entitled = Dictionary(
            Entitlements.content(for: transactions, catalog: catalog, now: now).map { ($0.contentIdentifier, $0) }
        ) { first, _ in first }
        let latest = VerifiedTransaction.latestCopies(transactions)
        for content in installed where products.isEmpty || products.contains(content.productId) {
            func skip(_ reason: UpdatePlan.Skipped.Reason, _ catalogVersion: String?, _ message: String) {
                plan.skipped.append(
                    UpdatePlan.Skipped(
                        contentIdentifier: content.contentIdentifier, productId: content.productId,
                        installedVersion: content.version, catalogVersion: catalogVersion, reason: reason, message: message))
            }
            guard let listed = catalogContent(content.contentIdentifier, productId: content.productId, in: catalog) else {
                skip(.notInCatalog, nil, "\(content.contentIdentifier) \(content.version): not in the catalog; left as it is")
                continue
            }
            switch ContentVersion.compare(listed.version, content.version) {
            case .orderedSame:
                plan.upToDate.append(content)
                continue
            case .orderedAscending:
                skip(
                    .downgrade, listed.version,
                    "\(content.contentIdentifier): the catalog lists \(listed.version), older than the installed "
                        + "\(content.version); a downgrade is refused")
                continue
            case .orderedDescending:
                break
            }
            guard let entitlement = entitled[content.contentIdentifier] else {
                let purchases = latest.filter { $0.productId.isIdentical(to: content.productId) }
                let why: String
                if purchases.isEmpty {
                    why = "no purchase of it in this store"
                } else if purchases.allSatisfy({ $0.revocationDate != nil }) {
                    why = "its purchase was refunded or revoked"
                } else if purchases.contains(where: { $0.type == .autoRenewable }) {
                    why = "its subscription expired"
                } else {
                    why = "no purchase entitles it"
                }
                skip(.notEntitled, listed.version, "\(content.contentIdentifier) \(content.version) not updated to \(listed.version): \(why)")
                continue
            }
            plan.updates.append(
                UpdatePlan.Update(
                    contentIdentifier: content.contentIdentifier, productId: content.productId, fromVersion: content.version,
                    toVersion: entitlement.content.version,
                    content: try QueuedContent(entitlement, catalogLocation: catalogLocation)))
        }
        return plan
    }

    /// The catalog's package for `contentIdentifier` (a product's content, or `<productId>.<itemId>`
    /// of a subscription item), whoever is entitled to it.
    static func catalogContent(_ contentIdentifier: String, productId: String, in catalog: Catalog) -> Catalog.Content? {
        guard let product = catalog.product(productId) else { return nil }
        if contentIdentifier.isIdentical(to: productId) { return product.content }
        return product.items?.first { "\(productId).\($0.itemId)".isIdentical(to: contentIdentifier) }?.content
    }
}
