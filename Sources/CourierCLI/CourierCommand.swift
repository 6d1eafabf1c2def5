import ArgumentParser
import Courier
import Foundation

/// `courier`: delivers purchased content. One file per subcommand; see README.md.
@main
struct CourierCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "courier",
        abstract: "Deliver purchased digital content: verify receipts, download, unpack, place.",
        discussion: """
            Exit codes: 0 done; 1 failure; 2 usage; 3 receipt invalid or not entitled; \
            4 insufficient disk space; 5 network failure after retries; \
            6 integrity failure or hostile package; 7 paused or interrupted (resumable).
            """,
        subcommands: [
            DeliverCommand.self,
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
        ]
    )

    /// Runs the command, ending with exit code 2 (DESIGN.md) rather than ArgumentParser's 64 on
    /// a usage error.
    static func main() async {
        // Everything Courier creates (state, partial files, journals, catalogs, content) is the
        // user's alone from its first byte: no file is ever created readable by others and then
        // chmodded (DESIGN.md, "Secure by default").
        umask(0o077)
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            if exitCode(for: error) == .validationFailure {
                let message = fullMessage(for: error)
                FileHandle.standardError.write(Data((message + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}
