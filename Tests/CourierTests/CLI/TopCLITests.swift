import Courier
import CourierTestSupport
import Foundation
import Logging
import Testing

@testable import CourierCLI

#if canImport(Glibc)
import Glibc
#endif

/// A store for the terminal tests: one waiting download per product of `products`, in
/// transactions named `t1`, `t2`…; returns the queue and its entries.
private func seededStore(_ directory: TemporaryDirectory, products: [String]) throws -> (PaymentQueue, [QueueEntry]) {
    let queue = try QueueFixtures.queue(directory)
    for (index, product) in products.enumerated() {
        let transaction = QueueFixtures.transaction("t\(index + 1)", product: product)
        try queue.add([transaction], content: [QueueFixtures.content(for: transaction, payload: Data(count: 3 << 20))])
    }
    return (queue, try queue.entries())
}

/// The rows of `courier top`, its keys, and the bars of `status --watch` and deliver: a paused
/// row shows no rate or ETA (issue 31, items 5 and 6).
@Suite("top: the model, the keys, paused rows")
struct TopModelTests {
    @Test("arrow keys (normal and application mode), page keys and letters are read from a terminal's bytes")
    func keys() {
        let bytes: [UInt8] = [0x1B, 0x5B, 0x41, 0x6A, 0x1B, 0x4F, 0x42, 0x1B, 0x5B, 0x36, 0x7E, 0x71, 0x01]
        #expect(TerminalKey.parse(bytes) == [.up, .character("j"), .down, .pageDown, .character("q")])
    }

    @Test("an active row shows its measured rate and ETA; a paused one with stale figures in the store shows neither")
    func pausedRowHasNoRate() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var (_, entries) = try seededStore(directory, products: ["com.example.moving", "com.example.stopped"])
        entries[0].download?.state = .active
        entries[0].download?.bytesReceived = 1 << 20
        entries[1].download?.state = .paused
        entries[1].download?.pauseReason = .user
        entries[1].download?.bytesReceived = 1 << 19
        // What a store kept from before the pause: it must not be shown.
        entries[1].download?.rate = 777_777
        entries[1].download?.timeRemaining = 99
        var model = TopModel()
        model.update(entries, at: 10)
        entries[0].download?.bytesReceived += 200_000
        model.update(entries, at: 11)
        let screen = model.screen(width: 120, height: 12)
        #expect(screen.count == 12)
        for line in screen { #expect(line.replacingOccurrences(of: "\u{1B}[7m", with: "").replacingOccurrences(of: "\u{1B}[0m", with: "").count <= 119, "\(line)") }
        let moving = try #require(screen.first { $0.contains("com.example.moving") })
        let stopped = try #require(screen.first { $0.contains("com.example.stopped") })
        #expect(moving.contains("195.3 KiB/s"), "\(moving)")
        #expect(moving.contains("active"), "\(moving)")
        #expect(stopped.contains("paused") && !stopped.contains("/s") && !stopped.contains("759.5"), "\(stopped)")
        #expect(screen[0].contains("1 active, 1 paused"), "\(screen[0])")
        #expect(screen.last?.contains("p pause") == true)

        // The same records in deliver's view (and status --watch's): the paused bar says so.
        let records = entries.compactMap(\.download)
        var rates = RateWindow()
        rates.record(records[0].id, bytes: 1 << 20, at: 10)
        rates.record(records[0].id, bytes: records[0].bytesReceived, at: 11)
        let lines = DeliveryProgressView.render(records, rates: rates, now: 11, width: 100)
        let bar = try #require(lines.first { $0.hasPrefix("com.example.stopped") })
        #expect(bar.hasSuffix("paused") && !bar.contains("/s"), "\(bar)")
        #expect(lines.first { $0.hasPrefix("com.example.moving") }?.contains("/s  ETA ") == true, "\(lines)")
        // Nothing moving: the total says paused, not a rate of long ago.
        entries[0].download?.state = .paused
        let still = DeliveryProgressView.render(entries.compactMap(\.download), rates: RateWindow(), now: 12, width: 100)
        #expect(still.last?.hasSuffix("paused") == true && still.allSatisfy { !$0.contains("/s") }, "\(still)")
    }

