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
            6 integrity failure or hostile package; 7 paused or interrupted (resumable). A file named on the command line that cannot be read \
            (--config, --receipt, --trust-root) is a usage error: exit 2, one line naming it. \
            Storage: --storage, else COURIER_STORAGE, else ./Storage where it exists, else \
            $XDG_DATA_HOME/courier. Configuration: --config, else COURIER_CONFIG, else \
            ./Config/courier.json where it exists, else $XDG_CONFIG_HOME/courier/courier.json. \
            Version \(CourierVersion.current).
            """,
        version: CourierVersion.current,
        subcommands: [
            DeliverCommand.self,
            UpdateCommand.self,
            GetCommand.self,
            EnqueueCommand.self,
            AgentCommand.self,
            ListCommand.self,
            StatusCommand.self,
            PauseCommand.self,
            ResumeCommand.self,
            CancelCommand.self,
            DiscardCommand.self,
            ContentCommand.self,
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
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments == ["--version"] || arguments == ["-V"] {
            print("courier \(CourierVersion.current)")
            return
        }
        // Everything Courier creates (state, partial files, journals, catalogs, content) is the
        // user's alone from its first byte: no file is ever created readable by others and then
        // chmodded (DESIGN.md, "Secure by default").
        umask(0o077)
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
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            if exitCode(for: error) == .validationFailure {
                var message = fullMessage(for: error)
                if let hint = subcommandSuggestion(arguments) { message += "\n" + hint }
                FileHandle.standardError.write(Data((message + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
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
