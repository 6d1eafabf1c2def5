import ArgumentParser
import Courier
import Foundation
import Logging

/// `courier list`: the queue's transactions and downloads, with progress, rate, ETA, error and owner.
struct ListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List transactions and their downloads: state, progress, rate, ETA, error, owner.",
        discussion: "Finished transactions are left out unless --all is given. --stalled shows only stalled downloads.")

    @OptionGroup var global: GlobalOptions

    @Flag(name: .long, help: "Include finished transactions.")
    var all = false

    @Flag(name: .long, help: "Only stalled downloads (owner died, no bytes for the stall timeout, network, space).")
    var stalled = false

    func run() async throws {
        try await global.run { output in
            let entries = try await global.queueControl().perform(.list(includeFinished: all, stalledOnly: stalled)).entries
            if let notice = CatalogTrustNotice.read(global.layout) { output.note("courier: \(notice)") }
            if output.json {
                output.emit(encodable: QueueListing(entries))
                return
            }
            guard !entries.isEmpty else {
                output.line(all ? "The queue is empty." : "No unfinished transactions.")
                return
            }
            let rows = entries.map(QueueFormat.row)
            for line in QueueFormat.listTable(rows).lines(rows, width: TableLayout.stdoutWidth()) { output.line(line) }
        }
    }
}

/// The `--json` document of `courier list` and `courier status`.
struct QueueListing: Encodable {
    struct Line: Encodable, Sendable {
        var transactionId: String
        var productId: String
        var transactionState: String
        /// The App Store refunded or revoked the transaction; absent when it did not.
        var revoked: Bool?
        var downloadId: String?
        var contentIdentifier: String?
        var state: String?
        var pauseReason: String?
        var progress: Double?
        var bytesReceived: Int64?
        var contentLength: Int64?
        var contentVersion: String?
        var placement: String?
        var rate: Double?
        var timeRemaining: Double?
        var error: ErrorLine?
        /// Where the content was placed (a path; StoreKit calls it contentURL).
        var contentPath: String?
        var owner: Owner?
        var stalled: String?
        /// An update: the installed version it replaces (`contentVersion` is the new one).
        var updateFrom: String?
        /// The URL the bytes come from (the download's own or a mirror), once known.
        var source: String?
        /// The catalog's mirrors of the package, tried in order after its URL.
        var mirrors: [String]?
        /// The content's delivery class (`essential`, `prefetch`, `onDemand`).
        var delivery: String?
        /// The content's purge order once placed (`low`, `normal`, `high`).
        var preservation: String?
        /// `high`, `normal` or `low`: the one set (`courier priority`), else the default (low for
        /// an update, normal otherwise; a foreground deliver works it at high).
        var priority: String?

        struct ErrorLine: Encodable, Sendable {
            var code: String
            var message: String
        }

        /// The same object as in `download` and `waitingForOwner` events (docs/json.md).
        typealias Owner = JSONOwner

        init(_ entry: QueueEntry) {
            transactionId = entry.transactionId
            productId = entry.productId
            transactionState = entry.transactionState.rawValue
            revoked = entry.revoked ? true : nil
            stalled = entry.stalled?.rawValue
            if let lease = entry.lease {
                owner = Owner(pid: lease.owner.pid, host: lease.owner.host, alive: entry.ownerAlive ?? false, heartbeatAt: lease.heartbeatAt)
            }
            guard let d = entry.download else { return }
            downloadId = d.id
            contentIdentifier = d.contentIdentifier
            state = d.state.rawValue
            pauseReason = d.pauseReason?.rawValue
            progress = d.progress
            bytesReceived = d.bytesReceived
            contentLength = d.length
            contentVersion = d.version
            placement = d.placement.rawValue
            rate = d.rate
            timeRemaining = d.timeRemaining
            if let code = d.errorCode { error = ErrorLine(code: code.rawValue, message: d.errorMessage ?? code.rawValue) }
            contentPath = d.contentURL?.path
            updateFrom = d.updateFrom
            source = d.source?.absoluteString
            mirrors = d.mirrors.isEmpty ? nil : d.mirrors.map(\.absoluteString)
            delivery = d.delivery.rawValue
            preservation = d.preservation.rawValue
            priority = d.effectivePriority.rawValue
        }
    }

