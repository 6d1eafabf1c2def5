import ArgumentParser
import Courier
import Foundation

/// `courier status ID [--watch]`: one transaction or download in detail; `status --watch`
/// without an ID follows every unfinished one.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a transaction or download in detail; --watch follows it (or, without an id, everything) until it settles.")

    @OptionGroup var global: GlobalOptions

    @Argument(
        help: "A download or transaction id (or an unambiguous prefix); with --watch, none follows every unfinished one.",
        completion: IdCompletion.kind(.anyIds))
    var id: String?

    @Flag(name: .long, help: "Refresh until every download is finished, failed, cancelled or paused.")
    var watch = false

    @Option(name: .long, help: "Seconds between refreshes with --watch.")
    var interval: Double = 1

    func validate() throws {
        if id == nil && !watch { throw ValidationError("give a download or transaction id, or --watch to follow everything") }
    }

    func run() async throws {
        try await global.run { output in
            let control = try global.queueControl()
            if let notice = CatalogTrustNotice.read(global.layout) { output.note("courier: \(notice)") }
            var last: [QueueEntry] = []
            var shown: [String]?
            var watcher = QueueWatcher()
            while true {
                let request: QueueCommand = id.map { .status($0) } ?? .list(includeFinished: false, stalledOnly: false)
                let entries = try await control.perform(request).entries
                watcher.observe(entries)
                guard !entries.isEmpty || !last.isEmpty else {
                    guard let id else {
                        if output.json { output.emit(StatusResult(entries: [])) } else { output.line("No unfinished transactions.") }
                        return
                    }
                    throw CourierError(.notFound, "no download or transaction \(id)")
                }
                let changed = entries != last
                last = entries
                let moving = entries.contains { $0.download?.state == .active || $0.download?.state == .waiting }
                let settled = !watch || !moving
                if watch && output.json {
                    // NDJSON: a `status` event when something a reader sees changed (not a
                    // heartbeat or a timestamp), then the `result`.
                    let key = Self.visible(entries)
                    if settled {
                        output.emit(StatusResult(entries: QueueListing(entries).entries))
                    } else if key != shown {
                        output.emit(StatusEvent(entries: QueueListing(entries).entries))
                    }
                    shown = key
                } else if watch && output.stderrIsTerminal && !output.json {
                    // Bars with rates measured between refreshes, redrawn every time (a stall
                    // shows as a falling rate); paused rows say so, with no stale rate or ETA.
                    let records = entries.compactMap(\.download)
                    output.statusBlock(
                        DeliveryProgressView.render(records, rates: watcher.rates, now: watcher.now, width: output.terminalColumns))
                } else if watch && !output.json && watcher.refreshes > 1 {
                    // Not a terminal: after the first full view, a plain line (with its rate and
                    // ETA when active) for each download whose line changed.
                    for line in watcher.changedLines(entries) { output.line(line) }
                } else if changed {
                    _ = watcher.changedLines(entries)
                    show(entries, output: output)
                }
                if settled { break }
                try await Task.sleep(nanoseconds: UInt64(max(0.1, interval) * 1e9))
            }
            if watch && !output.json { output.endStatus() }
        }
    }

    /// What a reader of `entries` sees change: states, bytes, errors, owners (not timestamps).
    static func visible(_ entries: [QueueEntry]) -> [String] {
        entries.map { entry in
            let d = entry.download
            return [
                entry.transactionId, entry.transactionState.rawValue, d?.id ?? "", d?.state.rawValue ?? "",
                d?.pauseReason?.rawValue ?? "", "\(d?.bytesReceived ?? 0)", d?.errorCode?.rawValue ?? "",
                entry.lease.map { "\($0.owner.pid)@\($0.owner.host)" } ?? "", entry.stalled?.rawValue ?? "",
                d?.source?.absoluteString ?? "",
            ].joined(separator: " ")
        }
    }

    private func show(_ entries: [QueueEntry], output: Output) {
        if output.json {
            output.emit(encodable: QueueListing(entries))
            return
        }
        var transaction: String?
        for entry in entries {
            if entry.transactionId != transaction {
                transaction = entry.transactionId
                output.line("transaction \(entry.transactionId)  product \(entry.productId)  \(entry.transactionState.rawValue)")
            }
            guard let d = entry.download else { continue }
            output.line("  download \(d.id)  \(d.contentIdentifier)  \(d.state.rawValue)\(d.pauseReason.map { " (\($0.rawValue))" } ?? "")")
            output.line("    progress \(String(format: "%.1f%%", d.progress * 100))  \(QueueFormat.bytes(d.bytesReceived)) of \(QueueFormat.bytes(d.length))  version \(d.version)  placement \(d.placement.rawValue)  class \(d.delivery.rawValue)  priority \(d.effectivePriority.rawValue)")
            if d.state == .active {
                output.line("    rate \(QueueFormat.bytes(Int64(d.rate)))/s  ETA \(QueueFormat.duration(d.timeRemaining))")
            }
            if let from = d.updateFrom {
                output.line("    update from \(from) to \(d.version)\(d.state == .finished ? " (done)" : "")")
            }
            if let source = d.source {
                let which = d.mirrors.firstIndex(of: source).map { " (mirror \($0 + 1) of \(d.mirrors.count))" } ?? ""
                output.line("    source \(source.absoluteString)\(source == d.url ? "" : which)")
            }
            if !d.mirrors.isEmpty { output.line("    mirrors \(d.mirrors.map(\.absoluteString).joined(separator: " "))") }
            let error = QueueFormat.errorText(d)
            if error != "-" { output.line("    error \(error)") }
            if let lease = entry.lease {
                output.line("    owner \(lease.owner.pid)@\(lease.owner.host)\(entry.ownerAlive == true ? "" : " (dead)")")
            }
            if let stalled = entry.stalled { output.line("    stalled: \(stalled.rawValue)") }
            if let url = d.contentURL { output.line("    content \(url.path)") }
        }
    }
}
