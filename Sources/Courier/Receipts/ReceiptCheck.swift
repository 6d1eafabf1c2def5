import Foundation

/// The checks a receipt must pass, named in every rejection.
///
/// A rejection is `CourierError(.receiptInvalid, …)` whose `message` starts with
/// `"<rawValue> check failed: "` and whose `cause` is `"check=<rawValue>"` followed by details,
/// so scripts can match either. `ReceiptCheck(failing:)` reads the check back from an error.
public enum ReceiptCheck: String, Sendable, CaseIterable, Codable {
    /// The token is not a compact JWS with an ES256 header and the expected payload fields, or
    /// the input is too large.
    case format
    /// An `x5c` certificate cannot be read, or is not valid at the transaction's `signedDate`.
    case certificate
    /// The certificates do not form leaf → intermediate → trusted root (`x5c` must hold exactly
    /// three entries; the chain ends at one of the configured roots, `x5c[2]` is not read).
    case chain
    /// The leaf lacks 1.2.840.113635.100.6.11.1 or the intermediate 1.2.840.113635.100.6.2.1.
    case oid = "OID"
    /// The ES256 signature does not verify with the leaf's key.
    case signature
    /// The transaction is for another app.
    case bundle
    /// The transaction's environment is not an allowed one.
    case environment
    /// The App Store revoked (refunded) the transaction.
    case revoked
    /// The transaction was signed in the future, beyond the allowed clock skew.
    case futureDated = "future-dated"
    /// The verifyReceipt service refused the legacy receipt (its status says why).
    case status

    /// The rejection error for this check.
    public func failure(_ detail: String, hint: String? = nil) -> CourierError {
        CourierError(
            .receiptInvalid,
            "\(rawValue) check failed: \(detail)",
            cause: "check=\(rawValue)",
            hint: hint
        )
    }

    /// The check a `CourierError` from receipt validation names, if any.
    public init?(failing error: CourierError) {
        guard error.code == .receiptInvalid, let cause = error.cause, cause.hasPrefix("check=") else { return nil }
        let name = cause.dropFirst("check=".count).prefix { $0 != " " && $0 != ";" }
        self.init(rawValue: String(name))
    }
}
