import ArgumentParser
import Courier
import CourierServer
import Foundation
import Logging

/// Options every subcommand accepts (DESIGN.md, "Command-line contract").
struct GlobalOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The data root. Else COURIER_STORAGE, else ./Storage where it exists, else $XDG_DATA_HOME/courier (~/.local/share/courier).",
            valueName: "dir"))
    var storage: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The configuration file. Else COURIER_CONFIG, else ./Config/courier.json where it exists, else $XDG_CONFIG_HOME/courier/courier.json (~/.config/courier).",
            valueName: "file"))
    var config: String?

    @Flag(name: .long, help: "Machine-readable output: one JSON document, or NDJSON events.")
    var json = false

    @Flag(name: .shortAndLong, help: "Only errors and results: no notes, no progress, no logs below error.")
    var quiet = false

    @Flag(name: .shortAndLong, help: "Informational logs on standard error.")
    var verbose = false

    func validate() throws {
        if quiet && verbose { throw ValidationError("give --quiet or --verbose, not both") }
    }

    /// The storage layout these options name. An existing root that others may enter is made
    /// owner-only (it holds signed transactions), with a one-line note on standard error.
    var layout: StorageLayout {
        let layout = StorageLayout.resolve(explicit: storage)
        if let previous = try? layout.secureRoot(), !quiet {
            let note = "courier: made \(layout.root.path) owner-only (mode 0700, was \(String(previous, radix: 8))): "
                + "it holds signed purchases\n"
            FileHandle.standardError.write(Data(note.utf8))
        }
        return layout
    }

    /// The layout of an existing store, for commands that only read (list, status, content
    /// list/path, pause/resume/cancel/discard by id): they never create one, so a mistyped
    /// `--storage` or another working directory is an error, not a fresh empty store.
    func existingLayout() throws -> StorageLayout {
        let layout = layout
        guard layout.storeExists else {
            throw CourierError(
                .notFound, "no Courier store at \(layout.root.path)",
                hint: "name one with --storage DIR or COURIER_STORAGE (docs/cli.md, \"Where Courier keeps things\")")
        }
        return layout
    }

    /// The configuration: the file (required when named with --config), then the environment.
    func loadConfiguration() throws -> CourierConfiguration {
        if let config {
            return try CourierConfiguration.load(file: URL(fileURLWithPath: config), required: true)
        }
        let environment = ProcessInfo.processInfo.environment
        let file = CourierConfiguration.defaultFile(environment: environment)
        return try CourierConfiguration.load(file: file, required: !(environment["COURIER_CONFIG"] ?? "").isEmpty)
    }

    /// The client core over this storage and configuration, `receiptOptions` applied over it.
    /// With `existingStore`, the store must exist (`update` has nothing to do in a new one).
    /// `configuration`, `logger` and `options`: the agent's own. With `output`, each retry of a
    /// download is said there as `get` says it (a line on standard error, a `retry` event with
    /// --json); `transfer` adjusts the transfer settings (a command's --proxy, --limit-rate).
    func client(
        _ receiptOptions: ReceiptOptions? = nil, existingStore: Bool = false, configuration: CourierConfiguration? = nil,
        logger: Logger? = nil, options: CourierClient.Options = .init(), catalogRoot: String? = nil, output: Output? = nil,
        transfer: (inout TransferConfiguration) -> Void = { _ in }
    ) throws -> CourierClient {
        var configuration = try configuration ?? loadConfiguration()
        transfer(&configuration.transfer)
        let core = try core(
            receiptOptions, existingStore: existingStore, configuration: configuration, logger: logger, catalogRoot: catalogRoot)
        var options = options
        if let output {
            options.onTransferRetry = { retry in
                if output.json {
                    output.emit(RetryEvent(retry, file: nil, downloadId: retry.id))
                } else {
                    output.info(RetryReporter.line(retry))
                }
            }
        }
        return try CourierClient(configuration: core.configuration, layout: core.layout, logger: core.logger, options: options)
    }

    /// The client core's parts that need no transfer engine (queue commands, the content
    /// placer, receipt validation, catalogs), over this storage and configuration (or
    /// `configuration`), `receiptOptions` applied over it. With `existingStore`, the store must
    /// exist: reading never creates one. `logger`: else one at the level of `logLevel`, default critical.
    func core(
        _ receiptOptions: ReceiptOptions? = nil, existingStore: Bool = false, configuration: CourierConfiguration? = nil,
        logger: Logger? = nil, catalogRoot: String? = nil
    ) throws -> CourierCore {
        var configuration = try configuration ?? loadConfiguration()
        receiptOptions?.apply(to: &configuration)
        // `--catalog-root` names the trusted root of the catalog's TUF repository.
        configuration.trustCatalogRoot(catalogRoot)
        return CourierCore(
            configuration: configuration, layout: existingStore ? try existingLayout() : layout,
            logger: logger ?? self.logger("courier", default: .critical))
    }

    /// The level of every logger a command makes (the one place it is decided): `--verbose`
    /// gives info, `--quiet` error, else `COURIER_LOG` names it, else the command's default.
    func logLevel(default fallback: Logger.Level) -> Logger.Level {
        if verbose { return min(fallback, .info) }
        if quiet { return max(fallback, .error) }
        return ProcessInfo.processInfo.environment["COURIER_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? fallback
    }

    /// A logger at `logLevel(default:)`: plain lines on standard error (the root command's
    /// bootstrap). With `ndjson`, for a command whose logs belong to its output (`serve`), they
    /// are NDJSON lines under --json.
    func logger(_ label: String, default fallback: Logger.Level, ndjson: Bool = false) -> Logger {
        var logger = Logger(label: label)
        if ndjson && json { logger = Logger(label: label) { NDJSONLogHandler(label: $0, descriptor: STDERR_FILENO) } }
        logger.logLevel = logLevel(default: fallback)
        return logger
    }

    /// `serve`'s access log: a line per request on standard output (NDJSON with --json). It is
    /// the command's output, not a diagnostic, so -q, -v and COURIER_LOG leave it at info.
    func accessLog(_ label: String) -> Logger {
        Logger(label: label) { [json] label in
            json ? NDJSONLogHandler(label: label) as any LogHandler : StreamLogHandler.standardOutput(label: label)
        }
    }
}
