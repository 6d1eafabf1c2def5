import Foundation

/// The response head of one download attempt, as far as the decision needs it.
package struct DownloadResponseHead: Sendable, Equatable {
    package var status: Int
    /// `Content-Length` of this response, if sent.
    package var contentLength: Int64?
    /// `Content-Range` of this response, if sent.
    package var contentRange: String?
    package var etag: String?
    package var lastModified: String?
    package var retryAfter: String?
    /// A header whose number is not a valid `HTTPNumber` (the field as received), if any.
    package var invalidNumber: String?

    package init(
        status: Int,
        contentLength: Int64? = nil,
        contentRange: String? = nil,
        etag: String? = nil,
        lastModified: String? = nil,
        retryAfter: String? = nil,
        invalidNumber: String? = nil
    ) {
        self.status = status
        self.contentLength = contentLength
        self.contentRange = contentRange
        self.etag = etag
        self.lastModified = lastModified
        self.retryAfter = retryAfter
        self.invalidNumber = invalidNumber
    }

    /// Records one `name: value` field of the head (name lowercased). A Content-Length that is
    /// not an `HTTPNumber` is kept as `invalidNumber`, never as a length.
    package mutating func record(name: String, value: String) {
        switch name {
        case "content-length":
            if let length = HTTPNumber.parse(value) {
                contentLength = length
            } else {
                invalidNumber = "Content-Length: \(value)"
            }
        case "content-range": contentRange = value
        case "etag": etag = value
        case "last-modified": lastModified = value
        case "retry-after": retryAfter = value
        default: break
        }
    }
}

/// What a download does with a response, decided before a body byte is written. Pure logic,
/// tested without a network (and fuzzed: `decide` takes any head the network can produce).
package enum ResponseDecision: Equatable, Sendable {
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
    package static func decide(
        _ head: DownloadResponseHead,
        requestedOffset: Int64,
        knownTotal: Int64?,
        url: URL,
        now: Date = Date()
    ) -> ResponseDecision {
        // Numbers from the network are checked before any arithmetic: a length or position that
        // is not a plain decimal within `HTTPNumber.maximum` is a hostile answer.
        let impossible =
            head.invalidNumber
            ?? head.contentRange.flatMap { HTTPNumber.hasOutOfRangeNumber($0) ? "Content-Range: \($0)" : nil }
        if let impossible {
            return .fail(
                CourierError(
                    .integrity,
                    "\(url.absoluteString) answered with an impossible number (\(impossible))",
                    cause: "invalid HTTP header"
                )
            )
        }
        switch head.status {
        case 200:
            if requestedOffset > 0 { return .restartFromZero }
            return .accept(offset: 0, total: head.contentLength)
        case 206:
            guard requestedOffset > 0, let range = head.contentRange.flatMap({ ContentRange($0) }) else {
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
        case 400...499:
            // DESIGN's exit 8: the server refused this request (404, 410, 400…).
            return .fail(
                CourierError(.serverRejected, "\(url.absoluteString) answered HTTP \(head.status)", cause: "HTTP \(head.status)")
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
    package static func parseRetryAfter(_ value: String, now: Date) -> Double? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        // delta-seconds is 1*DIGIT (RFC 9110): no sign, fraction, exponent, "nan" or "inf".
        if let seconds = HTTPNumber.parse(trimmed) { return Double(seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: trimmed) else { return nil }
        return max(0, date.timeIntervalSince(now))
    }
}

/// A `Content-Range: bytes first-last/total` value (total may be `*`). Every number is an
/// `HTTPNumber`, so `last - first + 1` and `total - first` cannot overflow.
package struct ContentRange: Equatable, Sendable {
    package var first: Int64
    package var last: Int64
    package var total: Int64?

    /// Parses a Content-Range value; nil unless it is exactly `bytes first-last/total` (or
    /// `/*`) with `first <= last < total`.
    package init?(_ value: String) {
        let text = value.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = text.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let bounds = parts[0].split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = HTTPNumber.parse(bounds[0]), let last = HTTPNumber.parse(bounds[1]),
            first <= last
        else {
            return nil
        }
        self.first = first
        self.last = last
        if parts[1] == "*" {
            total = nil
        } else {
            guard let total = HTTPNumber.parse(parts[1]), total > last else { return nil }
            self.total = total
        }
    }

    /// The total of a 416's `bytes */total`.
    package static func unsatisfiedTotal(_ value: String) -> Int64? {
        let text = value.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes */") else { return nil }
        return HTTPNumber.parse(text.dropFirst(8))
    }
}

/// A length or byte position read from the network (Content-Length, Content-Range): ASCII
/// digits only (no sign, space or exponent) and at most `maximum`, checked without overflow.
/// Below that bound, the sum or difference of two such numbers and a local length fits an
/// `Int64`, so the arithmetic on them cannot trap.
package enum HTTPNumber {
    /// 2^62 bytes (4 EiB): larger than any real resource, small enough to add safely.
    package static let maximum: Int64 = 1 << 62

    /// The value of `text`, or nil if it is empty, holds anything but ASCII digits or exceeds
    /// `maximum`.
    package static func parse<S: StringProtocol>(_ text: S) -> Int64? {
        guard !text.isEmpty else { return nil }
        var value: Int64 = 0
        for byte in text.utf8 {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (shifted, overflowed) = value.multipliedReportingOverflow(by: 10)
            let (sum, carried) = shifted.addingReportingOverflow(Int64(byte - UInt8(ascii: "0")))
            guard !overflowed, !carried, sum <= maximum else { return nil }
            value = sum
        }
        return value
    }

    /// Whether `text` holds a run of digits larger than `maximum` (an overflow attempt).
    package static func hasOutOfRangeNumber(_ text: String) -> Bool {
        text.utf8.split(whereSeparator: { $0 < UInt8(ascii: "0") || $0 > UInt8(ascii: "9") }).contains { run in
            parse(String(decoding: run, as: UTF8.self)) == nil
        }
    }
}
