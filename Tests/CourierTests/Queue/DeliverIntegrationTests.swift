import Courier
import CourierTestSupport
import Foundation
import Testing

/// A sandbox store, packages made by Info-ZIP `zip`, a catalog and an nginx origin on loopback.
struct Shop {
    let directory: TemporaryDirectory
    let sandbox: SandboxStore
    let nginx: NginxServer
    /// Product id → the payload file inside its package.
    let payloads: [String: Data]
    let placements: [String: Catalog.Placement]

    static let products = ["com.example.levels", "com.example.music", "com.example.maps"]

    init(payloadSize: Int = 64 * 1024, rateLimit: String? = nil) throws {
        directory = try TemporaryDirectory(prefix: "courier-shop")
        sandbox = try SandboxStore.create(at: directory.appending("sandbox"))
        let www = directory.appending("www")
        try FileManager.default.createDirectory(at: www, withIntermediateDirectories: true)
        var payloads: [String: Data] = [:]
        var placements: [String: Catalog.Placement] = [:]
        var products: [Catalog.Product] = []
        for (index, product) in Self.products.enumerated() {
            let payload = PackageFixtures.noise(payloadSize, seed: UInt64(index + 1))
            let package = www.appendingPathComponent("\(product).zip")
            try PackageFixtures.infoZip(product: product, version: "1.0", files: ["data.bin": payload], at: package, level: 0)
            let bytes = try Data(contentsOf: package)
            let placement: Catalog.Placement = index == 1 ? .cache : .documents
            payloads[product] = payload
            placements[product] = placement
            products.append(
                Catalog.Product(
                    productId: product,
                    content: Catalog.Content(
                        url: "\(product).zip", sha256: QueueFixtures.sha256(bytes), length: Int64(bytes.count),
                        version: "1.0", placement: placement)))
        }
        try Catalog(bundleId: "com.example.app", products: products).encoded().write(to: www.appendingPathComponent("catalog.json"))
        nginx = try NginxServer(root: www, extraLocations: rateLimit.map { "limit_rate \($0);" } ?? "")
        self.payloads = payloads
        self.placements = placements
    }

    /// A receipt file proving purchases of `products`.
    func receipt(_ products: [String], name: String = "receipt.txt") throws -> URL {
        let lines = try products.map { try sandbox.purchase(productId: $0) }
        let file = directory.appending(name)
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: file)
        return file
    }

    var storage: URL { directory.appending("Storage") }

    func courier(_ arguments: [String], storage: URL? = nil) throws -> CourierBinary.Result {
        try CourierBinary.run(arguments + common(storage: storage), environment: environment, directory: directory.url)
    }

    func start(_ arguments: [String]) throws -> Process {
        try CourierBinary.start(arguments + common(storage: nil), environment: environment, directory: directory.url)
    }

    private var environment: [String: String] {
        let config = directory.appending("courier.json")
        if !FileManager.default.fileExists(atPath: config.path) {
            let text = #"{"queue": {"heartbeatInterval": 0.5, "leaseDuration": 4}, "transfer": {"maxRetries": 2, "initialBackoff": 0.1}}"#
            try? Data(text.utf8).write(to: config)
        }
        return ["COURIER_CONFIG": config.path]
    }

    private func common(storage: URL?) -> [String] {
        ["--storage", (storage ?? self.storage).path]
    }

    func deliverArguments(_ receipt: URL) -> [String] {
        [
            "deliver", "--receipt", receipt.path, "--catalog", nginx.url("catalog.json").absoluteString,
            "--trust-root", sandbox.rootCertificateDERFile.path, "--environment", "Sandbox",
        ]
    }

    /// Whether `product`'s content is placed with the right bytes under `storage`.
    func isPlaced(_ product: String, storage: URL? = nil) -> Bool {
        let base = (storage ?? self.storage).appendingPathComponent(placements[product] == .cache ? "Caches" : "Documents")
        let file = base.appendingPathComponent(product).appendingPathComponent("Contents/data.bin")
        return (try? Data(contentsOf: file)) == payloads[product]
    }

    func stop() {
        nginx.stop()
        directory.remove()
    }
}

