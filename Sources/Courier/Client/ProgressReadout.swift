import Dispatch
import Synchronization

/// Rates over a moving window: one series of (time, bytes) samples per transfer that is active
/// now. A transfer that stops sending sees its rate fall as the window slides past its last
/// bytes (instead of showing the rate it had), and a finished one is removed, so a total never
/// counts it. Times are seconds on any monotonic clock. A value type: the caller serialises.
public struct RateWindow: Sendable {
    /// How far back a rate looks, in seconds.
    public let span: Double
    /// Below this much time between the oldest sample and now, a rate is not yet known.
    public let minimumElapsed: Double
    private var series: [String: [Sample]] = [:]

    private struct Sample: Sendable {
        var time: Double
        var bytes: Int64
    }

    public init(span: Double = 5, minimumElapsed: Double = 0.5) {
        self.span = span
        self.minimumElapsed = minimumElapsed
    }

    /// The transfers with samples (the active ones).
    public var ids: [String] { series.keys.sorted() }

    /// Records that transfer `id` had `bytes` at `time`. A count lower than the last one (the
    /// transfer started over) starts a new series.
    public mutating func record(_ id: String, bytes: Int64, at time: Double) {
        var samples = series[id] ?? []
        if let last = samples.last, bytes < last.bytes || time < last.time { samples.removeAll() }
        samples.append(Sample(time: time, bytes: bytes))
        // Keep one sample at or before the window's start: the base the rate is measured from.
        while samples.count > 2, samples[1].time <= time - span { samples.removeFirst() }
        series[id] = samples
    }

    /// Forgets transfer `id` (finished, failed or paused): it no longer counts in `total`.
    public mutating func remove(_ id: String) {
        series[id] = nil
    }

    /// Bytes per second of transfer `id` over the window ending `now`; nil until enough time has
    /// passed since its first sample. Measured to `now`, not to the last sample, so a stall
    /// shows as a falling rate.
    public func rate(_ id: String, now: Double) -> Double? {
        guard let samples = series[id], let last = samples.last else { return nil }
        let base = samples.last(where: { $0.time <= now - span }) ?? samples[0]
        let elapsed = now - base.time
        guard elapsed >= minimumElapsed else { return nil }
        return Double(max(0, last.bytes - base.bytes)) / elapsed
    }

    /// The sum of the active transfers' rates; nil when none is known yet.
    public func total(now: Double) -> Double? {
        let rates = series.keys.compactMap { rate($0, now: now) }
        return rates.isEmpty ? nil : rates.reduce(0, +)
    }
}

/// The lines of a progress display on a terminal: a name, a bar and a percentage, the amount,
/// the rate and the time left. What does not fit the width gives way in this order: the name is
/// shortened in its middle (to 16 columns), the bar goes, the name is shortened further (to 6),
/// the amount goes; the rate and the time left are always kept. One column is left free, so
/// the cursor never sits in the last one (terminals differ on wrapping there).
public enum ProgressLayout {
    /// One line of the display.
    public struct Row: Sendable, Equatable {
        public var name: String
        /// 0...1, or nil when the total is unknown (no bar, no percentage).
        public var fraction: Double?
        /// "1.2 MiB/4.0 MiB"
        public var amount: String
        /// "150.0 KiB/s", or "" for a row that is not moving (then only `eta` is shown).
        public var rate: String
        /// "ETA 12s", or another last word ("unpacking").
        public var eta: String

        public init(name: String, fraction: Double?, amount: String, rate: String, eta: String) {
            self.name = name
            self.fraction = fraction
            self.amount = amount
            self.rate = rate
            self.eta = eta
        }
    }

    /// `rows` laid out for a terminal `width` columns wide, names aligned in one column.
    public static func lines(_ rows: [Row], width: Int) -> [String] {
        let available = max(0, width - 1)
        let longestName = rows.map(\.name.count).max() ?? 0
        let barWidth = width >= 120 ? 24 : width >= 100 ? 16 : 8
        // Each step: (bar columns or nil for none, the amount shown, the shortest name allowed).
        let steps: [(bar: Int?, amount: Bool, minimumName: Int)] = [
            (barWidth, true, 16), (nil, true, 16), (nil, true, 6), (nil, false, 6), (nil, false, 0),
        ]
        for (index, step) in steps.enumerated() {
            let tail = rows.map { tailText($0, bar: step.bar, amount: step.amount).count }.max() ?? 0
            let nameWidth = min(longestName, available - tail - 1)
            if nameWidth >= min(step.minimumName, longestName) || index == steps.count - 1 {
                return rows.map { row in
                    let name = middleCut(row.name, max(0, nameWidth)).padding(toLength: max(0, nameWidth), withPad: " ", startingAt: 0)
                    return cut(name + " " + tailText(row, bar: step.bar, amount: step.amount), available)
                }
            }
        }
        return []
    }

    /// `text` shortened to `width` characters by an ellipsis in its middle, keeping its start
    /// and its end (where names differ: versions, extensions).
    public static func middleCut(_ text: String, _ width: Int) -> String {
        guard text.count > width, width > 1 else { return cut(text, width) }
        return String(text.prefix(width / 2)) + "…" + String(text.suffix(width - 1 - width / 2))
    }

    /// `text` cut at its end to `width` characters, with an ellipsis.
    public static func cut(_ text: String, _ width: Int) -> String {
        guard text.count > width else { return text }
        guard width > 1 else { return width == 1 ? "…" : "" }
        return String(text.prefix(width - 1)) + "…"
    }

    private static func tailText(_ row: Row, bar: Int?, amount: Bool) -> String {
        var text = ""
        if let fraction = row.fraction {
            let clamped = min(1, max(0, fraction.isFinite ? fraction : 0))
            if let bar {
                let filled = min(bar, Int(clamped * Double(bar)))
                text += "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: bar - filled) + "] "
            }
            let percent = Int(clamped * 100)
            text += String(repeating: " ", count: percent < 10 ? 2 : percent < 100 ? 1 : 0) + "\(percent)%  "
        }
        if amount { text += row.amount + "  " }
        // A row with no rate (paused, waiting, unpacking) says only its last word.
        return text + (row.rate.isEmpty ? "" : row.rate + "  ") + row.eta
    }
}

/// The repeating redraw of a progress display: calls its handler every `interval` seconds on a
/// Dispatch queue from `start` until `cancel` (or until it is released). The CLI's two displays
/// (`courier get`'s bar, the delivery view) hold one each and keep their state behind a `Mutex`.
public final class RedrawTimer: Sendable {
    /// The running source, and whether `cancel` was called (then nothing starts again).
    private let state = Mutex<(source: (any DispatchSourceTimer)?, cancelled: Bool)>((nil, false))
    public let interval: Double

    public init(interval: Double) {
        self.interval = interval
    }

    /// Starts calling `handler` every `interval` seconds, the first time one interval from now.
    /// A timer started already, or cancelled, does not start (again).
    public func start(_ handler: @escaping @Sendable () -> Void) {
        state.withLock { state in
            guard state.source == nil, !state.cancelled else { return }
            let source = DispatchSource.makeTimerSource(queue: .global())
            source.schedule(deadline: .now() + interval, repeating: interval)
            source.setEventHandler(handler: handler)
            source.resume()
            state.source = source
        }
    }

    /// Stops the calls: none starts after this returns (one under way may finish).
    public func cancel() {
        state.withLock { state in
            state.cancelled = true
            state.source?.cancel()
        }
    }

    /// Started and not cancelled.
    public var isRunning: Bool {
        state.withLock { $0.source != nil && !$0.cancelled }
    }

    deinit {
        cancel()
    }
}
