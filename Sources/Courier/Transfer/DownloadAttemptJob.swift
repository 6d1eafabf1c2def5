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
    /// A low download's own connection and the receive buffer last set on it
    /// (`LowPriorityWindow`); nil: the connection is not one, and the kernel tunes it.
    private var window: LowPriorityWindow.Connection?
    /// When `window` was last looked at (uptime nanoseconds).
    private var windowCheckedAt: UInt64 = 0

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
            let connection = LowPriorityWindow.Connection(ceiling: window)
            // Unretained: the job keeps `connection` for as long as libcurl may call back.
            try CurlOption.check(
                courier_easy_setopt_pointer(easy, CURLOPT_SOCKOPTDATA, Unmanaged.passUnretained(connection).toOpaque()), "CURLOPT_SOCKOPTDATA")
            try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_FRESH_CONNECT, 1), "CURLOPT_FRESH_CONNECT")
            try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_FORBID_REUSE, 1), "CURLOPT_FORBID_REUSE")
            self.window = connection
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
        if window != nil { resizeWindow(now: lastActivity.uptimeNanoseconds) }
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

    /// Sizes a low download's receive buffer to what it needs now, every half second: down as
    /// the capacity is measured (its window then bounds what still arrives once it is held), up
    /// to the ceiling if its priority was raised.
    private func resizeWindow(now: UInt64) {
        guard let window, let throttle, let easy, now &- windowCheckedAt >= LowPriorityWindow.interval else { return }
        windowCheckedAt = now
        guard let socket = window.socket(of: easy) else { return }
        let target =
            throttle.priority == .low
            ? throttle.lowWindow(rtt: LowPriorityWindow.roundTrip(socket), ceiling: window.ceiling, now: Double(now) / 1e9)
            : window.ceiling
        // Small changes are left alone: each one costs a system call and moves little.
        guard abs(target - window.size) > window.size / 8 else { return }
        if LowPriorityWindow.set(socket, size: target) { window.size = target }
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

/// The socket receive buffer of a low priority download (`transfer.lowPriorityReceiveBuffer`):
/// what its origin may still send once it must wait, so a higher priority gets the link soon.
///
/// The configured size is the ceiling, set before the connection is made (the window scale is
/// fixed at the handshake). While it runs, the buffer follows what the low downloads need
/// (`target`): twice their part of the measured capacity over a round trip, enough to take the
/// whole link when nothing else wants it, and little enough that the bytes it may still receive
/// once held last a round trip or two, not seconds.
enum LowPriorityWindow {
    /// The ceiling to set, within what SO_RCVBUF takes; nil: leave the kernel's autotuning.
    static func size(_ configured: Int) -> Int? {
        configured > 0 ? min(max(configured, 4096), Int(Int32.max / 2)) : nil
    }

    /// The least buffer a low download is sized down to (or the ceiling, if lower).
    static let floor = 32 << 10
    /// Seconds between looks at a running low download's buffer.
    static let interval: UInt64 = 500_000_000

    /// The buffer for one of `lows` low downloads now: twice its part of `capacity` (bytes a
    /// second, nil until measured: the ceiling) over `rtt` seconds (nil: unknown, 0.1 s taken),
    /// within `floor` and `ceiling`.
    static func target(capacity: Double?, lows: Int, rtt: Double?, ceiling: Int) -> Int {
        guard let capacity, capacity.isFinite, capacity > 0 else { return ceiling }
        let roundTrip = min(max(rtt ?? 0.1, 0.005), 1.0)
        let bytes = 2 * capacity / Double(max(1, lows)) * roundTrip
        let least = Double(min(ceiling, floor))
        return Int(min(Double(ceiling), max(least, bytes)))
    }

    /// A low download's connection: the sockets libcurl made for it, and the buffer set on it.
    /// Used on the loop thread only (libcurl calls `apply` there).
    final class Connection: @unchecked Sendable {  // @unchecked: the loop thread only.
        /// The ceiling set on each new socket before it connects.
        let ceiling: Int
        /// The buffer last set on the connection's socket.
        var size: Int
        /// The sockets `apply` saw, newest last. CURLINFO_ACTIVESOCKET does not tell the
        /// connection's socket while the transfer runs in libcurl 7.88, and with both address
        /// families (happy eyeballs) the newest socket may be the one that lost and was closed,
        /// its number perhaps another file's since: `socket(of:)` finds the one in use.
        var candidates: [Int32] = []
        /// The candidate found to be the connection's (-1: not looked for since the last new one).
        var socket: Int32 = -1

        init(ceiling: Int) {
            self.ceiling = ceiling
            self.size = ceiling
        }

        /// The socket of the connection `easy` uses now: the candidate whose local port and peer
        /// are the ones libcurl reports (a closed number reused since cannot match both).
        func socket(of easy: UnsafeMutableRawPointer) -> Int32? {
            if socket >= 0 { return socket }
            var local = 0
            var remote = 0
            guard courier_easy_getinfo_long(easy, CURLINFO_LOCAL_PORT, &local) == CURLE_OK,
                courier_easy_getinfo_long(easy, CURLINFO_PRIMARY_PORT, &remote) == CURLE_OK, local > 0, remote > 0
            else { return nil }
            guard let found = LowPriorityWindow.matching(candidates, local: local, peer: remote) else { return nil }
            socket = found
            return found
        }
    }

    /// CURLOPT_SOCKOPTFUNCTION: sets SO_RCVBUF on the connection's socket before it connects
    /// (the window scale is fixed at the handshake) and keeps the socket; `clientp` is the
    /// transfer's `Connection`.
    static let apply: curl_sockopt_callback = { clientp, socket, purpose in
        guard purpose == CURLSOCKTYPE_IPCXN, let clientp else { return CURL_SOCKOPT_OK }
        let connection = Unmanaged<Connection>.fromOpaque(clientp).takeUnretainedValue()
        // A refusal leaves autotuning: the download still works, only waits less promptly.
        guard set(socket, size: connection.ceiling) else { return CURL_SOCKOPT_OK }
        connection.candidates = Array(connection.candidates.suffix(3)) + [socket]
        connection.socket = -1
        connection.size = connection.ceiling
        return CURL_SOCKOPT_OK
    }

    /// Makes the kernel's receive buffer of `socket` `size` bytes (SO_RCVBUF takes half: the
    /// kernel doubles what it is given for its bookkeeping); false if refused. The receive
    /// window it advertises is about this buffer, less the overhead of the segments it holds.
    static func set(_ socket: Int32, size: Int) -> Bool {
        var value = Int32(truncatingIfNeeded: max(1, size / 2))
        return setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &value, socklen_t(MemoryLayout<Int32>.size)) == 0
    }

    /// The newest of `candidates` connected from port `local` to port `peer`; nil: none is.
    static func matching(_ candidates: [Int32], local: Int, peer: Int) -> Int32? {
        candidates.reversed().first { ports(of: $0).map { $0 == (local, peer) } ?? false }
    }

    /// The local and the peer's port of a TCP `socket`; nil when it is not a connected one.
    static func ports(of socket: Int32) -> (Int, Int)? {
        var local = sockaddr_storage()
        var peer = sockaddr_storage()
        var localLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        var peerLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &localLength) }
        }
        let connected = withUnsafeMutablePointer(to: &peer) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(socket, $0, &peerLength) }
        }
        guard named == 0, connected == 0, let localPort = port(local), let peerPort = port(peer) else { return nil }
        return (localPort, peerPort)
    }

    private static func port(_ address: sockaddr_storage) -> Int? {
        var address = address
        switch Int32(address.ss_family) {
        case AF_INET:
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) } }
        case AF_INET6:
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) } }
        default:
            return nil
        }
    }

    /// The round trip the kernel measured as `socket` received, in seconds (tcpi_rcv_rtt, else
    /// tcpi_rtt); nil: none measured yet, or not TCP.
    static func roundTrip(_ socket: Int32) -> Double? {
        var info = tcp_info()
        var length = socklen_t(MemoryLayout<tcp_info>.size)
        guard getsockopt(socket, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { return nil }
        let microseconds = info.tcpi_rcv_rtt > 0 ? info.tcpi_rcv_rtt : info.tcpi_rtt
        return microseconds > 0 ? Double(microseconds) / 1e6 : nil
    }
}
