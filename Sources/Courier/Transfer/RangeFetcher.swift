import CCurl
import Foundation
import Logging

/// What one range request brought.
package enum RangeAnswer: Sendable, Equatable {
    /// A 206: the ranges of the parts received (one for a single-part answer, which may cover
    /// fewer ranges than were asked for: the caller asks again for the rest).
    case parts([ClosedRange<Int64>])
    /// A 200: the origin ignored the Range header (or refused several ranges). Nothing of the body
    /// was read: the request was aborted at its first byte.
    case wholeRepresentation
}

/// Fetches byte ranges of one resource: several ranges per request (`Range: bytes=a-b,c-d`,
/// answered with `multipart/byteranges`), or one, streaming each received piece to a sink with
/// its offset in the representation. Memory stays bounded whatever the sizes.
///
/// The answer is checked as it arrives: a 206 must carry a `Content-Range` (or parts) of the
/// representation of `representationLength` bytes, inside it, and no more bytes than it
/// declares; a part's bytes reach the sink only once its header was checked. A 200 aborts the
/// transfer at once (`RangeAnswer.wholeRepresentation`), so an origin without Range support costs
/// one response head, not the whole file. Other statuses: 4xx `serverRejected` (403
/// `notEntitled`), else `network`. The sink runs on the network thread: keep it short (a
/// positional write); its errors abort the request and are rethrown.
///
/// Each request holds one of the engine's content slots and reuses its connections: a delta
/// update shares the connections (and the limits) of the downloads around it. A fetcher made for
/// a download (`TransferEngine.rangeFetcher(for:priority:)`) meters all its requests as that
/// download, one after the other, with one `TransferThrottle`: they wait for a slot and share
/// the rate limits at its priority, which `TransferEngine.setPriority` changes while they run.
package final class RangeFetcher: Sendable {
    private let engine: TransferEngine
    private let ownsEngine: Bool
    /// The metering of every request of this fetcher (the download's id and priority).
    private let throttle: TransferThrottle

    /// A fetcher with a transfer engine of its own (tests); call `shutdown()` when done.
    package init(configuration: TransferConfiguration = .init()) throws {
        self.engine = try TransferEngine(configuration: configuration, logger: Logger(label: "courier.ranges"))
        self.ownsEngine = true
        self.throttle = engine.makeThrottle(priority: engine.defaultPriority, downloadId: nil)
    }

    /// A fetcher sharing `engine`'s network thread, slots and connection cache, for the ranges
    /// of download `downloadId` at `priority` (nil: the engine's `defaultPriority`).
    init(engine: TransferEngine, downloadId: String?, priority: DownloadPriority?) {
        self.engine = engine
        self.ownsEngine = false
        self.throttle = engine.makeThrottle(priority: priority ?? engine.defaultPriority, downloadId: downloadId)
    }

    package func shutdown() {
        if ownsEngine { engine.shutdown() }
    }

    deinit {
        if ownsEngine { engine.shutdown() }
    }

    /// Requests `ranges` (half-open, non-empty, in increasing order, not overlapping) of `url`
    /// in one request with `headers` added.
    package func fetch(
        _ url: URL,
        ranges: [Range<Int64>],
        representationLength: Int64,
        headers: [(String, String)] = [],
        sink: @escaping @Sendable (Int64, UnsafeRawBufferPointer) throws -> Void
    ) async throws -> RangeAnswer {
        try URLPolicy.check(url, allowInsecureHTTP: engine.configuration.allowInsecureHTTP)
        guard !ranges.isEmpty, ranges.allSatisfy({ !$0.isEmpty && $0.lowerBound >= 0 && $0.upperBound <= representationLength })
        else {
            throw CourierError(.internal, "a range request needs ranges inside the representation")
        }
        let job = RangeRequestJob(
            url: url, ranges: ranges, representationLength: representationLength, headers: headers,
            configuration: engine.configuration, sink: sink)
        return try await engine.run(job, host: url.host ?? "", kind: .content, throttle: throttle)
    }

    /// The value of a Range header for `ranges`: `bytes=a-b,c-d` (inclusive bounds).
    package static func rangeHeaderValue(_ ranges: [Range<Int64>]) -> String {
        "bytes=" + ranges.map { "\($0.lowerBound)-\($0.upperBound - 1)" }.joined(separator: ",")
    }
}

/// One range request (see `RangeFetcher`). Its hooks run on the loop thread.
final class RangeRequestJob: AwaitedJob<RangeAnswer>, @unchecked Sendable {  // @unchecked: hooks run on the loop thread.
    private enum Body {
        case undecided
        case single(offset: Int64, end: Int64, range: ClosedRange<Int64>)
        case multipart(MultipartByteRangesParser)
    }

    private let url: URL
    private let ranges: [Range<Int64>]
    private let representationLength: Int64
    private let headers: [(String, String)]
    private let configuration: TransferConfiguration
    private let sink: @Sendable (Int64, UnsafeRawBufferPointer) throws -> Void
    private var status = 0
    private var responseHeaders: [String: String] = [:]
    private var body = Body.undecided
    private var whole = false
    private var failure: CourierError?

