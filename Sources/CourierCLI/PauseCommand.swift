import ArgumentParser
import Courier
import Foundation

/// `courier pause ID|--all`: pause downloads, keeping their partial data.
struct PauseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pause",
        abstract: "Pause a download (or every download of a transaction, or --all), keeping its partial data.",
        discussion: """
            An active download stops at its owner's next heartbeat (a few seconds) when another \
            process works it. `courier resume` continues it from where its journal says.
            """)

    @OptionGroup var global: GlobalOptions

    @Argument(
        help: "A download or transaction id (or an unambiguous prefix).",
        completion: IdCompletion.kind(.unfinishedIds))
    var id: String?

    @Flag(name: .long, help: "Pause every waiting or active download.")
    var all = false

    func validate() throws {
        if (id == nil) == !all { throw ValidationError("give either an id or --all") }
    }

    func run() async throws {
        try await global.run { output in
            let changed = try await global.queueControl().perform(.pause(QueueFormat.target(id: id, all: all))).downloads
            QueueFormat.report(output, verb: "paused", changed: changed)
        }
    }
}
