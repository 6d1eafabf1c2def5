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
            GetCommand.self,
            ServeCommand.self,
            PrestageCommand.self,
            ReceiptCommand.self,
            SandboxCommand.self,
            PackageCommand.self,
            ContentCommand.self,
        ]
    )
}
