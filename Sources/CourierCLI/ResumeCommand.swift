import ArgumentParser
import Courier
import Foundation

/// `courier resume ID|--all|--stalled`: continue paused, failed or stalled downloads.
struct ResumeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Resume a download (or a transaction's, or --all paused and failed, or --stalled ones).",
        discussion: """
            A download is stalled when its owner died (its lease expired), when it moved no bytes \
            for the stall timeout, or when it failed or paused for the network or for disk space. \
            Resumed downloads continue from their journal. A cancelled download named by its id \
            (or its transaction's) is queued again and starts from zero; --all and --stalled leave \
            cancelled downloads alone.
            """)

    @OptionGroup var global: GlobalOptions

    @Argument(
        help: "A download or transaction id (or an unambiguous prefix).",
        completion: IdCompletion.kind(.unfinishedIds))
    var id: String?

    @Flag(name: .long, help: "Resume every paused or failed download.")
    var all = false

    @Flag(name: .long, help: "Resume every stalled download.")
    var stalled = false

    @Flag(name: .customLong("queue-only"), help: "Only mark them waiting (for a running agent); do not deliver here.")
    var queueOnly = false

    func validate() throws {
        if [id != nil, all, stalled].filter({ $0 }).count != 1 {
            throw ValidationError("give exactly one of an id, --all or --stalled")
        }
    }

    func run() async throws {
        try await global.run { output in
            let control = try global.queueControl()
            let changed = try await control.perform(.resume(stalled ? .stalled : QueueFormat.target(id: id, all: all))).downloads
            // Delivered here next: the downloads resumed are an event, the delivery's is the result.
            let deliversHere = !(control is AgentQueueControl) && !queueOnly && !changed.isEmpty
            QueueFormat.report(output, verb: "resumed", changed: changed, final: !deliversHere)
            if control is AgentQueueControl {  // a running agent delivers them
                if !changed.isEmpty && !output.json { output.info("courier: the agent delivers them (see `courier list`)") }
                return
            }
            guard !queueOnly, !changed.isEmpty else { return }
            // Carry them on through unpacking, placement and finish, as the agent would.
            let client = try global.client()
            defer { client.shutdown() }
            try await client.deliver(scope: .downloads(Set(changed.map(\.id))), output: output, retryStopped: false)
        }
    }
}
