import ArgumentParser
import Courier
import CourierPostgres
import CourierServer
import Foundation
import Logging
import Synchronization

/// `courier prestage`: fetch, verify, inspect and stage the catalog's packages for `courier serve`.
struct PrestageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prestage",
        abstract: "Fetch, verify and stage content packages ahead of demand for `courier serve`.",
        discussion: """
            Fetches each package the catalog lists from its upstream URL with the transfer \
            engine (resumable), verifies length and SHA-256, inspects it as the client would, and \
            publishes it under DEST, then publishes DEST/catalog.json (atomically, last). A second \
            run with nothing new fetches nothing. One package's failure does not stop the others; \
            the run ends with a summary and exit 1 naming the failures; SIGINT pauses (exit 7).

            What is published (DEST, packages/, catalog.json, packages, manifests) is readable by \
            a web server's worker (folders 0755, files 0644, each given its mode before it is \
            published), so nginx running as www-data can serve it; who may have a package is the \
            gate's decision, by path. DEST/.prestage (partial downloads, journals) stays \
            owner-only. Folders above DEST must be traversable by the web server's user \
            (docs/origin.md, "File modes").

            With --queue postgresql://USER@HOST:PORT/DB (or prestage.queue in the configuration) \
            the same command on any number of machines shares one run: the process holding the \
            run's advisory lock plans it, every process claims and stages packages with leases, \
            and the catalog is published once, last; each process ends when the run is complete \
            (see docs/scaling.md).

            With --tuf-keys and --tuf-roots the published catalog is signed as a TUF target \
            (metadata/ and targets/ beside it). In a shared run the process that publishes signs \
            the catalog it computed, so every process of the run is given the same online keys \
            (targets, snapshot, timestamp; never the root key), and a process without keys does \
            not join a signed run (docs/trust.md).
            """
    )

    @OptionGroup var global: GlobalOptions

    @Option(name: .long, help: "The upstream catalog: a file or an http(s) URL (default: the configured one).")
    var catalog: String?

    @Option(
        name: .customLong("catalog-root"),
        help: ArgumentHelp(
            "The publisher's TUF root.json: the catalog is then accepted only through TUF (default: catalog.trustedRoot).",
            valueName: "file"))
    var catalogRoot: String?

    @Option(name: .long, help: "The staging folder `courier serve --content` serves.")
    var dest: String

    @Option(
        name: .customLong("tuf-keys"),
        help: ArgumentHelp(
            "Sign the published catalog (TUF): a folder with the targets.json, snapshot.json and timestamp.json keys.",
            valueName: "dir"))
    var tufKeys: String?

    @Option(
        name: .customLong("tuf-roots"),
        help: ArgumentHelp(
            "With --tuf-keys: the folder holding the root chain (1.root.json, 2.root.json, ...) to publish.", valueName: "dir"))
    var tufRoots: String?

    @Option(name: .shortAndLong, help: "Packages fetched at once.")
    var jobs: Int = 8

    @Option(name: .long, help: "Stage only this product (repeatable); others keep what is published.")
    var product: [String] = []

    @Option(name: .long, help: "Share the run through this PostgreSQL queue: postgresql://USER@HOST:PORT/DB.")
    var queue: String?

    @Option(name: .long, help: "Seconds a claimed task stays claimed without a heartbeat (with --queue; default 120).")
    var lease: Double?

    @Option(name: .customLong("metrics-port"), help: "Serve Prometheus metrics at GET /metrics on this port (0 picks one).")
    var metricsPort: Int?

    @Option(name: .customLong("metrics-host"), help: "The address the metrics listener binds.")
    var metricsHost: String = "127.0.0.1"

    func validate() throws {
        guard (1...256).contains(jobs) else { throw ValidationError("--jobs must be 1...256") }
        if let lease, !(lease >= 1 && lease <= 86_400) { throw ValidationError("--lease must be 1...86400 seconds") }
        if let metricsPort, !(0...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be 0...65535") }
        if let queue { _ = try Self.parseQueue(queue) }
        if (tufKeys == nil) != (tufRoots == nil) { throw ValidationError("--tuf-keys and --tuf-roots go together") }
    }

    static func parseQueue(_ text: String) throws -> PostgresURL {
        do {
            return try PostgresURL(parsing: text)
        } catch let error as CourierError {
            throw ValidationError(error.message)
        }
    }

    func run() async throws {
        // A batch job that moves thousands of packages through transfer buffers: freed ones stay
        // in the heap for the next download (MemoryPolicy; not for `get` or the agent, whose
        // resident size after a burst matters more than a few percent of CPU).
        MemoryPolicy.apply()
        try await global.run { output in
            var configuration = try global.loadConfiguration()
            configuration.trustCatalogRoot(catalogRoot)
            let (location, base) = try configuration.catalogLocation(catalog, for: "stage the packages of")
            let queueURL = try (queue ?? configuration.prestage.queue).map { try PostgresURL(parsing: $0) }
            let destination = URL(fileURLWithPath: dest, isDirectory: true).standardizedFileURL
            let tree = try LocalStagingTree(root: destination)
            let logger = global.logger("courier.prestage", default: .error)
            let metrics = metricsPort.map { port in
                MetricsEndpoint(registry: MetricsEndpoint.bootstrapPrometheus(), host: metricsHost, port: port, logger: logger) {
                    [metricsHost] bound in
                    if output.json {
                        output.emit(MetricsEvent(host: metricsHost, port: bound, url: "http://\(metricsHost):\(bound)/metrics"))
                    } else {
                        output.note("courier: metrics on http://\(metricsHost):\(bound)/metrics")
                    }
                }
            }
            let workerName = queueURL == nil ? "worker" : "\(ProcessInfo.processInfo.hostName)-\(getpid())-\(UUID().uuidString.prefix(8))"
            let runner = try PrestageRunner(
                configuration: configuration, layout: global.layout, tree: tree, jobs: jobs, workerName: workerName,
                logger: logger)
            defer { runner.shutdown() }
            let products = product.isEmpty ? nil : Set(product)
            let progress = PrestageProgress(output: output)
            // The keys are read and checked against the root chain before anything is fetched.
            let signer = try tufKeys.flatMap { keys in
                try tufRoots.map { roots in
                    try PrestageSigner.load(
                        keys: URL(fileURLWithPath: keys, isDirectory: true), roots: URL(fileURLWithPath: roots, isDirectory: true), tree: tree)
                }
            }
            var summary: PrestageSummary
            let lease = Duration.milliseconds(Int64((self.lease ?? configuration.prestage.leaseSeconds) * 1000))
            let runKey = PostgresPrestage.runKey(dest: destination, products: products)
            do {
                summary = try await withSignalCancellation {
                    try await withMetrics(metrics) {
                        if let queueURL {
                            return try await PostgresPrestage(url: queueURL, runner: runner, lease: lease, signer: signer, logger: logger).run(
                                catalog: location, relativeTo: base, products: products, runKey: runKey
                            ) { progress.handle($0) }
                        }
                        return try await runner.run(catalog: location, relativeTo: base, products: products) { progress.handle($0) }
                    }
                }
            } catch let error as CourierError where error.code == .paused {
                progress.finish()
                throw error
            }
            progress.finish()
            progress.printSummary(summary)
            // The catalog as a TUF target: signed metadata beside it, timestamp last. A shared
            // run's publisher signed it before marking the run published.
            if let signer, queueURL == nil, let catalog = summary.published {
                summary.signed = try signer.sign(catalog)
            }
            if let published = summary.signed {
                if output.json {
                    output.emit(
                        PrestageSignedEvent(
                            root: published.root, targets: published.targets, snapshot: published.snapshot,
                            timestamp: published.timestamp, target: published.targetPath))
                } else {
                    output.note(
                        "courier: signed the catalog (TUF root \(published.root), targets \(published.targets), "
                            + "snapshot \(published.snapshot), timestamp \(published.timestamp)) in \(destination.path)/metadata")
                }
            }
            progress.emitSummary(summary)
            let failures = summary.failures
            if !failures.isEmpty {
                let names = failures.map(\.contentIdentifier).joined(separator: ", ")
                throw CourierError(
                    .internal,
                    "\(failures.count) of \(summary.rows.count) packages were not staged: \(names)",
                    hint: "the catalog keeps their previously published versions; fix the cause and run again"
                )
            }
        }
    }
}

