import ArgumentParser
import Courier
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `courier top`: a live full-screen view of every transaction and download (state, bar, rate,
/// ETA, owner, error), refreshed twice a second, with keys to pause, resume and cancel the
/// selected row. Reads the store as `list` does and acts through the running agent when there
/// is one, else on the store, as `pause`/`resume`/`cancel` do. Not on a terminal: a plain line
/// per change (NDJSON `status` events with --json), as `status --watch`.
struct TopCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "top",
        abstract: "A live full-screen view of every transaction and download, with keys to pause, resume and cancel.",
        discussion: """
            Keys: Up/Down or k/j select a row; p pauses it, r resumes it, c cancels it (y confirms); \
            q quits (Ctrl-C too). The view is refreshed every --interval seconds (at most 0.5 on a \
            terminal) and follows the terminal's size. Actions go through the running agent when \
            there is one, else change the store directly. When standard output is not a terminal, \
            top prints a line for each download whose state, percentage, owner or error changed \
            (an NDJSON `status` event with --json) until interrupted or --iterations is reached.
            """)

    @OptionGroup var global: GlobalOptions

    @Flag(name: .long, help: "Include finished transactions.")
    var all = false

    @Option(name: .long, help: "Seconds between refreshes (at most 0.5 on a terminal).")
    var interval: Double = 0.5

    @Option(name: [.customShort("n"), .long], help: "Stop after this many refreshes (default: until q or interrupted).")
    var iterations: Int?

    func validate() throws {
        guard interval.isFinite, interval > 0, interval <= 3600 else {
            throw ValidationError("--interval must be a number of seconds above 0 (at most 3600)")
        }
        if let iterations, iterations < 1 { throw ValidationError("--iterations must be at least 1") }
    }

    func run() async throws {
        try await global.run { output in
            let source = TopSource(global: global, includeFinished: all)
            // Fail before the screen is taken: no store is a plain error.
            _ = try source.control()
            if output.json || !output.stdoutIsTerminal {
                try await plain(source, output: output)
            } else {
                try await TopScreen(source: source, interval: min(interval, 0.5), iterations: iterations).run()
            }
        }
    }

    /// Output that is not a terminal: a line per change, or NDJSON `status` events.
    private func plain(_ source: TopSource, output: Output) async throws {
        var watcher = QueueWatcher()
        var shown: [String]?
        var count = 0
        while true {
            let entries = try await source.entries()
            watcher.observe(entries)
            count += 1
            let last = iterations.map { count >= $0 } ?? false
            if output.json {
                let key = StatusCommand.visible(entries)
                if last {
                    output.emit(StatusResult(entries: QueueListing(entries).entries))
                } else if key != shown {
                    output.emit(StatusEvent(entries: QueueListing(entries).entries))
                }
                shown = key
            } else {
                for line in watcher.changedLines(entries, detailed: true) { output.line(line) }
            }
            if last { return }
            try await Task.sleep(nanoseconds: UInt64(interval * 1e9))
        }
    }
}

/// Where `top` reads the queue and sends its actions: the running agent when one answers (asked
/// again at each refresh, so an agent started or stopped meanwhile is followed), else the store.
struct TopSource: Sendable {
    let global: GlobalOptions
    let includeFinished: Bool
    private let local = LocalControlCache()

    init(global: GlobalOptions, includeFinished: Bool) {
        self.global = global
        self.includeFinished = includeFinished
    }

    func control() throws -> any QueueControl {
        if let agent = global.agentControl() { return agent }
        return try local.control {
            // Logs would draw over the screen: only critical ones.
            try global.core(existingStore: true, logger: global.logger("courier", default: .critical)).queueControl()
        }
    }

    func entries() async throws -> [QueueEntry] {
        try await read().entries
    }

    /// The queue's entries, and whether a running agent answered.
    func read() async throws -> (entries: [QueueEntry], throughAgent: Bool) {
        let control = try control()
        let entries = try await control.perform(.list(includeFinished: includeFinished, stalledOnly: false)).entries
        return (entries, control is AgentQueueControl)
    }
}

/// The store's queue control, opened once.
final class LocalControlCache: Sendable {
    private let cached = Mutex<LocalQueueControl?>(nil)

    func control(_ open: () throws -> LocalQueueControl) throws -> LocalQueueControl {
        try cached.withLock { cached in
            if let cached { return cached }
            let control = try open()
            cached = control
            return control
        }
    }
}

/// The priority column and keys of `top`: a download's priority (the one set, else its default:
/// `DownloadRecord.effectivePriority`), and `+`/`-` to move the selected download one step up or
/// down (`courier priority`, through the agent when one runs).
enum TopPriority {
    static func priority(of entry: QueueEntry) -> String? {
        guard let download = entry.download, download.state != .finished, download.state != .cancelled else { return nil }
        return download.effectivePriority.rawValue
    }