    @Test("the selection follows its row when the list changes, and moves with the keys within bounds")
    func selectionFollowsRow() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (_, entries) = try seededStore(directory, products: ["com.example.a", "com.example.b", "com.example.c"])
        var model = TopModel()
        model.update(entries)
        #expect(model.selectedEntry?.productId == "com.example.a")
        model.move(by: 1)
        #expect(model.selectedEntry?.productId == "com.example.b")
        model.update(entries.reversed())
        #expect(model.selectedEntry?.productId == "com.example.b")
        model.move(by: 10)
        #expect(model.selectedEntry?.productId == "com.example.a")
        model.move(by: -10)
        #expect(model.selectedEntry?.productId == "com.example.c")
        // The selected row leaves: the row in its place is selected.
        model.move(by: 1)
        model.update(entries.filter { $0.productId != "com.example.b" })
        #expect(model.selectedEntry != nil)
    }
}

@Suite("list fits the terminal: TableLayout")
struct TableLayoutTests {
    private let rows = [
        ["2000000000000001", "3f2a9c0d1e2b4a5c", "com.example.a-rather-long-content-identifier-for-winter-v1", "active", "42%", "150.0 KiB/s", "18m32s", "-", "1234@builder", "127.0.0.1:8080"],
        ["2000000000000002", "3f2a9c0d77777777", "com.example.a-rather-long-content-identifier-for-winter-v2", "paused", "10%", "-", "-", "-", "-", "-"],
    ]

    @Test("at 60 and 120 columns no line is wider than the terminal; ids keep a unique prefix, names both ends", arguments: [60, 120])
    func fits(width: Int) {
        let lines = QueueFormat.listTable(rows).lines(rows, width: width)
        #expect(lines.count == 3)
        for line in lines { #expect(line.count <= width, "\(line.count): \(line)") }
        #expect(lines[1].contains("3f2a9c0d1") && lines[2].contains("3f2a9c0d7"), "\(lines)")
        #expect(lines[1].contains("com.") && lines[1].contains("v1") && lines[2].contains("v2"), "\(lines)")
        #expect(lines[1].contains("active") && lines[2].contains("paused"))
        if width == 60 {
            #expect(!lines[0].contains("SOURCE") && !lines[0].contains("OWNER"), "\(lines[0])")
            #expect(lines[1].contains("…"))
        } else {
            // SOURCE and OWNER go before a name is cut.
            #expect(lines[0].contains("TRANSACTION") && lines[0].contains("RATE") && lines[0].contains("ERROR"), "\(lines[0])")
            #expect(lines[1].contains("com.example.a-rath"), "\(lines[1])")
        }
    }

    @Test("without a terminal every value is in full")
    func fullValues() {
        let lines = QueueFormat.listTable(rows).lines(rows, width: nil)
        #expect(lines[1].contains(rows[0][2]) && lines[1].contains("3f2a9c0d1e2b4a5c") && lines[1].hasSuffix("127.0.0.1:8080"))
        #expect(QueueFormat.uniquePrefix(["3f2a9c0d1e2b4a5c", "3f2a9c0d77777777"]) == 10)
        #expect(QueueFormat.uniquePrefix(["a", "b"]) == 8)
    }
}

/// tmux on a private socket in the test's folder: a detached session of a given size running
/// one shell command; the screen is read with capture-pane.
struct Tmux {
    let socket: URL

    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux") }

