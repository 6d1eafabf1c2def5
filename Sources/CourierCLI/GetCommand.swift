import ArgumentParser
import Courier
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// `courier get`: resumable downloads from the command line.
struct GetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Download a URL to a file, resumably: running the same command again resumes.",
        discussion: """
            The partial data (FILE.courier-part) and its journal (FILE.courier-journal) live beside \
            FILE until the download is verified and renamed into place. SIGINT or SIGTERM pause the \
            download (exit 7). With --input-file, every URL of LIST (one a line) is saved into DIR \
            under the last component of its path, --jobs at a time. A line whose name is not one \
            safe file name directly inside DIR (empty, ., .., a / or control character once \
            percent-decoded, or a name already used by another line) is refused with a message \
            naming it while the others download; the exit code is then 2 unless a download failed.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The URL to download.")
    var url: String?

    @Option(name: [.short, .long], help: "The file to write.")
    var output: String?

    @Option(help: "The expected SHA-256 of the file (hex).")
    var sha256: String?

    @Option(help: "The expected length of the file in bytes.")
    var length: Int64?

    @Option(name: [.short, .customLong("input-file")], help: "A file of URLs, one a line (multi-URL mode).")
    var inputFile: String?

    @Option(name: [.customShort("d"), .customLong("dir")], help: "The folder for --input-file downloads.")
    var directory: String?

    @Option(name: [.short, .long], help: "Downloads at once in --input-file mode (default 16).")
    var jobs: Int = 16

    @Option(name: [.customShort("H"), .customLong("header")], help: "An extra request header, 'Name: value' (repeatable).")
    var headers: [String] = []

    func validate() throws {
        if inputFile != nil {
            guard url == nil, output == nil, sha256 == nil, length == nil else {
                throw ValidationError("--input-file takes no URL, -o, --sha256 or --length")
            }
            guard directory != nil else { throw ValidationError("--input-file needs -d DIR") }
            guard jobs >= 1 else { throw ValidationError("--jobs must be at least 1") }
        } else {
            guard url != nil else { throw ValidationError("give a URL (or --input-file LIST)") }
            guard output != nil else { throw ValidationError("give the output file with -o FILE") }
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

    func run() async throws {
        try await global.run { output in
            var configuration = try global.loadConfiguration().transfer
            if inputFile != nil {
                configuration.maxConcurrentTransfers = jobs
                configuration.maxTransfersPerHost = jobs
            }
            let engine = try TransferEngine(configuration: configuration, logger: Logger(label: "courier.get"))
            defer { engine.shutdown() }
            let requestHeaders = headers.map { header -> (String, String) in
                let parts = header.split(separator: ":", maxSplits: 1)
                return (String(parts[0]).trimmingCharacters(in: .whitespaces), String(parts.count > 1 ? parts[1] : "").trimmingCharacters(in: .whitespaces))
            }
            let work = Task {
                if let inputFile, let directory {
                    try await downloadList(inputFile, into: directory, headers: requestHeaders, engine: engine, output: output)
                } else if let url, let file = self.output {
                    try await downloadOne(url, to: file, headers: requestHeaders, engine: engine, output: output)
                }
            }
            let trap = SignalTrap(signals: [SIGINT, SIGTERM]) { work.cancel() }
            defer { trap.cancel() }
            try await work.value
        }
    }

    private func downloadOne(
        _ address: String,
        to path: String,
        headers: [(String, String)],
        engine: TransferEngine,
        output: Output
    ) async throws {
        guard let source = URL(string: address), source.scheme != nil else {
            throw ValidationError("not a URL: \(address)")
        }
        let destination = URL(fileURLWithPath: path).standardizedFileURL
        let request = DownloadRequest(
            id: destination.lastPathComponent,
            url: source,
            destination: destination,
            expectedLength: length,
            expectedSHA256: sha256,
            headers: headers
        )
        let store = FileResumeJournalStore(directory: destination.deletingLastPathComponent())
        let bar = ProgressBar(output: output, label: destination.lastPathComponent)
        do {
            let result = try await engine.download(request, journal: store) { bar.update($0) }
            bar.finish()
            report(result, output: output)
        } catch let error as CourierError where error.code == .paused {
            bar.finish()
            throw CourierError(.paused, "\(destination.path): \(error.message)", hint: error.hint)
        } catch {
            bar.finish()
            throw error
        }
    }

    private func downloadList(
        _ list: String,
        into directory: String,
        headers: [(String, String)],
        engine: TransferEngine,
        output: Output
    ) async throws {
        let text: String
        do {
            text = try String(contentsOfFile: list, encoding: .utf8)
        } catch {
            throw CourierError(.usage, "cannot read \(list)", cause: "\(error)")
        }
        let folder = URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        } catch {
            throw CourierError(.io, "cannot create \(folder.path)", cause: "\(error)")
        }
        // A line that cannot be saved safely (not an http(s) URL, no safe file name, a name
        // another line already uses) is refused on its own; the other lines still download.
        var requests: [DownloadRequest] = []
        var lineOfName: [String: Int] = [:]
        var refused: [CourierError] = []
        let lines = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
        for (index, line) in lines.enumerated() {
            let number = index + 1
            let address = line.trimmingCharacters(in: .whitespaces)
            if address.isEmpty || address.hasPrefix("#") { continue }
            do {
                guard let source = URL(string: address), let scheme = source.scheme?.lowercased(),
                    scheme == "http" || scheme == "https", source.host?.isEmpty == false
                else {
                    throw CourierError(.usage, "not an http(s) URL")
                }
                let destination = try DownloadFileName.destination(for: source, in: folder)
                let name = destination.lastPathComponent
                if let earlier = lineOfName[name] {
                    throw CourierError(.usage, "line \(earlier) saves to the same name \(DownloadFileName.escaped(name))")
                }
                lineOfName[name] = number
                requests.append(DownloadRequest(id: name, url: source, destination: destination, headers: headers))
            } catch {
                let reason = (error as? CourierError)?.message ?? "\(error)"
                let refusal = CourierError(
                    .usage, "\(list):\(number): refused \(DownloadFileName.escaped(address)): \(reason)")
                refused.append(refusal)
                if output.json {
                    output.emit([
                        "event": "refused", "line": number, "url": address, "code": refusal.code.rawValue,
                        "message": refusal.message,
                    ])
                } else {
                    output.note("courier: \(refusal.message)")
                }
            }
        }
        let store = FileResumeJournalStore(directory: folder)
        let bar = ProgressBar(output: output, label: "\(requests.count) files", files: requests.count)
        let failures = await withTaskGroup(of: (any Error)?.self) { group -> [any Error] in
            for request in requests {
                group.addTask {
                    do {
                        let result = try await engine.download(request, journal: store) { bar.update($0) }
                        bar.fileFinished(result)
                        if output.json { report(result, output: output) }
                        return nil
                    } catch {
                        if output.json, let error = error as? CourierError {
                            output.emit([
                                "event": "failed", "id": request.id, "code": error.code.rawValue, "message": error.message,
                            ])
                        }
                        return error
                    }
                }
            }
            var failures: [any Error] = []
            for await failure in group {
                if let failure { failures.append(failure) }
            }
            return failures
        }
        bar.finish()
        if failures.isEmpty && refused.isEmpty {
            if !output.json { output.line("saved \(requests.count) files in \(folder.path)") }
            return
        }
        let errors = failures.compactMap { $0 as? CourierError }
        let refusedNote = refused.isEmpty ? "" : "; \(refused.count) lines of \(list) refused"
        // Paused wins (resumable), then the first download failure, then the refused lines (usage).
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
            "\(refused.count) lines of \(list) refused; saved the other \(requests.count) files in \(folder.path)",
            hint: "each refused line is printed above with its reason")
    }

    private func report(_ result: DownloadResult, output: Output) {
        if output.json {
            output.emit([
                "event": "result", "id": result.id, "file": result.file.path, "length": result.length,
                "sha256": result.sha256, "bytesFetched": result.bytesFetched, "resumedFrom": result.resumedFrom,
            ])
        } else if inputFile == nil {
            let resumed = result.resumedFrom > 0 ? ", resumed at byte \(result.resumedFrom)" : ""
            output.line("saved \(result.file.path) (\(result.length) bytes, sha256 \(result.sha256)\(resumed))")
        }
    }
}

/// Turns SIGINT/SIGTERM into a call of `handler` (pausing the work) instead of death.
final class SignalTrap: @unchecked Sendable {  // @unchecked: sources are created in init and only cancelled afterwards.
    private var sources: [any DispatchSourceSignal] = []

    init(signals: [Int32], handler: @escaping @Sendable () -> Void) {
        for number in signals {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler(handler: handler)
            source.resume()
            sources.append(source)
        }
    }

    func cancel() {
        for source in sources { source.cancel() }
    }
}
