import CCurl
import Foundation
import Synchronization

/// libcurl's process-wide initialisation, done once before the first handle.
enum CurlGlobal {
    static let initialized: Bool = {
        // CURL_GLOBAL_DEFAULT (SSL | WIN32); the macro is not importable.
        curl_global_init(3) == CURLE_OK
    }()

    /// The text of a curl result code.
    static func describe(_ code: CURLcode) -> String {
        "curl \(code.rawValue): \(String(cString: curl_easy_strerror(code)))"
    }
}

/// Why a job left the loop before libcurl finished it.
enum CurlJobStop: Sendable {
    /// The caller paused or cancelled the work.
    case requested
    /// The stall watchdog saw no byte for the job's stall timeout.
    case stalled
    /// The loop is shutting down.
    case shutdown
}

/// Work the loop drives: one easy handle, configured and cleaned up on the loop thread.
///
/// Subclasses override the hooks; every hook runs on the loop thread. `requestStop` may be
/// called from any thread.
class CurlJob: @unchecked Sendable {  // @unchecked: hooks run on the loop thread only; `posted` is a Mutex.
    /// The stop asked for, if any, and the loop this job was posted to (set by `CurlMultiLoop.add`).
    private struct Posted {
        var stop: CurlJobStop?
        weak var loop: CurlMultiLoop?
    }
    private let posted = Mutex(Posted())
    /// The easy handle while the job is on the loop.
    fileprivate(set) var easy: UnsafeMutableRawPointer?
    /// When the watchdog last saw life (a received byte, a resume from backpressure).
    var lastActivity = DispatchTime.now()
    /// Seconds without activity before the watchdog stops the job; nil disables it.
    var stallTimeout: Double?
    /// True while the job has paused its own receiving (backpressure); the watchdog ignores it.
    var isReceivePaused = false
    /// The job's rate limits, set before it is posted; nil: not metered.
    var throttle: TransferThrottle?
    /// While the rate limits hold the job back: when the loop resumes it (uptime nanoseconds).
    var throttledUntil: UInt64?

    /// The write callback's entry: the rate limits first (a job over them pauses, and the loop
    /// resumes it when its buckets allow, with the same bytes), then `didReceive`.
    final func receive(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard let throttle else { return didReceive(bytes) }
        let now = DispatchTime.now().uptimeNanoseconds
        let seconds = Double(now) / 1e9
        let wait = throttle.wait(now: seconds)
        if wait > 0 {
            throttledUntil = now &+ UInt64(min(wait, 3600) * 1e9)
            return Self.pauseReceiving
        }
        let consumed = didReceive(bytes)
        if consumed == bytes.count { throttle.take(bytes.count, now: seconds) }
        return consumed
    }

    /// Sets the options of `easy` (the loop sets the callbacks and private pointer afterwards).
    func configure(_ easy: UnsafeMutableRawPointer) throws {}

    /// Why `configure` failed (set by the loop when it throws, before `didFinish`).
    var setupError: CourierError?

