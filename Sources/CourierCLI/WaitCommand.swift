import ArgumentParser
import Courier
import Foundation

/// `courier wait --essential [--timeout S]`: waits until the essential content of every purchase
/// is placed (Play Asset Delivery's install-time packs, Background Assets' essential packs).
struct WaitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wait",
        abstract: "Wait until the essential content of every purchase is placed.",
        discussion: """
            Reads the store until no essential download of a purchased, restored or finished \
            purchase is waiting, active, paused or failed: prefetch and on-demand content do not \
            count. It does no work itself (the agent, or a `deliver`, does). Exit 0 once \
            everything essential is placed (at once when it already is); exit 7 when --timeout \
            passes first (run it again to keep waiting); when an essential download fails, or is \
            cancelled before its purchase finished, the exit code of its error (1 when it has none).
            """)

    @OptionGroup var global: GlobalOptions

    @Flag(name: .long, help: "Wait for essential content (the only kind `wait` waits for; required).")
    var essential = false

    @Option(help: ArgumentHelp("Give up after this many seconds (exit 7); default: wait as long as it takes.", valueName: "seconds"))
    var timeout: Double?

    func validate() throws {
        guard essential else { throw ValidationError("say what to wait for: --essential") }
        if let timeout, !(timeout >= 0 && timeout <= 31_536_000) {
            throw ValidationError("--timeout must be between 0 and 31536000 seconds")
        }
    }

    func run() async throws {
        try await global.run { output in
            let core = try global.core(existingStore: true)
            let queue = try core.paymentQueue()
            let deadline = timeout.map { Date().addingTimeInterval($0) }
            var said: Set<String> = []
            while true {
                let progress = try queue.essentialProgress()
                if let failed = progress.failed.first {
                    let error = failed.error ?? CourierError(.internal, "\(failed.state.rawValue)")
                    throw CourierError(
                        error.code, "essential content \(failed.contentIdentifier) \(failed.state.rawValue): \(error.message)",
                        hint: "see courier status \(failed.id); courier resume \(failed.id) tries again")
                }
                if progress.isComplete {
                    if output.json {
                        output.emit(WaitEssentialResult(essentialPlaced: true))
                    } else {
                        output.done("Every essential content is placed.")
                    }
                    return
                }
                let pending = progress.pending.map(\.contentIdentifier)
                if output.json, said != Set(pending) {
                    output.emit(WaitingEvent(pending: pending))
                }
                said = Set(pending)
                if let deadline, Date() >= deadline {
                    throw CourierError(
                        .paused, "timed out: \(pending.count) essential content\(pending.count == 1 ? " is" : "s are") not placed: "
                            + pending.joined(separator: ", "),
                        hint: "run it again to keep waiting; see courier list")
                }
                let left = deadline.map { max(0, $0.timeIntervalSinceNow) } ?? 0.25
                try await Task.sleep(nanoseconds: UInt64(min(0.25, left) * 1e9))
            }
        }
    }
}
