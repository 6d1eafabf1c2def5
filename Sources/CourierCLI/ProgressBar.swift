import Courier
import Foundation

/// The progress of `courier get`: a bar on a terminal (standard error), NDJSON `progress`
/// events with `--json`, nothing otherwise. Throttled; safe from any thread.
final class ProgressBar: @unchecked Sendable {  // @unchecked: mutable state is guarded by `lock`.
    private let output: Output
    private let label: String
    private let files: Int?
    private let lock = NSLock()
    private var perDownload: [String: TransferProgress] = [:]
    private var finishedFiles = 0
    private var lastDraw: UInt64 = 0
    private let interval: UInt64

    init(output: Output, label: String, files: Int? = nil) {
        self.output = output
        self.label = label
        self.files = files
        self.interval = output.json ? 500_000_000 : 150_000_000
    }

    func update(_ progress: TransferProgress) {
        lock.lock()
        perDownload[progress.id] = progress
        let now = DispatchTime.now().uptimeNanoseconds
        guard now - lastDraw >= interval else {
            lock.unlock()
            return
        }
        lastDraw = now
        let snapshot = Array(perDownload.values)
        let finished = finishedFiles
        lock.unlock()
        draw(snapshot, finished: finished)
    }

    func fileFinished(_ result: DownloadResult) {
        lock.lock()
        finishedFiles += 1
        perDownload[result.id] = nil
        lock.unlock()
    }

    func finish() {
        lock.lock()
        let drawn = lastDraw != 0
        lock.unlock()
        if drawn { output.endStatus() }
    }

    private func draw(_ downloads: [TransferProgress], finished: Int) {
        if output.json {
            guard files == nil else { return }
            for progress in downloads {
                var event: [String: Any] = [
                    "event": "progress", "id": progress.id, "bytesReceived": progress.bytesReceived,
                    "bytesPerSecond": Int(progress.bytesPerSecond),
                ]
                if let total = progress.totalBytes { event["totalBytes"] = total }
                if let fraction = progress.progress { event["progress"] = (fraction * 1000).rounded() / 1000 }
                if let remaining = progress.timeRemaining { event["timeRemaining"] = (remaining * 10).rounded() / 10 }
                output.emit(event)
            }
            return
        }
        guard output.stderrIsTerminal else { return }
        let received = downloads.reduce(Int64(0)) { $0 + $1.bytesReceived }
        let rate = downloads.reduce(0.0) { $0 + $1.bytesPerSecond }
        if let files {
            output.status("\(label): \(finished)/\(files) done, \(Self.bytes(Double(received))) active, \(Self.bytes(rate))/s")
            return
        }
        guard let progress = downloads.first else { return }
        let width = 30
        var text = label + " "
        if let fraction = progress.progress, let total = progress.totalBytes {
            let filled = Int(fraction * Double(width))
            text += "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "] "
            text += String(format: "%3d%% ", Int(fraction * 100))
            text += "\(Self.bytes(Double(progress.bytesReceived)))/\(Self.bytes(Double(total)))"
        } else {
            text += Self.bytes(Double(progress.bytesReceived))
        }
        text += "  \(Self.bytes(progress.bytesPerSecond))/s"
        if let remaining = progress.timeRemaining { text += "  ETA \(Int(remaining.rounded(.up)))s" }
        output.status(text)
    }

    static func bytes(_ count: Double) -> String { QueueFormat.bytes(count) }
}