    /// The options every request shares: its URL, no signals, redirects up to the limit over
    /// http(s) only (https only from an https URL, so a redirect never downgrades to plain http
    /// unless `allowInsecureHTTP`), TLS verification on, the connect timeout (capped by
    /// `connectTimeout`). Throws `.internal` if libcurl refuses any of them: a request never
    /// runs on a silent default of a security setting.
    func configureCommon(
        _ easy: UnsafeMutableRawPointer,
        url: URL,
        configuration: TransferConfiguration,
        connectTimeout: Double
    ) throws {
        try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_URL, url.absoluteString), "CURLOPT_URL")
        try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1), "CURLOPT_NOSIGNAL")
        try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 1), "CURLOPT_FOLLOWLOCATION")
        try CurlOption.check(
            courier_easy_setopt_long(easy, CURLOPT_MAXREDIRS, configuration.maxRedirects),
            "CURLOPT_MAXREDIRS \(configuration.maxRedirects)")
        try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"), "CURLOPT_PROTOCOLS_STR")
        let downgradeAllowed = url.scheme?.lowercased() != "https" || configuration.allowInsecureHTTP
        try CurlOption.check(
            courier_easy_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR, downgradeAllowed ? "http,https" : "https"),
            "CURLOPT_REDIR_PROTOCOLS_STR")
        try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1), "CURLOPT_SSL_VERIFYPEER")
        try CurlOption.check(courier_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2), "CURLOPT_SSL_VERIFYHOST")
        try CurlOption.check(
            courier_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, Int(min(connectTimeout, configuration.connectTimeout) * 1000)),
            "CURLOPT_CONNECTTIMEOUT_MS")
        try ProxySettings.apply(to: easy, proxy: configuration.proxy)
        if !configuration.allowInsecureHTTP {
            // Plain http stays on loopback after redirects too: checked per socket, before connecting.
            try CurlOption.check(courier_easy_setopt_opensocket_callback(easy, URLPolicy.openSocket), "CURLOPT_OPENSOCKETFUNCTION")
            try CurlOption.check(courier_easy_setopt_pointer(easy, CURLOPT_OPENSOCKETDATA, easy), "CURLOPT_OPENSOCKETDATA")
        }
    }
    /// The request's header lines handed to libcurl: owned by the job, freed with it (after its
    /// handle, which the loop cleans up while it still holds the job).
    private var headerList: UnsafeMutablePointer<curl_slist>?

    /// Sends `lines` (`Name: value`) as the request's headers; `configure` calls it once.
    func setHeaders(_ easy: UnsafeMutableRawPointer, _ lines: [String]) throws {
        for line in lines { headerList = curl_slist_append(headerList, line) }
        guard let headerList else { return }
        try CurlOption.check(
            courier_easy_setopt_pointer(easy, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headerList)), "CURLOPT_HTTPHEADER")
    }

    deinit {
        if let headerList { curl_slist_free_all(headerList) }
    }

    /// One header line as received, CRLF included.
    func didReceiveHeader(_ line: UnsafeRawBufferPointer) -> Bool { true }
    /// Body bytes: return `bytes.count` to consume, `CurlJob.pauseReceiving` to be called again
    /// later with the same bytes, anything else to abort with CURLE_WRITE_ERROR.
    func didReceive(_ bytes: UnsafeRawBufferPointer) -> Int { bytes.count }
    /// The end: libcurl's result, or why the job was stopped early. The handle is still valid.
    func didFinish(_ result: CURLcode, stop: CurlJobStop?) {}

    static let pauseReceiving = Int(CURL_WRITEFUNC_PAUSE)

    /// Asks the loop to stop this job; `didFinish` follows with `stop`. Safe from any thread,
    /// before or after the job was added.
    func requestStop(_ reason: CurlJobStop = .requested) {
        posted.withLock { posted in
            if posted.stop == nil { posted.stop = reason }
            return posted.loop
        }?.post(.stop(self))
    }

    var pendingStop: CurlJobStop? { posted.withLock { $0.stop } }

    fileprivate func attach(_ loop: CurlMultiLoop) {
        posted.withLock { $0.loop = loop }
    }

    /// Asks the loop to resume receiving after `pauseReceiving`. Safe from any thread.
    func resumeReceiving() {
        posted.withLock { $0.loop }?.post(.unpause(self))
    }
}

/// A job whose end is one value for the task that awaits it (`CurlMultiLoop.run`): its
/// `didFinish` takes the continuation once and resumes it.
class AwaitedJob<Value: Sendable>: CurlJob, @unchecked Sendable {  // @unchecked: `continuation` is set before `add`, then used on the loop thread only.
    fileprivate var continuation: CheckedContinuation<Value, any Error>?

    /// The awaiting task's continuation, the first time only (nil after).
    func takeContinuation() -> CheckedContinuation<Value, any Error>? {
        defer { continuation = nil }
        return continuation
    }
}

/// The one network thread: owns a curl multi handle and drives every job on it.
///
/// Other threads post commands (add, stop, unpause) and wake it with `curl_multi_wakeup`; the
/// thread never blocks on disk or hashing. The multi handle keeps a connection cache, so jobs to
/// the same host reuse connections.
final class CurlMultiLoop: @unchecked Sendable {  // @unchecked: `inbox` is a Mutex; the rest is loop-thread only.
    enum Command {
        case add(CurlJob)
        case stop(CurlJob)
        case unpause(CurlJob)
    }

    private let multi: UnsafeMutableRawPointer
    /// Commands posted since the loop's last turn, and whether `shutdown` was asked.
    private let inbox = Mutex((commands: [Command](), stopped: false))
    private let threadExited = DispatchSemaphore(value: 0)
    /// Jobs on the multi handle, keyed by their easy handle (loop thread only).
    private var jobs: [UnsafeMutableRawPointer: CurlJob] = [:]

