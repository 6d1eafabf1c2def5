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

    @Argument(help: "A download or transaction id (or an unambiguous prefix).")
    var id: String?

    @Flag(name: .long, help: "Pause every waiting or active download.")
    var all = false

    func validate() throws {
        if (id == nil) == !all { throw ValidationError("give either an id or --all") }
    }

    func run() async throws {
        try await global.run { output in
            if let agent = AgentRoute.client(global) {  // a running agent pauses through its socket
                QueueControl.report(output, verb: "paused", changed: try AgentRoute.control(agent, .pause, id: id, all: all))
                return
            }
            let queue = try global.openQueue()
            let targets = try QueueFormat.targets(queue, id: id, all: all, states: [.waiting, .active])
            let changed = try QueueControl.apply(targets, single: id != nil && targets.count == 1) { try queue.pause([$0.id]) }
            QueueControl.report(output, verb: "paused", changed: changed)
        }
    }
}

/// Applies one queue operation to several downloads and reports what changed.
enum QueueControl {
    /// Runs `operation` on each download. With a single named download its refusal is the
    /// command's error; otherwise downloads the operation does not apply to are skipped.
    static func apply(
        _ downloads: [DownloadRecord], single: Bool, _ operation: (DownloadRecord) throws -> [DownloadRecord]
    ) throws -> [DownloadRecord] {
        var changed: [DownloadRecord] = []
        for download in downloads {
            do {
                changed += try operation(download)
            } catch let error as CourierError where !single && error.code == .invalidState {
                continue
            }
        }
        return changed
    }

    static func report(_ output: Output, verb: String, changed: [DownloadRecord]) {
        if output.json {
            output.emit([
                "event": verb,
                "downloads": changed.map { ["id": $0.id, "transactionId": $0.transactionId, "state": $0.state.rawValue] },
            ])
            return
        }
        if changed.isEmpty {
            output.line("Nothing to do: no download changed.")
            return
        }
        for download in changed {
            output.line("\(verb) \(download.id) (\(download.contentIdentifier)): now \(download.state.rawValue)")
        }
    }
}