    init(
        url: URL, ranges: [Range<Int64>], representationLength: Int64, headers: [(String, String)],
        configuration: TransferConfiguration, sink: @escaping @Sendable (Int64, UnsafeRawBufferPointer) throws -> Void
    ) {
        self.url = url
        self.ranges = ranges
        self.representationLength = representationLength
        self.headers = headers
        self.configuration = configuration
        self.sink = sink
        super.init()
        stallTimeout = configuration.stallTimeout
    }

    override func configure(_ easy: UnsafeMutableRawPointer) throws {
        try configureCommon(easy, url: url, configuration: configuration, connectTimeout: configuration.connectTimeout)
        try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_USERAGENT, "courier/1"), "CURLOPT_USERAGENT")
        // Bytes as stored ("identity"): a compressed transfer would make the offsets meaningless.
        try setHeaders(
            easy,
            ["Range: \(RangeFetcher.rangeHeaderValue(ranges))", "Accept-Encoding: identity"]
                + headers.filter { $0.0.lowercased() != "range" }.map { "\($0): \($1)" })
    }

    override func didReceiveHeader(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let line = HTTPHeaderLine.text(bytes)
        if let status = HTTPHeaderLine.status(line) {
            self.status = status
            responseHeaders = [:]
        } else if let (name, value) = HTTPHeaderLine.field(line) {
            responseHeaders[name] = value
        }
        return true
    }

    override func didReceive(_ bytes: UnsafeRawBufferPointer) -> Int {
        lastActivity = .now()
        if case .undecided = body {
            if let failure = decide() {
                self.failure = failure
                return 0
            }
            if whole { return 0 }
        }
        do {
            switch body {
            case .undecided:
                return 0
            case .single(let offset, let end, let range):
                guard Int64(bytes.count) <= end - offset else {
                    failure = CourierError(.integrity, "the origin sent more than the \(range.count) bytes of its Content-Range")
                    return 0
                }
                try sink(offset, bytes)
                body = .single(offset: offset + Int64(bytes.count), end: end, range: range)
            case .multipart(var parser):
                body = .undecided
                defer { body = .multipart(parser) }
                try parser.feed(bytes, sink: sink)
            }
            return bytes.count
        } catch let error as CourierError {
            failure = error
            return 0
        } catch {
            failure = CourierError(.io, "cannot keep fetched bytes", cause: "\(error)")
            return 0
        }
    }

    /// Reads the response head: sets `body` or `whole`, or returns why the answer is refused.
    private func decide() -> CourierError? {
        switch status {
        case 206:
            if let contentType = responseHeaders["content-type"], contentType.lowercased().hasPrefix("multipart/byteranges") {
                guard let parser = MultipartByteRangesParser(contentType: contentType, representationLength: representationLength) else {
                    return CourierError(.integrity, "the origin answered multipart/byteranges without a usable boundary")
                }
                body = .multipart(parser)
                return nil
            }
            guard let value = responseHeaders["content-range"], let range = ContentRange(value) else {
                return CourierError(.integrity, "the origin answered 206 without a usable Content-Range")
            }
            guard range.total == representationLength else {
                return CourierError(
                    .integrity, "the origin's Content-Range \(value) is not of the \(representationLength)-byte package")
            }
            body = .single(offset: range.first, end: range.last + 1, range: range.first...range.last)
            return nil
        case 200:
            whole = true
            return nil
        case 403:
            return CourierError(.notEntitled, "the origin refused \(url.absoluteString) (HTTP 403)", cause: "HTTP 403")
        case 400..<500:
            return CourierError(.serverRejected, "the origin refused the range request for \(url.absoluteString)", cause: "HTTP \(status)")
        default:
            return CourierError(.network, "the origin answered HTTP \(status) to a range request", cause: "HTTP \(status)")
        }
    }

    override func didFinish(_ result: CURLcode, stop: CurlJobStop?) {
        guard let continuation = takeContinuation() else { return }
        if case .undecided = body, !whole, failure == nil, setupError == nil, stop == nil, result == CURLE_OK {
            // A head without a body: decide on it now (an empty 206 then ends early below).
            if let refusal = decide() { failure = refusal }
        }
        if let failure = setupError ?? failure {
            continuation.resume(throwing: failure)
        } else if whole {
            continuation.resume(returning: .wholeRepresentation)
        } else if let stop {
            continuation.resume(
                throwing: stop == .stalled
                    ? CourierError(.network, "no byte from \(url.absoluteString) for \(Int(configuration.stallTimeout)) s")
                    : stop == .shutdown
                        ? CourierError(.network, "the range fetcher was shut down")
                        : CourierError(.cancelled, "the range request to \(url.absoluteString) was cancelled"))
        } else if result != CURLE_OK {
            continuation.resume(
                throwing: CourierError(.network, "GET \(url.absoluteString) (ranges) failed", cause: CurlGlobal.describe(result)))
        } else {
            switch body {
            case .undecided:
                continuation.resume(throwing: CourierError(.integrity, "the origin's range answer had no body"))
            case .single(let offset, let end, let range):
                if offset == end {
                    continuation.resume(returning: .parts([range]))
                } else {
                    continuation.resume(
                        throwing: CourierError(.network, "the origin's range answer ended \(end - offset) bytes early"))
                }
            case .multipart(let parser):
                do {
                    try parser.finish()
                    continuation.resume(returning: .parts(parser.parts))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }
}