    init(_ directory: TemporaryDirectory, command: String, width: Int, height: Int = 30) throws {
        socket = directory.appending("tmux.sock")
        // Not through Foundation's Process: the server tmux forks keeps the descriptors it was
        // given, and Process would wait for it to exit. system(3) waits for the shell alone.
        let line = ["env", "-u", "TMUX", "/usr/bin/tmux", "-S", socket.path, "new-session", "-d", "-x", "\(width)", "-y", "\(height)", command]
            .map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let status = system(line + " </dev/null >/dev/null 2>&1")
        guard status == 0 else { throw CourierError(.internal, "tmux new-session: status \(status)") }
    }

    @discardableResult
    func run(_ arguments: [String]) throws -> Shell.Result {
        try Shell.run("/usr/bin/env", ["-u", "TMUX", "/usr/bin/tmux", "-S", socket.path] + arguments)
    }

    func screen() throws -> [String] {
        try run(["capture-pane", "-p"]).stdout.components(separatedBy: "\n")
    }

    /// The screen once `condition` holds for it (polled for up to `timeout` seconds), else the last one.
    func screen(until condition: ([String]) -> Bool, timeout: Double = 30) throws -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        var lines = try screen()
        while !condition(lines) && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.1)
            lines = try screen()
        }
        return lines
    }

    func keys(_ keys: String...) throws { try run(["send-keys"] + keys) }

    func stop() { _ = try? run(["kill-server"]) }
}

private func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }

private func waitFor(_ timeout: Double = 30, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.1)
    }
    return try condition()
}

@Suite("top, status --watch and list on a terminal (the built courier binary)")
struct TopCLITests {
    @Test(
        "top in tmux: rows of a slow delivery from nginx, p pauses it in the store, q exits 0 and restores the terminal",
        .enabled(if: NginxServer.isAvailable && Tmux.isAvailable, "nginx or tmux is not installed"))
    func topInTmux() throws {
        // 1 MiB at 64 KiB/s: about 16 s, far longer than the test needs it active.
        let shop = try Shop(payloadSize: 1 << 20, rateLimit: "64k")
        defer { shop.stop() }
        let product = Shop.products[0]
        let receipt = try shop.receipt([product])
        let deliver = try shop.start(shop.deliverArguments(receipt))
        defer {
            if deliver.isRunning { deliver.terminate() }
            deliver.waitUntilExit()
        }
        func state() throws -> String? {
            let list = try shop.courier(["list", "--json"])
            return (list.events.first?["entries"] as? [[String: Any]])?.first?["state"] as? String
        }
        #expect(try waitFor { try state() == "active" }, "the delivery never became active")

        let config = shop.directory.appending("courier.json").path
        let exitFile = shop.directory.appending("top.exit").path
        let sttyFile = shop.directory.appending("top.stty").path
        let top = ([CourierBinary.url.path, "top", "--storage", shop.storage.path]).map(quoted).joined(separator: " ")
        let command =
            "COURIER_CONFIG=\(quoted(config)) \(top); echo $? > \(quoted(exitFile)); stty -a > \(quoted(sttyFile)); sleep 60"
        let tmux = try Tmux(shop.directory, command: command, width: 120)
        defer { tmux.stop() }

        let running = try tmux.screen { lines in lines.contains { $0.contains(product) && $0.contains("active") && $0.contains("B/s") } }
        let row = try #require(running.first { $0.contains(product) }, "\(running.joined(separator: "\n"))")
        #expect(running[0].hasPrefix("courier top"), "\(running[0])")
        let header = running[1]
        for column in ["ID", "NAME", "STATE", "PROGRESS", "RATE", "ETA", "OWNER", "ERROR"] {
            #expect(header.contains(column), "\(header)")
        }
        #expect(row.contains("%") && row.contains("[#") || row.contains("[-"), "\(row)")
        #expect(row.contains("\(deliver.processIdentifier)@"), "the owner is the delivering process: \(row)")
        #expect(running.allSatisfy { $0.count <= 120 })
        #expect(try tmux.run(["display", "-p", "#{alternate_on}"]).stdout.hasPrefix("1"))

        try tmux.keys("p")
        #expect(try waitFor { try state() == "paused" }, "p did not pause the download in the store")
        let paused = try tmux.screen { lines in lines.contains { $0.contains(product) && $0.contains("paused") } }
        let pausedRow = try #require(paused.first { $0.contains(product) }, "\(paused.joined(separator: "\n"))")
        #expect(!pausedRow.contains("B/s"), "a paused row shows no rate: \(pausedRow)")
        #expect(paused.contains { $0.contains("paused \(product): now paused") }, "\(paused.joined(separator: "\n"))")

        // A narrower terminal (SIGWINCH): redrawn for its width, the bar gives way to the percentage.
        #expect(row.contains("["), "\(row)")
        try tmux.run(["resize-window", "-x", "70", "-y", "30"])
        let narrow = try tmux.screen { lines in lines.contains { $0.contains("paused") && $0.contains("%") && !$0.contains("[") } }
        #expect(narrow.contains { $0.contains("paused") && !$0.contains("[") }, "\(narrow.joined(separator: "\n"))")

        try tmux.keys("q")
        #expect(waitFor { FileManager.default.fileExists(atPath: sttyFile) }, "top did not exit on q")
        #expect((try? String(contentsOfFile: exitFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        let stty = (try? String(contentsOfFile: sttyFile, encoding: .utf8)) ?? ""
        #expect(stty.contains(" icanon") && stty.contains(" echo ") && !stty.contains("-icanon"), "\(stty)")
        #expect(try tmux.run(["display", "-p", "#{alternate_on}"]).stdout.hasPrefix("0"))
    }

