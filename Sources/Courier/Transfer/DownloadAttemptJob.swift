import CCurl
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// How one attempt (one HTTP exchange) of a download ended.
enum AttemptOutcome: Sendable {
    /// The body was received in full; `total` when the server said how long it is.
    case completed
    /// A 416 said the durable bytes are already the whole resource.
    case alreadyComplete
    /// The resource changed (or the server sent an unusable range): start again from byte 0.
    case restartFromZero
    /// A retryable failure; `retryAfter` in seconds when the server asked for a delay.
    case retry(retryAfter: Double?, CourierError)
    case fail(CourierError)
    /// The caller paused (cancelled) the download, or the engine shut down.
    case paused
    /// The writer failed (disk full, I/O error): its error says why.
    case writerFailed
}

/// One HTTP exchange of a download on the network thread: sends the Range/If-Range request,
/// judges the response head (`ResponseDecision`), feeds accepted body bytes to the writer in
/// chunks, and reports an `AttemptOutcome`.
final class DownloadAttemptJob: AwaitedJob<AttemptOutcome>, @unchecked Sendable {  // @unchecked: hooks run on the loop thread.
    private let request: DownloadRequest
    private let configuration: TransferConfiguration
    private let writer: PartialFileWriter
    private let requestedOffset: Int64
    private var journal: ResumeJournal
    /// Seconds this exchange may take at most (what is left of the download's time limit).
    private let timeLimit: Double?

    private var head = DownloadResponseHead(status: 0)
    private var decision: ResponseDecision?
    private var failure: CourierError?
    private var buffer: [UInt8] = []
    /// Bytes handed to the writer at once: 256 KiB, or less when checkpoints are closer (the
    /// writer's high water is 1 MiB: bounded memory, and little lost in flight on a kill).
    private let chunkSize: Int
    /// When bytes were last handed to the writer: a slow body is handed over at least every
    /// `flushInterval`, so its progress (reported as it is written) moves at least that often.
    private var lastFlush = DispatchTime.now()
    private static let flushInterval: UInt64 = 250_000_000
    /// Body bytes accepted by this attempt.
    private(set) var receivedBytes: Int64 = 0
    /// Where the accepted body starts in the file.
    private var acceptedOffset: Int64 = 0
    /// The file's length the body must not go past: the expected length, else the announced
    /// total (Content-Length or Content-Range). Nil when neither is known.
    private var byteLimit: Int64?

    init(
        request: DownloadRequest,
        journal: ResumeJournal,
        requestedOffset: Int64,
        writer: PartialFileWriter,
        configuration: TransferConfiguration,
        timeLimit: Double? = nil
    ) {
        self.timeLimit = timeLimit
        self.request = request
        self.journal = journal
        self.requestedOffset = requestedOffset
        self.writer = writer
        self.configuration = configuration
        self.chunkSize = Int(min(256 << 10, max(64 << 10, configuration.checkpointBytes)))
        super.init()
        stallTimeout = configuration.stallTimeout
    }

