import Foundation

/// The response head of one download attempt, as far as the decision needs it.
struct DownloadResponseHead: Sendable, Equatable {
    var status: Int
    /// `Content-Length` of this response, if sent.
    var contentLength: Int64?
    /// `Content-Range` of this response, if sent.
    var contentRange: String?
    var etag: String?
    var lastModified: String?
    var retryAfter: String?
}

/// What a download does with a response, decided before a body byte is written. Pure logic,
/// tested without a network.
enum ResponseDecision: Equatable, Sendable {
    /// Write the body starting at `offset` of the partial file; `total` is the resource's length.
    case accept(offset: Int64, total: Int64?)
    /// The resource is complete on disk already (416 whose total equals the durable offset).
    case alreadyComplete
    /// The resource changed or the range was refused: discard the partial data, request from 0.
    case restartFromZero
    /// Try again later (408, 429, 5xx); `retryAfter` in seconds when the server said.
    case retry(retryAfter: Double?, CourierError)
    /// Fail now.
    case fail(CourierError)

    /// Decides for a response to a request for bytes from `requestedOffset` (0: no Range sent).
    /// `knownTotal` is the journal's length of the resource, if a previous run learned it.
    static func decide(
        _ head: DownloadResponseHead,
        requestedOffset: Int64,
        knownTotal: Int64?,
        url: URL,
        now: Date = Date()
    ) -> ResponseDecision {
        switch head.status {
        case 200:
            if requestedOffset > 0 { return .restartFromZero }
            return .accept(offset: 0, total: head.contentLength)
        case 206:
            guard requestedOffset > 0, let range = head.contentRange.flatMap(ContentRange.init) else {
                // A 206 we did not ask for, or without a usable Content-Range: do not trust it.
                return .restartFromZero
            }
            guard range.first == requestedOffset else { return .restartFromZero }
            if let knownTotal, let total = range.total, total != knownTotal { return .restartFromZero }
            if let length = head.contentLength, length != range.last - range.first + 1 { return .restartFromZero }
            return .accept(offset: requestedOffset, total: range.total ?? knownTotal)
        case 416:
            let total = head.contentRange.flatMap(ContentRange.unsatisfiedTotal)
            if requestedOffset > 0, let total, total == requestedOffset, knownTotal == nil || knownTotal == total {
                return .alreadyComplete
            }
            return .restartFromZero
        case 401:
            return .fail(
                CourierError(
                    .serverRejected,
                    "the origin refused \(url.absoluteString) (HTTP 401)",
                    cause: "HTTP 401",
                    hint: "the receipt or credentials were not accepted"
                )
            )
        case 403:
            return .fail(
                CourierError(
                    .notEntitled,
                    "the origin refused \(url.absoluteString) (HTTP 403)",
                    cause: "HTTP 403",
                    hint: "the purchase does not entitle this content"
                )
            )
        case 408, 429, 500...599:
            return .retry(
                retryAfter: head.retryAfter.flatMap { parseRetryAfter($0, now: now) },
                CourierError(.network, "\(url.absoluteString) answered HTTP \(head.status)", cause: "HTTP \(head.status)")
            )
        default:
            return .fail(
                CourierError(
                    .network,
                    "\(url.absoluteString) answered HTTP \(head.status)",
                    cause: "HTTP \(head.status)"
                )
            )
        }
    }

    /// Seconds from a Retry-After value: delta-seconds or an HTTP date.
    static func parseRetryAfter(_ value: String, now: Date) -> Double? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Double(trimmed) { return max(0, seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: trimmed) else { return nil }
        return max(0, date.timeIntervalSince(now))
    }
}

/// A `Content-Range: bytes first-last/total` value (total may be `*`).
struct ContentRange: Equatable, Sendable {
    var first: Int64
    var last: Int64
    var total: Int64?

    init?(_ value: String) {
        let text = value.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = text.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "/", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let bounds = parts[0].split(separator: "-", maxSplits: 1)
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first <= last else {
            return nil
        }
        self.first = first
        self.last = last
        if parts[1] == "*" {
            total = nil
        } else {
            guard let total = Int64(parts[1]), total > last else { return nil }
            self.total = total
        }
    }

    /// The total of a 416's `bytes */total`.
    static func unsatisfiedTotal(_ value: String) -> Int64? {
        let text = value.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes */") else { return nil }
        return Int64(text.dropFirst(8))
    }
}

/// Retry timing: exponential backoff with full jitter, honouring Retry-After, capped.
struct RetryBackoff: Sendable {
    var initial: Double
    var maximum: Double

    /// The delay before retry number `attempt` (1-based).
    func delay(attempt: Int, retryAfter: Double?, random: Double = Double.random(in: 0...1)) -> Double {
        if let retryAfter { return min(retryAfter, maximum) }
        let exponential = initial * pow(2, Double(max(0, attempt - 1)))
        let capped = min(exponential, maximum)
        // Half fixed, half jitter: never zero, never in lockstep with other clients.
        return capped / 2 + capped / 2 * random
    }
}
