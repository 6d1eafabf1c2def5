import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A second `deliver` on a store whose download another live process works (issue 14, item 4):
/// it names the owner at once, follows the owner's bytes from the store, and ends with the same
/// result; if the owner dies, it takes the download over.
@Suite("deliver beside another deliver on one store (the built courier binary, a throttled origin)")
struct SecondDeliverCLITests {
    /// One product whose 2 MiB package a FaultOrigin serves at `bytesPerSecond` (512 KiB/s:
    /// about 4 s), or a real nginx at `nginxRate` (its `limit_rate`); with `wrongDigest`, the
    /// catalog names another SHA-256, so whoever downloads it fails with `integrity`.
    struct Store {
        let directory: TemporaryDirectory
        let origin: FaultOrigin?
        let nginx: NginxServer?
        let arguments: [String]
        let environment: [String: String]
        let length: Int

        init(nginxRate: String? = nil, bytesPerSecond: Int = 512 << 10, wrongDigest: Bool = false) throws {
            directory = try TemporaryDirectory(prefix: "courier-second")
            let sandbox = try SandboxStore.create(at: directory.appending("sandbox"))
            let www = directory.appending("www")
            try FileManager.default.createDirectory(at: www, withIntermediateDirectories: true)
            let package = www.appendingPathComponent("levels.zip")
            try PackageFixtures.infoZip(
                product: "com.example.levels", version: "1.0", files: ["data.bin": PackageFixtures.noise(2 << 20)], at: package, level: 0)
            let bytes = try Data(contentsOf: package)
            length = bytes.count
            let url: URL
            if let nginxRate {
                let nginx = try NginxServer(root: www, extraLocations: "limit_rate \(nginxRate);")
                (self.nginx, origin, url) = (nginx, nil, nginx.url("/levels.zip"))
            } else {
                var behavior = FaultOrigin.Behavior()
                behavior.bytesPerSecond = bytesPerSecond
                let origin = try FaultOrigin(content: bytes, behavior: behavior)
                (nginx, self.origin, url) = (nil, origin, origin.url("/levels.zip"))
            }
            let content = Catalog.Content(
                url: url.absoluteString, sha256: QueueFixtures.sha256(wrongDigest ? Data("other".utf8) : bytes),
                length: Int64(bytes.count),
                version: "1.0", placement: .documents)
            let catalog = directory.appending("catalog.json")
            try Catalog(bundleId: "com.example.app", products: [Catalog.Product(productId: "com.example.levels", content: content)])
                .encoded().write(to: catalog)
            let receipt = directory.appending("receipt.txt")
            try Data((try sandbox.purchase(productId: "com.example.levels") + "\n").utf8).write(to: receipt)
            let config = directory.appending("courier.json")
            try Data(#"{"queue": {"heartbeatInterval": 0.5, "leaseDuration": 4}}"#.utf8).write(to: config)
            environment = ["COURIER_CONFIG": config.path]
            arguments = [
                "deliver", "--receipt", receipt.path, "--catalog", catalog.path, "--trust-root", sandbox.rootCertificateDERFile.path,
                "--environment", "Sandbox", "--storage", directory.appending("Storage").path,
            ]
        }

        /// Stops the origin and removes the folder.
        func remove() {
            origin?.stop()
            nginx?.stop()
            directory.remove()
        }

        func start(_ extra: [String], name: String) throws -> Process {
            try CourierBinary.start(
                arguments + extra, environment: environment, directory: directory.url, stdout: directory.appending("\(name).out"),
                stderr: directory.appending("\(name).err"))
        }

        func output(_ name: String, _ stream: String = "out") -> String {
            (try? String(contentsOf: directory.appending("\(name).\(stream)"), encoding: .utf8)) ?? ""
        }

        func events(_ name: String) -> [[String: Any]] {
            output(name).split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        }

        /// Waits (at most `seconds`) until `condition` holds; whether it did.
        func wait(_ seconds: Double, _ condition: () -> Bool) -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while !condition() {
                if Date() > deadline { return false }
                usleep(10_000)
            }
            return true
        }

