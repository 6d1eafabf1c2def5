import Courier
import CourierTestSupport
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Progress that does not lie (issue 14, item 9): rates over a moving window of the active
/// transfers, names shortened first so the rate and the time left always fit, and a redraw at
/// least once a second however slowly the bytes come.
@Suite("progress: rates over a window, lines that fit")
struct ProgressReadoutTests {
    @Test("a stalled transfer's rate falls as the window slides past its last bytes")
    func stallFalls() {
        var window = RateWindow(span: 5)
        for second in 0...4 { window.record("a", bytes: Int64(second) * 150_000, at: Double(second)) }
        #expect(abs((window.rate("a", now: 4) ?? 0) - 150_000) < 1)
        // No bytes since second 4: the rate measured to now falls, and reaches 0 after the span.
        let later = window.rate("a", now: 7) ?? -1
        #expect(later < 150_000 * 0.75, "\(later)")
        #expect(window.rate("a", now: 9.5) == 0)
        window.record("a", bytes: 600_000, at: 10)
        #expect(window.rate("a", now: 10) == 0)
    }

    @Test("a rate is unknown until half a second has passed; a restart from zero starts a new series")
    func unknownThenRestart() {
        var window = RateWindow()
        window.record("a", bytes: 1000, at: 100)
        #expect(window.rate("a", now: 100.2) == nil)
        #expect(window.total(now: 100.2) == nil)
        window.record("a", bytes: 3000, at: 101)
        #expect(window.rate("a", now: 101) == 2000)
        window.record("a", bytes: 0, at: 102)
        #expect(window.rate("a", now: 102) == nil)
    }

    @Test("the total counts only active transfers: a finished one is removed")
    func totalActiveOnly() {
        var window = RateWindow()
        for second in 0...2 {
            window.record("slow", bytes: Int64(second) * 1000, at: Double(second))
            window.record("fast", bytes: Int64(second) * 1_000_000, at: Double(second))
        }
        #expect(window.total(now: 2) == 1_001_000)
        window.remove("fast")
        #expect(window.total(now: 2) == 1000)
        #expect(window.ids == ["slow"])
    }

    private let longName = "com.example.a-rather-long-content-identifier-for-the-winter-levels-v2"

    private func row(_ name: String) -> ProgressLayout.Row {
        ProgressLayout.Row(name: name, fraction: 0.42, amount: "120.5 MiB/287.0 MiB", rate: "150.0 KiB/s", eta: "ETA 18m32s")
    }

    @Test("at 60, 80 and 120 columns a long name is shortened in its middle; rate and ETA always fit", arguments: [60, 80, 120])
    func longNameFits(width: Int) {
        let lines = ProgressLayout.lines([row(longName), row("total (0/2 done)")], width: width)
        #expect(lines.count == 2)
        for line in lines {
            #expect(line.count <= width - 1, "\(line.count): \(line)")
            #expect(line.contains("150.0 KiB/s  ETA 18m32s"), "\(line)")
        }
        #expect(lines[0].hasPrefix("com."), "\(lines[0])")
        #expect(lines[0].contains("…"), "\(lines[0])")
        #expect(lines[0].contains("-v2"), "the end of the name is kept: \(lines[0])")
        // Names are aligned: the bars (or percentages) start in the same column.
        #expect(lines[0].firstIndex(of: "%").map { lines[0].distance(from: lines[0].startIndex, to: $0) }
            == lines[1].firstIndex(of: "%").map { lines[1].distance(from: lines[1].startIndex, to: $0) })
        if width >= 80 { #expect(lines[0].contains("[")) }
        if width >= 120 { #expect(lines[0].contains("120.5 MiB/287.0 MiB")) }
    }

    @Test("a short name is not padded past its length; very narrow terminals keep rate and ETA")
    func narrow() {
        let wide = ProgressLayout.lines([row("file.bin")], width: 120)
        #expect(wide[0].hasPrefix("file.bin ["), "\(wide[0])")
        let narrow = ProgressLayout.lines([row(longName)], width: 40)
        #expect(narrow[0].count <= 39)
        #expect(narrow[0].hasSuffix("150.0 KiB/s  ETA 18m32s"), "\(narrow[0])")
        #expect(ProgressLayout.middleCut("abcdefghij", 5) == "ab…ij")
        #expect(ProgressLayout.middleCut("abc", 5) == "abc")
    }
}

/// The displays' repeating redraw (`RedrawTimer`): calls until cancelled, never after, never twice started.
@Suite("progress: the redraw timer")
struct RedrawTimerTests {
    /// Waits for `count` calls of a timer's handler (its stream's elements).
    static func calls(_ stream: AsyncStream<Void>, count: Int) async -> Int {
        var seen = 0
        for await _ in stream {
            seen += 1
            if seen == count { break }
        }
        return seen
    }

    @Test("calls its handler again and again once started; cancel stops it and it does not start again")
    func callsUntilCancelled() async {
        let timer = RedrawTimer(interval: 0.005)
        #expect(!timer.isRunning)
        let (stream, continuation) = AsyncStream<Void>.makeStream()
        timer.start { continuation.yield() }
        #expect(timer.isRunning)
        #expect(await Self.calls(stream, count: 3) == 3)
        timer.cancel()
        #expect(!timer.isRunning)
        timer.start { continuation.yield() }
        #expect(!timer.isRunning)
        continuation.finish()
    }

