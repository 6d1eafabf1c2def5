import Foundation

/// A stand-in for Apple's verifyReceipt service, speaking its protocol over HTTP on loopback:
/// `POST /production` and `POST /sandbox` with `{"receipt-data", "password",
/// "exclude-old-transactions"}`, answering what the test's `respond` closure decides.
public final class VerifyReceiptStub: @unchecked Sendable {  // @unchecked: `server` is immutable; its own state is locked.
    /// One request the stub received.
    public struct Call: Sendable {
        /// `production` or `sandbox`.
        public var service: String
        public var receiptData: String?
        public var password: String?
        public var excludeOldTransactions: Bool?
    }

    /// What the stub answers.
    public enum Reply: Sendable {
        /// HTTP 200 with this JSON object.
        case json(String)
        /// Any HTTP status and raw body.
        case raw(status: Int, body: String)
    }

    private let server: LoopbackHTTPServer

    /// Starts the stub. `respond(service, callIndex)` decides each answer; `callIndex` counts
    /// every call so far across both services, from 0.
    public init(respond: @escaping @Sendable (_ service: String, _ callIndex: Int) -> Reply) throws {
        let counter = Counter()
        server = try LoopbackHTTPServer { request, response in
            let service = request.path == "/sandbox" ? "sandbox" : "production"
            guard request.method == "POST" else {
                response.send(
                    200,
                    headers: [("Content-Type", "application/json")],
                    body: Data(#"{"status":21000}"#.utf8)
                )
                return
            }
            switch respond(service, counter.next()) {
            case .json(let text):
                response.send(200, headers: [("Content-Type", "application/json")], body: Data(text.utf8))
            case .raw(let status, let body):
                response.send(status, headers: [("Content-Type", "text/plain")], body: Data(body.utf8))
            }
        }
    }

    public var productionURL: URL { server.url("/production") }
    public var sandboxURL: URL { server.url("/sandbox") }

    /// Every call so far, in order.
    public var calls: [Call] {
        server.receivedRequests.filter { $0.method == "POST" }.map { request in
            let object = (try? JSONSerialization.jsonObject(with: request.body)) as? [String: Any] ?? [:]
            return Call(
                service: request.path == "/sandbox" ? "sandbox" : "production",
                receiptData: object["receipt-data"] as? String,
                password: object["password"] as? String,
                excludeOldTransactions: object["exclude-old-transactions"] as? Bool
            )
        }
    }

    public func stop() { server.stop() }

    /// A status-only answer, e.g. `{"status": 21007}`.
    public static func status(_ status: Int, retryable: Bool? = nil) -> Reply {
        if let retryable { return .json(#"{"status":\#(status),"is-retryable":\#(retryable)}"#) }
        return .json(#"{"status":\#(status)}"#)
    }

    /// A status-0 answer for `bundleId` in `environment` (nil: no `environment` key, as older
    /// answers have) with these `in_app` entries, echoed as `latest_receipt_info` (as Apple does
    /// for subscriptions) unless `latestReceiptInfo` gives that list.
    public static func valid(
        bundleId: String = "com.example.app",
        environment: String? = "Sandbox",
        inApp: [[String: String]],
        latestReceiptInfo: [[String: String]]? = nil
    ) -> Reply {
        let receipt: [String: Any] = [
            "receipt_type": environment == "Sandbox" ? "ProductionSandbox" : "Production",
            "bundle_id": bundleId,
            "application_version": "1",
            "request_date_ms": "\(Int64(Date().timeIntervalSince1970 * 1000))",
            "in_app": inApp,
        ]
        var object: [String: Any] = [
            "status": 0, "receipt": receipt, "latest_receipt_info": latestReceiptInfo ?? inApp,
            "latest_receipt": "bGF0ZXN0",
        ]
        if let environment { object["environment"] = environment }
        let data = (try? JSONSerialization.data(withJSONObject: object)) ?? Data()
        return .json(String(decoding: data, as: UTF8.self))
    }

    /// One `in_app` entry with Apple's keys (dates as millisecond strings).
    public static func inApp(
        productId: String,
        transactionId: String,
        purchaseDate: Date,
        expiresDate: Date? = nil,
        cancellationDate: Date? = nil
    ) -> [String: String] {
        func ms(_ date: Date) -> String { "\(Int64(date.timeIntervalSince1970 * 1000))" }
        var entry = [
            "quantity": "1", "product_id": productId, "transaction_id": transactionId,
            "original_transaction_id": transactionId, "purchase_date_ms": ms(purchaseDate),
            "original_purchase_date_ms": ms(purchaseDate), "is_trial_period": "false",
        ]
        if let expiresDate { entry["expires_date_ms"] = ms(expiresDate) }
        if let cancellationDate { entry["cancellation_date_ms"] = ms(cancellationDate) }
        return entry
    }

    private final class Counter: @unchecked Sendable {  // @unchecked: `value` is guarded by `lock`.
        private let lock = NSLock()
        private var value = 0
        func next() -> Int {
            lock.lock()
            defer { lock.unlock() }
            value += 1
            return value - 1
        }
    }
}
