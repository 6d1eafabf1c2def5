import Courier
import Foundation

/// Shows a delivery's progress: on a terminal a bar per active download and a total line with
/// the overall rate and ETA, redrawn in place on standard error; NDJSON events with --json.
/// An observer of the queue, so the caller can wait until it has shown every committed change
/// (`PaymentQueue.observersCaughtUp`) before printing the result.
final class DeliveryProgressView: PaymentQueueObserver, @unchecked Sendable {  // @unchecked: mutable state is guarded by `lock`.
    private let output: Output
    private let lock = NSLock()
    private var downloads: [String: DownloadRecord] = [:]
    /// Download ids in the order they were first seen, so lines keep their places.
    private var order: [String] = []
    private var lastDraw = Date.distantPast
    /// (time, bytes in) samples of the last few seconds, for the overall rate.
    private var samples: [(time: Date, bytes: Int64)] = []
    /// At most this many download lines; the rest are summed up in one line.
    static let maxLines = 8

    /// Starts with every unfinished download of `scope`, so the total covers the whole delivery
    /// from the first line on.
    init(output: Output, queue: PaymentQueue, scope: DeliveryScope) {
        self.output = output
        guard output.stderrIsTerminal, !output.json else { return }  // nothing is drawn
        let records = ((try? queue.entries()) ?? []).compactMap(\.download).filter(scope.contains)
        for record in records where downloads.updateValue(record, forKey: record.id) == nil { order.append(record.id) }
    }

    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord]) {
        for record in downloads { show(record) }
    }

    func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [TransactionRecord]) {
        emit(transactions)
    }

    func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [TransactionRecord]) {
        emit(transactions)
    }

    private func emit(_ transactions: [TransactionRecord]) {
        guard output.json else { return }
        for record in transactions {
            output.emit(["event": "transaction", "transactionId": record.id, "productId": record.productId, "state": record.state.rawValue])
        }
    }

    private func show(_ record: DownloadRecord) {
        if output.json {
            var event: [String: Any] = [
                "event": "download", "id": record.id, "contentIdentifier": record.contentIdentifier,
                "state": record.state.rawValue, "progress": record.progress, "bytesReceived": record.bytesReceived,
                "contentLength": record.length, "rate": record.rate,
            ]
            if let remaining = record.timeRemaining { event["timeRemaining"] = remaining }
            if let code = record.errorCode { event["error"] = ["code": code.rawValue, "message": record.errorMessage ?? ""] }
            if let url = record.contentURL { event["contentURL"] = url.path }
            output.emit(event)
            return
        }
        guard output.stderrIsTerminal else { return }
        let lines: [String]? = lock.withLock {
            if downloads.updateValue(record, forKey: record.id) == nil { order.append(record.id) }
            let now = Date()
            // Progress redraws at most ten times a second; a change of state always shows.
            guard now.timeIntervalSince(lastDraw) > 0.1 || record.state != .active else { return nil }
            lastDraw = now
            let records = order.compactMap { downloads[$0] }
            return Self.render(records, rate: overallRate(Self.received(records), now: now), width: output.terminalColumns)
        }
        if let lines { output.statusBlock(lines) }
    }

    /// Bytes per second over the last three seconds (the per-download rates are updated only
    /// every half second or so, and short downloads end before they have one).
    private func overallRate(_ received: Int64, now: Date) -> Double {
        samples.append((now, received))
        while samples.count > 2, now.timeIntervalSince(samples[0].time) > 3 { samples.removeFirst() }
        guard let first = samples.first else { return 0 }
        let elapsed = now.timeIntervalSince(first.time)
        return elapsed > 0.2 ? Double(max(0, received - first.bytes)) / elapsed : 0
    }

    static func received(_ records: [DownloadRecord]) -> Int64 {
        records.reduce(Int64(0)) { $0 + ($1.state == .finished ? $1.length : min($1.length, $1.bytesReceived)) }
    }

    func finish() {
        output.endStatus()
    }

    /// The lines drawn for `records` (in display order) on a terminal `width` columns wide:
    /// one per active download (at most `maxLines`, then one line for the rest), then the total
    /// at the overall `rate` (bytes per second).
    static func render(_ records: [DownloadRecord], rate: Double, width: Int) -> [String] {
        let barWidth = width >= 120 ? 24 : width >= 100 ? 16 : 8
        let active = records.filter { $0.state == .active }
        let shown = active.prefix(maxLines)
        let done = records.filter { $0.state == .finished }.count
        let totalName = "total (\(done)/\(records.count) done)"
        let nameWidth = min(width >= 100 ? 32 : 24, max(totalName.count, records.map(\.contentIdentifier.count).max() ?? 0))
        var lines = shown.map { record -> String in
            let received = record.bytesReceived
            let fraction = record.length > 0 ? Double(received) / Double(record.length) : record.progress
            let eta = record.rate > 0 ? QueueFormat.duration(Double(max(0, record.length - received)) / record.rate) : "?"
            // All bytes in: the package is being unpacked and placed.
            let detail =
                record.length > 0 && received >= record.length
                ? "\(QueueFormat.bytes(record.length))  unpacking"
                : "\(QueueFormat.bytes(received))/\(QueueFormat.bytes(record.length))  \(QueueFormat.bytes(Int64(record.rate)))/s  ETA \(eta)"
            return line(name: fit(record.contentIdentifier, nameWidth), fraction: fraction, barWidth: barWidth, detail: detail, width: width)
        }
        if active.count > shown.count {
            lines.append(cut("… and \(active.count - shown.count) more downloading", width))
        }
        let total = records.reduce(Int64(0)) { $0 + $1.length }
        let received = Self.received(records)
        let eta = rate > 0 ? QueueFormat.duration(Double(max(0, total - received)) / rate) : "?"
        lines.append(
            line(
                name: fit(totalName, nameWidth), fraction: total > 0 ? Double(received) / Double(total) : 0, barWidth: barWidth,
                detail: "\(QueueFormat.bytes(received))/\(QueueFormat.bytes(total))  \(QueueFormat.bytes(Int64(rate)))/s  ETA \(eta)",
                width: width))
        return lines
    }

    private static func line(name: String, fraction: Double, barWidth: Int, detail: String, width: Int) -> String {
        let clamped = min(1, max(0, fraction.isFinite ? fraction : 0))
        let filled = min(barWidth, Int(clamped * Double(barWidth)))
        let bar = "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: barWidth - filled) + "]"
        return cut("\(name) \(bar) " + String(format: "%3.0f%%", clamped * 100) + "  \(detail)", width)
    }

    /// `text` cut to fit a terminal line `width` columns wide (one column is left free, so the
    /// cursor never sits in the last column, where terminals differ on wrapping).
    private static func cut(_ text: String, _ width: Int) -> String {
        guard width > 2 else { return "" }
        return text.count > width - 1 ? String(text.prefix(width - 2)) + "…" : text
    }

    /// `text` cut (with an ellipsis) or padded to exactly `width` characters.
    private static func fit(_ text: String, _ width: Int) -> String {
        guard width > 1 else { return "" }
        if text.count > width { return String(text.prefix(width - 1)) + "…" }
        return text.padding(toLength: width, withPad: " ", startingAt: 0)
    }
}
