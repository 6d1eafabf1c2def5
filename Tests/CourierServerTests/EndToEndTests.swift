import Courier
import CourierTestSupport
import Foundation
import Testing

/// Issue 6's end-to-end path, every part a real process: nginx as the upstream, `courier
/// prestage` into a folder, `courier serve` over it with the receipt gate, and `courier get` as
/// the client presenting a sandbox purchase (an App Store-shaped signed transaction).
@Suite("End to end: prestage from nginx, serve with the receipt gate, download with a purchase", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct EndToEndTests {
    /// nginx as the upstream with two real packages, `courier prestage` into a folder, and
    /// `courier serve` over it with the sandbox store's root as the receipt gate's trust root.
    struct Stack {
        let work: TemporaryDirectory
        let upstream: URL
        let staged: URL
        let store: SandboxStore
        let nginx: NginxServer
        let serve: Process
        let port: Int
        let serveLog: URL
        let scratch: TemporaryDirectory

        init() throws {
            work = try TemporaryDirectory(prefix: "courier-e2e")
            upstream = work.appending("upstream")
            try FileManager.default.createDirectory(at: upstream, withIntermediateDirectories: true)
            var products: [Catalog.Product] = []
            for (productId, size) in [("com.example.levels.pack1", 8 << 20), ("com.example.levels.pack2", 10_000)] {
                let file = upstream.appendingPathComponent("\(productId).zip")
                try PackageFixtures.infoZip(
                    product: productId, version: "1.0", files: ["level.bin": PackageFixtures.noise(size, seed: UInt64(size))], at: file, level: 0
                )
                let digest = try Shell.run("/usr/bin/sha256sum", [file.path]).stdout.prefix(64)
                let length = try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int ?? 0
                products.append(
                    Catalog.Product(
                        productId: productId,
                        content: Catalog.Content(url: "\(productId).zip", sha256: String(digest), length: Int64(length), version: "1.0", placement: .documents)
                    )
                )
            }
            try Catalog(bundleId: "com.example.app", products: products).encoded().write(to: upstream.appendingPathComponent("catalog.json"))
            nginx = try NginxServer(root: upstream)
            staged = work.appending("staged")
            let prestage = try CourierBinary.run(["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", staged.path])
            #expect(prestage.status == 0, "\(prestage.stderr)")
            store = try SandboxStore.create(at: work.appending("sandbox"))
            scratch = try TemporaryDirectory()
            (serve, port, serveLog) = try ServeCommandTests.startServe(
                [
                    "--content", staged.path, "--trust-root", store.rootCertificateFile.path, "--bundle-id", "com.example.app",
                    "--environment", "Sandbox", "--limit-rate", "\(2 << 20)",
                ],
                scratch: scratch
            )
        }

        /// The origin's access-log entries for `contentId`.
        func access(_ contentId: String) -> [[String: Any]] {
            ((try? String(contentsOf: serveLog, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }.filter { $0["message"] as? String == "access" && $0["content-id"] as? String == contentId }
        }

        func stop() {
            kill(serve.processIdentifier, SIGTERM)
            serve.waitUntilExit()
            nginx.stop()
            scratch.remove()
            work.remove()
        }
    }

    @Test("a purchase downloads its package through the gate and survives kill -9; another product's purchase gets 403 and exit 3")
    func prestageServeDeliver() throws {
        let stack = try Stack()
        defer { stack.stop() }
        let (work, upstream, staged, store, port) = (stack.work, stack.upstream, stack.staged, stack.store, stack.port)
        let published = try Catalog.decode(Data(contentsOf: staged.appendingPathComponent("catalog.json")))
        let pack1 = try #require(published.product("com.example.levels.pack1")?.content)
        let packageURL = "http://127.0.0.1:\(port)/\(pack1.url)"
        let purchase = try store.purchase(productId: "com.example.levels.pack1")
        let otherPurchase = try store.purchase(productId: "com.example.levels.pack2")

        // Another product's purchase: 403, exit 3, nothing written.
        let refusedFile = work.appending("refused.zip")
        let refused = try CourierBinary.run(["get", packageURL, "-o", refusedFile.path, "-H", "Authorization: Bearer \(otherPurchase)"])
        #expect(refused.status == 3)
        #expect(!FileManager.default.fileExists(atPath: refusedFile.path))
        // No purchase at all: 401, exit 8 (the server refused the request), nothing written.
        let anonymous = try CourierBinary.run(["get", packageURL, "-o", refusedFile.path])
        #expect(anonymous.status == 8, "\(anonymous.stderr)")
        #expect(!FileManager.default.fileExists(atPath: refusedFile.path))

        // The purchase: killed with SIGKILL part way, then resumed to the verified package.
        let output = work.appending("pack1.zip")
        let arguments = ["get", packageURL, "-o", output.path, "--sha256", pack1.sha256, "--length", "\(pack1.length)", "-H", "Authorization: Bearer \(purchase)"]
        let client = try CourierBinary.start(arguments)
        let killedAt = ResumeJournalProbe.waitForDurable(2 << 20, in: work.url, while: client)
        kill(client.processIdentifier, SIGKILL)
        client.waitUntilExit()
        #expect(killedAt >= 2 << 20, "the client should have been killed part way")
        #expect(!FileManager.default.fileExists(atPath: output.path))
        let resumed = try CourierBinary.run(arguments)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(try Data(contentsOf: output) == (try Data(contentsOf: upstream.appendingPathComponent("com.example.levels.pack1.zip"))))
        // The origin's access log: the resume was a range request, let in for the purchase's transaction.
        let access = stack.access("com.example.levels.pack1")
        #expect(access.map { $0["http.status"] as? Int } .contains(206))
        #expect(access.map { $0["http.status"] as? Int } .contains(403))
        #expect(!access.contains { "\($0)".contains(purchase) }, "the access log must not contain the token")
    }

    @Test("deliver: a sandbox purchase is delivered through the gate, survives kill -9 and is placed once")
    func deliverThroughTheGate() throws {
        let stack = try Stack()
        defer { stack.stop() }
        let storage = stack.work.appending("Storage")
        let catalog = "http://127.0.0.1:\(stack.port)/catalog.json"
        let receipt = stack.work.appending("purchase.jws")
        try Data(stack.store.purchase(productId: "com.example.levels.pack1").utf8).write(to: receipt)
        let arguments = [
            "deliver", "--storage", storage.path, "--receipt", receipt.path, "--catalog", catalog,
            "--trust-root", stack.store.rootCertificateFile.path, "--bundle-id", "com.example.app", "--environment", "Sandbox",
        ]

        // Killed part way through the 8 MiB package (the origin sends 2 MiB/s).
        let client = try CourierBinary.start(arguments)
        // Wait until the journal in the state database says 2 MiB are durable.
        let database = storage.appendingPathComponent("state.sqlite").path
        let deadline = Date().addingTimeInterval(120)
        var durable: Int64 = 0
        while Date() < deadline, client.isRunning, durable < 2 << 20 {
            let query = try Shell.run("/usr/bin/sqlite3", [database, "SELECT coalesce(max(durableOffset), 0) FROM downloads"])
            durable = Int64(query.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            usleep(50_000)
        }
        kill(client.processIdentifier, SIGKILL)
        client.waitUntilExit()
        #expect(durable >= 2 << 20, "deliver should have been killed part way")

        // Run again: it continues from the journal and places the content.
        let again = try CourierBinary.run(arguments)
        #expect(again.status == 0, "\(again.stderr)")
        let path = try CourierBinary.run(["content", "path", "com.example.levels.pack1", "--storage", storage.path])
        #expect(path.status == 0, "\(path.stderr)")
        let folder = URL(fileURLWithPath: path.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(folder.path.hasPrefix(storage.appendingPathComponent("Documents").path))
        let level = try Data(contentsOf: folder.appendingPathComponent("Contents/level.bin"))
        #expect(level == PackageFixtures.noise(8 << 20, seed: UInt64(8 << 20)))
        let statuses = stack.access("com.example.levels.pack1").compactMap { $0["http.status"] as? Int }
        #expect(statuses.contains(206), "the second run should resume with a range request: \(statuses)")

        // A third run has nothing to do; the transaction was finished once.
        let third = try CourierBinary.run(arguments)
        #expect(third.status == 0)
        #expect(third.stdout.contains("already delivered"), "\(third.stdout)")
    }
}
