import Foundation
import Logging

/// A client of the verifyReceipt protocol, for legacy (base64 PKCS#7) App Store receipts.
///
/// Sends `{"receipt-data", "password", "exclude-old-transactions"}` to the production URL first,
/// always; on status 21007 sends the same request to the sandbox URL, and on 21008 back to
/// production (at most two switches, so two misconfigured services cannot loop). Retries with
/// exponential backoff on 21002, 21005, 21009, 211xx when the answer says `is-retryable`, on
/// HTTP 5xx and when no answer arrives. Every other status is a precise error.
/// `receipt.in_app` and `latest_receipt_info` become `VerifiedTransaction`s (`cancellation_date`
/// becomes `revocationDate`; of two copies of one transaction, the cancelled one wins); the
/// receipt's bundle and environment are checked like a JWS's, the environment being the
/// endpoint's that answered (the sandbox URL answered: `Sandbox`), never assumed Production.
/// Decoding an answer is `VerifyReceiptResponse`. The shared secret is sent but never logged.
public struct LegacyReceiptClient: Sendable {
    public let transport: any HTTPTransport
    public let configuration: ReceiptConfiguration
    public let logger: Logger
    private let environment: [String: String]

    public init(
        transport: any HTTPTransport,
        configuration: ReceiptConfiguration,
        logger: Logger,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) {
        self.transport = transport
        self.configuration = configuration
        self.logger = logger
        self.environment = environment
    }

    /// Statuses of the verifyReceipt protocol.
    public enum Status {
        public static let valid = 0
        public static let subscriptionExpired = 21006
        public static let sandboxReceiptSentToProduction = 21007
        public static let productionReceiptSentToSandbox = 21008
        /// Retryable whatever the answer says.
        public static let retryable: Set<Int> = [21002, 21005, 21009]
    }

    /// Verifies a base64 legacy receipt with the service and returns the transactions it holds,
    /// one per transactionId (cancelled ones carry their `revocationDate`).
    public func verify(receiptData: String) async throws -> [VerifiedTransaction] {
        let settings = configuration.verifyReceipt
        var body: [String: Any] = [
            "receipt-data": receiptData,
            "exclude-old-transactions": settings.excludeOldTransactions,
        ]
        if let secret = settings.resolvedSharedSecret(environment: environment) { body["password"] = secret }
        let requestBody = try CourierError.wrapping(.internal, "cannot encode the verifyReceipt request") {
            try JSONSerialization.data(withJSONObject: body, options: [.withoutEscapingSlashes])
        }
        var useSandbox = false
        var switches = 0
        var attempt = 0
        /// Waits before the next attempt, when one is left.
        let policy = RetryPolicy(maxRetries: max(0, settings.retries), backoffBase: settings.retryDelay, backoffMax: 30)
        func retried(_ reason: String) async throws -> Bool {
            guard policy.allows(retry: attempt + 1) else { return false }
            try await backoff(policy, retry: attempt + 1, reason: reason)
            attempt += 1
            return true
        }
        while true {
            let urlText = useSandbox ? settings.sandboxURL : settings.productionURL
            let service = useSandbox ? "sandbox" : "production"
            guard let url = URL(string: urlText), url.scheme != nil else {
                throw CourierError(.usage, "the verifyReceipt \(service) URL \(urlText) is not a URL")
            }
            let outcome = await exchange(url: url, body: requestBody, service: service)
            switch outcome {
            case .answer(let response):
                let status = response.status
                switch status {
                case Status.valid, Status.subscriptionExpired:
                    return try response.transactions(
                        answeredBy: useSandbox ? .sandbox : .production,
                        bundleId: configuration.bundleId,
                        environments: configuration.environments
                    )
                case Status.sandboxReceiptSentToProduction, Status.productionReceiptSentToSandbox:
                    let toSandbox = status == Status.sandboxReceiptSentToProduction
                    guard switches < 2, toSandbox != useSandbox else {
                        throw CourierError(
                            .network,
                            "the verifyReceipt services keep sending the receipt back and forth (status \(status) from \(service))",
                            cause: "status \(status)",
                            hint: "check receipts.verifyReceipt.productionURL and sandboxURL"
                        )
                    }
                    logger.debug(
                        "verifyReceipt: status \(status), switching environment",
                        metadata: ["service": "\(service)"]
                    )
                    switches += 1
                    useSandbox = toSandbox
                    continue
                default:
                    let retryable =
                        Status.retryable.contains(status)
                        || ((21100...21199).contains(status) && response.isRetryable)
                    if retryable, try await retried("status \(status)") { continue }
                    throw Self.error(status: status, service: service, afterRetries: retryable)
                }
            case .transient(let error):
                if try await retried(error.message) { continue }
                throw error
            case .fatal(let error):
                throw error
            }
        }
    }