    @Test("top on SIGTERM restores the terminal before it ends", .enabled(if: Tmux.isAvailable, "tmux is not installed"))
    func topRestoresOnSignal() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        _ = try seededStore(directory, products: ["com.example.one"])
        let sttyFile = directory.appending("stty").path
        let pidFile = directory.appending("pid").path
        let top = [CourierBinary.url.path, "top", "--storage", directory.appending("Storage").path].map(quoted).joined(separator: " ")
        let command = "sh -c 'echo $$ > \(pidFile); exec \"$0\" \"$@\"' \(top); stty -a > \(quoted(sttyFile)); sleep 60"
        let tmux = try Tmux(directory, command: command, width: 80)
        defer { tmux.stop() }
        let screen = try tmux.screen { $0.contains { $0.contains("com.example.one") } }
        #expect(screen.contains { $0.contains("com.example.one") && $0.contains("waiting") }, "\(screen.joined(separator: "\n"))")
        let pid = try #require(Int32((try? String(contentsOfFile: pidFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""))
        kill(pid, SIGTERM)
        #expect(waitFor { FileManager.default.fileExists(atPath: sttyFile) }, "top did not end on SIGTERM")
        let stty = (try? String(contentsOfFile: sttyFile, encoding: .utf8)) ?? ""
        #expect(stty.contains(" icanon") && !stty.contains("-echo "), "\(stty)")
        #expect(try tmux.run(["display", "-p", "#{alternate_on}"]).stdout.hasPrefix("0"))
    }

    @Test("not on a terminal top prints a line per download once, then only changes; --json ends with a result")
    func plainLines() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (queue, entries) = try seededStore(directory, products: ["com.example.one", "com.example.two"])
        try queue.pause(entries.compactMap(\.download?.id))
        let storage = directory.appending("Storage").path
        let environment = CourierBinary.isolatedEnvironment(directory)
        let plain = try CourierBinary.run(["top", "-n", "3", "--interval", "0.1", "--storage", storage], environment: environment)
        #expect(plain.status == 0, "\(plain.stderr)")
        let lines = plain.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2, "\(plain.stdout)")
        for (line, entry) in zip(lines, entries) {
            #expect(line.hasPrefix(entry.download?.id ?? "?") && line.contains("paused") && !line.contains("B/s"), "\(line)")
        }
        let json = try CourierBinary.run(["top", "--json", "-n", "1", "--storage", storage], environment: environment)
        #expect(json.status == 0, "\(json.stderr)")
        #expect(json.events.last?["event"] as? String == "result")
        #expect((json.events.last?["entries"] as? [Any])?.count == 2, "\(json.stdout)")
        let bad = try CourierBinary.run(["top", "--interval", "0", "--storage", storage], environment: environment)
        #expect(bad.status == 2 && bad.stderr.hasPrefix("courier: "), "\(bad.stderr)")
        let none = try CourierBinary.run(["top", "-n", "1", "--storage", directory.appending("none").path], environment: environment)
        #expect(none.status == 1 && none.stderr.contains("no Courier store"), "\(none.stderr)")
    }

    @Test("status --watch on a terminal draws bars; a paused download shows no rate or ETA")
    func statusWatchBars() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (queue, entries) = try seededStore(directory, products: ["com.example.one", "com.example.two"])
        try queue.pause(entries.compactMap(\.download?.id))
        let terminal = try PseudoTerminal(columns: 80)
        let process = Process()
        process.executableURL = CourierBinary.url
        process.arguments = ["status", "--watch", "--storage", directory.appending("Storage").path]
        process.environment = CourierBinary.isolatedEnvironment(directory)
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = terminal.secondary
        try process.run()
        terminal.closeSecondary()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let text = terminal.output().map(\.text).joined()
        let lines = text.components(separatedBy: CharacterSet(charactersIn: "\r\n")).map {
            $0.replacingOccurrences(of: "\u{1B}\\[[0-9]*[AJ]", with: "", options: .regularExpression)
        }.filter { !$0.isEmpty }
        for product in ["com.example.one", "com.example.two"] {
            let bar = try #require(lines.first { $0.hasPrefix(product) }, "\(text.debugDescription)")
            #expect(bar.contains("%") && bar.hasSuffix("paused") && !bar.contains("/s"), "\(bar)")
        }
        #expect(lines.contains { $0.hasPrefix("total (0/2 done)") && $0.hasSuffix("paused") }, "\(lines)")
        #expect(lines.allSatisfy { $0.count < 80 })
    }

    @Test("list in tmux at 60 and 120 columns: no line wraps, ids stay distinguishable", .enabled(if: Tmux.isAvailable, "tmux is not installed"), arguments: [60, 120])
    func listFits(width: Int) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let products = ["com.example.a-rather-long-content-identifier-for-winter-v1", "com.example.a-rather-long-content-identifier-for-winter-v2"]
        let (_, entries) = try seededStore(directory, products: products)
        let outFile = directory.appending("done").path
        let list = [CourierBinary.url.path, "list", "--storage", directory.appending("Storage").path].map(quoted).joined(separator: " ")
        let tmux = try Tmux(directory, command: "\(list); echo $? > \(quoted(outFile)); sleep 60", width: width)
        defer { tmux.stop() }
        #expect(waitFor { FileManager.default.fileExists(atPath: outFile) })
        let screen = try tmux.screen().filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        // A wrapped line would be two lines of the pane: the header and one per download, no more.
        #expect(screen.count == 3, "\(screen.joined(separator: "\n"))")
        #expect(screen.first?.hasPrefix(width == 60 ? "DOWNLOAD" : "TRANSACTION") == true, "\(screen.first ?? "")")
        for entry in entries {
            let id = try #require(entry.download?.id)
            #expect(screen.contains { $0.contains(String(id.prefix(8))) }, "\(id): \(screen)")
        }
        #expect(screen.contains { $0.contains("v1") } && screen.contains { $0.contains("v2") }, "\(screen)")
        if width == 120 {
            // OWNER and SOURCE (empty here) went before the names were cut, and only a little.
            #expect(screen.contains { $0.contains("com.example.a-rather-long-") && $0.contains("-identifier-for-winter-v1") }, "\(screen)")
        }
        // Not a terminal: full values.
        let piped = try CourierBinary.run(["list", "--storage", directory.appending("Storage").path], environment: CourierBinary.isolatedEnvironment(directory))
        for product in products { #expect(piped.stdout.contains(product)) }
    }
}

