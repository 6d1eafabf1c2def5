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