    override func configure(_ easy: UnsafeMutableRawPointer) throws {
        try configureCommon(easy, url: request.url, configuration: configuration, connectTimeout: configuration.connectTimeout)
        // libcurl's own low-speed limit backs up the watchdog (which also sees paused time).
        _ = courier_easy_setopt_long(easy, CURLOPT_LOW_SPEED_LIMIT, 1)
        _ = courier_easy_setopt_long(easy, CURLOPT_LOW_SPEED_TIME, Int((configuration.stallTimeout * 2).rounded(.up)))
        // A metered transfer reads in smaller chunks: each one is a short burst against its limit.
        let bufferSize = throttle?.receiveBufferSize(upTo: configuration.receiveBufferSize) ?? configuration.receiveBufferSize
        _ = courier_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, bufferSize)
        _ = courier_easy_setopt_long(easy, CURLOPT_TCP_KEEPALIVE, 1)
        if throttle?.priority == .low, let window = LowPriorityWindow.size(configuration.lowPriorityReceiveBuffer) {
            // A bounded receive window: once it must wait, the origin stops sending to it within
            // this many bytes. On a connection of its own, so no other download inherits it.
            try CurlOption.check(courier_easy_setopt_sockopt_callback(easy, LowPriorityWindow.apply), "CURLOPT_SOCKOPTFUNCTION")
            try CurlOption.check(
                courier_easy_setopt_pointer(easy, CURLOPT_SOCKOPTDATA, UnsafeMutableRawPointer(bitPattern: window)), "CURLOPT_SOCKOPTDATA")
            try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_FRESH_CONNECT, 1), "CURLOPT_FRESH_CONNECT")
            try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_FORBID_REUSE, 1), "CURLOPT_FORBID_REUSE")
        }
        _ = courier_easy_setopt_string(easy, CURLOPT_USERAGENT, "courier/1")
        if let timeLimit {
            // The rest of the download's time limit: the attempt ends in CURLE_OPERATION_TIMEDOUT.
            let milliseconds = Int(min(max(1, timeLimit * 1000), Double(Int32.max)))
            try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, milliseconds), "CURLOPT_TIMEOUT_MS")
        }
        if requestedOffset > 0 {
            try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_RANGE, "\(requestedOffset)-"), "CURLOPT_RANGE")
        }
        var lines = request.headers.map { "\($0): \($1)" }
        if requestedOffset > 0, let validator = journal.etag ?? journal.lastModified {
            // Journals are validated when loaded and validators when received; a CR or LF here
            // would still inject request headers, so never send one.
            guard ResumeJournal.isSafeValidator(validator) else {
                throw CourierError(.internal, "refusing to send an unsafe If-Range validator for \(request.url.absoluteString)")
            }
            lines.append("If-Range: \(validator)")
        }
        try setHeaders(easy, lines)
    }

    override func didReceiveHeader(_ bytes: UnsafeRawBufferPointer) -> Bool {
        lastActivity = .now()
        let line = HTTPHeaderLine.text(bytes)
        if let status = HTTPHeaderLine.status(line) {
            head = DownloadResponseHead(status: status)
            if let insecure = URLPolicy.insecureRedirect(easy, allowInsecureHTTP: configuration.allowInsecureHTTP) {
                decision = .fail(insecure)
                return false
            }
            return true
        }
        if !line.isEmpty {
            if let (name, value) = HTTPHeaderLine.field(line) {
                head.record(name: name, value: value)
            }
            return true
        }
        // The end of a head. Interim (1xx) and followed redirects (3xx with a Location) are skipped.
        if head.status < 200 || (300...399).contains(head.status) { return true }
        return decide()
    }

    /// Judges the final response head; returns false to abort the exchange.
    private func decide() -> Bool {
        let decided = ResponseDecision.decide(
            head,
            requestedOffset: requestedOffset,
            knownTotal: journal.totalLength,
            url: request.url
        )
        var accepted: (offset: Int64, total: Int64?)?
        switch decided {
        case .accept(let offset, let total):
            accepted = (offset, total)
        case .restartFromZero where head.status == 200:
            // A 200 to a ranged request: the resource changed or ranges are unsupported.
            // Start over within this same response.
            accepted = (0, head.contentLength)
        default:
            decision = decided
            return false
        }
        guard let accepted else { return false }
        if let expected = request.expectedLength, let total = accepted.total, total != expected {
            decision = .fail(
                CourierError(
                    .integrity,
                    "\(request.url.absoluteString) is \(total) bytes, expected \(expected)",
                    cause: "length mismatch"
                )
            )
            return false
        }
        if let total = accepted.total {
            do {
                // `total` and `offset` are HTTPNumbers (at most 2^62), so the difference cannot
                // overflow; SpaceCheck adds the rest without overflowing.
                try SpaceCheck.require(
                    bytes: SpaceCheck.sum(total - accepted.offset, request.additionalSpaceNeeded),
                    reserve: configuration.diskReserve,
                    at: request.partialFile
                )
            } catch let error as CourierError {
                decision = .fail(error)
                return false
            } catch {
                return false
            }
        }
        // A validator is kept only if it can be sent back safely as If-Range (no CR, LF, NUL...).
        let strongETag = head.etag.flatMap { $0.hasPrefix("W/") || !ResumeJournal.isSafeValidator($0) ? nil : $0 }
        var updated = journal
        updated.url = request.url
        updated.etag = strongETag
        updated.lastModified = head.lastModified.flatMap { ResumeJournal.isSafeValidator($0) ? $0 : nil }
        updated.totalLength = accepted.total
        if accepted.offset == 0 && requestedOffset > 0 {
            updated.durableOffset = 0
            writer.submitRestart(journal: updated)
        } else {
            writer.submitJournal(updated)
        }
        journal = updated
        acceptedOffset = accepted.offset
        byteLimit = request.expectedLength.map { max(0, $0) } ?? accepted.total
        decision = .accept(offset: accepted.offset, total: accepted.total)
        return true
    }

    override func didReceive(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard case .accept = decision else {
            // The body of a response we do not keep (an error page before a redirect, say).
            return bytes.count
        }
        if writer.error != nil { return 0 }
        if writer.shouldPause(self) {
            isReceivePaused = true
            return CurlJob.pauseReceiving
        }
        lastActivity = .now()
        if let limit = byteLimit, bytes.count > limit - acceptedOffset - receivedBytes {
            // More than the expected or announced length: stop now, not after the whole body.
            decision = .fail(
                CourierError(
                    .integrity,
                    "\(request.url.absoluteString) sent more than the \(limit) bytes "
                        + (request.expectedLength != nil ? "expected" : "it announced"),
                    cause: "length mismatch",
                    hint: "the download was discarded; running it again starts over"
                )
            )
            buffer = []
            return 0
        }
        if buffer.count + bytes.count > chunkSize { flush() }
        if buffer.capacity < chunkSize { buffer.reserveCapacity(max(chunkSize, bytes.count)) }
        buffer.append(contentsOf: bytes)
        receivedBytes += Int64(bytes.count)
        if buffer.count >= chunkSize || DispatchTime.now().uptimeNanoseconds - lastFlush.uptimeNanoseconds >= Self.flushInterval {
            flush()
        }
        return bytes.count
    }

    private func flush() {
        lastFlush = .now()
        guard !buffer.isEmpty else { return }
        writer.submit(buffer)
        buffer = []
    }

    override func didFinish(_ result: CURLcode, stop: CurlJobStop?) {
        if case .accept = decision { flush() }
        guard let continuation = takeContinuation() else { return }
        continuation.resume(returning: outcome(result, stop: stop))
    }

    private func outcome(_ result: CURLcode, stop: CurlJobStop?) -> AttemptOutcome {
        if let setupError { return .fail(setupError) }
        switch stop {
        case .requested, .shutdown:
            return .paused
        case .stalled:
            return .retry(
                retryAfter: nil,
                CourierError(
                    .network,
                    "\(request.url.absoluteString) stalled: no data for \(configuration.stallTimeout) s",
                    cause: "stall watchdog"
                )
            )
        case nil:
            break
        }
        if writer.error != nil { return .writerFailed }
        switch decision {
        case .accept?:
            if result == CURLE_OK { return .completed }
        case .alreadyComplete?:
            return .alreadyComplete
        case .restartFromZero?:
            return .restartFromZero
        case .retry(let retryAfter, let error)?:
            return .retry(retryAfter: retryAfter, error)
        case .fail(let error)?:
            return .fail(error)
        case nil:
            break
        }
        if result == CURLE_COULDNT_CONNECT, let refused = URLPolicy.refusedRedirect(easy) { return .fail(refused) }
        let error = CourierError(
            .network,
            "downloading \(request.url.absoluteString) failed",
            cause: CurlGlobal.describe(result)
        )
        return Self.isRetryable(result) ? .retry(retryAfter: nil, error) : .fail(error)
    }

    /// Connection errors, resets, timeouts and short bodies are retried; errors that cannot heal
    /// by trying again fail at once: a TLS handshake failure (CURLE_SSL_CONNECT_ERROR: a server
    /// that does not speak TLS, or no common protocol or cipher), certificate failures, an
    /// unsupported protocol, bad URLs and redirect loops (curl's `--retry` agrees).
    static func isRetryable(_ code: CURLcode) -> Bool {
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_CONNECT, CURLE_PARTIAL_FILE, CURLE_OPERATION_TIMEDOUT,
            CURLE_GOT_NOTHING, CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_OK:
            return true
        default:
            return false
        }
    }
}

