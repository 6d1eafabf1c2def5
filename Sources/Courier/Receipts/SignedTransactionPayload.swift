import Foundation

/// The payload of an App Store JWS transaction (Apple's `JWSTransactionDecodedPayload`), with
/// Apple's field names: dates are milliseconds since 1970 and `type` is the App Store's wording
/// (`Non-Consumable`, `Auto-Renewable Subscription`, `Non-Renewing Subscription`, `Consumable`).
///
/// Only the fields Courier uses are modelled; others in a token are ignored when reading and
/// absent when writing.
public struct SignedTransactionPayload: Sendable, Equatable {
    public var transactionId: String
    public var originalTransactionId: String
    public var bundleId: String
    public var productId: String
    public var type: Catalog.ProductType
    public var purchaseDate: Date
    public var originalPurchaseDate: Date?
    public var expiresDate: Date?
    public var revocationDate: Date?
    public var environment: String
    public var signedDate: Date
    public var quantity: Int

    public init(
        transactionId: String,
        originalTransactionId: String? = nil,
        bundleId: String,
        productId: String,
        type: Catalog.ProductType,
        purchaseDate: Date,
        originalPurchaseDate: Date? = nil,
        expiresDate: Date? = nil,
        revocationDate: Date? = nil,
        environment: String,
        signedDate: Date,
        quantity: Int = 1
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId ?? transactionId
        self.bundleId = bundleId
        self.productId = productId
        self.type = type
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = originalPurchaseDate
        self.expiresDate = expiresDate
        self.revocationDate = revocationDate
        self.environment = environment
        self.signedDate = signedDate
        self.quantity = quantity
    }

    /// The App Store's name of a product type, as the `type` field carries it.
    public static func appStoreName(of type: Catalog.ProductType) -> String {
        switch type {
        case .consumable: return "Consumable"
        case .nonConsumable: return "Non-Consumable"
        case .nonRenewable: return "Non-Renewing Subscription"
        case .autoRenewable: return "Auto-Renewable Subscription"
        }
    }

    /// The product type an App Store `type` names (the catalog's own spelling is accepted too).
    public static func productType(appStoreName name: String) -> Catalog.ProductType? {
        switch name {
        case "Consumable": return .consumable
        case "Non-Consumable": return .nonConsumable
        case "Non-Renewing Subscription": return .nonRenewable
        case "Auto-Renewable Subscription": return .autoRenewable
        default: return Catalog.ProductType(rawValue: name)
        }
    }

    /// 10000-01-01T00:00:00Z in milliseconds: the latest date a payload may carry.
    static let latestMilliseconds: Double = 253_402_300_800_000

    /// The date `milliseconds` since 1970 names, or nil for a number no App Store date is
    /// (negative, NaN, infinite, past the year 10000): such a number would trap when written
    /// back as an `Int64` of milliseconds.
    package static func date(milliseconds: Double) -> Date? {
        guard milliseconds.isFinite, milliseconds >= 0, milliseconds <= latestMilliseconds else { return nil }
        return Date(timeIntervalSince1970: milliseconds / 1000)
    }

    /// The date a JSON value of milliseconds since 1970 (a number or a numeric string) names, as
    /// `date(milliseconds:)` judges it; nil for any other value.
    package static func date(millisecondsIn value: Any?) -> Date? {
        switch value {
        case let text as String: return Double(text).flatMap(date(milliseconds:))
        case let number as NSNumber: return date(milliseconds: number.doubleValue)
        default: return nil
        }
    }

    /// Reads a payload, failing with the `format` check on a missing or mistyped field.
    public init(json data: Data) throws {
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw ReceiptCheck.format.failure("the payload is not a JSON object")
        }
        func string(_ key: String) throws -> String {
            switch object[key] {
            case let value as String where !value.isEmpty: return value
            case let value as NSNumber
            where value.doubleValue == value.doubleValue.rounded()
                && abs(value.doubleValue) < 1e15:
                return String(value.int64Value)
            default: throw ReceiptCheck.format.failure("the payload has no valid \(key)")
            }
        }
        func date(_ key: String) throws -> Date? {
            guard let raw = object[key], !(raw is NSNull) else { return nil }
            guard let date = Self.date(millisecondsIn: raw) else {
                throw ReceiptCheck.format.failure("the payload's \(key) is not milliseconds since 1970")
            }
            return date
        }
        func requiredDate(_ key: String) throws -> Date {
            guard let value = try date(key) else { throw ReceiptCheck.format.failure("the payload has no \(key)") }
            return value
        }
        let typeName = try string("type")
        guard let type = Self.productType(appStoreName: typeName) else {
            throw ReceiptCheck.format.failure("the payload's type \"\(typeName)\" is not an App Store product type")
        }
        let transactionId = try string("transactionId")
        self.transactionId = transactionId
        self.originalTransactionId =
            object["originalTransactionId"] == nil ? transactionId : try string("originalTransactionId")
        self.bundleId = try string("bundleId")
        self.productId = try string("productId")
        self.type = type
        self.purchaseDate = try requiredDate("purchaseDate")
        self.originalPurchaseDate = try date("originalPurchaseDate")
        self.expiresDate = try date("expiresDate")
        self.revocationDate = try date("revocationDate")
        self.environment = try string("environment")
        self.signedDate = try requiredDate("signedDate")
        self.quantity = (object["quantity"] as? NSNumber)?.intValue ?? 1
    }

    /// The payload as Apple writes it: a JSON object, dates in integer milliseconds.
    public func json() throws -> Data {
        func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }
        var object: [String: Any] = [
            "transactionId": transactionId,
            "originalTransactionId": originalTransactionId,
            "bundleId": bundleId,
            "productId": productId,
            "type": Self.appStoreName(of: type),
            "purchaseDate": milliseconds(purchaseDate),
            "originalPurchaseDate": milliseconds(originalPurchaseDate ?? purchaseDate),
            "environment": environment,
            "signedDate": milliseconds(signedDate),
            "quantity": quantity,
            "inAppOwnershipType": "PURCHASED",
            "transactionReason": "PURCHASE",
            "storefront": "USA",
            "storefrontId": "143441",
        ]
        if let expiresDate { object["expiresDate"] = milliseconds(expiresDate) }
        if let revocationDate {
            object["revocationDate"] = milliseconds(revocationDate)
            object["revocationReason"] = 0
        }
        return try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    }

    /// The verified-transaction model every receipt path produces.
    public var verifiedTransaction: VerifiedTransaction {
        VerifiedTransaction(
            transactionId: transactionId,
            originalTransactionId: originalTransactionId,
            productId: productId,
            bundleId: bundleId,
            type: type,
            purchaseDate: purchaseDate,
            expiresDate: expiresDate,
            revocationDate: revocationDate,
            environment: environment,
            signedDate: signedDate
        )
    }
}