    /// Starts the network thread. `maxConnections` sizes the connection cache.
    init(name: String, maxConnections: Int) throws {
        guard CurlGlobal.initialized, let multi = curl_multi_init() else {
            throw CourierError(.internal, "cannot initialise libcurl")
        }
        self.multi = multi
        _ = courier_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, max(8, maxConnections))
        let thread = Thread { [self] in self.run() }
        thread.name = name
        thread.start()
    }

    /// Posts a job; it starts on the next loop turn.
    func add(_ job: CurlJob) {
        job.attach(self)
        post(.add(job))
    }

    func post(_ command: Command) {
        let (posted, wake) = inbox.withLock { inbox in
            // Only the first command of a batch wakes the loop: it takes the whole inbox at once.
            let wake = inbox.commands.isEmpty
            if !inbox.stopped { inbox.commands.append(command) }
            return (!inbox.stopped, wake)
        }
        guard posted else {
            // Never started: tell it so on this thread (no handle exists yet).
            if case .add(let job) = command { job.didFinish(CURLE_ABORTED_BY_CALLBACK, stop: .shutdown) }
            return
        }
        if wake { curl_multi_wakeup(multi) }
    }

    /// Stops every job (`didFinish` with `.shutdown`) and ends the thread; waits for it.
    func shutdown() {
        let wasStopped = inbox.withLock { inbox in
            defer { inbox.stopped = true }
            return inbox.stopped
        }
        guard !wasStopped else { return }
        curl_multi_wakeup(multi)
        threadExited.wait()
    }

    private func run() {
        while true {
            let (pending, isStopping) = inbox.withLock { inbox in
                defer { inbox.commands.removeAll(keepingCapacity: true) }
                return (inbox.commands, inbox.stopped)
            }
            for command in pending { perform(command) }
            if isStopping {
                for job in Array(jobs.values) { finish(job, result: CURLE_ABORTED_BY_CALLBACK, stop: .shutdown) }
                curl_multi_cleanup(multi)
                threadExited.signal()
                return
            }
            var running: Int32 = 0
            curl_multi_perform(multi, &running)
            var left: Int32 = 0
            while let message = curl_multi_info_read(multi, &left) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle,
                    let job = jobs[easy]
                else { continue }
                finish(job, result: courier_multi_message_result(message), stop: nil)
            }
            watchdog()
            curl_multi_poll(multi, nil, 0, releaseThrottled(), nil)
        }
    }

    private func perform(_ command: Command) {
        switch command {
        case .add(let job):
            if let reason = job.pendingStop {
                job.didFinish(CURLE_ABORTED_BY_CALLBACK, stop: reason)
                return
            }
            guard let easy = curl_easy_init() else {
                job.didFinish(CURLE_FAILED_INIT, stop: nil)
                return
            }
            job.easy = easy
            do {
                try job.configure(easy)
                // The loop's own options: a handle without its callbacks would write the body
                // to standard output, so a refusal here fails the job like `configure`'s.
                let context = Unmanaged.passUnretained(job).toOpaque()
                try CurlOption.check(courier_easy_setopt_pointer(easy, CURLOPT_PRIVATE, context), "CURLOPT_PRIVATE")
                try CurlOption.check(courier_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, context), "CURLOPT_WRITEDATA")
                try CurlOption.check(courier_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, context), "CURLOPT_HEADERDATA")
                try CurlOption.check(
                    courier_easy_setopt_data_callback(easy, CURLOPT_WRITEFUNCTION) { data, size, count, context in
                        guard let context else { return 0 }
                        let job = Unmanaged<CurlJob>.fromOpaque(context).takeUnretainedValue()
                        let bytes = UnsafeRawBufferPointer(start: data, count: size * count)
                        return job.receive(bytes)
                    }, "CURLOPT_WRITEFUNCTION")
                try CurlOption.check(
                    courier_easy_setopt_data_callback(easy, CURLOPT_HEADERFUNCTION) { data, size, count, context in
                        guard let context else { return 0 }
                        let job = Unmanaged<CurlJob>.fromOpaque(context).takeUnretainedValue()
                        let bytes = UnsafeRawBufferPointer(start: data, count: size * count)
                        return job.didReceiveHeader(bytes) ? size * count : 0
                    }, "CURLOPT_HEADERFUNCTION")
            } catch {
                job.setupError =
                    error as? CourierError ?? CourierError(.internal, "cannot configure a libcurl handle", cause: "\(error)")
                job.didFinish(CURLE_FAILED_INIT, stop: nil)
                job.easy = nil
                curl_easy_cleanup(easy)
                return
            }
            job.lastActivity = .now()
            jobs[easy] = job
            let added = curl_multi_add_handle(multi, easy)
            if added != CURLM_OK {
                jobs[easy] = nil
                job.didFinish(CURLE_FAILED_INIT, stop: nil)
                job.easy = nil
                curl_easy_cleanup(easy)
            }
        case .stop(let job):
            guard let easy = job.easy, jobs[easy] === job else { return }
            finish(job, result: CURLE_ABORTED_BY_CALLBACK, stop: job.pendingStop ?? .requested)
        case .unpause(let job):
            guard let easy = job.easy, jobs[easy] === job, job.isReceivePaused, job.throttledUntil == nil else { return }
            job.isReceivePaused = false
            job.lastActivity = .now()
            // CURLPAUSE_CONT is 0; the macro is not importable. May call the write callback at once.
            curl_easy_pause(easy, 0)
        }
    }

    private func finish(_ job: CurlJob, result: CURLcode, stop: CurlJobStop?) {
        guard let easy = job.easy else { return }
        curl_multi_remove_handle(multi, easy)
        jobs[easy] = nil
        job.didFinish(result, stop: stop)
        job.easy = nil
        curl_easy_cleanup(easy)
    }

    /// Resumes the jobs the rate limits held back whose time has come; returns how long the
    /// loop may sleep (milliseconds) before the next one is due, 200 at most.
    private func releaseThrottled() -> Int32 {
        var now = DispatchTime.now().uptimeNanoseconds
        for job in Array(jobs.values) {
            guard let until = job.throttledUntil, until <= now, let easy = job.easy else { continue }
            job.throttledUntil = nil
            job.lastActivity = .now()
            // CURLPAUSE_CONT: libcurl hands the held bytes to the write callback at once.
            curl_easy_pause(easy, 0)
        }
        now = DispatchTime.now().uptimeNanoseconds
        var sleep: UInt64 = 200_000_000
        for job in jobs.values {
            guard let until = job.throttledUntil else { continue }
            sleep = min(sleep, until > now ? until - now : 0)
        }
        return Int32(max(1, (sleep + 999_999) / 1_000_000))
    }

    private func watchdog() {
        let now = DispatchTime.now().uptimeNanoseconds
        for job in Array(jobs.values) {
            // A job paused by its own backpressure or by the rate limits is not stalled.
            guard let timeout = job.stallTimeout, !job.isReceivePaused, job.throttledUntil == nil else { continue }
            let idle = Double(now &- job.lastActivity.uptimeNanoseconds) / 1e9
            if idle > timeout {
                finish(job, result: CURLE_OPERATION_TIMEDOUT, stop: .stalled)
            }
        }
    }
}