@Suite("shell completion of download and product ids (the built courier binary)")
struct IdCompletionCLITests {
    @Test("the completion callback offers the store's ids for pause and products for --product, filtered by the word typed")
    func callback() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (_, entries) = try seededStore(directory, products: ["com.example.levels", "com.example.music"])
        let storage = directory.appending("Storage").path
        let environment = CourierBinary.isolatedEnvironment(directory)
        // What the generated bash script runs: ---completion SUBCOMMAND -- ARGUMENT CWORD CURSOR WORDS...
        let pause = try CourierBinary.run(
            ["---completion", "pause", "--", "positional@0", "4", "0", "courier", "pause", "--storage", storage, ""], environment: environment)
        #expect(pause.status == 0, "\(pause.stderr)")
        let offered = Set(pause.stdout.split(separator: "\n").map(String.init))
        let ids = Set(entries.compactMap(\.download?.id) + ["t1", "t2"])
        #expect(offered == ids, "\(pause.stdout)")
        let first = try #require(entries.first?.download?.id)
        let narrowed = try CourierBinary.run(
            ["---completion", "pause", "--", "positional@0", "4", "3", "courier", "pause", "--storage", storage, String(first.prefix(3))],
            environment: environment)
        #expect(narrowed.stdout.split(separator: "\n").allSatisfy { $0.hasPrefix(first.prefix(3)) } && narrowed.stdout.contains(first))
        let products = try CourierBinary.run(
            ["---completion", "deliver", "--", "--product", "5", "13", "courier", "deliver", "--storage=\(storage)", "--product", "com.example.m"],
            environment: environment)
        #expect(products.stdout.split(separator: "\n").map(String.init) == ["com.example.music"], "\(products.stdout)")
        // No store: nothing offered, nothing created, no error.
        let none = directory.appending("none")
        let empty = try CourierBinary.run(
            ["---completion", "resume", "--", "positional@0", "4", "0", "courier", "resume", "--storage", none.path, ""], environment: environment)
        #expect(empty.status == 0 && empty.stdout.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "\(empty.stdout)")
        #expect(!FileManager.default.fileExists(atPath: none.path))
    }

    @Test("bash: TAB after `courier cancel` completes the store's ids through the generated script")
    func bashCompletes() throws {
        guard FileManager.default.isExecutableFile(atPath: "/bin/bash") else { return }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (_, entries) = try seededStore(directory, products: ["com.example.levels"])
        let script = directory.appending("courier.bash")
        try Data(try CourierBinary.run(["--generate-completion-script", "bash"]).stdout.utf8).write(to: script)
        let storage = directory.appending("Storage").path
        let line = "courier cancel --storage \(storage) "
        let body = """
            source \(quoted(script.path))
            COMP_WORDS=(\(quoted(CourierBinary.url.path)) cancel --storage \(quoted(storage)) '')
            COMP_CWORD=4
            COMP_LINE=\(quoted(line))
            COMP_POINT=\(line.count)
            _courier
            printf '%s\\n' "${COMPREPLY[@]}"
            """
        try Data(body.utf8).write(to: directory.appending("complete.sh"))
        let result = try Shell.run("/bin/bash", [directory.appending("complete.sh").path])
        #expect(result.status == 0, "\(result.stderr)")
        let offered = Set(result.stdout.split(separator: "\n").map(String.init))
        let id = try #require(entries.first?.download?.id)
        #expect(offered.contains(id) && offered.contains("t1"), "\(result.stdout) \(result.stderr)")
    }
}
