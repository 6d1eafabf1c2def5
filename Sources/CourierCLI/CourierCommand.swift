import ArgumentParser
import Courier
import Foundation
import Logging

/// `courier`: delivers purchased content. One file per subcommand; see README.md.
@main
struct CourierCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "courier",
        abstract: "Deliver purchased digital content: verify receipts, download, unpack, place.",
        discussion: """
            Exit codes: 0 done; 1 failure; 2 usage; 3 receipt invalid or not entitled; \
            4 insufficient disk space; 5 network failure after retries; \
            6 integrity failure or hostile package; 7 paused or interrupted (resumable); \
            8 the server refused the request (an HTTP 4xx). A file named on the command line that cannot be read \
            (--config, --receipt, --trust-root) is a usage error: exit 2, one line naming it. \
            Storage: --storage, else COURIER_STORAGE, else ./Storage where it exists, else \
            $XDG_DATA_HOME/courier. Configuration: --config, else COURIER_CONFIG, else \
            ./Config/courier.json where it exists, else $XDG_CONFIG_HOME/courier/courier.json. \
            Version \(CourierVersion.current).
            """,
        // The same line wherever `--version` is asked (`courier list --version` too).
        version: "courier \(CourierVersion.current)",
        subcommands: [
            DeliverCommand.self,
            UpdateCommand.self,
            GetCommand.self,
            EnqueueCommand.self,
            AgentCommand.self,
            ListCommand.self,
            StatusCommand.self,
            TopCommand.self,
            PauseCommand.self,
            ResumeCommand.self,
            CancelCommand.self,
            DiscardCommand.self,
            PriorityCommand.self,
            ContentCommand.self,
            WaitCommand.self,
            PackageCommand.self,
            ReceiptCommand.self,
            SandboxCommand.self,
            PrestageCommand.self,
            ServeCommand.self,
            OriginCommand.self,
            TUFClientCommand.self,
        ]
    )

    /// Runs the command, ending with exit code 2 (DESIGN.md) rather than ArgumentParser's 64 on
    /// a usage error.
    static func main() async {
        let typed = Array(CommandLine.arguments.dropFirst())
        let arguments: [String]
        switch CommandLineWords.normalized(typed) {
        case .arguments(let normalized): arguments = normalized
        case .usageError(let message):
            usageError(message, json: typed.contains("--json"))
        }
        if arguments == ["--version"] || arguments == ["-V"] {
            print("courier \(CourierVersion.current)")
            return
        }
        // The --json schema's samples for JSONSchemaDocTests (docs/json.md); no user option.
        if typed.isEmpty, let samples = ProcessInfo.processInfo.environment["COURIER_JSON_SCHEMA_SAMPLES"], !samples.isEmpty {
            if samples == "unencodable" { Foundation.exit(JSONSchema.emitUnencodable()) }
            return JSONSchema.printSamples()
        }
        // Everything Courier creates (state, partial files, journals, catalogs, content) is the
        // user's alone from its first byte: no file is ever created readable by others and then
        // chmodded (DESIGN.md, "Secure by default").
        GetDestination.inheritedUmask.withLock { $0 = umask(0o077) }
        // While TZ is unset, glibc stats /etc/localtime on every mktime (to see whether the zone
        // changed), and libarchive's zip reader calls mktime for each entry's DOS time: about a
        // dozen stats per package inspected. Naming the same zone file makes glibc read it once.
        // Set before any thread starts (setenv is not thread-safe); Foundation still finds the
        // zone through /etc/localtime's link, as with TZ unset.
        setenv("TZ", ":/etc/localtime", 0)
        // The one logging setup: every logger writes to standard error; each command sets its
        // level through GlobalOptions.logger (--verbose, --quiet, COURIER_LOG).
        LoggingSystem.bootstrap { label in StreamLogHandler.standardError(label: label) }
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            if exitCode(for: error) == .validationFailure {
                var message = fullMessage(for: error)
                // Courier's own voice, as every other error: `courier: …`, not ArgumentParser's
                // `Error: …`.
                if message.hasPrefix("Error: ") { message = "courier: " + message.dropFirst("Error: ".count) }
                if let hint = subcommandSuggestion(arguments) { message += "\n" + hint }
                usageError(message, json: arguments.contains("--json"))
            }
            exit(withError: error)
        }
    }

    /// Ends with exit code 2 after a usage error: the message on standard error, and under
    /// `--json` an `error` document on standard output too (docs/json.md: the last line is always
    /// `result` or `error`).
    static func usageError(_ message: String, json: Bool) -> Never {
        var text = message
        if !text.hasPrefix("courier: ") && !text.hasPrefix("Usage:") { text = "courier: " + text }
        FileHandle.standardError.write(Data((text + "\n").utf8))
        if json {
            // Through Output, the one writer of JSON lines (it adds `time`).
            let first = text.split(separator: "\n", maxSplits: 1).first.map(String.init) ?? text
            let line = first.hasPrefix("courier: ") ? String(first.dropFirst("courier: ".count)) : first
            Output(json: true).emit(ErrorEvent(code: CourierError.Code.usage.rawValue, message: line, exitCode: 2))
        }
        Foundation.exit(2)
    }

    /// "Did you mean 'list'?" when the first word that is not an option names no subcommand
    /// (at the top level, or under a command with subcommands such as `content`) but is close
    /// to one.
    static func subcommandSuggestion(_ arguments: [String]) -> String? {
        var command: any ParsableCommand.Type = CourierCommand.self
        for word in arguments where !word.hasPrefix("-") {
            let subcommands = command.configuration.subcommands
            if subcommands.isEmpty { return nil }
            let names = subcommands.compactMap { $0.configuration.commandName }
            if let next = subcommands.first(where: { $0.configuration.commandName == word }) {
                command = next
                continue
            }
            return Spelling.suggestion(for: word, among: names).map { "Did you mean '\($0)'?" }
        }
        return nil
    }
}
