import ArgumentParser
import Courier
import Foundation
import Synchronization
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// `courier get`: resumable downloads from the command line.
struct GetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Download URLs to files, resumably: running the same command again resumes.",
        discussion: """
            The partial data (FILE.courier-part) and its journal (FILE.courier-journal) live beside \
            FILE until the download is verified and renamed into place. SIGINT or SIGTERM pause the \
            download (exit 7). With several URLs, or --input-file LIST (one URL a line, # comments \
            and blank lines skipped; - reads standard input), every URL is saved under the last \
            component of its path into DIR (-d DIR, or -o DIR naming a folder; default: the \
            current folder), --jobs at a time, as wget and aria2c do. A URL whose name is not one \
            safe file name directly inside DIR (empty, ., .., a / or control character once \
            percent-decoded, or a name already used by another URL) is refused with a message \
            naming it while the others download. At the end every file's outcome is listed (OK, \
            ERR or PAUSED). The exit code is 0 when every file was saved; else 7 if any download \
            was paused, else the code of the first failed download in the order given, else 2 \
            (only refused URLs). With --mirror, each switch to another URL is said on standard \
            error with the failed URL and its cause, and the result names the URL that served \
            the file. \
            Without -o, the file is saved in the current folder under the URL's last path \
            component (refused if that is not one safe file name). The destination is checked \
            before any byte is fetched: its folder must exist (or pass --create-dirs) and it must \
            not be a folder. With -o -, the download is verified in a temporary file, then \
            written to standard output (not resumable).
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The URLs to download (several: each is saved under its own name in the current folder, -d DIR or -o DIR).")
    var urls: [String] = []

    @Option(
        name: [.short, .long],
        help: ArgumentHelp("The file to write; - for standard output. Default: the URL's file name, here.", valueName: "file"))
    var output: String?

    @Flag(name: .customLong("create-dirs"), help: "Create the missing folders of -o FILE (-d DIR is always created).")
    var createDirs = false

    @Option(help: "The expected SHA-256 of the file (hex).")
    var sha256: String?

    @Option(help: "The expected length of the file in bytes.")
    var length: Int64?

    @Option(name: [.short, .customLong("input-file")], help: "A file of URLs, one a line (# comments, blank lines skipped); - reads them from standard input.")
    var inputFile: String?

    @Option(
        name: [.customShort("d"), .customLong("dir")],
        help: "The folder to save into under the URLs' own names (created; default: the current folder).")
    var directory: String?

    @Option(name: [.short, .long], help: "Downloads at once with several URLs (as aria2c's -j).")
    var jobs: Int = 5

    @Option(name: [.customShort("H"), .customLong("header")], help: "An extra request header, 'Name: value' (repeatable).")
    var headers: [String] = []

    @Option(
        name: .customLong("mirror"),
        help: ArgumentHelp(
            "Another URL serving the same bytes (repeatable; tried in order): a failing origin hands over, resuming.",
            valueName: "url"))
    var mirrors: [String] = []

    @Option(
        name: .customLong("retry"),
        help: ArgumentHelp(
            "Retries of a failing transfer before giving up (default: transfer.maxRetries, 5); bytes received reset the count.",
            valueName: "n"))
    var retry: Int?

    @Option(
        name: .customLong("connect-timeout"),
        help: ArgumentHelp("Seconds allowed to connect (default: transfer.connectTimeout, 15).", valueName: "seconds"))
    var connectTimeout: Double?

    @Option(
        name: [.customShort("m"), .customLong("max-time")],
        help: ArgumentHelp(
            "Seconds each download may take in all, retries included; past it, exit 5 with the partial data kept (default: transfer.maxTime; 0: no limit).",
            valueName: "seconds"))
    var maxTime: Double?

    @Option(
        name: [.customShort("x"), .customLong("proxy")],
        help: ArgumentHelp(
            "Send every request through this proxy (curl's syntax: http://host:port, socks5h://host; \"\" for none). Default: transfer.proxy, else http_proxy/https_proxy/no_proxy with loopback direct.",
            valueName: "url"))
    var proxy: String?

    @Option(
        name: .customLong("limit-rate"),
        help: ArgumentHelp(
            "Hold each transfer to this many bytes per second, in curl's syntax: 500k, 2M, 1G (default: transfer.limitRate; transfer.maxRate limits all together).",
            valueName: "rate"))
    var limitRate: String?

    func validate() throws {
        if let proxy { try ProxyOption.validate(proxy) }
        if let limitRate { _ = try RateOption.parse(limitRate) }
        if let retry, retry < 0 { throw ValidationError("--retry must not be negative") }
        if let connectTimeout, !(connectTimeout.isFinite && connectTimeout > 0) {
            throw ValidationError("--connect-timeout must be a positive number of seconds")
        }
        if let maxTime, !(maxTime.isFinite && maxTime >= 0) {
            throw ValidationError("--max-time must be a number of seconds (0: no limit)")
        }
        for mirror in mirrors where !Catalog.Content.isMirrorURL(mirror) {
            throw ValidationError("--mirror must be an absolute http(s) URL, not \(mirror)")
        }
        if output != nil && directory != nil {
            throw ValidationError("-o and -d both say where to save: give one (-o FILE for one URL, -d DIR for any number)")
        }
        guard jobs >= 1 else { throw ValidationError("--jobs must be at least 1") }
        if severalURLs {
            if !mirrors.isEmpty { throw ValidationError("--mirror goes with one URL, not several or --input-file") }
            guard sha256 == nil, length == nil else {
                throw ValidationError("--sha256 and --length describe one file: give one URL with them")
            }
            if output == "-" { throw ValidationError("-o - writes one file to standard output: give one URL") }
        } else {
            guard !urls.isEmpty else { throw ValidationError("give a URL (or --input-file LIST)") }
            if output == "-" && global.json {
                throw ValidationError("-o - writes the file to standard output: it cannot also carry --json")
            }
            if let sha256 {
                guard sha256.count == 64, sha256.allSatisfy(\.isHexDigit) else {
                    throw ValidationError("--sha256 must be 64 hex digits")
                }
            }
            if let length, length < 0 { throw ValidationError("--length must not be negative") }
        }
        for header in headers where !header.contains(":") {
            throw ValidationError("--header must look like 'Name: value'")
        }
    }

    /// Several URLs (arguments or a list): each is saved under its own name into a folder.
    private var severalURLs: Bool { inputFile != nil || urls.count > 1 }

    func run() async throws {
        try await global.run { output in
            var loaded = try global.loadConfiguration()
            var configuration = loaded.transfer
            if let retry { configuration.maxRetries = retry }
            if let connectTimeout { configuration.connectTimeout = connectTimeout }
            if let maxTime { configuration.maxTime = maxTime }
            if let proxy { configuration.proxy = proxy }
            if let limitRate { configuration.limitRate = try RateOption.parse(limitRate) }
            if severalURLs {
                configuration.maxConcurrentTransfers = jobs
                configuration.maxTransfersPerHost = jobs
            }
            loaded.transfer = configuration
            // No store: the core hands out the engine alone (the layout is only named, never touched).
            let engine = try CourierCore(
                configuration: loaded, layout: StorageLayout.resolve(explicit: global.storage),
                logger: global.logger("courier.get", default: .warning)
            ).transferEngine()
            defer { engine.shutdown() }
            let requestHeaders = headers.map { header -> (String, String) in
                let parts = header.split(separator: ":", maxSplits: 1)
                return (String(parts[0]).trimmingCharacters(in: .whitespaces), String(parts.count > 1 ? parts[1] : "").trimmingCharacters(in: .whitespaces))
            }
            try await withSignalCancellation {
                if severalURLs {
                    try await downloadMany(headers: requestHeaders, engine: engine, output: output)
                } else if let url = urls.first {
                    try await downloadOne(url, to: self.output, headers: requestHeaders, engine: engine, output: output)
                }
            }
        }
    }

    /// The URL `address` names; without a scheme (`host:8080/path`), http, as curl assumes.
    static func url(_ address: String) -> URL? {
        let spelled = address.contains("://") ? address : "http://" + address
        guard let url = URL(string: spelled), url.scheme != nil else { return nil }
        return url
    }

    private func downloadOne(
        _ address: String,
        to path: String?,
        headers: [(String, String)],
        engine: TransferEngine,
        output: Output
    ) async throws {
        guard let source = Self.url(address) else {
            throw ValidationError("not a URL: \(address)")
        }
        if path == "-" {
            try await downloadToStandardOutput(source, headers: headers, engine: engine, output: output)
            return
        }
        let destination: URL
        if let path {
            destination = URL(fileURLWithPath: path).standardizedFileURL
        } else {
            // Like wget and curl -O: the URL's own name, in the current folder (or -d DIR,
            // created, as wget's -P and aria2c's -d).
            let here: URL
            if let directory {
                here = try Self.makeFolder(directory)
            } else {
                here = URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)
            }
            do {
                destination = try DownloadFileName.destination(for: source, in: here)
            } catch let error as CourierError {
                throw CourierError(.usage, "cannot save \(address) under its own name: \(error.message)", hint: "name the file with -o FILE")
            }
        }
        try GetDestination.check(file: destination, createFolders: createDirs)
        try await download(source, to: destination, headers: headers, engine: engine, output: output)
    }

    /// `get URL -o -`: the download is verified in a private temporary folder, then copied to
    /// standard output and removed (standard output cannot be resumed or renamed into).
    private func downloadToStandardOutput(
        _ source: URL, headers: [(String, String)], engine: TransferEngine, output: Output
    ) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "courier-get-\(getpid())-\(UUID().uuidString)", isDirectory: true)
        try CourierError.wrapping(.io, "cannot create a temporary folder in \(folder.deletingLastPathComponent().path)") {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        }
        defer { try? FileManager.default.removeItem(at: folder) }
        let name = (try? DownloadFileName.derive(from: source)) ?? "download"
        let file = folder.appendingPathComponent(name)
        let result = try await download(source, to: file, headers: headers, engine: engine, output: output, quietResult: true)
        try GetDestination.copyToStandardOutput(result.file)
    }

    @discardableResult
    private func download(
        _ source: URL, to destination: URL, headers: [(String, String)], engine: TransferEngine, output: Output,
        quietResult: Bool = false
    ) async throws -> DownloadResult {
        var request = DownloadRequest(
            id: destination.lastPathComponent,
            url: source,
            destination: destination,
            expectedLength: length,
            expectedSHA256: sha256,
            headers: headers
        )
        request.mirrors = mirrors.compactMap(URL.init(string:))
        let store = FileResumeJournalStore(directory: destination.deletingLastPathComponent())
        let bar = ProgressBar(output: output, label: destination.lastPathComponent, file: destination.path)
        let retries = RetryReporter(output: output, file: destination.path)
        do {
            let result = try await engine.download(
                request, journal: store, progress: { bar.update($0) }, retrying: retries.report,
                handingOver: retries.reportHandover)
            bar.finish()
            if !quietResult {
                try GetDestination.applyUserMode(result.file)
                report(result, output: output)
            }
            return result
        } catch let error as CourierError where error.code == .paused {
            bar.finish()
            throw CourierError(.paused, "\(destination.path): \(error.message)", hint: error.hint)
        } catch {
            bar.finish()
            // A refusal before any byte leaves nothing behind (no empty part file, no journal).
            GetDestination.removeEmptyLeftovers(of: request, journal: store)
            throw retries.summarized(error)
        }
    }

    /// Makes (if needed) and returns the folder `path`: `-d DIR` is created, as aria2c's is
    /// (-o's missing folder needs --create-dirs, as curl's).
    private static func makeFolder(_ path: String) throws -> URL {
        let folder = URL(fileURLWithPath: path, isDirectory: true).standardizedFileURL
        try CourierError.wrapping(.io, "cannot create \(folder.path)") {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        return folder
    }

    /// Where several URLs are saved: `-d DIR`, or `-o DIR` when it names a folder (an existing
    /// one, or a path ending in /), else the current folder. `-o FILE` is a usage error.
    private func folderForSeveralURLs() throws -> URL {
        if let directory { return try Self.makeFolder(directory) }
        if let output {
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: output, isDirectory: &isFolder) && isFolder.boolValue {
                return URL(fileURLWithPath: output, isDirectory: true).standardizedFileURL
            }
            if output.hasSuffix("/") { return try Self.makeFolder(output) }
            throw CourierError(
                .usage, "-o \(output) names one file, but there are several URLs",
                hint: "save them into a folder with -d DIR (or -o DIR/), each under its own name")
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)
    }

    /// One URL of several, where it was given: an argument or a line of the list.
    private struct Entry {
        var address: String
        /// The argument's position (1-based), for a URL given on the command line.
        var argument: Int?
        /// The line's number (1-based), for a URL of the list.
        var line: Int?
    }

    /// `get URL URL...` and `get -i LIST`: every URL (the arguments first, then the list's
    /// lines) saved under its own name into one folder, `--jobs` at a time through the one engine.
    private func downloadMany(
        headers: [(String, String)],
        engine: TransferEngine,
        output: Output
    ) async throws {
        var entries = urls.enumerated().map { Entry(address: $1, argument: $0 + 1) }
        if let list = inputFile {
            // `-i -`: the list comes on standard input, as with wget and aria2c.
            let text = try CourierError.wrapping(.usage, "cannot read \(list == "-" ? "the list on standard input" : list)") {
                if list == "-" {
                    guard let text = String(data: FileHandle.standardInput.readDataToEndOfFile(), encoding: .utf8) else {
                        throw CourierError(.usage, "not UTF-8 text")
                    }
                    return text
                }
                return try String(contentsOfFile: list, encoding: .utf8)
            }
            let lines = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
            for (index, line) in lines.enumerated() {
                let address = line.trimmingCharacters(in: .whitespaces)
                if address.isEmpty || address.hasPrefix("#") { continue }
                entries.append(Entry(address: address, line: index + 1))
            }
        }
        let folder = try folderForSeveralURLs()
        // A URL that cannot be saved safely (not an http(s) URL, no safe file name, a name
        // another URL already uses) is refused on its own; the others still download.
        var requests: [DownloadRequest] = []
        var placeOfName: [String: String] = [:]
        var refused: [CourierError] = []
        for entry in entries {
            let place =
                entry.line.map { "\(inputFile == "-" ? "standard input" : inputFile ?? ""):\($0)" }
                ?? "argument \(entry.argument ?? 0)"
            do {
                guard let source = Self.url(entry.address), let scheme = source.scheme?.lowercased(),
                    scheme == "http" || scheme == "https", source.host?.isEmpty == false
                else {
                    throw CourierError(.usage, "not an http(s) URL")
                }
                let destination = try DownloadFileName.destination(for: source, in: folder)
                let name = destination.lastPathComponent
                if let earlier = placeOfName[name] {
                    throw CourierError(.usage, "\(earlier) saves to the same name \(DownloadFileName.escaped(name))")
                }
                placeOfName[name] = place
                requests.append(DownloadRequest(id: name, url: source, destination: destination, headers: headers))
            } catch {
                let reason = (error as? CourierError)?.message ?? "\(error)"
                let refusal = CourierError(.usage, "\(place): refused \(DownloadFileName.escaped(entry.address)): \(reason)")
                refused.append(refusal)
                if output.json {
                    output.emit(
                        GetRefusedEvent(
                            line: entry.line, argument: entry.argument, url: entry.address, code: refusal.code.rawValue,
                            message: refusal.message))
                } else {
                    output.note("courier: \(refusal.message)")
                }
            }
        }
        let store = FileResumeJournalStore(directory: folder)
        let bar = ProgressBar(output: output, label: "\(requests.count) files", files: requests.count)
        let finished = await withTaskGroup(of: (Int, Result<DownloadResult, any Error>).self) { group in
            for (index, request) in requests.enumerated() {
                group.addTask {
                    let retries = RetryReporter(output: output, file: request.destination.path)
                    do {
                        let result = try await engine.download(
                            request, journal: store, progress: { bar.update($0) }, retrying: retries.report)
                        try GetDestination.applyUserMode(result.file)
                        bar.fileFinished(result)
                        if output.json { report(result, output: output) }
                        return (index, .success(result))
                    } catch {
                        let error = retries.summarized(error)
                        GetDestination.removeEmptyLeftovers(of: request, journal: store)
                        if output.json, let error = error as? CourierError {
                            output.emit(GetFailedEvent(file: request.destination.path, code: error.code.rawValue, message: error.message))
                        }
                        return (index, .failure(error))
                    }
                }
            }
            var finished: [(Int, Result<DownloadResult, any Error>)] = []
            for await outcome in group { finished.append(outcome) }
            return finished
        }
        bar.finish()
        // In the order given (arguments, then the list), whatever order they finished in.
        let outcomes = finished.sorted { $0.0 < $1.0 }.map { (requests[$0.0], $0.1) }
        let failures = outcomes.compactMap { outcome -> (any Error)? in
            if case .failure(let error) = outcome.1 { return error }
            return nil
        }
        // Every file's outcome at the end, as aria2's "Download Results", in the order given;
        // under --quiet only when something failed.
        if !output.json && !requests.isEmpty && (!output.quiet || !failures.isEmpty || !refused.isEmpty) {
            var table = [["STATUS", "SIZE", "FILE", ""]]
            for (request, result) in outcomes {
                switch result {
                case .success(let done):
                    table.append(["OK", QueueFormat.bytes(done.length), done.file.path, ""])
                case .failure(let error):
                    let failure = error as? CourierError
                    table.append([
                        failure?.code == .paused ? "PAUSED" : "ERR", "-", request.destination.path,
                        failure.map { "\($0.code.rawValue): \($0.message)" } ?? "\(error)",
                    ])
                }
            }
            output.line("Download results:")
            for line in QueueFormat.align(table) { output.line(line.trimmingCharacters(in: .whitespaces)) }
        }
        if failures.isEmpty && refused.isEmpty {
            if output.json {
                output.emit(GetListResult(saved: requests.count, directory: folder.path))
            } else {
                output.done("saved \(requests.count) files in \(folder.path)")
            }
            return
        }
        let errors = failures.compactMap { $0 as? CourierError }
        let refusedNote = refused.isEmpty ? "" : "; \(refused.count) URLs refused"
        // Paused wins (resumable), then the first download failure in the order given, then the
        // refused URLs (usage).
        if let paused = errors.first(where: { $0.code == .paused }) {
            throw CourierError(
                .paused, "\(failures.count) of \(requests.count) downloads stopped\(refusedNote)", hint: paused.hint)
        }
        if let first = errors.first {
            throw CourierError(
                first.code, "\(failures.count) of \(requests.count) downloads failed\(refusedNote); first: \(first.message)",
                cause: first.cause)
        }
        if let failure = failures.first { throw failure }
        throw CourierError(
            .usage,
            "\(refused.count) URLs refused; saved the other \(requests.count) files in \(folder.path)",
            hint: "each refused URL is printed above with its reason")
    }

    private func report(_ result: DownloadResult, output: Output) {
        if output.json {
            // One file of several is "saved"; the command's last line is its "result" or "error".
            if severalURLs {
                output.emit(GetSavedEvent(saved: SavedFileFields(result)))
            } else {
                output.emit(GetResult(saved: SavedFileFields(result)))
            }
        } else if !severalURLs {
            let resumed = result.resumedFrom > 0 ? ", resumed at byte \(result.resumedFrom)" : ""
            // With mirrors, which one served the file.
            let served = !mirrors.isEmpty ? result.source.map { " from \($0.absoluteString)" } ?? "" : ""
            output.done("saved \(result.file.path)\(served) (\(result.length) bytes, sha256 \(result.sha256)\(resumed))")
        }
    }
}

/// Runs `body` in a task of its own that SIGINT and SIGTERM cancel instead of ending the
/// process (the work then pauses: exit 7), as does cancelling the calling task. The CLI's one
/// signal helper (`get`, `deliver`, `update`, `prestage`).
func withSignalCancellation<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
    let task = Task { try await body() }
    let sources = [SIGINT, SIGTERM].map { number in
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler { task.cancel() }
        source.resume()
        return source
    }
    defer { for source in sources { source.cancel() } }
    return try await withTaskCancellationHandler {
        try await task.value
    } onCancel: {
        task.cancel()
    }
}

/// Says each retry of one download as it is scheduled ("file.bin: HTTP 503; retry 2 of 5 in
/// 0.4 s" on standard error, a `retry` event with --json), and adds the attempts and the time
/// spent to the error a download finally fails with.
final class RetryReporter: Sendable {
    private let output: Output
    private let started = Date()
    private let retries = Atomic<Int>(0)

    /// The file the download is saved to, named in `retry` events (docs/json.md).
    private let file: String

    init(output: Output, file: String) {
        self.output = output
        self.file = file
    }

    var report: @Sendable (TransferRetry) -> Void {
        { [self] retry in
            retries.add(1, ordering: .relaxed)
            if output.json {
                output.emit(RetryEvent(retry, file: file, downloadId: nil))
            } else {
                output.info(Self.line(retry))
            }
        }
    }

    /// Says each switch of the download to another URL (`--mirror`): a line on standard error,
    /// a `mirror` event with --json.
    var reportHandover: @Sendable (TransferHandover) -> Void {
        { [self] handover in
            if output.json {
                output.emit(Self.event(handover, file: file))
            } else {
                output.info(Self.line(handover))
            }
        }
    }

    /// The line that says a switch to another URL: the URL that failed and why, and the next.
    static func line(_ handover: TransferHandover) -> String {
        let error = handover.error
        let from = handover.from.absoluteString
        let failed = error.message.contains(from) ? error.message : "\(from) failed: \(error.message)"
        let cause = error.cause.map { failed.contains($0) ? "" : " (\($0))" } ?? ""
        return "courier: \(handover.id): \(failed)\(cause); switching to \(handover.to.absoluteString)"
    }

    /// The `mirror` event of --json output (docs/json.md).
    static func event(_ handover: TransferHandover, file: String?) -> GetMirrorEvent {
        GetMirrorEvent(
            file: file, failedURL: handover.from.absoluteString, nextURL: handover.to.absoluteString,
            code: handover.error.code.rawValue, message: handover.error.message, cause: handover.error.cause)
    }

    /// The line that says a retry: the download, the cause (with its underlying cause: the curl
    /// error, the HTTP status), the retry's number and when it starts. `get`, `deliver` and the
    /// agent say retries with it.
    static func line(_ retry: TransferRetry) -> String {
        let cause = retry.error.cause.map { cause in retry.error.message.contains(cause) ? "" : " (\(cause))" } ?? ""
        let count = retry.maxRetries > 0 ? "retry \(retry.retry) of \(retry.maxRetries)" : "retry \(retry.retry)"
        return "courier: \(retry.id): \(retry.error.message)\(cause); \(count) in \(seconds(retry.delay))"
    }

    /// `error` with "after N attempts in T" added when the download was retried.
    func summarized(_ error: any Error) -> any Error {
        let count = retries.load(ordering: .relaxed)
        guard count > 0, var failure = error as? CourierError, failure.code != .paused else { return error }
        failure.message += " (gave up after \(count + 1) attempts in \(Self.seconds(Date().timeIntervalSince(started))))"
        return failure
    }

    static func seconds(_ value: Double) -> String {
        value < 1 ? String(format: "%.2f s", value) : value < 10 ? String(format: "%.1f s", value) : "\(Int(value.rounded())) s"
    }
}

/// `--limit-rate RATE` of `get` and `deliver`, in curl's syntax, checked before anything runs.
enum RateOption {
    static func parse(_ text: String) throws -> ByteRate {
        do {
            return try ByteRate(parsing: text)
        } catch let error as CourierError {
            throw ValidationError("--limit-rate: \(error.message)")
        }
    }
}

/// `--proxy URL` of `get` and `deliver`, checked before anything runs.
enum ProxyOption {
    /// The schemes libcurl takes for a proxy; a URL without one is an http proxy, as in curl.
    static let schemes: Set<String> = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]

    static func validate(_ proxy: String) throws {
        if proxy.isEmpty { return }  // no proxy at all
        guard !proxy.contains(where: { $0.isWhitespace || $0.asciiValue.map { $0 < 0x20 || $0 == 0x7F } == true }) else {
            throw ValidationError("--proxy must be a URL without spaces or control characters")
        }
        if let range = proxy.range(of: "://") {
            let scheme = proxy[..<range.lowerBound].lowercased()
            guard schemes.contains(scheme) else {
                throw ValidationError("--proxy: unsupported proxy scheme \(scheme) (use \(schemes.sorted().joined(separator: ", ")))")
            }
        }
    }
}