/// Runs `body` with `endpoint` (a metrics listener) serving beside it until `body` returns.
func withMetrics<T: Sendable>(_ endpoint: MetricsEndpoint?, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    guard let endpoint else { return try await body() }
    return try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask {
            try await endpoint.run()
            return nil
        }
        defer { group.cancelAll() }
        return try await body()
    }
}

/// Overall progress of a pre-staging run: a status line on a terminal (packages, bytes, rate,
/// ETA, laid out as the other progress displays), NDJSON events with `--json`, and the summary
/// table at the end.
final class PrestageProgress: Sendable {
    private struct State {
        var totalTasks = 0
        var totalBytes: Int64 = 0
        var done = 0
        var failed = 0
        var received: [String: Int64] = [:]
        var finishedBytes: Int64 = 0
        var lastDraw = Date.distantPast
        var lastEvent = Date.distantPast
    }

    private let output: Output
    private let state = Mutex(State())
    private let started = Date()

    init(output: Output) {
        self.output = output
    }

    func handle(_ event: PrestageEvent) {
        switch event {
        case .planned(let tasks, let bytes, let unchanged, let refused):
            state.withLock { ($0.totalTasks, $0.totalBytes) = (tasks, bytes) }
            if output.json {
                output.emit(PrestagePlannedEvent(packages: tasks, bytes: bytes, unchanged: unchanged, refused: refused))
            }
        case .started(let task):
            if output.json { output.emit(PrestageStartedEvent(contentIdentifier: task.contentIdentifier, url: task.source.absoluteString)) }
        case .progress(let task, let bytes):
            state.withLock { $0.received[task.contentIdentifier] = bytes }
        case .staged(let task, let bytesFetched):
            state.withLock { state in
                state.done += 1
                state.received[task.contentIdentifier] = nil
                state.finishedBytes += task.content.length
            }
            if output.json {
                output.emit(PrestageStagedEvent(contentIdentifier: task.contentIdentifier, bytesFetched: bytesFetched, path: task.stagedPath))
            }
        case .failed(let task, let error):
            state.withLock { state in
                state.failed += 1
                state.received[task.contentIdentifier] = nil
            }
            if output.json {
                output.emit(
                    PrestageFailedEvent(
                        contentIdentifier: task.contentIdentifier, code: error.code.rawValue, message: error.message, cause: error.cause))
            }
        case .published(let packages, let changed):
            if output.json { output.emit(PrestagePublishedEvent(packages: packages, changed: changed)) }
        }
        tick()
    }