    var entries: [Line]

    init(_ entries: [QueueEntry]) { self.entries = entries.map(Line.init) }
}

extension GlobalOptions {
    /// Where queue commands go: a running agent (through its socket; docs/agent.md), else the
    /// payment queue of this storage's store, which must exist (they only read or change it).
    /// `COURIER_NO_AGENT=1` ignores a running agent.
    func queueControl() throws -> any QueueControl {
        if let agent = agentControl() { return agent }
        return try core(existingStore: true, logger: logger("courier", default: .warning)).queueControl()
    }

    /// The running agent of this storage, or nil when none answers (or `COURIER_NO_AGENT=1`).
    func agentControl() -> AgentQueueControl? {
        if ProcessInfo.processInfo.environment["COURIER_NO_AGENT"] == "1" { return nil }
        return AgentQueueControl.connect(layout: layout)
    }
}

/// Text formatting shared by the queue commands.
enum QueueFormat {
    /// The columns of `list` for `rows` (QueueFormat.row): on a narrow terminal SOURCE, OWNER and
    /// TRANSACTION go first, then ETA, RATE and ERROR; ids keep a prefix unique among the rows
    /// (what `pause`, `resume` and `cancel` take), names their start and end.
    static func listTable(_ rows: [[String]]) -> TableLayout {
        TableLayout(columns: [
            .init("TRANSACTION", short: "TXN", minimum: uniquePrefix(rows.map { $0[0] }), comfortable: 16, middle: false, dropOrder: 3),
            .init("DOWNLOAD", short: "ID", minimum: uniquePrefix(rows.map { $0[1] }), comfortable: 16, middle: false),
            .init("PRODUCT", minimum: 12, comfortable: 32),
            .init("STATE", minimum: 7, comfortable: 12, middle: false),
            .init("PROGRESS", short: "DONE", minimum: 4, middle: false),
            .init("RATE", minimum: 11, middle: false, dropOrder: 5),
            .init("ETA", minimum: 6, middle: false, dropOrder: 4),
            .init("ERROR", minimum: 10, comfortable: 24, middle: false, dropOrder: 6),
            .init("OWNER", minimum: 10, comfortable: 16, dropOrder: 2, dropsEarly: true),
            .init("SOURCE", minimum: 10, comfortable: 16, dropOrder: 1, dropsEarly: true),
        ])
    }

    /// The width an id column needs so each of `ids` keeps a prefix no other id has (and the
    /// ellipsis after it): at least 8, as `git log --oneline` keeps 7 digits.
    static func uniquePrefix(_ ids: [String]) -> Int {
        let distinct = Array(Set(ids.filter { $0 != "-" })).sorted()
        var length = 7
        for (a, b) in zip(distinct, distinct.dropFirst()) {
            let common = zip(a, b).prefix { $0 == $1 }.count
            length = max(length, min(common + 1, max(a.count, b.count)))
        }
        return length + 1
    }

    static func row(_ entry: QueueEntry) -> [String] {
        let transaction = entry.transactionId
        guard let d = entry.download else {
            return [transaction, "-", entry.productId, entry.transactionState.rawValue + (entry.revoked ? " (revoked)" : ""), "-", "-", "-", "-", "-", "-"]
        }
        var state = d.state.rawValue
        if entry.revoked { state += " (revoked)" }
        if d.state == .paused, let reason = d.pauseReason, reason != .user { state += " (\(reason.rawValue))" }
        if let stalled = entry.stalled, d.state == .active { state += " (stalled: \(stalled.rawValue))" }
        if let from = d.updateFrom, d.state != .finished { state += " (update \(from) -> \(d.version))" }
        if d.delivery != .essential { state += " (\(d.delivery.rawValue))" }
        if d.effectivePriority != .normal, d.state != .finished, d.state != .cancelled {
            state += " [\(d.effectivePriority.rawValue)]"
        }
        let active = d.state == .active
        let error = errorText(d)
        var owner = "-"
        if let lease = entry.lease {
            owner = "\(lease.owner.pid)@\(lease.owner.host)" + (entry.ownerAlive == true ? "" : " (dead)")
        }
        return [
            transaction, d.id, d.contentIdentifier, state,
            String(format: "%.0f%%", d.progress * 100),
            active && d.rate > 0 ? bytes(Int64(d.rate)) + "/s" : "-",
            active ? duration(d.timeRemaining) : "-",
            String(error.prefix(60)),
            owner,
            sourceText(d),
        ]
    }