    /// Raises (`step` > 0) or lowers the priority of `entry`; returns the line to show.
    static func change(_ entry: QueueEntry, by step: Int, control: any QueueControl) async throws -> String {
        guard let download = entry.download else { throw CourierError(.usage, "select a download to change its priority") }
        let order: [DownloadPriority] = [.low, .normal, .high]
        let current = order.firstIndex(of: download.effectivePriority) ?? 1
        let next = order[min(max(current + step, 0), order.count - 1)]
        if next == download.effectivePriority {
            return "\(download.id) is at priority \(next.rawValue) already"
        }
        _ = try await control.perform(.priority(.id(download.id), next))
        return "priority of \(download.id): now \(next.rawValue)"
    }
}

/// What `top` shows and which row is selected: the screen's lines for a size, from the last
/// reading of the queue. Rows keep their selection by id when the list changes.
struct TopModel {
    var entries: [QueueEntry] = []
    var watcher = QueueWatcher()
    /// The selected row's key (its download id, else its transaction id).
    var selected: String?
    /// The first row shown (scrolling).
    var offset = 0
    /// The line under the table: the outcome of the last action, or a question.
    var message: String?
    /// A cancel asked for and not yet confirmed: the row's key.
    var confirmingCancel: String?
    var throughAgent = false

    static func key(_ entry: QueueEntry) -> String { entry.download?.id ?? entry.transactionId }

    mutating func update(_ entries: [QueueEntry], at time: Double = QueueWatcher.monotonicNow) {
        self.entries = entries
        watcher.observe(entries, at: time)
        if selected == nil || !entries.contains(where: { Self.key($0) == selected }) {
            // The row that took the selected one's place, else the first.
            let index = min(selectedIndex ?? 0, max(0, entries.count - 1))
            selected = entries.indices.contains(index) ? Self.key(entries[index]) : nil
        }
    }

    private var lastIndex: Int?

    var selectedIndex: Int? {
        entries.firstIndex { Self.key($0) == selected } ?? lastIndex
    }

    var selectedEntry: QueueEntry? { entries.first { Self.key($0) == selected } }

    mutating func move(by step: Int) {
        guard !entries.isEmpty else { return }
        let index = min(max(0, (selectedIndex ?? 0) + step), entries.count - 1)
        selected = Self.key(entries[index])
        lastIndex = index
    }

    /// The screen: a summary line, the table's header, the rows that fit (the selected one in
    /// reverse video), the message line and the keys; every line at most `width - 1` columns.
    mutating func screen(width: Int, height: Int) -> [String] {
        let usable = max(1, width - 1)
        let downloads = entries.compactMap(\.download)
        func count(_ state: DownloadState) -> Int { downloads.filter { $0.state == state }.count }
        let rate = watcher.rates.total(now: watcher.now)
        var summary = "courier top  \(Set(entries.map(\.transactionId)).count) transactions  \(downloads.count) downloads: "
            + "\(count(.active)) active, \(count(.paused)) paused, \(count(.waiting)) waiting, \(count(.failed)) failed"
        if count(.active) > 0 { summary += "  total \(ProgressLayout.rate(rate))" }
        summary += throughAgent ? "  (agent)" : "  (no agent)"

        let priorities = entries.map(TopPriority.priority(of:))
        let showPriority = priorities.contains { $0 != nil }
        let bar = width >= 100 ? 10 : nil
        var columns: [TableLayout.Column] = [
            .init("ID", minimum: QueueFormat.uniquePrefix(entries.map(Self.key)), middle: false),
            .init("NAME", minimum: 12),
            .init("STATE", minimum: 7, middle: false),
            .init("PROGRESS", short: "DONE", minimum: 4, middle: false),
            .init("RATE", minimum: 11, middle: false, dropOrder: 4),
            .init("ETA", minimum: 6, middle: false, dropOrder: 3),
        ]
        if showPriority { columns.append(.init("PRIO", minimum: 4, middle: false, dropOrder: 5)) }
        columns += [.init("OWNER", minimum: 10, dropOrder: 1), .init("ERROR", minimum: 10, middle: false, dropOrder: 2)]
        let table = TableLayout(columns: columns)
        let rows = entries.enumerated().map { index, entry in
            row(entry, bar: bar, priority: showPriority ? priorities[index] ?? "-" : nil)
        }
        let lines = table.lines(rows, width: usable)
        var keys = "Up/Down j/k select  p pause  r resume  c cancel  q quit"
        if showPriority { keys += "  +/- priority" }
        // Rows that fit between the header and the two last lines.
        let visible = max(1, height - 4)
        if let index = selectedIndex {
            if index < offset { offset = index }
            if index >= offset + visible { offset = index - visible + 1 }
        }
        offset = min(offset, max(0, entries.count - visible))
        var screen = [ProgressLayout.cut(summary, usable), lines.first ?? ""]
        if entries.isEmpty {
            screen.append(includeFinishedNote)
        }
        for (position, line) in lines.dropFirst().enumerated().dropFirst(offset).prefix(visible) {
            let selectedRow = entries.indices.contains(position) && Self.key(entries[position]) == selected
            screen.append(selectedRow ? "\u{1B}[7m" + line.padding(toLength: usable, withPad: " ", startingAt: 0) + "\u{1B}[0m" : line)
        }
        while screen.count < height - 2 { screen.append("") }
        screen.append(ProgressLayout.cut(message ?? "", usable))
        screen.append(ProgressLayout.cut(keys, usable))
        return Array(screen.prefix(max(1, height)))
    }