    private enum Outcome {
        case answer(VerifyReceiptResponse)
        case transient(CourierError)
        case fatal(CourierError)
    }

    private func exchange(url: URL, body: Data, service: String) async -> Outcome {
        let request = HTTPRequest(
            method: "POST",
            url: url,
            headers: [("Content-Type", "application/json"), ("Accept", "application/json")],
            body: body,
            timeout: configuration.verifyReceipt.timeout,
            maxResponseBytes: 16 << 20
        )
        logger.debug("verifyReceipt: POST", metadata: ["url": "\(url.absoluteString)"])
        let response: HTTPResponse
        do {
            response = try await transport.send(request)
        } catch let error as CourierError {
            return error.code == .network ? .transient(error) : .fatal(error)
        } catch {
            return .transient(
                CourierError(.network, "the verifyReceipt \(service) service did not answer", cause: "\(error)")
            )
        }
        guard response.status == 200 else {
            let error = CourierError(
                .network,
                "the verifyReceipt \(service) service answered HTTP \(response.status)",
                cause: "HTTP \(response.status)"
            )
            return response.status >= 500 || response.status == 429 ? .transient(error) : .fatal(error)
        }
        guard let answer = VerifyReceiptResponse(body: response.body) else {
            return .fatal(
                CourierError(
                    .network,
                    "the verifyReceipt \(service) service answered something that is not a verifyReceipt response",
                    cause: "malformed JSON (\(response.body.count) bytes)"
                )
            )
        }
        logger.debug("verifyReceipt: answer", metadata: ["status": "\(answer.status)", "service": "\(service)"])
        return .answer(answer)
    }

    private func backoff(_ policy: RetryPolicy, retry: Int, reason: String) async throws {
        let delay = policy.delay(retry: retry)
        logger.debug(
            "verifyReceipt: retrying",
            metadata: ["reason": "\(reason)", "retry": "\(retry)", "max-retries": "\(policy.maxRetries ?? 0)", "delay": "\(delay)"])
        do {
            try await Task.sleep(nanoseconds: UInt64(max(0, delay) * 1_000_000_000))
        } catch {
            throw CourierError(.cancelled, "receipt verification was cancelled while waiting to retry")
        }
    }

    /// The precise error for a status the protocol does not let us get past.
    static func error(status: Int, service: String, afterRetries: Bool) -> CourierError {
        let cause = "status \(status)"
        switch status {
        case 21000:
            return CourierError(
                .internal,
                "the verifyReceipt \(service) service says the request was malformed",
                cause: cause
            )
        case 21002:
            return ReceiptCheck.status.failure("the receipt data is malformed (status 21002, still after retries)")
        case 21003:
            return ReceiptCheck.status.failure(
                "the verifyReceipt service could not authenticate the receipt (status 21003)"
            )
        case 21004:
            return CourierError(
                .usage,
                "the shared secret does not match the account's (status 21004)",
                cause: cause,
                hint: "set receipts.verifyReceipt.sharedSecret or COURIER_SHARED_SECRET"
            )
        case 21005, 21009:
            return CourierError(
                .network,
                "the verifyReceipt \(service) service is unavailable (status \(status), still after retries)",
                cause: cause
            )
        case 21010:
            return ReceiptCheck.status.failure(
                "the receipt could not be authorized; treat it as if no purchase was made (status 21010)"
            )
        case 21100...21199:
            return CourierError(
                .network,
                "the verifyReceipt \(service) service had an internal data access error (status \(status)\(afterRetries ? ", still after retries" : ""))",
                cause: cause
            )
        default:
            return ReceiptCheck.status.failure(
                "the verifyReceipt service refused the receipt with unknown status \(status)"
            )
        }
    }
}