@Suite("courier deliver end to end (sandbox receipts, zip packages, nginx)", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct DeliverIntegrationTests {
    @Test("a purchase is delivered and finished; a second run does nothing and says so")
    func deliverTwice() throws {
        let shop = try Shop()
        defer { shop.stop() }
        let receipt = try shop.receipt(Shop.products)
        let first = try shop.courier(shop.deliverArguments(receipt) + ["--json"])
        #expect(first.status == 0, "\(first.stderr)")
        for product in Shop.products { #expect(shop.isPlaced(product), "\(product)") }
        let result = try #require(first.events.last)
        #expect(result["event"] as? String == "result")
        #expect((result["finishedTransactions"] as? [String])?.count == 3)
        #expect(first.events.contains { $0["event"] as? String == "download" && $0["state"] as? String == "finished" })
        let requests = shop.nginx.accessLog(atLeast: 1 + Shop.products.count).count  // the catalog, then a package each

        let list = try shop.courier(["list", "--all", "--json"])
        let entries = try #require(list.events.first?["entries"] as? [[String: Any]])
        #expect(entries.count == 3)
        #expect(entries.allSatisfy { $0["transactionState"] as? String == "finished" && $0["state"] as? String == "finished" })

        let second = try shop.courier(shop.deliverArguments(receipt))
        #expect(second.status == 0)
        #expect(second.stdout.contains("already delivered"))
        // Only the catalog was fetched again; no package.
        let after = shop.nginx.accessLog(atLeast: requests + 1).dropFirst(requests)
        #expect(after.allSatisfy { $0.contains("catalog.json") }, "\(Array(after))")
        // ... and revalidated from the cache under Storage/Catalogs: nginx answered 304.
        #expect(after.contains { $0.contains("catalog.json") && $0.contains("\" 304 ") }, "\(Array(after))")
        #expect(!(try FileManager.default.contentsOfDirectory(atPath: shop.storage.appendingPathComponent("Downloads").path)).contains { $0.hasSuffix(".part") })
    }

    @Test("on a terminal, deliver draws a bar per active download and a total line, redrawn in place")
    func progressOnTerminal() throws {
        // ~1 s per package, so the bars are drawn while bytes flow.
        let shop = try Shop(payloadSize: 256 << 10, rateLimit: "256k")
        defer { shop.stop() }
        let receipt = try shop.receipt(Shop.products)
        _ = try shop.courier(["list", "--json"])  // writes the configuration file
        func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let command =
            "stty cols 80; COURIER_CONFIG=\(quoted(shop.directory.appending("courier.json").path)) exec "
            + ([CourierBinary.url.path] + shop.deliverArguments(receipt) + ["--storage", shop.storage.path]).map(quoted).joined(separator: " ")
        // util-linux script(1) gives the command a pseudo-terminal; its output is what a user sees.
        let run = try Shell.run("/usr/bin/script", ["-qfec", command, "/dev/null"], directory: shop.directory.url)
        #expect(run.status == 0, "\(run.stdout) \(run.stderr)")
        for product in Shop.products { #expect(shop.isPlaced(product), "\(product)") }
        let screen = run.stdout
        // Redrawn in place: back up over the last block, clear to the end of the screen.
        #expect(screen.contains("\u{1B}[J"))
        let lines = screen.components(separatedBy: CharacterSet(charactersIn: "\r\n")).map {
            $0.replacingOccurrences(of: "\u{1B}[J", with: "").replacingOccurrences(
                of: "\u{1B}\\[[0-9]+A", with: "", options: .regularExpression)
        }
        // A bar per download while it runs: name, [###---], percent, bytes, rate, ETA.
        let barLine = #"^com\.example\.[a-z]+ +\[[#-]+\] +[0-9]+%  .*(/s  ETA|  unpacking)"#
        for product in Shop.products {
            #expect(lines.contains { $0.hasPrefix(product + " ") && $0.range(of: barLine, options: .regularExpression) != nil }, "\(product): \(lines)")
        }
        // And a total line: downloads done, bytes, overall rate, ETA; the last one says 3/3.
        let totals = lines.filter { $0.hasPrefix("total (") }
        #expect(totals.contains { $0.contains("(0/3 done)") || $0.contains("(1/3 done)") }, "\(totals)")
        #expect(totals.last.map { $0.contains("(3/3 done)") && $0.contains("100%") } == true, "\(totals.last ?? "")")
        #expect(totals.allSatisfy { $0.contains("/s  ETA ") })
        #expect(lines.contains { $0.hasPrefix("delivered com.example.levels ") })
        // No line is wider than the terminal (a wrapped line would break the redraw).
        let progress = lines.filter { $0.hasPrefix("total (") || $0.range(of: barLine, options: .regularExpression) != nil }
        #expect(progress.allSatisfy { $0.count < 80 }, "\(progress.filter { $0.count >= 80 })")
    }

    @Test("a tampered receipt downloads nothing and exits 3")
    func badReceipt() throws {
        let shop = try Shop()
        defer { shop.stop() }
        let receipt = try shop.receipt([Shop.products[0]])
        var text = try String(contentsOf: receipt, encoding: .utf8)
        let middle = text.index(text.startIndex, offsetBy: text.count / 2)
        text.replaceSubrange(middle...middle, with: text[middle] == "A" ? "B" : "A")
        try Data(text.utf8).write(to: receipt)
        let run = try shop.courier(shop.deliverArguments(receipt))
        #expect(run.status == 3, "\(run.stderr)")
        #expect(!shop.nginx.accessLog().contains { $0.contains(".zip") })
        #expect(!shop.isPlaced(Shop.products[0]))
    }

    @Test("restore delivers the chosen products only")
    func restoreChosen() throws {
        let shop = try Shop()
        defer { shop.stop() }
        let receipt = try shop.receipt(Shop.products)
        let run = try shop.courier(shop.deliverArguments(receipt) + ["--restore", "--product", "com.example.music"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(shop.isPlaced("com.example.music"))
        #expect(!shop.isPlaced("com.example.levels") && !shop.isPlaced("com.example.maps"))
        let list = try shop.courier(["list", "--all", "--json"])
        let entries = try #require(list.events.first?["entries"] as? [[String: Any]])
        #expect(entries.map { $0["productId"] as? String } == ["com.example.music"])
        #expect(try shop.courier(shop.deliverArguments(receipt) + ["--restore"]).status == 2)
    }

    @Test("kill -9 of deliver at random points over 20 trials, then run again: delivered, checksums right, finished once")
    func killAndContinue() throws {
        // Small packages on a rate-limited origin (~1 s each) so most kills land mid-flow.
        let shop = try Shop(payloadSize: 256 << 10, rateLimit: "256k")
        defer { shop.stop() }
        var landed = (beforeQueueing: 0, midFlow: 0, afterFinish: 0)
        for trial in 0..<20 {
            let storage = shop.directory.appending("Storage-\(trial)")
            let receipt = try shop.receipt(Shop.products, name: "receipt-\(trial).txt")
            // Through `courier` first so the configuration file exists before the process starts.
            _ = try shop.courier(["list", "--json"], storage: storage)
            let process = try CourierBinary.start(
                shop.deliverArguments(receipt) + ["--storage", storage.path],
                environment: ["COURIER_CONFIG": shop.directory.appending("courier.json").path], directory: shop.directory.url)
            usleep(UInt32.random(in: 100_000...1_300_000))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            let before = try shop.courier(["list", "--all", "--json"], storage: storage).events.first?["entries"] as? [[String: Any]] ?? []
            if before.isEmpty {
                landed.beforeQueueing += 1
            } else if before.allSatisfy({ $0["transactionState"] as? String == "finished" }) {
                landed.afterFinish += 1
            } else {
                landed.midFlow += 1
            }

            let again = try shop.courier(shop.deliverArguments(receipt), storage: storage)
            #expect(again.status == 0, "trial \(trial): \(again.stderr)")
            for product in Shop.products { #expect(shop.isPlaced(product, storage: storage), "trial \(trial) \(product)") }
            let list = try shop.courier(["list", "--all", "--json"], storage: storage)
            let entries = try #require(list.events.first?["entries"] as? [[String: Any]])
            // Finished exactly once: three transactions, each finished, and a third run has nothing to do.
            #expect(entries.count == 3, "trial \(trial)")
            #expect(Set(entries.compactMap { $0["transactionId"] as? String }).count == 3, "trial \(trial)")
            #expect(entries.allSatisfy { $0["transactionState"] as? String == "finished" }, "trial \(trial)")
            let third = try shop.courier(shop.deliverArguments(receipt), storage: storage)
            #expect(third.status == 0 && third.stdout.contains("already delivered"), "trial \(trial): \(third.stdout)")
            #expect(
                !((try? FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("Downloads").path)) ?? [])
                    .contains { $0.hasSuffix(".part") }, "trial \(trial)")
        }
        print("kill -9 of deliver, 20 trials: \(landed.beforeQueueing) before queueing, \(landed.midFlow) mid-flow, \(landed.afterFinish) after finishing")
        #expect(landed.midFlow > 0, "no kill landed mid-flow")
    }

    @Test("SIGTERM pauses deliver with exit 7; resume --stalled finishes it without refetching durable bytes")
    func sigtermThenResume() throws {
        // 4 s of transfer at 1 MB/s: the SIGTERM lands mid-transfer even when `courier list`
        // (polled below) is slow on a loaded machine (at 2 MB/s a run once finished first).
        let shop = try Shop(payloadSize: 4 << 20, rateLimit: "1m")
        defer { shop.stop() }
        let receipt = try shop.receipt([Shop.products[0]])
        let process = try shop.start(shop.deliverArguments(receipt))
        let deadline = Date().addingTimeInterval(60)
        var sawBytes = false
        while Date() < deadline && !sawBytes {
            usleep(100_000)
            let list = try shop.courier(["list", "--json"])
            let entries = list.events.first?["entries"] as? [[String: Any]] ?? []
            sawBytes = entries.contains { ($0["bytesReceived"] as? Int ?? 0) > 512 * 1024 }
        }
        #expect(sawBytes)
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.exitStatus == 7)
        let list = try shop.courier(["list", "--stalled", "--json"])
        let entries = try #require(list.events.first?["entries"] as? [[String: Any]])
        #expect(entries.first?["stalled"] as? String == "interrupted")
        let resumed = try shop.courier(["resume", "--stalled"])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(shop.isPlaced(Shop.products[0]))
        // nginx's combined log: `"GET /x.zip HTTP/1.1" STATUS BODY-BYTES ...`. The resume asked
        // for a range (206) and the bytes sent in all stay well under twice the package.
        let fetches = shop.nginx.accessLog().filter { $0.contains(".zip") }.compactMap { line -> (Int, Int)? in
            let fields = line.components(separatedBy: "\"")
            guard fields.count > 2 else { return nil }
            let numbers = fields[2].split(separator: " ").compactMap { Int($0) }
            return numbers.count >= 2 ? (numbers[0], numbers[1]) : nil
        }
        #expect(fetches.count >= 2)
        #expect(fetches.contains { $0.0 == 206 })
        let package = try FileManager.default.attributesOfItem(
            atPath: shop.nginx.root.appendingPathComponent("\(Shop.products[0]).zip").path)[.size] as? Int ?? 0
        #expect(fetches.reduce(0) { $0 + $1.1 } < package + package / 2, "\(fetches)")
    }

    @Test("two resume --stalled processes at once after a kill -9: delivered once, nothing corrupted")
    func twoResumersAtOnce() throws {
        let shop = try Shop(payloadSize: 3 << 20, rateLimit: "1m")
        defer { shop.stop() }
        let receipt = try shop.receipt(Shop.products)
        let process = try shop.start(shop.deliverArguments(receipt))
        let deadline = Date().addingTimeInterval(60)
        var active = false
        while Date() < deadline && !active {
            usleep(100_000)
            let entries = try shop.courier(["list", "--json"]).events.first?["entries"] as? [[String: Any]] ?? []
            active = entries.contains { ($0["bytesReceived"] as? Int ?? 0) > 0 }
        }
        #expect(active)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        let stalled = try shop.courier(["list", "--stalled", "--json"]).events.first?["entries"] as? [[String: Any]] ?? []
        #expect(!stalled.isEmpty)
        #expect(stalled.allSatisfy { $0["stalled"] as? String == "ownerDied" })

        let logs = shop.directory
        let first = try CourierBinary.start(
            ["resume", "--stalled", "--storage", shop.storage.path],
            environment: ["COURIER_CONFIG": logs.appending("courier.json").path], directory: logs.url,
            stdout: logs.appending("a.out"), stderr: logs.appending("a.err"))
        let second = try CourierBinary.start(
            ["resume", "--stalled", "--storage", shop.storage.path],
            environment: ["COURIER_CONFIG": logs.appending("courier.json").path], directory: logs.url,
            stdout: logs.appending("b.out"), stderr: logs.appending("b.err"))
        first.waitUntilExit()
        second.waitUntilExit()
        let errors = (try? String(contentsOf: logs.appending("a.err"), encoding: .utf8)) ?? ""
        #expect(first.exitStatus == 0, "\(errors)")
        #expect(second.exitStatus == 0, "\((try? String(contentsOf: logs.appending("b.err"), encoding: .utf8)) ?? "")")
        // Waiting ones that were never started are not stalled: deliver finishes the rest.
        let finish = try shop.courier(shop.deliverArguments(receipt))
        #expect(finish.status == 0, "\(finish.stderr)")
        for product in Shop.products { #expect(shop.isPlaced(product), "\(product)") }
        let entries = try shop.courier(["list", "--all", "--json"]).events.first?["entries"] as? [[String: Any]] ?? []
        #expect(entries.count == 3)
        #expect(entries.allSatisfy { $0["transactionState"] as? String == "finished" })
    }
}
