import Foundation

/// A purchase proven by a verified receipt: a JWS signed transaction or a legacy receipt's
/// `in_app` / `latest_receipt_info` entry. Both paths produce this one model.
public struct VerifiedTransaction: Sendable, Codable, Equatable, Hashable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var bundleId: String
    public var type: Catalog.ProductType
    public var purchaseDate: Date
    /// The end of the period an auto-renewable subscription transaction covers.
    public var expiresDate: Date?
    /// When the App Store revoked or refunded it; a revoked transaction entitles to nothing.
    public var revocationDate: Date?
    /// `Production` or `Sandbox`.
    public var environment: String
    /// When the App Store signed it.
    public var signedDate: Date
    /// The compact JWS this transaction was verified from (nil for a legacy receipt's entry).
    /// A receipt-gated origin takes it as `Authorization: Bearer`; never logged.
    public var signedTransaction: String?

    public init(
        transactionId: String,
        originalTransactionId: String,
        productId: String,
        bundleId: String,
        type: Catalog.ProductType,
        purchaseDate: Date,
        expiresDate: Date? = nil,
        revocationDate: Date? = nil,
        environment: String,
        signedDate: Date,
        signedTransaction: String? = nil
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.bundleId = bundleId
        self.type = type
        self.purchaseDate = purchaseDate
        self.expiresDate = expiresDate
        self.revocationDate = revocationDate
        self.environment = environment
        self.signedDate = signedDate
        self.signedTransaction = signedTransaction
    }
}

extension VerifiedTransaction {
    /// Whether this copy of a transaction takes precedence over `other`, another copy of the same
    /// transactionId (a receipt may hold both a purchase and, signed later, its refund).
    ///
    /// A revoked copy wins over an unrevoked one (a refund is never hidden by an older copy);
    /// then the later `signedDate` (the App Store's newer statement); then, between revoked
    /// copies, the earlier `revocationDate`. Remaining ties are broken on the copies' contents,
    /// so the choice never depends on the order the copies were read in.
    public func supersedes(_ other: VerifiedTransaction) -> Bool {
        if (revocationDate != nil) != (other.revocationDate != nil) { return revocationDate != nil }
        if signedDate != other.signedDate { return signedDate > other.signedDate }
        if let mine = revocationDate, let theirs = other.revocationDate, mine != theirs { return mine < theirs }
        return tieBreakKey.lexicographicallyPrecedes(other.tieBreakKey)
    }

    /// One copy per transactionId, the one that supersedes the others (`supersedes(_:)`), in the
    /// order each transactionId first appears. The same copies in any order give the same set.
    public static func latestCopies(_ transactions: [VerifiedTransaction]) -> [VerifiedTransaction] {
        var chosen: [String: VerifiedTransaction] = [:]
        var order: [String] = []
        for transaction in transactions {
            if let current = chosen[transaction.transactionId] {
                if transaction.supersedes(current) { chosen[transaction.transactionId] = transaction }
            } else {
                chosen[transaction.transactionId] = transaction
                order.append(transaction.transactionId)
            }
        }
        return order.compactMap { chosen[$0] }
    }

    /// Every other field, as text, for a total order between copies that tie on the rule.
    private var tieBreakKey: [String] {
        func milliseconds(_ date: Date?) -> String {
            date.map { String(format: "%020.0f", $0.timeIntervalSince1970 * 1000 + 1e15) } ?? ""
        }
        return [
            milliseconds(expiresDate), milliseconds(purchaseDate), productId, originalTransactionId, bundleId,
            type.rawValue, environment, signedTransaction ?? "",
        ]
    }
}