    private var includeFinishedNote: String { "No unfinished transactions (--all shows finished ones)." }

    /// A row's cells: id, name, state, progress, rate, ETA, [priority], owner, error.
    private func row(_ entry: QueueEntry, bar: Int?, priority: String?) -> [String] {
        var cells: [String]
        if let d = entry.download {
            let received = min(d.length, max(0, d.bytesReceived))
            let fraction = d.state == .finished ? 1 : d.length > 0 ? Double(received) / Double(d.length) : d.progress
            let clamped = min(1, max(0, fraction.isFinite ? fraction : 0))
            let percent = "\(Int(clamped * 100))%"
            var progress = String(repeating: " ", count: max(0, 4 - percent.count)) + percent
            if let bar {
                let filled = min(bar, Int(clamped * Double(bar)))
                progress = "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: bar - filled) + "] " + progress
            }
            var rate = "-"
            var eta = "-"
            if d.state == .active {
                if d.length > 0 && received >= d.length {
                    eta = "unpacking"
                } else {
                    let measured = watcher.rate(d.id)
                    rate = ProgressLayout.rate(measured)
                    eta = ProgressLayout.eta(d.length - received, at: measured).replacingOccurrences(of: "ETA ", with: "")
                }
            }
            cells = [d.id, d.contentIdentifier, QueueWatcher.stateText(entry), progress, rate, eta]
        } else {
            cells = [entry.transactionId, entry.productId, QueueWatcher.stateText(entry), "-", "-", "-"]
        }
        if let priority { cells.append(priority) }
        var owner = "-"
        if let lease = entry.lease {
            owner = "\(lease.owner.pid)@\(lease.owner.host)" + (entry.ownerAlive == true ? "" : " (dead)")
        }
        cells += [owner, entry.download.map(QueueFormat.errorText) ?? "-"]
        return cells
    }
}

/// The full-screen `top` on a terminal: the alternate screen, keys read raw (no echo, no line
/// editing) from standard input, redrawn every `interval` seconds and on a resize; the terminal
/// is restored on q, on an error, and on SIGINT or SIGTERM (which then end the process as they
/// would have).
struct TopScreen {
    enum Event: Sendable {
        case tick, resize, key(TerminalKey), signal(Int32)
    }

    let source: TopSource
    let interval: Double
    let iterations: Int?

