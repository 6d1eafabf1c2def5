import Foundation

/// The attempts of one download: after each attempt (one HTTP exchange) it decides what comes
/// next: finish, retry after a delay, hand over to the next mirror, restart from byte 0, fall
/// back to an earlier offset after a failed verification, pause, or fail. Pure (no I/O, no
/// clock of its own: the caller passes the time and the random draw), as `ResponseDecision` is
/// for one response; `TransferEngine` performs its actions.
///
/// Rules:
/// - A failure that can heal (a refused connection, a timeout, a 5xx, a stall) is retried by
///   `policy`; bytes received by an attempt reset the count (a slow but live origin never runs
///   out of retries). With mirrors, a failing source hands over to the next at once, resuming;
///   a retry (and its delay) counts once every source has failed in turn.
/// - A failure that cannot heal at this source (an HTTP 4xx, a TLS handshake or certificate
///   failure, an unsupported protocol) hands over to the next mirror if there is one, else fails
///   at once, without retries.
/// - A resource that changes during the download restarts from byte 0, at most `maxRestarts` times.
/// - A whole file that fails its SHA-256 after a resume is fetched again from each of
///   `fallbacks` in turn (the last durable checkpoint, then 0), once each.
/// - With a time limit (`transfer.maxTime`, `get --max-time`), no retry starts that would
///   begin after it, and an attempt cut short by it fails the download.
struct TransferAttempts: Sendable {
    /// How an attempt ended, as the machine needs to know it.
    enum Event: Sendable {
        /// The body is complete on disk.
        case completed
        /// The resource changed: start again from byte 0.
        case restartFromZero
        /// The caller paused or cancelled.
        case paused
        /// A failure that may heal: retry. `receivedBytes` the attempt accepted.
        case retryable(CourierError, retryAfter: Double?, receivedBytes: Int64)
        /// A failure that cannot heal at this source.
        case failed(CourierError)
        /// The complete file failed its SHA-256 check.
        case verificationFailed(CourierError)
    }

    /// What to do next.
    enum Action: Sendable, Equatable {
        case finish
        case pause
        /// Start the file over at byte 0 (the `restart`-th time).
        case restartFromZero(restart: Int)
        /// Continue from source `to` (an index into the request's URL and mirrors) at once.
        case handOver(to: Int, after: CourierError)
        /// Retry number `retry` of `of` (nil: no limit) from source `source` after `delay` s.
        case retry(retry: Int, of: Int?, source: Int, delay: Double, cause: CourierError)
        /// Fetch again from `offset` (after a failed verification).
        case fallBack(to: Int64)
        case fail(CourierError)
    }

    static let maxRestarts = 3

    let policy: RetryPolicy
    let sourceCount: Int
    /// The URL the download is of, for messages.
    let url: URL
    /// When the time limit ends (the caller's clock, seconds), and how long it is.
    let deadline: Double?
    let timeLimit: Double?
    /// The source the next attempt uses (0: the request's URL).
    private(set) var source = 0
    /// Retries counted since bytes last arrived.
    private(set) var retries = 0
    private(set) var restarts = 0
    /// Offsets to fetch again from after a failed verification, in order.
    private(set) var fallbacks: [Int64]

    /// `timeLimit` seconds from `start` bound the download (nil or ≤ 0: no limit).
    init(policy: RetryPolicy, sourceCount: Int, url: URL, fallbacks: [Int64] = [], start: Double = 0, timeLimit: Double? = nil) {
        self.policy = policy
        self.sourceCount = max(1, sourceCount)
        self.url = url
        self.fallbacks = fallbacks
        let limit = timeLimit.flatMap { $0.isFinite && $0 > 0 ? $0 : nil }
        self.timeLimit = limit
        self.deadline = limit.map { start + $0 }
    }

    /// Seconds left before the time limit at `now` (nil: no limit; never negative).
    func remaining(at now: Double) -> Double? {
        deadline.map { max(0, $0 - now) }
    }

    mutating func next(after event: Event, now: Double, random: Double = Double.random(in: 0...1)) -> Action {
        switch event {
        case .completed:
            return .finish
        case .paused:
            return .pause
        case .restartFromZero:
            restarts += 1
            guard restarts <= Self.maxRestarts else {
                return .fail(CourierError(.network, "\(url.absoluteString) keeps changing during the download"))
            }
            return .restartFromZero(restart: restarts)
        case .verificationFailed(let error):
            guard !fallbacks.isEmpty else { return .fail(error) }
            return .fallBack(to: fallbacks.removeFirst())
        case .failed(let error):
            if (error.code == .network || error.code == .serverRejected) && source + 1 < sourceCount {
                // This origin refuses (a 404 on a mirror that lacks the file, say): the next one.
                source += 1
                return .handOver(to: source, after: error)
            }
            return .fail(error)
        case .retryable(let error, let retryAfter, let receivedBytes):
            if let deadline, now >= deadline { return .fail(timedOut(error)) }
            if receivedBytes > 0 { retries = 0 }
            if sourceCount > 1 {
                source = (source + 1) % sourceCount
                if source != 0 { return .handOver(to: source, after: error) }
            }
            retries += 1
            guard policy.allows(retry: retries) else { return .fail(error) }
            let delay = policy.delay(retry: retries, retryAfter: retryAfter, random: random)
            if let deadline, now + delay >= deadline { return .fail(timedOut(error)) }
            return .retry(retry: retries, of: policy.maxRetries, source: source, delay: delay, cause: error)
        }
    }

    /// The failure of a download that ran out of time, naming the last attempt's error.
    private func timedOut(_ error: CourierError) -> CourierError {
        let limit = timeLimit.map { $0 == $0.rounded() ? "\(Int($0))" : "\($0)" } ?? "?"
        return CourierError(
            .network, "\(url.absoluteString) did not finish within the time limit of \(limit) s",
            cause: error.cause.map { "\(error.message): \($0)" } ?? error.message,
            hint: "run the same command again to resume, or allow more time (--max-time, transfer.maxTime)")
    }
}