/// Checked `curl_easy_setopt` results.
enum CurlOption {
    /// Throws `.internal` unless libcurl accepted the option `name`.
    static func check(_ result: CURLcode, _ name: String) throws {
        guard result == CURLE_OK else {
            throw CourierError(
                .internal, "libcurl refused the option \(name)", cause: CurlGlobal.describe(result),
                hint: "check the transfer settings of the configuration")
        }
    }
}

/// Header-line parsing shared by the jobs (pure, so the fuzz harness can call it).
package enum HTTPHeaderLine {
    /// A header line as libcurl hands it over, without its line end (CR, LF) at either side.
    /// Works on the bytes: Foundation's trimming bridged each line through NSString, 8 µs a line.
    package static func text(_ bytes: UnsafeRawBufferPointer) -> String {
        var start = 0
        var end = bytes.count
        while start < end, bytes[start] == 0x0D || bytes[start] == 0x0A { start += 1 }
        while end > start, bytes[end - 1] == 0x0D || bytes[end - 1] == 0x0A { end -= 1 }
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
    }

    /// The status code of an `HTTP/x y reason` line, or nil if the line is not a status line.
    package static func status(_ line: String) -> Int? {
        guard line.hasPrefix("HTTP/") else { return nil }
        let parts = line.utf8.split(separator: UInt8(ascii: " "), maxSplits: 2)
        guard parts.count >= 2 else { return nil }
        return Int(Substring(parts[1]))
    }

    /// The lowercased name and trimmed value of a `Name: value` line. Trims HTTP's optional
    /// whitespace (spaces and tabs) and line ends (CR, LF), nothing else.
    package static func field(_ line: String) -> (String, String)? {
        let utf8 = line.utf8
        guard let colon = utf8.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        let name = String(Substring(trimmed(utf8[..<colon])))
        let value = String(Substring(trimmed(utf8[utf8.index(after: colon)...])))
        return (name.lowercased(), value)
    }

    private static func trimmed(_ bytes: Substring.UTF8View) -> Substring.UTF8View {
        func blank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
        var bytes = bytes
        while let first = bytes.first, blank(first) { bytes.removeFirst() }
        while let last = bytes.last, blank(last) { bytes.removeLast() }
        return bytes
    }
}

