import ArgumentParser
import Courier
import Foundation

/// `courier cancel ID|--all`: cancel downloads and drop their partial data.
struct CancelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Cancel a download (or every download of a transaction, or --all) and drop its partial data.",
        discussion: "A cancelled download is queued again by `courier resume ID` (not by resume --all); it starts from zero.")

    @OptionGroup var global: GlobalOptions

    @Argument(
        help: "A download or transaction id (or an unambiguous prefix).",
        completion: IdCompletion.kind(.unfinishedIds))
    var id: String?

    @Flag(name: .long, help: "Cancel every unfinished download.")
    var all = false

    func validate() throws {
        if (id == nil) == !all { throw ValidationError("give either an id or --all") }
    }

    func run() async throws {
        try await global.run { output in
            let changed = try await global.queueControl().perform(.cancel(QueueFormat.target(id: id, all: all))).downloads
            QueueFormat.report(output, verb: "cancelled", changed: changed)
            if !changed.isEmpty && !output.json {
                output.info("courier: to queue one again: courier resume ID (it starts from zero)")
            }
        }
    }
}
