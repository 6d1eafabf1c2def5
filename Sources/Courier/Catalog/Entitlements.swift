import Foundation

/// One piece of hosted content a set of verified transactions entitles the user to.
public struct EntitledContent: Sendable, Hashable, Codable {
    /// The name content is placed and recorded under: the productId, or
    /// `"<productId>.<itemId>"` for an item of a subscription.
    public var contentIdentifier: String
    public var productId: String
    /// The subscription item, for subscription content.
    public var itemId: String?
    /// The transaction that unlocked it (for a subscription item, the one whose period did).
    public var transactionId: String
    public var content: Catalog.Content

    public init(
        contentIdentifier: String,
        productId: String,
        itemId: String?,
        transactionId: String,
        content: Catalog.Content
    ) {
        self.contentIdentifier = contentIdentifier
        self.productId = productId
        self.itemId = itemId
        self.transactionId = transactionId
        self.content = content
    }
}

/// The entitlement rules: which catalog content verified transactions unlock.
///
/// - A revoked transaction unlocks nothing; a product the catalog does not list unlocks nothing.
///   Of several copies of one transactionId, a revoked one wins, else the latest `signedDate`
///   (`VerifiedTransaction.latestCopies`), so a refund read after, or before, an older copy of
///   the purchase still unlocks nothing, whatever the order.
/// - Non-consumables, non-renewing subscriptions (and consumables with content) unlock their
///   product's `content`. The same transactionId seen twice delivers once, and so does the same
///   content bought twice (the earliest purchase is kept).
/// - A product with subscription `items` follows the In-App Purchase guide's magazine rule. Each
///   transaction's period `[purchaseDate, expiresDate)` unlocks every item published inside it,
///   plus the latest item published at or before its start (what a subscriber gets on
///   subscribing or re-subscribing); nothing published during a lapse. Items published after
///   `now` are not yet available. A subscription transaction without `expiresDate` unlocks only
///   the item current at its purchase.
/// - An auto-renewable subscription whose product has plain `content` (no items) unlocks it
///   only while one of its periods is active at `now`, as StoreKit's current entitlements.
public enum Entitlements {
    /// The content `transactions` unlock in `catalog`, ordered by product, then publication.
    public static func content(
        for transactions: [VerifiedTransaction],
        catalog: Catalog,
        now: Date
    ) -> [EntitledContent] {
        // One copy per transactionId first (a refund is never hidden by an older copy of the
        // purchase), then the revoked ones dropped; sorted on (purchaseDate, transactionId) so
        // the input order never changes the answer.
        let unique = VerifiedTransaction.latestCopies(transactions)
            .filter { $0.revocationDate == nil }
            .sorted { ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId) }
        var result: [String: EntitledContent] = [:]
        var order: [String: (String, Date)] = [:]
        func add(_ entry: EntitledContent, published: Date) {
            guard result[entry.contentIdentifier] == nil else { return }
            result[entry.contentIdentifier] = entry
            order[entry.contentIdentifier] = (entry.productId, published)
        }
        for transaction in unique {
            guard let product = catalog.product(transaction.productId) else { continue }
            if let items = product.items, !items.isEmpty {
                let start = transaction.purchaseDate
                let end = min(transaction.expiresDate ?? start, now)
                let available = items.filter { $0.publishedAt <= now }
                var unlocked = available.filter { $0.publishedAt >= start && $0.publishedAt < end }
                if let current = available.filter({ $0.publishedAt <= start }).max(by: {
                    $0.publishedAt < $1.publishedAt
                }) {
                    unlocked.append(current)
                }
                for item in unlocked {
                    add(
                        EntitledContent(
                            contentIdentifier: "\(product.productId).\(item.itemId)",
                            productId: product.productId,
                            itemId: item.itemId,
                            transactionId: transaction.transactionId,
                            content: item.content
                        ),
                        published: item.publishedAt
                    )
                }
            } else if let content = product.content {
                if transaction.type == .autoRenewable {
                    // A subscription's single content is available while a period is active.
                    guard transaction.purchaseDate <= now, let expires = transaction.expiresDate, now < expires else {
                        continue
                    }
                }
                add(
                    EntitledContent(
                        contentIdentifier: product.productId,
                        productId: product.productId,
                        itemId: nil,
                        transactionId: transaction.transactionId,
                        content: content
                    ),
                    published: .distantPast
                )
            }
        }
        return result.values.sorted { lhs, rhs in
            let left = order[lhs.contentIdentifier] ?? ("", .distantPast)
            let right = order[rhs.contentIdentifier] ?? ("", .distantPast)
            if left.0 != right.0 { return left.0 < right.0 }
            if left.1 != right.1 { return left.1 < right.1 }
            return lhs.contentIdentifier < rhs.contentIdentifier
        }
    }
}
