import Crypto
import Foundation

/// An App Store Server Notification V2 (Apple's `responseBodyV2DecodedPayload`), decoded but not
/// yet verified: what the JWS in the POST body `{"signedPayload": "<JWS>"}` claims.
///
/// Only the fields Courier uses are modelled; others are ignored. Dates are Apple's milliseconds
/// since 1970. `signedTransactionInfo` and `signedRenewalInfo` stay signed: each is a JWS of its
/// own, verified separately.
public struct ServerNotification: Sendable, Equatable {
    /// `REFUND`, `REVOKE`, `REFUND_REVERSED`, `TEST`, `CONSUMPTION_REQUEST`, …
    public var notificationType: String
    public var subtype: String?
    /// Unique per notification; Apple sends the same one again when it retries.
    public var notificationUUID: String
    public var version: String?
    /// When the App Store signed the notification; the certificates are judged at this date.
    /// Apple's own fixtures have notifications without one (then the chain is judged now).
    public var signedDate: Date?
    /// `data.bundleId`.
    public var bundleId: String?
    /// `data.environment`: `Production` or `Sandbox`.
    public var environment: String?
    public var appAppleId: Int64?
    /// `data.signedTransactionInfo`: the transaction the notification is about (a JWS).
    public var signedTransactionInfo: String?
    /// `data.signedRenewalInfo`: the subscription's renewal info (a JWS), unused by Courier.
    public var signedRenewalInfo: String?

    /// The largest POST body taken as a notification. Apple's are a few tens of KiB (three JWS
    /// with their certificate chains).
    public static let maximumBodyLength = 256 * 1024

    /// Reads the POST body Apple sends (`{"signedPayload": "<JWS>"}`) and decodes the JWS's
    /// payload, without verifying anything. A pure function on bytes (the fuzz entry point).
    /// Throws `CourierError(.receiptInvalid)` with the `format` check on anything else.
    public static func decode(body: Data) throws -> (signedPayload: String, notification: ServerNotification) {
        guard body.count <= maximumBodyLength else {
            throw ReceiptCheck.format.failure("the notification body is \(body.count) bytes; at most \(maximumBodyLength) are read")
        }
        guard let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
            throw ReceiptCheck.format.failure("the notification body is not a JSON object")
        }
        guard let signedPayload = object["signedPayload"] as? String, !signedPayload.isEmpty else {
            throw ReceiptCheck.format.failure("the notification body has no signedPayload")
        }
        let jws = try CompactJWS(signedPayload)
        return (signedPayload, try ServerNotification(json: jws.payload))
    }

    /// Reads a decoded notification payload, failing with the `format` check when a required
    /// field (`notificationType`, `notificationUUID`) is missing or a field has the wrong type.
    public init(json data: Data) throws {
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw ReceiptCheck.format.failure("the notification payload is not a JSON object")
        }
        func string(_ source: [String: Any], _ key: String) throws -> String? {
            switch source[key] {
            case nil, is NSNull: return nil
            case let value as String: return value
            default: throw ReceiptCheck.format.failure("the notification's \(key) is not a string")
            }
        }
        guard let type = try string(object, "notificationType"), !type.isEmpty else {
            throw ReceiptCheck.format.failure("the notification has no notificationType")
        }
        guard let uuid = try string(object, "notificationUUID"), !uuid.isEmpty else {
            throw ReceiptCheck.format.failure("the notification has no notificationUUID")
        }
        notificationType = type
        notificationUUID = uuid
        subtype = try string(object, "subtype")
        version = try string(object, "version")
        switch object["signedDate"] {
        case nil, is NSNull: signedDate = nil
        case let number as NSNumber where SignedTransactionPayload.date(milliseconds: number.doubleValue) != nil:
            signedDate = SignedTransactionPayload.date(milliseconds: number.doubleValue)
        default: throw ReceiptCheck.format.failure("the notification's signedDate is not milliseconds since 1970")
        }
        let payloadData: [String: Any]
        switch object["data"] {
        case nil, is NSNull: payloadData = [:]
        case let value as [String: Any]: payloadData = value
        default: throw ReceiptCheck.format.failure("the notification's data is not an object")
        }
        bundleId = try string(payloadData, "bundleId")
        environment = try string(payloadData, "environment")
        signedTransactionInfo = try string(payloadData, "signedTransactionInfo")
        signedRenewalInfo = try string(payloadData, "signedRenewalInfo")
        switch payloadData["appAppleId"] {
        case nil, is NSNull: appAppleId = nil
        case let number as NSNumber where number.doubleValue.isFinite && abs(number.doubleValue) < 9e15:
            appAppleId = number.int64Value
        default: throw ReceiptCheck.format.failure("the notification's appAppleId is not a number")
        }
    }
}

/// A notification whose signature, chain, bundle and environment verified, with the
/// transaction it carries, verified the same way (revoked or not).
public struct VerifiedServerNotification: Sendable, Equatable {
    public var notification: ServerNotification
    /// The verified `data.signedTransactionInfo`, when the notification has one.
    public var transaction: VerifiedTransaction?
}

extension SignedTransactionVerifier {
    /// Verifies an App Store Server Notification V2's `signedPayload` with the rules of a signed
    /// transaction: format and ES256, the `x5c` chain to a trusted root with Apple's OIDs (judged
    /// at the notification's `signedDate`), the signature, `data.bundleId`, `data.environment`
    /// and `signedDate` not in the future; then its `data.signedTransactionInfo` with
    /// `verifyAllowingRevocation`. Throws `CourierError(.receiptInvalid)` naming the check.
    public func verifyNotification(_ signedPayload: String, now: Date = Date()) async throws -> VerifiedServerNotification {
        let (jws, encodedChain) = try Self.decodeHeader(signedPayload, owner: "the notification's")
        let notification = try ServerNotification(json: jws.payload)
        try await verifySignature(of: jws, chain: encodedChain, at: notification.signedDate ?? now, owner: "the notification's")
        try checkClaims(
            of: "the notification", bundleId: notification.bundleId, environment: notification.environment,
            signedDate: notification.signedDate, now: now)
        var transaction: VerifiedTransaction?
        if let info = notification.signedTransactionInfo {
            transaction = try await verifyAllowingRevocation(info, now: now)
        }
        return VerifiedServerNotification(notification: notification, transaction: transaction)
    }
}
