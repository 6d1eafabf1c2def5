import Foundation

/// A verifyReceipt answer decoded from its HTTP body, before it is judged.
///
/// Pure functions on bytes (no I/O), so the fuzz harness can call them:
/// `VerifyReceiptResponse(body:)` then `transactions(answeredBy:bundleId:environments:)`.
package struct VerifyReceiptResponse {
    /// The endpoint that answered; it, not the answer, decides the environment of the purchases.
    package enum Endpoint: String, Sendable {
        case production
        case sandbox
    }

    /// The protocol status (0 valid, 21007 sandbox receipt sent to production, …).
    package let status: Int
    /// `is-retryable` (or `is_retryable`), for the 211xx statuses.
    package let isRetryable: Bool
    /// The answer's own `environment`, nil when it has none.
    package let statedEnvironment: String?
    private let object: [String: Any]

    /// Decodes a body; nil when it is not a JSON object with a numeric `status`.
    package init?(body: Data) {
        guard let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any],
            let number = object["status"] as? NSNumber,
            let status = Int(exactly: number.doubleValue.rounded(.towardZero)),
            Double(status) == number.doubleValue
        else { return nil }
        self.object = object
        self.status = status
        self.isRetryable = Self.retryableFlag(object)
        self.statedEnvironment = object["environment"] as? String
    }

    /// The environment the purchases belong to: `Sandbox` when the sandbox endpoint answered
    /// (whatever the answer says), else the answer's `environment`, else `Production`.
    package func environment(answeredBy endpoint: Endpoint) -> String {
        switch endpoint {
        case .sandbox: return "Sandbox"
        case .production: return statedEnvironment ?? "Production"
        }
    }

    /// The transactions of a status-0 (or 21006) answer, after the `bundle` and `environment`
    /// checks: `receipt.in_app` and `latest_receipt_info`, one per `transaction_id`
    /// (`VerifiedTransaction.latestCopies`: a cancelled copy wins over an uncancelled one).
    /// A malformed receipt is a `network` error (the service answered nonsense).
    package func transactions(
        answeredBy endpoint: Endpoint,
        bundleId expectedBundle: String,
        environments: Set<String>
    ) throws -> [VerifiedTransaction] {
        guard let receipt = object["receipt"] as? [String: Any] else {
            throw CourierError(.network, "the verifyReceipt answer has no receipt", cause: "malformed response")
        }
        let bundle = (receipt["bundle_id"] as? String) ?? (receipt["bid"] as? String) ?? ""
        guard bundle == expectedBundle else {
            throw ReceiptCheck.bundle.failure(
                "the receipt is for bundle \(bundle.isEmpty ? "(none)" : bundle), not \(expectedBundle)",
                hint: "pass --bundle-id or set receipts.bundleId"
            )
        }
        let environment = environment(answeredBy: endpoint)
        guard environments.contains(environment) else {
            let allowed = environments.sorted().joined(separator: ", ")
            throw ReceiptCheck.environment.failure(
                "the receipt's environment \(environment) (the \(endpoint.rawValue) service answered) is not one of \(allowed)",
                hint: "pass --environment \(environment) to accept it"
            )
        }
        let signedDate =
            Self.date(receipt["request_date_ms"]) ?? Self.date(receipt["receipt_creation_date_ms"]) ?? Date()
        var entries = (receipt["in_app"] as? [Any]) ?? []
        entries += (object["latest_receipt_info"] as? [Any]) ?? []
        var result: [VerifiedTransaction] = []
        for case let entry as [String: Any] in entries {
            guard let transactionId = Self.string(entry["transaction_id"]),
                let productId = Self.string(entry["product_id"]),
                let purchaseDate = Self.date(entry["purchase_date_ms"])
            else {
                throw CourierError(
                    .network,
                    "the verifyReceipt answer has an in-app entry without ids or dates",
                    cause: "malformed response"
                )
            }
            let expires = Self.date(entry["expires_date_ms"])
            let isSubscription = expires != nil || entry["web_order_line_item_id"] != nil
            result.append(
                VerifiedTransaction(
                    transactionId: transactionId,
                    originalTransactionId: Self.string(entry["original_transaction_id"]) ?? transactionId,
                    productId: productId,
                    bundleId: bundle,
                    type: isSubscription ? .autoRenewable : .nonConsumable,
                    purchaseDate: purchaseDate,
                    expiresDate: expires,
                    revocationDate: Self.date(entry["cancellation_date_ms"]),
                    environment: environment,
                    signedDate: signedDate
                )
            )
        }
        return VerifiedTransaction.latestCopies(result)
    }

    static func retryableFlag(_ object: [String: Any]) -> Bool {
        for key in ["is-retryable", "is_retryable"] {
            if let value = object[key] as? Bool { return value }
            if let value = object[key] as? NSNumber { return value.intValue != 0 }
            if let value = object[key] as? String { return value == "true" || value == "1" }
        }
        return false
    }

    static func string(_ value: Any?) -> String? {
        switch value {
        case let text as String where !text.isEmpty: return text
        case let number as NSNumber:
            let double = number.doubleValue
            guard double.isFinite, abs(double) < 1e18 else { return nil }
            return String(number.int64Value)
        default: return nil
        }
    }

    static func date(_ value: Any?) -> Date? {
        SignedTransactionPayload.date(millisecondsIn: value)
    }
}