/// The URL policy of DESIGN.md: https, or plain http only to loopback unless allowed.
enum URLPolicy {
    static func check(_ url: URL, allowInsecureHTTP: Bool) throws {
        let scheme = url.scheme?.lowercased() ?? ""
        if scheme == "https" { return }
        guard scheme == "http" else {
            throw CourierError(.usage, "unsupported URL scheme in \(url.absoluteString)", hint: "use an https:// URL")
        }
        if allowInsecureHTTP || isLoopback(host: url.host ?? "") { return }
        throw CourierError(
            .usage,
            "plain http is allowed only to loopback: \(url.absoluteString)",
            hint: "use https, or set transfer.allowInsecureHTTP in the configuration"
        )
    }

    /// libcurl's socket opener (CURLOPT_OPENSOCKETFUNCTION, with the easy handle as its data):
    /// refuses a socket for plain http to an address outside loopback (127.0.0.0/8, ::1), so a
    /// loopback http origin cannot redirect a transfer to a plain-http host elsewhere. libcurl
    /// updates the effective URL to a redirect's target before it connects, so the check sees
    /// where the request is going. The refusal ends the transfer with CURLE_COULDNT_CONNECT
    /// before any packet is sent.
    static let openSocket: curl_opensocket_callback = { clientp, _, address in
        guard let clientp, let address else { return CURL_SOCKET_BAD }
        let effective = effectiveURL(clientp)
        let plainHTTP = effective.map { !$0.lowercased().hasPrefix("https://") } ?? true
        if plainHTTP && !isLoopback(address: address) {
            blockedRedirects.note(effective ?? "")
            return CURL_SOCKET_BAD
        }
        return socket(address.pointee.family, address.pointee.socktype | Int32(SOCK_CLOEXEC.rawValue), address.pointee.protocol)
    }

    /// The plain-http URLs a socket was refused for, so the transfer can say why it failed.
    static let blockedRedirects = BlockedURLs()

    /// Whether libcurl's address is in 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104. The address
    /// runs past `curl_sockaddr.addr` (a sockaddr_in6 is longer than a sockaddr): libcurl
    /// allocates storage for `addrlen` bytes there.
    static func isLoopback(address: UnsafeMutablePointer<curl_sockaddr>) -> Bool {
        guard let offset = MemoryLayout<curl_sockaddr>.offset(of: \.addr) else { return false }
        let raw = UnsafeRawPointer(address) + offset
        let length = Int(address.pointee.addrlen)
        switch Int32(address.pointee.family) {
        case AF_INET:
            guard length >= MemoryLayout<sockaddr_in>.size else { return false }
            var ipv4 = sockaddr_in()
            withUnsafeMutableBytes(of: &ipv4) { $0.copyMemory(from: UnsafeRawBufferPointer(start: raw, count: $0.count)) }
            return UInt32(bigEndian: ipv4.sin_addr.s_addr) >> 24 == 127
        case AF_INET6:
            guard length >= MemoryLayout<sockaddr_in6>.size else { return false }
            var ipv6 = sockaddr_in6()
            withUnsafeMutableBytes(of: &ipv6) { $0.copyMemory(from: UnsafeRawBufferPointer(start: raw, count: $0.count)) }
            return withUnsafeBytes(of: ipv6.sin6_addr) { bytes in
                let loopback = bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1
                let mapped = bytes.prefix(10).allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF && bytes[12] == 127
                return loopback || mapped
            }
        default:
            return false
        }
    }

