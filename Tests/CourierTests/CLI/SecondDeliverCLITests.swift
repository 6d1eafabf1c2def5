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
    /// One product whose 2 MiB package a FaultOrigin serves at 512 KiB/s (about 4 s).
    struct Store {
        let directory: TemporaryDirectory
        let origin: FaultOrigin
        let arguments: [String]
        let environment: [String: String]
        let length: Int

        init() throws {
            directory = try TemporaryDirectory(prefix: "courier-second")
            let sandbox = try SandboxStore.create(at: directory.appending("sandbox"))
            let package = directory.appending("levels.zip")
            try PackageFixtures.infoZip(
                product: "com.example.levels", version: "1.0", files: ["data.bin": PackageFixtures.noise(2 << 20)], at: package, level: 0)
            let bytes = try Data(contentsOf: package)
            length = bytes.count
            var behavior = FaultOrigin.Behavior()
            behavior.bytesPerSecond = 512 << 10
            origin = try FaultOrigin(content: bytes, behavior: behavior)
            let content = Catalog.Content(
                url: origin.url("/levels.zip").absoluteString, sha256: QueueFixtures.sha256(bytes), length: Int64(bytes.count),
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

    @Test("the second names the owner at once, follows its bytes from the store, and ends with the same result")
    func followsTheOwner() throws {
        let store = try Store()
        defer {
            store.origin.stop()
            store.directory.remove()
        }
        let first = try store.startOwner()
        defer { store.finish(first) }
        let launched = Date()
        let second = try store.start(["--json"], name: "second")
        defer { store.finish(second) }
        #expect(store.wait(60) { store.output("second").contains("waitingForOwner") }, "\(store.output("second", "err"))")
        let said = Date().timeIntervalSince(launched)
        // Said while the owner is still downloading (about 3 s of bytes are left); 0.1 s here.
        #expect(first.isRunning, "the owner line came only after the owner finished (\(said) s)")
        #expect(said < 10, "the owner line took \(said) s")
        store.finish(first)
        store.finish(second)
        #expect(first.terminationStatus == 0, "\(store.output("first", "err"))")
        #expect(second.terminationStatus == 0, "\(store.output("second", "err"))")

        let events = store.events("second")
        let waiting = try #require(events.first)
        #expect(waiting["event"] as? String == "waitingForOwner", "\(events)")
        #expect(waiting["owners"] as? [String] == ["\(first.processIdentifier)@\(LeaseOwner.hostName())"], "\(waiting)")
        // The owner's bytes, as it checkpoints them: several distinct counts while active.
        let counts = Set(events.compactMap { event -> Int? in
            guard event["event"] as? String == "download", event["state"] as? String == "active",
                let bytes = event["bytesReceived"] as? Int, bytes > 0, bytes < store.length
            else { return nil }
            return bytes
        })
        #expect(counts.count >= 2, "the owner's progress was not followed: \(events)")
        #expect(events.contains { $0["event"] as? String == "download" && $0["state"] as? String == "finished" })
        // The same result as the owner's: the same content, delivered once.
        let mine = try #require(events.last)
        let owners = try #require(store.events("first").last)
        #expect(mine["event"] as? String == "result")
        #expect(mine["content"] as? [String] == owners["content"] as? [String], "\(mine) vs \(owners)")
        #expect((owners["content"] as? [String])?.count == 1)
        #expect(store.origin.requests.count == 1, "the second fetched bytes itself")
    }

    @Test("on a terminal's terms: the owner line, then the same delivered line; taken over when the owner dies")
    func takesOverFromADeadOwner() throws {
        let store = try Store()
        defer {
            store.origin.stop()
            store.directory.remove()
        }
        let first = try store.startOwner()
        defer { store.finish(first) }
        let second = try store.start([], name: "second")
        defer { store.finish(second) }
        #expect(store.wait(60) { store.output("second", "err").contains("another process (\(first.processIdentifier)@") })
        #expect(store.output("second", "err").contains("is delivering com.example.levels; waiting for it to finish"))
        kill(first.processIdentifier, SIGKILL)
        store.finish(second)
        #expect(second.terminationStatus == 0, "\(store.output("second", "err"))")
        #expect(store.output("second").contains("delivered com.example.levels 1.0 to "), "\(store.output("second"))")
        let placed = store.directory.appending("Storage/Documents/com.example.levels/Contents/data.bin")
        #expect((try? Data(contentsOf: placed))?.count == 2 << 20)
        // The second resumed the partial file: its request asked for a range.
        #expect(store.origin.requestedOffsets.count == 2)
        #expect((store.origin.requestedOffsets.last ?? 0) > 0, "\(store.origin.requestedOffsets)")
    }
}