/// The disk-space check of DESIGN.md: remaining bytes plus a reserve must fit, else
/// `insufficientSpace` before a byte is requested.
public enum SpaceCheck {
    /// `a + b` with negatives as 0, saturating at `Int64.max` instead of overflowing (a length
    /// that large never fits, so the space check fails as it should).
    public static func sum(_ a: Int64, _ b: Int64) -> Int64 {
        let (total, overflowed) = max(0, a).addingReportingOverflow(max(0, b))
        return overflowed ? .max : total
    }

    /// Throws `insufficientSpace` unless `bytes + reserve` fit at `url`, naming the reserve by
    /// its setting (`reserveSetting`).
    public static func require(bytes: Int64, reserve: Int64, at url: URL, reserveSetting: String = "transfer.diskReserve") throws {
        let available = try FreeSpaceProbe.statvfs.available(url)
        let needed = sum(bytes, reserve)
        guard needed <= available else {
            throw CourierError.notEnoughSpace(
                at: url.deletingLastPathComponent().path, bytes: bytes, reserve: reserve, reserveSetting: reserveSetting,
                available: available)
        }
    }
}

/// The socket receive buffer of a low priority download (`transfer.lowPriorityReceiveBuffer`).
enum LowPriorityWindow {
    /// The buffer to set, within what SO_RCVBUF takes; nil: leave the kernel's autotuning.
    static func size(_ configured: Int) -> Int? {
        configured > 0 ? min(max(configured, 4096), Int(Int32.max / 2)) : nil
    }

    /// CURLOPT_SOCKOPTFUNCTION: sets SO_RCVBUF on the connection's socket before it connects
    /// (the window scale is fixed at the handshake). The size travels as the pointer's bits.
    static let apply: curl_sockopt_callback = { clientp, socket, purpose in
        guard purpose == CURLSOCKTYPE_IPCXN else { return CURL_SOCKOPT_OK }
        // A refusal leaves autotuning: the download still works, only waits less promptly.
        _ = set(socket, size: Int(bitPattern: clientp))
        return CURL_SOCKOPT_OK
    }

    /// Sets SO_RCVBUF of `socket` to `size` bytes (the kernel doubles it for its bookkeeping);
    /// false if refused.
    static func set(_ socket: Int32, size: Int) -> Bool {
        var value = Int32(truncatingIfNeeded: size)
        return setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &value, socklen_t(MemoryLayout<Int32>.size)) == 0
    }
}