        /// Waits until `process` exits (SIGKILL after `seconds`).
        func finish(_ process: Process, within seconds: Double = 120) {
            if !wait(seconds, { !process.isRunning }) { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }

        /// Starts the first deliver and waits until its download has bytes in.
        func startOwner() throws -> Process {
            let first = try start(["--json"], name: "first")
            let working = wait(60) {
                events("first").contains { $0["event"] as? String == "download" && (($0["bytesReceived"] as? Int) ?? 0) > 0 }
            }
            #expect(working, "the first deliver never reported bytes: \(output("first", "err"))")
            return first
        }
    }

    @Test(
        "--json: the owner named at once, its bytes as download events marked with it (nginx), then the same result",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func followsTheOwner() throws {
        // 2 MiB at 256 KiB/s: about 8 s, most of it left when the second starts.
        let store = try Store(nginxRate: "256k")
        defer { store.remove() }
        let first = try store.startOwner()
        defer { store.finish(first) }
        let launched = Date()
        let second = try store.start(["--json"], name: "second")
        defer { store.finish(second) }
        #expect(store.wait(60) { store.output("second").contains("waitingForOwner") }, "\(store.output("second", "err"))")
        let said = Date().timeIntervalSince(launched)
        // Said while the owner is still downloading; 0.1 s here.
        #expect(first.isRunning, "the owner line came only after the owner finished (\(said) s)")
        #expect(said < 10, "the owner line took \(said) s")
        store.finish(first)
        store.finish(second)
        #expect(first.exitStatus == 0, "\(store.output("first", "err"))")
        #expect(second.exitStatus == 0, "\(store.output("second", "err"))")

        let events = store.events("second")
        // The same owner object as `list` and `status` print (docs/json.md, "The owner object").
        let owner = "\(first.processIdentifier)@\(LeaseOwner.hostName())"
        func name(_ value: Any?) -> String? {
            guard let object = value as? [String: Any], let pid = object["pid"] as? Int, let host = object["host"] as? String,
                object["alive"] as? Bool == true
            else { return nil }
            return "\(pid)@\(host)"
        }
        let waiting = try #require(events.first)
        #expect(waiting["event"] as? String == "waitingForOwner", "\(events)")
        #expect((waiting["owners"] as? [Any])?.map(name) == [owner], "\(waiting)")
        // The owner's bytes as it writes them, each event marked with the owner and stamped.
        let active = events.filter { event in
            guard event["event"] as? String == "download", event["state"] as? String == "active",
                let bytes = event["bytesReceived"] as? Int
            else { return false }
            return bytes > 0 && bytes < store.length
        }
        let counts = active.compactMap { $0["bytesReceived"] as? Int }
        #expect(Set(counts).count >= 2, "the owner's progress was not followed: \(events)")
        #expect(counts == counts.sorted(), "bytes went backwards: \(counts)")
        for event in active {
            #expect(name(event["owner"]) == owner, "\(event)")
            #expect(event["time"] is String, "\(event)")
            #expect(((event["progress"] as? Double) ?? 0) > 0, "\(event)")
        }
        let finished = events.first { $0["event"] as? String == "download" && $0["state"] as? String == "finished" }
        #expect(name(finished?["owner"]) == owner, "\(events)")
        #expect(finished?["contentPath"] is String, "\(events)")
        // The same result as the owner's: the same content, delivered once, fetched once.
        let mine = try #require(events.last)
        let owners = try #require(store.events("first").last)
        #expect(mine["event"] as? String == "result")
        #expect(mine["content"] as? [String] == owners["content"] as? [String], "\(mine) vs \(owners)")
        #expect((owners["content"] as? [String])?.count == 1)
        #expect(store.nginx?.accessLog(atLeast: 1).count == 1, "the second fetched bytes itself")
    }

    @Test(
        "on a terminal: the owner's download drawn as a moving bar, then its delivered line (nginx)",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func drawsTheOwnersBar() throws {
        let store = try Store(nginxRate: "256k")
        defer { store.remove() }
        let first = try store.startOwner()
        defer { store.finish(first) }
        let terminal = try PseudoTerminal(columns: 100)
        let second = Process()
        second.executableURL = CourierBinary.url
        second.arguments = store.arguments
        second.environment = ProcessInfo.processInfo.environment.merging(store.environment) { $1 }
        second.currentDirectoryURL = store.directory.url
        second.standardInput = FileHandle.nullDevice
        let out = store.directory.appending("second.out")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        second.standardOutput = try FileHandle(forWritingTo: out)
        second.standardError = terminal.secondary
        try second.run()
        terminal.closeSecondary()
        defer { store.finish(second) }
        store.finish(first)
        store.finish(second)
        #expect(first.exitStatus == 0, "\(store.output("first", "err"))")
        #expect(second.exitStatus == 0)

        let text = terminal.output().map(\.text).joined()
        #expect(text.contains("another process (\(first.processIdentifier)@"), "\(text.debugDescription)")
        // The bars drawn (each block starts after an erase): the product's line, with an amount
        // that moves, a rate and an ETA.
        let lines = text.components(separatedBy: "\u{1B}[J").dropFirst().flatMap { block in
            block.components(separatedBy: CharacterSet(charactersIn: "\r\n"))
                .filter { $0.hasPrefix("com.example.levels") }
        }
        #expect(!lines.isEmpty, "no bar for the owner's download: \(text.debugDescription)")
        for line in lines { #expect(line.contains("B/s  ETA ") || line.contains("unpacking"), "\(line)") }
        let amounts = Set(lines.compactMap { line in
            line.components(separatedBy: "%  ").last?.components(separatedBy: "  ").first
        })
        #expect(amounts.count >= 2, "the bar did not move: \(lines)")
        let results = store.output("second")
        #expect(
            results.contains("delivered com.example.levels 1.0 to ") && results.contains(" (by another process)\n"),
            "\(results)")
    }

    @Test("the owner's failure is said when the owner records it, marked, once; the second ends with its error")
    func saysTheOwnersFailure() throws {
        // 2 MiB at 256 KiB/s: the owner fails its check after about 8 s, long after the second starts.
        let store = try Store(bytesPerSecond: 256 << 10, wrongDigest: true)
        defer { store.remove() }
        let first = try store.startOwner()
        defer { store.finish(first) }
        let second = try store.start([], name: "second")
        defer { store.finish(second) }
        #expect(store.wait(60) { store.output("second", "err").contains("another process (\(first.processIdentifier)@") })
        store.finish(first)
        store.finish(second)
        #expect(first.exitStatus == 6, "\(store.output("first", "err"))")
        #expect(second.exitStatus == 6, "\(store.output("second", "err"))")
        let said = store.output("second", "err")
        #expect(said.contains("courier: com.example.levels failed: "), "\(said)")
        #expect(said.contains("failed verification: SHA-256 is "), "\(said)")
        #expect(said.contains(" (by another process)\n"), "\(said)")
        #expect(said.components(separatedBy: "com.example.levels failed").count == 2, "said more than once: \(said)")
        #expect(store.output("second").isEmpty, "\(store.output("second"))")
        // The second fetched nothing itself.
        #expect(store.origin?.requests.count == 1)
    }

    @Test("on a terminal's terms: the owner line, then the same delivered line; taken over when the owner dies")
    func takesOverFromADeadOwner() throws {
        let store = try Store()
        defer { store.remove() }
        let first = try store.startOwner()
        defer { store.finish(first) }
        let second = try store.start([], name: "second")
        defer { store.finish(second) }
        #expect(store.wait(60) { store.output("second", "err").contains("another process (\(first.processIdentifier)@") })
        #expect(store.output("second", "err").contains("is delivering com.example.levels; waiting for it to finish"))
        kill(first.processIdentifier, SIGKILL)
        store.finish(second)
        #expect(second.exitStatus == 0, "\(store.output("second", "err"))")
        #expect(store.output("second").contains("delivered com.example.levels 1.0 to "), "\(store.output("second"))")
        let placed = store.directory.appending("Storage/Documents/com.example.levels/Contents/data.bin")
        #expect((try? Data(contentsOf: placed))?.count == 2 << 20)
        // The second resumed the partial file: its request asked for a range.
        let origin = try #require(store.origin)
        #expect(origin.requestedOffsets.count == 2)
        #expect((origin.requestedOffsets.last ?? 0) > 0, "\(origin.requestedOffsets)")
    }
}