    func run() async throws {
        let terminal = RawTerminal()
        terminal.enter()
        let (events, continuation) = AsyncStream<Event>.makeStream()
        // Signals arrive as events; their default actions wait until the terminal is restored.
        var signalSources: [any DispatchSourceSignal] = []
        for number in [SIGINT, SIGTERM, SIGHUP, SIGWINCH] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number == SIGWINCH ? .resize : .signal(number)) }
            source.resume()
            signalSources.append(source)
        }
        let timer = RedrawTimer(interval: interval)
        timer.start { continuation.yield(.tick) }
        if terminal.readsKeys {
            Thread.detachNewThread {
                var buffer = [UInt8](repeating: 0, count: 64)
                while true {
                    let count = read(STDIN_FILENO, &buffer, buffer.count)
                    if count < 0 && errno == EINTR { continue }
                    if count <= 0 { return }
                    for key in TerminalKey.parse(Array(buffer[0..<count])) { continuation.yield(.key(key)) }
                }
            }
        }
        var model = TopModel()
        var ending: Int32?
        var refreshes = 0
        do {
            defer {
                timer.cancel()
                for source in signalSources { source.cancel() }
                terminal.leave()
            }
            try await refresh(&model)
            refreshes += 1
            draw(&model)
            loop: for await event in events {
                switch event {
                case .tick:
                    try await refresh(&model)
                    refreshes += 1
                    if let iterations, refreshes >= iterations { break loop }
                case .resize:
                    break
                case .signal(let number):
                    ending = number
                    break loop
                case .key(let key):
                    if try await handle(key, &model) == false { break loop }
                }
                draw(&model)
            }
        }
        if let ending {
            // Restored: end as the signal would have ended top.
            signal(ending, SIG_DFL)
            raise(ending)
        }
    }

    private func refresh(_ model: inout TopModel) async throws {
        let reading = try await source.read()
        model.throughAgent = reading.throughAgent
        model.update(reading.entries)
    }

    private func draw(_ model: inout TopModel) {
        let (width, height) = RawTerminal.size()
        let lines = model.screen(width: width, height: height)
        // Home, each line over the old one (cleared to its end), then the rest cleared.
        let text = "\u{1B}[H" + lines.map { $0 + "\u{1B}[K" }.joined(separator: "\r\n") + "\u{1B}[J"
        RawTerminal.write(text)
    }

    /// Acts on `key`; false when top should end.
    private func handle(_ key: TerminalKey, _ model: inout TopModel) async throws -> Bool {
        if let pending = model.confirmingCancel {
            model.confirmingCancel = nil
            if key == .character("y") || key == .character("Y"), let entry = model.entries.first(where: { TopModel.key($0) == pending }) {
                model.message = await act(.cancel(.id(TopModel.key(entry))), verb: "cancelled", entry)
                try await refresh(&model)
            } else {
                model.message = "not cancelled"
            }
            return true
        }
        switch key {
        case .up, .character("k"): model.move(by: -1)
        case .down, .character("j"): model.move(by: 1)
        case .pageUp: model.move(by: -10)
        case .pageDown: model.move(by: 10)
        case .home, .character("g"): model.move(by: -model.entries.count)
        case .end, .character("G"): model.move(by: model.entries.count)
        case .character("q"), .character("Q"): return false
        case .character("p"), .character("r"):
            guard let entry = model.selectedEntry else { return true }
            let pause = key == .character("p")
            let target = QueueTarget.id(TopModel.key(entry))
            model.message = await act(pause ? .pause(target) : .resume(target), verb: pause ? "paused" : "resumed", entry)
            try await refresh(&model)
        case .character("c"):
            guard let entry = model.selectedEntry else { return true }
            model.confirmingCancel = TopModel.key(entry)
            model.message = "cancel \(entry.download?.contentIdentifier ?? entry.productId) and delete its partial data? (y/n)"
        case .character("+"), .character("-"):
            guard let entry = model.selectedEntry else { return true }
            do {
                model.message = try await TopPriority.change(entry, by: key == .character("+") ? 1 : -1, control: source.control())
            } catch {
                model.message = "courier: " + ((error as? CourierError)?.message ?? "\(error)")
            }
        default: break
        }
        return true
    }

    /// Performs `command` through the agent or on the store; the line that says what it did.
    private func act(_ command: QueueCommand, verb: String, _ entry: QueueEntry) async -> String {
        let name = entry.download?.contentIdentifier ?? entry.productId
        do {
            let changed = try await source.control().perform(command).downloads
            if changed.isEmpty { return "\(name): nothing to do (it is \(QueueWatcher.stateText(entry)))" }
            return changed.map { "\(verb) \($0.contentIdentifier): now \($0.state.rawValue)" }.joined(separator: "; ")
        } catch {
            return "courier: " + ((error as? CourierError)?.message ?? "\(error)")
        }
    }
}

/// The terminal of `top`: standard input without echo and line editing (signals still raised by
/// Ctrl-C, output processing kept), the alternate screen and a hidden cursor; `leave` restores
/// all of it. Used from one task.
final class RawTerminal: Sendable {
    private let original: termios?

    init() {
        var settings = termios()
        original = isatty(STDIN_FILENO) == 1 && tcgetattr(STDIN_FILENO, &settings) == 0 ? settings : nil
    }

    /// Whether keys can be read (standard input is a terminal).
    var readsKeys: Bool { original != nil }

    func enter() {
        if var raw = original {
            raw.c_lflag &= ~tcflag_t(ICANON | ECHO | IEXTEN)
            withUnsafeMutableBytes(of: &raw.c_cc) { bytes in
                bytes[Int(VMIN)] = 1
                bytes[Int(VTIME)] = 0
            }
            _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw)
        }
        // The alternate screen, the cursor hidden, the screen cleared.
        Self.write("\u{1B}[?1049h\u{1B}[?25l\u{1B}[H\u{1B}[2J")
    }

    func leave() {
        Self.write("\u{1B}[0m\u{1B}[?25h\u{1B}[?1049l")
        if var settings = original { _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &settings) }
    }

    /// The size of the terminal on standard output (80x24 when it cannot be told).
    static func size() -> (columns: Int, rows: Int) {
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 else { return (80, 24) }
        return (Int(size.ws_col), Int(size.ws_row))
    }

    static func write(_ text: String) {
        _ = Array(text.utf8).withUnsafeBytes { writeAll(STDOUT_FILENO, $0) }
    }
}
