import ArgumentParser
import Courier
import Foundation

/// `courier priority ID high|normal|low`: how urgently a download is wanted.
struct PriorityCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "priority",
        abstract: "Set the priority of a download (or of every download of a transaction): high, normal or low.",
        discussion: """
            Downloads are started high first, and share a rate limit (transfer.maxRate, \
            transfer.backgroundMaxRate, the schedule) by weight: high 400, normal 20, low 1, so a \
            purchase beside four updates gets 83% of it and a low one never stops. Without a \
            priority set, the agent works a purchase at normal and an update at low, and a \
            foreground `courier deliver` works its downloads at high. A running download follows \
            within a heartbeat (2 s), through the agent when one runs.
            """)

    @OptionGroup var global: GlobalOptions

    @Argument(help: "A download or transaction id (or an unambiguous prefix).")
    var id: String

    @Argument(help: "high, normal or low.")
    var priority: String

    func validate() throws {
        do {
            _ = try DownloadPriority(parsing: priority)
        } catch let error as CourierError {
            throw ValidationError("\(error.message): \(error.hint ?? "")")
        }
    }

    func run() async throws {
        try await global.run { output in
            let priority = try DownloadPriority(parsing: self.priority)
            let changed = try await global.queueControl().perform(.priority(.id(id), priority)).downloads
            if output.json {
                output.emit(
                    PriorityResult(
                        priority: priority.rawValue,
                        downloads: changed.map {
                            .init(downloadId: $0.id, transactionId: $0.transactionId, state: $0.state.rawValue, priority: $0.effectivePriority.rawValue)
                        }))
                return
            }
            if changed.isEmpty {
                output.done("Nothing to do: \(id) is at priority \(priority.rawValue) already.")
                return
            }
            for download in changed {
                output.done("priority of \(download.id) (\(download.contentIdentifier)): now \(priority.rawValue)")
            }
        }
    }
}
