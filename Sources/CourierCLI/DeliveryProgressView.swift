import Courier
import Foundation
import Synchronization

/// Shows a delivery's progress: on a terminal a bar per active download and a total line with
/// the overall rate and ETA, redrawn in place on standard error at least twice a second (a
/// stall shows as a falling rate), with rates over a moving window of the downloads still
/// active; NDJSON events with --json. Each "delivered" line is printed when its download is
/// placed, not at the end. An observer of the queue, so the caller can wait until it has shown
/// every committed change (`PaymentQueue.observersCaughtUp`) before printing the result.
final class DeliveryProgressView: PaymentQueueObserver, Sendable {
    private struct State {
        var downloads: [String: DownloadRecord] = [:]
        /// Download ids in the order they were first seen, so lines keep their places.
        var order: [String] = []
        var lastDraw = 0.0
        /// Bytes in of the active downloads, for their rates and the total's.
        var window = RateWindow()
        /// The downloads whose "delivered" line was printed.
        var announced: Set<String> = []
        /// Another process's downloads whose failure was said when it happened.
        var failuresSaid: Set<String> = []
        /// The state of each transaction said last in a `transaction` event (--json).
        var transactionStates: [String: TransactionState] = [:]
        /// Set by `finish`: nothing more is drawn.
        var closed = false
    }

    private let output: Output
    private let state: Mutex<State>
    private let timer: RedrawTimer?
    /// At most this many download lines; the rest are summed up in one line.
    static let maxLines = 8
    /// How often the display is redrawn when nothing changes.
    static let redrawInterval = 0.5

    /// Starts with every unfinished download of `scope`, so the total covers the whole delivery
    /// from the first line on.
    init(output: Output, queue: PaymentQueue, scope: DeliveryScope) {
        self.output = output
        var initial = State()
        let drawn = output.stderrIsTerminal && !output.json
        if drawn {
            let records = ((try? queue.entries()) ?? []).compactMap(\.download).filter(scope.contains)
            for record in records where initial.downloads.updateValue(record, forKey: record.id) == nil {
                initial.order.append(record.id)
            }
        }
        state = Mutex(initial)
        timer = drawn && !output.quiet ? RedrawTimer(interval: Self.redrawInterval) : nil
        timer?.start { [weak self] in self?.redraw(force: true) }
    }

    /// Another process's downloads whose failure this view said (the caller says the others).
    var failuresSaid: Set<String> {
        state.withLock { $0.failuresSaid }
    }