    /// Where `easy` is now (`CURLINFO_EFFECTIVE_URL`: a redirect's target once it is followed).
    static func effectiveURL(_ easy: UnsafeMutableRawPointer?) -> String? {
        guard let easy else { return nil }
        var effective: UnsafeMutablePointer<CChar>?
        guard courier_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &effective) == CURLE_OK, let effective else { return nil }
        return String(cString: effective)
    }

    /// The failure of a response head from a plain http URL outside loopback (a redirect led
    /// there), checked at its status line; nil for any other, or with `allowInsecureHTTP`.
    static func insecureRedirect(_ easy: UnsafeMutableRawPointer?, allowInsecureHTTP: Bool) -> CourierError? {
        guard !allowInsecureHTTP, let url = effectiveURL(easy).flatMap(URL.init(string:)),
            (try? check(url, allowInsecureHTTP: false)) == nil
        else { return nil }
        return CourierError(.network, "redirected to an insecure URL \(url.absoluteString)")
    }

    /// The failure of a transfer whose socket `openSocket` refused; nil if it refused none.
    static func refusedRedirect(_ easy: UnsafeMutableRawPointer?) -> CourierError? {
        guard let url = effectiveURL(easy), blockedRedirects.take(url) else { return nil }
        return CourierError(
            .network, "redirected to an insecure URL \(url)", cause: "plain http is allowed only to loopback",
            hint: "use https, or set transfer.allowInsecureHTTP in the configuration")
    }

    static func isLoopback(host: String) -> Bool {
        // Brackets trimmed by hand: a CharacterSet built per call (and NSString's trimming) cost
        // more than the rest of a loopback download's URL checks.
        var trimmed = Substring(host.lowercased())
        while let first = trimmed.first, first == "[" || first == "]" { trimmed.removeFirst() }
        while let last = trimmed.last, last == "[" || last == "]" { trimmed.removeLast() }
        let host = String(trimmed)
        if host == "localhost" || host == "::1" { return true }
        let octets = host.split(separator: ".")
        return octets.count == 4 && octets.first == "127" && octets.allSatisfy { UInt8($0) != nil }
    }
}

/// A short record of URLs refused by `URLPolicy.openSocket` (the C callback has no way to hand
/// its reason to the job), read when a transfer ends in CURLE_COULDNT_CONNECT.
final class BlockedURLs: Sendable {
    private let urls = Mutex<[String]>([])

    func note(_ url: String) {
        urls.withLock { urls in
            urls.append(url)
            if urls.count > 64 { urls.removeFirst(urls.count - 64) }
        }
    }

    /// Whether a socket was refused for `url` (and forgets it).
    func take(_ url: String) -> Bool {
        urls.withLock { urls in
            guard let index = urls.lastIndex(of: url) else { return false }
            urls.remove(at: index)
            return true
        }
    }
}

extension CurlMultiLoop {
    /// Adds `job` and waits, suspended, for the value it ends with; cancelling the calling task
    /// stops the job (which then ends with its own cancellation answer).
    func run<Value>(_ job: AwaitedJob<Value>) async throws -> Value {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                job.continuation = continuation
                add(job)
            }
        } onCancel: {
            job.requestStop(.requested)
        }
    }
}

/// Which proxy a request goes through (docs/transfer.md, "Proxies").
///
/// With a configured proxy (`transfer.proxy`, `--proxy`), every request goes through it except
/// the hosts `no_proxy` (or `NO_PROXY`) lists, as with `curl --proxy`. Without one, libcurl reads
/// `http_proxy`, `https_proxy`, `all_proxy` and `no_proxy` from the environment by itself (Courier
/// never turns that off), and loopback (`localhost`, 127.0.0.1, ::1) is added to `no_proxy`: a
/// proxy from the environment is for the outside world, never for a server on this machine (Go's
/// `ProxyFromEnvironment` does the same). An empty `transfer.proxy` turns every proxy off.
package enum ProxySettings {
    /// The hosts that go direct: `no_proxy` as libcurl reads it (`no_proxy`, else `NO_PROXY`),
    /// plus loopback unless `explicitProxy`. "*" (every host direct) stays as it is.
    package static func noProxy(environment: [String: String], explicitProxy: Bool) -> String? {
        let listed = [environment["no_proxy"], environment["NO_PROXY"]].compactMap { $0 }.first { !$0.isEmpty }
        if explicitProxy { return listed }
        if listed?.trimmingCharacters(in: .whitespaces) == "*" { return "*" }
        return ([listed].compactMap { $0 } + ["localhost", "127.0.0.1", "::1"]).joined(separator: ",")
    }

    /// The process's environment, read once (libcurl reads it at each request; it does not change).
    private static let environment = ProcessInfo.processInfo.environment

    static func apply(to easy: UnsafeMutableRawPointer, proxy: String?) throws {
        if let proxy {
            // The URL may carry credentials: it is never put in a message.
            try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_PROXY, proxy), "CURLOPT_PROXY")
        }
        if let noProxy = noProxy(environment: environment, explicitProxy: proxy != nil) {
            try CurlOption.check(courier_easy_setopt_string(easy, CURLOPT_NOPROXY, noProxy), "CURLOPT_NOPROXY")
        }
    }
}
