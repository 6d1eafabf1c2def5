import Courier
import Foundation
import Logging

/// `POST /notifications`: App Store Server Notifications V2 (`{"signedPayload": "<JWS>"}`).
///
/// The payload and its `data.signedTransactionInfo` are verified with the receipt gate's rules
/// (`SignedTransactionVerifier.verifyNotification`); `REFUND` and `REVOKE` record the transaction
/// as revoked and `REFUND_REVERSED` clears it, durably, before the 200 (Apple retries any other
/// answer). Other types are acknowledged and change nothing; a replayed `notificationUUID`
/// changes nothing. A body that does not verify is 400 and nothing is recorded.
public struct NotificationReceiver: Sendable {
    public let verifier: SignedTransactionVerifier
    public let store: any RefundStore
    let clock: @Sendable () -> Date

    public init(verifier: SignedTransactionVerifier, store: any RefundStore, clock: @escaping @Sendable () -> Date = { Date() }) {
        self.verifier = verifier
        self.store = store
        self.clock = clock
    }

    /// The answer to one POST: an HTTP status and a JSON object, plus what the log should say.
    public struct Answer: Sendable, Equatable {
        public var status: Int
        public var body: [String: String]
        /// The transaction the notification named, for the access log.
        public var transactionId: String?
    }

    /// Verifies and applies one notification body.
    public func receive(body: Data) async -> Answer {
        let now = clock()
        let verified: VerifiedServerNotification
        do {
            let (signedPayload, _) = try ServerNotification.decode(body: body)
            verified = try await verifier.verifyNotification(signedPayload, now: now)
        } catch let error as CourierError {
            return Answer(status: 400, body: ["error": error.code.rawValue, "message": error.message, "status": "400"])
        } catch {
            return Answer(status: 400, body: ["error": "receiptInvalid", "message": "\(error)", "status": "400"])
        }
        let notification = verified.notification
        let outcome: OriginStateStore.Outcome
        do {
            outcome = try await store.apply(verified, now: now)
        } catch let error as CourierError {
            // Not recorded: anything but 200 makes Apple send it again later.
            return Answer(status: 503, body: ["error": error.code.rawValue, "message": error.message, "status": "503"])
        } catch {
            return Answer(status: 503, body: ["error": "io", "message": "\(error)", "status": "503"])
        }
        var answer: [String: String] = [
            "result": outcome.rawValue,
            "notificationType": notification.notificationType,
            "notificationUUID": notification.notificationUUID,
        ]
        if let subtype = notification.subtype { answer["subtype"] = subtype }
        if let transactionId = verified.transaction?.transactionId { answer["transactionId"] = transactionId }
        return Answer(status: 200, body: answer, transactionId: verified.transaction?.transactionId)
    }
}