    private static var now: Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord]) {
        for record in downloads { show(record, owner: nil) }
    }

    /// Another process's downloads, as it records and writes them: shown as this process's
    /// are, marked with their owner (`owner` in --json events; "(by another process)" after a
    /// delivered line).
    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord], workedBy owner: LeaseOwner) {
        for record in downloads { show(record, owner: owner) }
    }

    func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [TransactionRecord]) {
        emit(transactions)
    }

    func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [TransactionRecord]) {
        emit(transactions)
    }

    /// Another process works `downloads`: said at once; the client then follows its progress.
    func paymentQueue(_ queue: PaymentQueue, downloads: [DownloadRecord], workedBy owner: LeaseOwner) {
        let name = "\(owner.pid)@\(owner.host)"
        if output.json {
            output.emit(WaitingForOwnerEvent(owners: [JSONOwner(live: owner)], downloads: downloads.map(\.id)))
        } else {
            let names = downloads.map(\.contentIdentifier).joined(separator: ", ")
            output.info("courier: another process (\(name)) is delivering \(names); waiting for it to finish")
        }
    }

    /// An update fetches its whole package rather than its changed entries: one note line on
    /// standard error without --verbose (the bytes it costs are worth knowing), a `wholePackage`
    /// event with --json.
    func paymentQueue(_ queue: PaymentQueue, download: DownloadRecord, fetchesWholePackageBecause reason: String) {
        if output.json {
            output.emit(
                WholePackageEvent(
                    downloadId: download.id, contentIdentifier: download.contentIdentifier, contentLength: download.length, reason: reason))
        } else {
            output.info(
                "courier: \(download.contentIdentifier): downloading the whole package (\(QueueFormat.bytes(download.length))) "
                    + "instead of the changed files: \(reason)")
        }
    }

    private func emit(_ transactions: [TransactionRecord]) {
        guard output.json else { return }
        for record in transactions {
            // A finished transaction is both updated and removed from the queue: one event per
            // state a transaction reaches, not one per notification.
            let changed = state.withLock { $0.transactionStates.updateValue(record.state, forKey: record.id) != record.state }
            guard changed else { continue }
            output.emit(TransactionEvent(transactionId: record.id, productId: record.productId, state: record.state.rawValue))
        }
    }

    private func show(_ record: DownloadRecord, owner: LeaseOwner?) {
        if output.json {
            output.emit(DownloadEvent(record, owner: owner))
            return
        }
        announce(record, byAnotherProcess: owner != nil)  // when it happens, on a terminal or not
        // Another process's failure, when it happens (this run ends with it, unfinished).
        if record.state == .failed, owner != nil, state.withLock({ $0.failuresSaid.insert(record.id).inserted }) {
            let reason = record.errorMessage.map { ": \($0)" } ?? ""
            output.info("courier: \(record.contentIdentifier) failed\(reason) (by another process)")
        }
        guard output.stderrIsTerminal else { return }
        state.withLock { state in
            if state.downloads.updateValue(record, forKey: record.id) == nil { state.order.append(record.id) }
            if record.state == .active {
                state.window.record(record.id, bytes: record.bytesReceived, at: Self.now)
            } else {
                state.window.remove(record.id)
            }
        }
        // Progress redraws at most ten times a second; a change of state always shows.
        redraw(force: record.state != .active)
    }

    /// Says once, on standard output, that `record` was placed: "delivered ID VERSION to PATH", or
    /// "updated ID from OLD to NEW at PATH"; the caller calls it too for what the view did not see.
    func announce(_ record: DownloadRecord, byAnotherProcess: Bool = false) {
        guard record.state == .finished, let url = record.contentURL, state.withLock({ $0.announced.insert(record.id).inserted })
        else { return }
        let by = byAnotherProcess ? " (by another process)" : ""
        if let from = record.updateFrom {
            output.done("updated \(record.contentIdentifier) from \(from) to \(record.version) at \(url.path)\(by)")
        } else {
            output.done("delivered \(record.contentIdentifier) \(record.version) to \(url.path)\(by)")
        }
    }

    /// Draws under the state's lock, so nothing is drawn after `finish` ended the block.
    private func redraw(force: Bool) {
        state.withLock { state in
            let now = Self.now
            guard !state.closed, force || now - state.lastDraw > 0.1, !state.order.isEmpty else { return }
            state.lastDraw = now
            let records = state.order.compactMap { state.downloads[$0] }
            output.statusBlock(Self.render(records, rates: state.window, now: now, width: output.terminalColumns))
        }
    }

    func finish() {
        timer?.cancel()
        state.withLock { $0.closed = true }
        output.endStatus()
    }

    /// The lines drawn for `records` (in display order) on a terminal `width` columns wide:
    /// one per download that moves or stopped part way (active, paused, or waiting with bytes
    /// in; at most `maxLines`, then one line for the rest), then the total. Rates come from
    /// `rates` (the active downloads' bytes over a moving window) measured to `now`; a paused or
    /// waiting row says so instead of a rate and an ETA (which would be stale).
    static func render(_ records: [DownloadRecord], rates: RateWindow, now: Double, width: Int) -> [String] {
        let active = records.filter(showsBar)
        let shown = active.prefix(maxLines)
        let done = records.filter { $0.state == .finished }.count
        var rows = shown.map { row($0, rates: rates, now: now) }
        let total = records.reduce(Int64(0)) { $0 + $1.length }
        let received = records.reduce(Int64(0)) {
            $0 + ($1.state == .finished ? $1.length : min($1.length, $1.bytesReceived))
        }
        let rate = rates.total(now: now)
        // Nothing moving but some paused or waiting: no rate or ETA, which could only be stale.
        let paused = records.contains { $0.state == .paused }
        let moving = records.contains { $0.state == .active } || !(paused || records.contains { $0.state == .waiting })
        let still = paused ? "paused" : "waiting"
        rows.append(
            ProgressLayout.Row(
                name: "total (\(done)/\(records.count) done)", fraction: total > 0 ? Double(received) / Double(total) : 0,
                amount: "\(QueueFormat.bytes(received))/\(QueueFormat.bytes(total))", rate: moving ? ProgressLayout.rate(rate) : "",
                eta: moving ? ProgressLayout.eta(total - received, at: rate) : still))
        var lines = ProgressLayout.lines(rows, width: width)
        if active.count > shown.count {
            lines.insert(ProgressLayout.cut("… and \(active.count - shown.count) more downloading", max(0, width - 1)), at: lines.count - 1)
        }
        return lines
    }

    /// Whether `record` gets a line of its own: it moves, or it stopped part way.
    static func showsBar(_ record: DownloadRecord) -> Bool {
        switch record.state {
        case .active, .paused: true
        case .waiting: record.bytesReceived > 0
        case .finished, .failed, .cancelled: false
        }
    }

    /// The bar of one download named `name` (its content identifier by default): an active one
    /// with its rate over `rates` and its ETA, or "unpacking" once every byte is in; any other
    /// says its state ("paused", "waiting", "failed"...) and shows no rate or ETA.
    static func row(_ record: DownloadRecord, name: String? = nil, rates: RateWindow, now: Double) -> ProgressLayout.Row {
        let received = min(record.length, max(0, record.bytesReceived))
        let fraction = record.state == .finished ? 1 : record.length > 0 ? Double(received) / Double(record.length) : record.progress
        let amount = "\(QueueFormat.bytes(received))/\(QueueFormat.bytes(record.length))"
        let name = name ?? record.contentIdentifier
        guard record.state == .active else {
            return ProgressLayout.Row(name: name, fraction: fraction, amount: amount, rate: "", eta: record.state.rawValue)
        }
        // All bytes in: the package is being unpacked and placed.
        if record.length > 0 && received >= record.length {
            return ProgressLayout.Row(name: name, fraction: 1, amount: amount, rate: "", eta: "unpacking")
        }
        let rate = rates.rate(record.id, now: now)
        return ProgressLayout.Row(
            name: name, fraction: fraction, amount: amount, rate: ProgressLayout.rate(rate),
            eta: ProgressLayout.eta(record.length - received, at: rate))
    }
}