    @Test("a second start keeps the first handler; a timer cancelled before it starts never runs")
    func startsOnce() async {
        let timer = RedrawTimer(interval: 0.005)
        let (first, firstCalls) = AsyncStream<Void>.makeStream()
        let second = Mutex(0)
        timer.start { firstCalls.yield() }
        timer.start { second.withLock { $0 += 1 } }
        #expect(await Self.calls(first, count: 2) == 2)
        timer.cancel()
        #expect(second.withLock { $0 } == 0)
        firstCalls.finish()

        let idle = RedrawTimer(interval: 0.005)
        idle.cancel()
        idle.start { second.withLock { $0 += 1 } }
        #expect(!idle.isRunning)
    }
}

@Suite("progress on a terminal (the built courier binary)")
struct ProgressCLITests {
    @Test("get at 50 KB/s on a 60-column terminal: redrawn at least every 2 s, bytes move, rate and ETA fit")
    func redrawsWhileSlow() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        // 200 KiB at 50 KB/s: about 4 s, less than one 256 KiB chunk of the transfer.
        let content = PackageFixtures.noise(200 << 10)
        var behavior = FaultOrigin.Behavior()
        behavior.bytesPerSecond = 50_000
        behavior.faultyResponses = 10
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let name = "winter-levels-with-a-name-much-longer-than-a-narrow-terminal-v1.2.3.bin"
        let terminal = try PseudoTerminal(columns: 60)
        let process = Process()
        process.executableURL = CourierBinary.url
        process.arguments = ["get", origin.url().absoluteString, "-o", folder.appending(name).path, "--config", config.path]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = terminal.secondary
        let started = Date()
        try process.run()
        terminal.closeSecondary()
        process.waitUntilExit()
        let ended = Date()
        #expect(process.exitStatus == 0)
        #expect(try Data(contentsOf: folder.appending(name)) == content)

        let chunks = terminal.output()
        let draws = chunks.filter { $0.text.contains("\u{1B}[J") }.map(\.time)
        #expect(draws.count >= 4, "\(draws.count) draws in \(ended.timeIntervalSince(started)) s")
        var previous = draws.first ?? started
        var longest = 0.0
        for time in draws.dropFirst() {
            longest = max(longest, time.timeIntervalSince(previous))
            previous = time
        }
        #expect(longest <= 2, "the bar froze for \(longest) s")
        // What was drawn: lines of at most 59 columns, the name shortened, rate and ETA kept,
        // and the amount moving (not one stale figure redrawn).
        let text = chunks.map(\.text).joined()
        let lines = text.components(separatedBy: "\u{1B}[J").dropFirst().compactMap { part -> String? in
            let line = part.components(separatedBy: CharacterSet(charactersIn: "\r\n\u{1B}")).first ?? ""
            return line.isEmpty ? nil : line
        }
        #expect(!lines.isEmpty, "\(text.debugDescription)")
        for line in lines {
            #expect(line.count <= 59, "\(line.count): \(line)")
            #expect(line.contains("B/s  ETA "), "\(line)")
            #expect(line.hasPrefix("winter") && line.contains("…"), "\(line)")
        }
        let amounts = Set(lines.compactMap { $0.components(separatedBy: "%  ").last?.components(separatedBy: "  ").first })
        #expect(amounts.count >= 3, "\(amounts)")
    }

    @Test(
        "deliver prints each delivered line when it happens, not when the slowest download ends",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func deliveredLinesAsTheyHappen() throws {
        let shop = try Shop(payloadSize: 64 * 1024)
        defer { shop.stop() }
        // The music package comes from an origin sending 20 KB/s (about 3 s); the others from nginx.
        let www = shop.directory.appending("www")
        let slow = "com.example.music"
        var behavior = FaultOrigin.Behavior()
        behavior.bytesPerSecond = 20_000
        behavior.faultyResponses = 100
        let origin = try FaultOrigin(content: try Data(contentsOf: www.appendingPathComponent("\(slow).zip")), behavior: behavior)
        defer { origin.stop() }
        let catalogFile = www.appendingPathComponent("catalog.json")
        var catalog = try Catalog.decode(try Data(contentsOf: catalogFile))
        for index in catalog.products.indices where catalog.products[index].productId == slow {
            catalog.products[index].content?.url = origin.url("/\(slow).zip").absoluteString
        }
        try catalog.encoded().write(to: catalogFile)
        let receipt = try shop.receipt(["com.example.levels", slow])
        _ = try shop.courier(["list", "--json"])  // writes the configuration file
        let out = shop.directory.appending("deliver.out")
        let process = try CourierBinary.start(
            shop.deliverArguments(receipt) + ["--storage", shop.storage.path],
            environment: ["COURIER_CONFIG": shop.directory.appending("courier.json").path], directory: shop.directory.url,
            stdout: out)
        // When each line appeared on standard output (polled; the run takes about 3 s).
        var seen: [String: Date] = [:]
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            let running = process.isRunning
            let text = (try? String(contentsOf: out, encoding: .utf8)) ?? ""
            for product in ["com.example.levels", slow] where seen[product] == nil && text.contains("delivered \(product) ") {
                seen[product] = Date()
            }
            if !running { break }
            usleep(20_000)
        }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        #expect(process.exitStatus == 0)
        let fast = try #require(seen["com.example.levels"])
        let last = try #require(seen[slow])
        #expect(last.timeIntervalSince(fast) >= 1, "the fast download's line came \(last.timeIntervalSince(fast)) s before the slow one's")
        #expect(shop.isPlaced("com.example.levels") && shop.isPlaced(slow))
        // Each said once.
        let text = try String(contentsOf: out, encoding: .utf8)
        #expect(text.components(separatedBy: "delivered com.example.levels ").count == 2, "\(text)")
    }
}