    /// Where a download's bytes come from: the host (and port) of its source, and which mirror
    /// it is ("mirror 1/2") when not the download's own URL; "-" before any byte came.
    static func sourceText(_ d: DownloadRecord) -> String {
        guard let source = d.source else { return "-" }
        let host = (source.host ?? "?") + (source.port.map { ":\($0)" } ?? "")
        guard let index = d.mirrors.firstIndex(of: source), source != d.url else { return host }
        return "\(host) (mirror \(index + 1)/\(d.mirrors.count))"
    }

    /// The ERROR cell: the code and message, once ("network: …", not "paused: paused: …"). A
    /// pause is no error: its reason is in the STATE cell already.
    static func errorText(_ d: DownloadRecord) -> String {
        guard let code = d.errorCode, code != .paused, d.state != .paused else { return "-" }
        guard let message = d.errorMessage, !message.isEmpty else { return code.rawValue }
        return message.hasPrefix(code.rawValue + ":") ? message : "\(code.rawValue): \(message)"
    }

    static func align(_ table: [[String]]) -> [String] {
        guard let columns = table.first?.count else { return [] }
        var widths = [Int](repeating: 0, count: columns)
        for row in table { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        return table.map { row in
            row.enumerated().map { i, cell in
                i == columns - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }
    }

    /// A byte count for people (binary units), one decimal: "3.0 MiB".
    static func bytes(_ count: Int64) -> String { CourierError.readableBytes(count, alwaysDecimal: true) }

    static func bytes(_ count: Double) -> String { CourierError.readableBytes(count, alwaysDecimal: true) }

    static func duration(_ seconds: Double?) -> String {
        guard let seconds, seconds.isFinite, seconds >= 0 else { return "?" }
        let total = Int(seconds.rounded(.up))
        if total < 60 { return "\(total)s" }
        if total < 3600 { return "\(total / 60)m\(String(format: "%02d", total % 60))s" }
        return "\(total / 3600)h\(String(format: "%02d", (total % 3600) / 60))m"
    }

    /// Why `d` stopped, as a suffix of its state: ": MESSAGE", " (PAUSE REASON)", or "".
    static func stopReason(_ d: DownloadRecord) -> String {
        d.errorMessage.map { ": \($0)" } ?? d.pauseReason.map { " (\($0.rawValue))" } ?? ""
    }

    /// The downloads `id` names, or every applicable one with `all`.
    static func target(id: String?, all: Bool) -> QueueTarget {
        all ? .all : .ids(id.map { [$0] } ?? [])
    }

    /// What a pause, resume, cancel or discard changed: a line per download, or the `result` line.
    /// Not `final` (`resume` delivering them next): a `resumed` event rather than the result.
    static func report(_ output: Output, verb: String, changed: [DownloadRecord], final: Bool = true) {
        if output.json {
            let downloads = changed.map {
                QueueChangeResult.Download(downloadId: $0.id, transactionId: $0.transactionId, state: $0.state.rawValue)
            }
            if final { output.emit(QueueChangeResult(downloads: downloads)) } else { output.emit(ResumedEvent(downloads: downloads)) }
            return
        }
        if changed.isEmpty {
            output.done("Nothing to do: no download changed.")
            return
        }
        for download in changed {
            output.done("\(verb) \(download.id) (\(download.contentIdentifier)): now \(download.state.rawValue)")
        }
    }
}
