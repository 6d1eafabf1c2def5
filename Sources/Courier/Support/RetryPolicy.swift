import Foundation

/// The one retry policy of Courier: how many retries, and the schedule between them.
///
/// The delay before retry `n` is `backoffBase × 2^(n − 1)`, capped at `backoffMax`, with optional
/// jitter (half fixed, half random: never zero, never in lockstep with other clients); a server's
/// `Retry-After` wins, capped at `backoffMax`. Transfers (`transfer.maxRetries`,
/// `transfer.initialBackoff`, `transfer.maxBackoff`, `transfer.jitter`), range fetches of delta
/// updates, verifyReceipt calls, the agent's retries of failed downloads, the finish webhook,
/// the finish notification, the state database's busy retries, the TUF store's lock and the
/// PostgreSQL refunds channel all use it; `TransferAttempts` decides when a transfer retries.
public struct RetryPolicy: Sendable, Equatable {
    /// Retries after the first attempt before giving up (`curl --retry N`); nil: no limit (the
    /// agent and the webhook outbox keep trying, with the delay capped).
    public var maxRetries: Int?
    /// The delay before the first retry, in seconds.
    public var backoffBase: Double
    /// The longest delay, in seconds (also caps a server's Retry-After).
    public var backoffMax: Double
    /// Whether the delay is jittered: `capped / 2 + capped / 2 × random`.
    public var jitter: Bool

    public init(maxRetries: Int?, backoffBase: Double, backoffMax: Double, jitter: Bool = true) {
        self.maxRetries = maxRetries
        self.backoffBase = backoffBase
        self.backoffMax = backoffMax
        self.jitter = jitter
    }

    /// Whether retry number `retry` (1 for the first retry, the second attempt) may run.
    public func allows(retry: Int) -> Bool {
        maxRetries.map { retry <= $0 } ?? true
    }

    /// The delay before retry number `retry` (1 for the first retry); a server's `retryAfter`
    /// wins, capped at `backoffMax`. Never negative, never NaN.
    public func delay(retry: Int, retryAfter: Double? = nil, random: Double = Double.random(in: 0...1)) -> Double {
        let maximum = backoffMax.isFinite ? max(0, backoffMax) : 0
        if let retryAfter { return retryAfter.isFinite ? min(max(0, retryAfter), maximum) : maximum }
        let base = backoffBase.isFinite ? max(0, backoffBase) : 0
        let capped = min(base * pow(2, Double(min(max(0, retry - 1), 60))), maximum)
        let unit = random.isFinite ? min(max(0, random), 1) : 0
        return jitter ? capped / 2 + capped / 2 * unit : capped
    }
}
