import ArgumentParser
import Courier
import Foundation

/// `courier discard ID`: drop a download's partial data; a later resume starts from zero.
struct DiscardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "discard",
        abstract: "Drop the partial data of a download (or of every download of a transaction).",
        discussion: "Refused for an active download: pause it first. Its state is kept; a resume starts from zero.")

    @OptionGroup var global: GlobalOptions

    @Argument(
        help: "A download or transaction id (or an unambiguous prefix).",
        completion: IdCompletion.kind(.anyIds))
    var id: String

    func run() async throws {
        try await global.run { output in
            let changed = try await global.queueControl().perform(.discard(.id(id))).downloads
            QueueFormat.report(output, verb: "discarded", changed: changed)
        }
    }
}
