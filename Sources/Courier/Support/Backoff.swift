import Foundation

/// The one retry schedule of Courier: `initial × 2^(attempt − 1)`, capped at `maximum`, with
/// optional jitter (half fixed, half random: never zero, never in lockstep with other clients).
/// Transfers, verifyReceipt calls, the agent's retries and the finish webhook all use it.
public struct Backoff: Sendable, Equatable {
    /// The delay before the first retry, in seconds.
    public var initial: Double
    /// The longest delay, in seconds (also caps a server's Retry-After).
    public var maximum: Double
    /// Whether the delay is jittered: `capped / 2 + capped / 2 × random`.
    public var jitter: Bool

    public init(initial: Double, maximum: Double, jitter: Bool = true) {
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
    }

    /// The delay before retry number `attempt` (1 for the first retry); a server's `retryAfter`
    /// wins, capped at `maximum`.
    public func delay(attempt: Int, retryAfter: Double? = nil, random: Double = Double.random(in: 0...1)) -> Double {
        if let retryAfter { return min(max(0, retryAfter), maximum) }
        let capped = min(initial * pow(2, Double(min(max(0, attempt - 1), 60))), maximum)
        return jitter ? capped / 2 + capped / 2 * random : capped
    }
}
