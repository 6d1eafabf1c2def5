import ArgumentParser
import Courier
import Foundation

/// `courier cancel ID|--all`: cancel downloads and drop their partial data.
struct CancelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Cancel a download (or every download of a transaction, or --all) and drop its partial data.")

    @OptionGroup var global: GlobalOptions

    @Argument(help: "A download or transaction id (or an unambiguous prefix).")
    var id: String?

    @Flag(name: .long, help: "Cancel every unfinished download.")
    var all = false

    func validate() throws {
        if (id == nil) == !all { throw ValidationError("give either an id or --all") }
    }

    func run() async throws {
        try await global.run { output in
            if let agent = AgentRoute.client(global) {  // a running agent cancels through its socket
                QueueControl.report(output, verb: "cancelled", changed: try AgentRoute.control(agent, .cancel, id: id, all: all))
                return
            }
            let queue = try global.openQueue()
            let targets = try QueueFormat.targets(queue, id: id, all: all, states: [.waiting, .active, .paused, .failed])
            let changed = try QueueControl.apply(targets, single: id != nil && targets.count == 1) { try queue.cancel([$0.id]) }
            QueueControl.report(output, verb: "cancelled", changed: changed)
        }
    }
}
