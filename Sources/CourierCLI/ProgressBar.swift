import Courier
import Foundation
import Synchronization

/// The progress of `courier get`: a bar on a terminal (standard error), NDJSON `progress`
/// events with `--json`, nothing otherwise. On a terminal it is redrawn twice a second whether
/// or not bytes came (a stall shows as a falling rate, not a frozen one), with rates over a
/// moving window of the transfers still active. Safe from any thread.
final class ProgressBar: Sendable {
    private struct State {
        var perDownload: [String: TransferProgress] = [:]
        var window = RateWindow()
        var finishedFiles = 0
        var lastDraw: UInt64 = 0
        var drawn = false
        /// Set by `finish`: nothing more is drawn.
        var closed = false
    }

    private let output: Output
    private let label: String
    private let files: Int?
    private let state = Mutex(State())
    private let interval: UInt64
    private let timer: RedrawTimer?
    /// How often the bar is redrawn when no bytes come.
    static let redrawInterval = 0.5

    /// The file of a one-file download, named in `progress` events (docs/json.md).
    private let file: String?

    init(output: Output, label: String, file: String? = nil, files: Int? = nil) {
        self.output = output
        self.label = label
        self.file = file
        self.files = files
        self.interval = output.json ? 500_000_000 : 150_000_000
        timer = output.stderrIsTerminal && !output.json && !output.quiet ? RedrawTimer(interval: Self.redrawInterval) : nil
        timer?.start { [weak self] in self?.tick() }
    }

    private static func seconds(_ nanoseconds: UInt64) -> Double { Double(nanoseconds) / 1e9 }

    func update(_ progress: TransferProgress) {
        state.withLock { state in
            let now = DispatchTime.now().uptimeNanoseconds
            state.perDownload[progress.id] = progress
            state.window.record(progress.id, bytes: progress.bytesReceived, at: Self.seconds(now))
            guard now - state.lastDraw >= interval else { return }
            drawLocked(&state, now: now)
        }
    }

    /// The redraw of the timer: the same state, a rate measured to now.
    private func tick() {
        state.withLock { state in
            guard !state.perDownload.isEmpty || (files != nil && state.drawn) else { return }
            drawLocked(&state, now: DispatchTime.now().uptimeNanoseconds)
        }
    }

    /// Draws under the state's lock, so nothing is drawn after `finish` ended the status line.
    private func drawLocked(_ state: inout State, now: UInt64) {
        guard !state.closed else { return }
        state.lastDraw = now
        state.drawn = true
        draw(
            state.perDownload.values.sorted { $0.id < $1.id }, finished: state.finishedFiles, rates: state.window,
            now: Self.seconds(now))
    }

    func fileFinished(_ result: DownloadResult) {
        state.withLock { state in
            state.finishedFiles += 1
            state.perDownload[result.id] = nil
            state.window.remove(result.id)
        }
    }

    func finish() {
        timer?.cancel()
        let wasDrawn = state.withLock { state in
            state.closed = true
            return state.drawn
        }
        if wasDrawn { output.endStatus() }
    }

    private func draw(_ downloads: [TransferProgress], finished: Int, rates: RateWindow, now: Double) {
        if output.json {
            guard files == nil else { return }
            for progress in downloads {
                let rate = rates.rate(progress.id, now: now) ?? progress.bytesPerSecond
                var event = GetProgressEvent(
                    file: file ?? progress.id, bytesReceived: progress.bytesReceived, rate: rate.isFinite ? Int64(rate) : 0,
                    contentLength: progress.totalBytes)
                if let fraction = progress.progress { event.progress = (fraction * 1000).rounded() / 1000 }
                if let total = progress.totalBytes, rate > 0, rate.isFinite {
                    event.timeRemaining = (Double(max(0, total - progress.bytesReceived)) / rate * 10).rounded() / 10
                }
                output.emit(event)
            }
            return
        }
        guard output.stderrIsTerminal else { return }
        output.statusBlock(Self.lines(downloads, label: label, files: files, finished: finished, rates: rates, now: now, width: output.terminalColumns))
    }

    /// The status line for `downloads` (the active ones) on a terminal `width` columns wide.
    static func lines(
        _ downloads: [TransferProgress], label: String, files: Int?, finished: Int, rates: RateWindow, now: Double, width: Int
    ) -> [String] {
        let rate = rates.total(now: now)
        let rateText = ProgressLayout.rate(rate)
        if let files {
            let received = downloads.reduce(Int64(0)) { $0 + $1.bytesReceived }
            let row = ProgressLayout.Row(
                name: "\(label): \(finished)/\(files) done", fraction: nil, amount: "\(QueueFormat.bytes(received)) active",
                rate: rateText, eta: "\(downloads.count) downloading")
            return ProgressLayout.lines([row], width: width)
        }
        guard let progress = downloads.first else { return [] }
        let amount = QueueFormat.bytes(progress.bytesReceived) + (progress.totalBytes.map { "/\(QueueFormat.bytes($0))" } ?? "")
        let eta = ProgressLayout.eta(progress.totalBytes.map { $0 - progress.bytesReceived }, at: rate)
        let row = ProgressLayout.Row(name: label, fraction: progress.progress, amount: amount, rate: rateText, eta: eta)
        return ProgressLayout.lines([row], width: width)
    }
}

extension ProgressLayout {
    /// "150.0 KiB/s", or "- B/s" while the rate is not known.
    static func rate(_ rate: Double?) -> String { rate.map { "\(QueueFormat.bytes($0))/s" } ?? "- B/s" }

    /// "ETA 12s" for `remaining` bytes at `rate`; "ETA ?" while either is not known.
    static func eta(_ remaining: Int64?, at rate: Double?) -> String {
        guard let remaining, let rate, rate > 0 else { return "ETA ?" }
        return "ETA " + QueueFormat.duration(Double(max(0, remaining)) / rate)
    }
}