    /// Redraws the status line (at most ten times a second) or emits a progress event (once a second).
    private func tick() {
        let now = Date()
        let (state, draw, emit) = self.state.withLock { state -> (State, Bool, Bool) in
            let draw = !output.json && output.stderrIsTerminal && now.timeIntervalSince(state.lastDraw) >= 0.1
            let emit = output.json && now.timeIntervalSince(state.lastEvent) >= 1
            if draw { state.lastDraw = now }
            if emit { state.lastEvent = now }
            return (state, draw, emit)
        }
        let bytes = state.finishedBytes + state.received.values.reduce(0, +)
        let rate = Double(bytes) / max(now.timeIntervalSince(started), 0.001)
        if draw {
            let failed = state.failed > 0 ? ", \(state.failed) failed" : ""
            let row = ProgressLayout.Row(
                name: "\(state.done + state.failed)/\(state.totalTasks) packages\(failed)",
                fraction: state.totalBytes > 0 ? Double(bytes) / Double(state.totalBytes) : 1,
                amount: "\(QueueFormat.bytes(bytes))/\(QueueFormat.bytes(state.totalBytes))", rate: ProgressLayout.rate(rate),
                eta: ProgressLayout.eta(state.totalBytes - bytes, at: rate))
            output.statusBlock(ProgressLayout.lines([row], width: output.terminalColumns))
        }
        if emit {
            var event = PrestageProgressEvent(
                packages: state.totalTasks, packagesDone: state.done, packagesFailed: state.failed, bytesReceived: bytes,
                contentLength: state.totalBytes, rate: rate.isFinite ? Int64(rate) : 0)
            if rate > 0, rate.isFinite {
                event.timeRemaining = (Double(max(state.totalBytes - bytes, 0)) / rate * 10).rounded() / 10
            }
            output.emit(event)
        }
    }

    func finish() {
        state.withLock { $0.lastDraw = .distantPast }
        if !output.json && output.stderrIsTerminal {
            tick()
            output.endStatus()
        }
    }

    /// The run's numbers with `--json`, last: the `result` when every package was staged, else a
    /// `summary` event before the `error`.
    func emitSummary(_ summary: PrestageSummary) {
        guard output.json else { return }
        let fields = PrestageSummaryFields(
            staged: summary.rows.filter { $0.status == .staged }.count,
            unchanged: summary.rows.filter { $0.status == .unchanged }.count,
            failed: summary.failures.map {
                PrestageSummaryFields.Failure(
                    contentIdentifier: $0.contentIdentifier, code: $0.error?.code.rawValue ?? "internal", message: $0.error?.message ?? "")
            },
            bytesFetched: summary.bytesFetched, catalogChanged: summary.catalogChanged,
            seconds: (Date().timeIntervalSince(started) * 1000).rounded() / 1000)
        if summary.failures.isEmpty { output.emit(PrestageResult(summary: fields)) } else { output.emit(PrestageSummaryEvent(summary: fields)) }
    }

    /// The table of every entry (text; with `--json` see `emitSummary`).
    func printSummary(_ summary: PrestageSummary) {
        guard !output.json else { return }
        let staged = summary.rows.filter { $0.status == .staged }.count
        let unchanged = summary.rows.filter { $0.status == .unchanged }.count
        let seconds = Date().timeIntervalSince(started)
        let table = [["CONTENT", "STATUS", "FETCHED", "NOTE"]] + summary.rows.map { row in
            let note = row.error.map { "\($0.code): \($0.message)" } ?? ""
            return [row.contentIdentifier, row.status.rawValue, QueueFormat.bytes(row.bytesFetched), note]
        }
        for line in QueueFormat.align(table) { output.line(line) }
        output.line(
            "\(staged) staged, \(unchanged) unchanged, \(summary.failures.count) failed; "
                + "\(QueueFormat.bytes(summary.bytesFetched)) fetched in \(QueueFormat.duration(seconds))"
                + (summary.catalogChanged ? "; catalog published" : "; catalog unchanged"))
    }
}
