import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A purchase that unlocks nothing is never a silent success (issue 14, item 1): a product the
/// catalog does not list is said, exits 3 and stays unfinished; a product it lists without
/// hosted content is finished and said.
@Suite("deliver: purchases that unlock nothing (the built courier binary)", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct PurchaseOutcomeCLITests {
    /// The transactions of the store, finished ones included, by product.
    private func transactions(_ shop: Shop) throws -> [String: String] {
        let listed = try shop.courier(["list", "--all", "--json"])
        var states: [String: String] = [:]
        for entry in (listed.events.first?["entries"] as? [[String: Any]]) ?? [] {
            if let product = entry["productId"] as? String { states[product] = entry["transactionState"] as? String ?? "?" }
        }
        return states
    }

    @Test("a product not in the catalog: said, exit 3, nothing queued or finished; a re-run says it again")
    func productNotInCatalog() throws {
        let shop = try Shop(payloadSize: 1024)
        defer { shop.stop() }
        let receipt = try shop.receipt(["com.example.unknown"])
        for _ in 0..<2 {
            let result = try shop.courier(shop.deliverArguments(receipt))
            #expect(result.status == 3, "\(result.stdout)\(result.stderr)")
            #expect(result.stderr.contains("com.example.unknown: not in the catalog"), "\(result.stderr)")
            #expect(!result.stdout.contains("already delivered"))
        }
        #expect(try transactions(shop).isEmpty, "an unlisted product must not be finished")
        // enqueue says the same and queues nothing.
        let enqueued = try shop.courier([
            "enqueue", "--receipt", receipt.path, "--catalog", shop.nginx.url("catalog.json").absoluteString,
            "--trust-root", shop.sandbox.rootCertificateDERFile.path, "--environment", "Sandbox",
        ])
        #expect(enqueued.status == 3, "\(enqueued.stderr)")
        #expect(enqueued.stderr.contains("com.example.unknown: not in the catalog"))
        // --json: one error document with the code.
        let json = try shop.courier(shop.deliverArguments(receipt) + ["--json"])
        #expect(json.status == 3)
        #expect(json.events.last?["code"] as? String == "notEntitled")
        #expect((json.events.last?["message"] as? String)?.contains("not in the catalog") == true)
    }

    @Test("a receipt with a listed and an unlisted product: the listed one is delivered, the other said, exit 3")
    func mixedReceipt() throws {
        let shop = try Shop(payloadSize: 1024)
        defer { shop.stop() }
        let receipt = try shop.receipt(["com.example.levels", "com.example.unknown"])
        let result = try shop.courier(shop.deliverArguments(receipt))
        #expect(result.status == 3, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("delivered com.example.levels"), "\(result.stdout)")
        #expect(result.stderr.contains("com.example.unknown: not in the catalog"), "\(result.stderr)")
        #expect(shop.isPlaced("com.example.levels"))
        let states = try transactions(shop)
        #expect(states["com.example.levels"] == "finished")
        #expect(states["com.example.unknown"] == nil)
    }

    @Test("a product the catalog lists without hosted content: finished, and said")
    func productWithoutContent() throws {
        let shop = try Shop(payloadSize: 1024)
        defer { shop.stop() }
        let catalog = shop.directory.appending("contentless.json")
        try Catalog(bundleId: "com.example.app", products: [Catalog.Product(productId: "com.example.coins", type: .consumable)])
            .encoded().write(to: catalog)
        let receipt = try shop.receipt(["com.example.coins"])
        let result = try shop.courier([
            "deliver", "--receipt", receipt.path, "--catalog", catalog.path,
            "--trust-root", shop.sandbox.rootCertificateDERFile.path, "--environment", "Sandbox",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("com.example.coins: no hosted content in the catalog"), "\(result.stdout)")
        #expect(try transactions(shop)["com.example.coins"] == "finished")
    }

    @Test("enqueue with no agent says nothing downloads until one runs, and how; not under -q")
    func enqueueWithoutAgent() throws {
        let shop = try Shop(payloadSize: 1024)
        defer { shop.stop() }
        let receipt = try shop.receipt(["com.example.levels"])
        var arguments = shop.deliverArguments(receipt)
        arguments[0] = "enqueue"
        let enqueued = try shop.courier(arguments)
        #expect(enqueued.status == 0, "\(enqueued.stderr)")
        #expect(enqueued.stdout.contains("queued "), "\(enqueued.stdout)")
        #expect(enqueued.stderr.contains("no agent runs on this store"), "\(enqueued.stderr)")
        #expect(enqueued.stderr.contains("courier resume --all"), "\(enqueued.stderr)")
        let receipt2 = try shop.receipt(["com.example.music"])
        var quiet = shop.deliverArguments(receipt2)
        quiet[0] = "enqueue"
        let silent = try shop.courier(quiet + ["-q"])
        #expect(silent.status == 0, "\(silent.stderr)")
        #expect(silent.stdout.isEmpty && silent.stderr.isEmpty, "\(silent.stdout)\(silent.stderr)")
    }

    @Test("a cancelled download is queued again by resume ID (not by resume --all), and delivered")
    func wayBackFromCancel() throws {
        let shop = try Shop(payloadSize: 1024)
        defer { shop.stop() }
        let receipt = try shop.receipt(["com.example.levels", "com.example.music"])
        var arguments = shop.deliverArguments(receipt)
        arguments[0] = "enqueue"
        let enqueued = try shop.courier(arguments + ["--json"])
        #expect(enqueued.status == 0, "\(enqueued.stderr)")
        let queued = (enqueued.events.last?["transactions"] as? [[String: Any]]) ?? []
        let ids = queued.compactMap { $0["transactionId"] as? String }
        #expect(ids.count == 2)
        let cancelled = try shop.courier(["cancel", "--all"])
        #expect(cancelled.status == 0, "\(cancelled.stderr)")
        #expect(cancelled.stderr.contains("courier resume ID"), "\(cancelled.stderr)")
        // deliver says how to get it back.
        let again = try shop.courier(shop.deliverArguments(receipt))
        #expect(again.stderr.contains("cancelled; queue it again with: courier resume"), "\(again.stderr)")
        // ... and does not end as a success: nothing was delivered.
        #expect(again.status == 1, "\(again.stderr)")
        #expect(again.stderr.contains("not delivered: com.example."), "\(again.stderr)")
        // --all leaves cancelled downloads alone.
        let all = try shop.courier(["resume", "--all"])
        #expect(all.status == 0, "\(all.stderr)")
        #expect(!shop.isPlaced("com.example.levels"))
        // resume ID brings one back and, without an agent, delivers it.
        let levels = try #require(queued.first { $0["productId"] as? String == "com.example.levels" }?["transactionId"] as? String)
        let resumed = try shop.courier(["resume", levels])
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        #expect(shop.isPlaced("com.example.levels"))
        #expect(!shop.isPlaced("com.example.music"))
        #expect(try transactions(shop)["com.example.levels"] == "finished")
    }

    @Test("space refusals: readable units, the reserve by its setting, the next step, once per deliver")
    func spaceWording() throws {
        let shop = try Shop(payloadSize: 1000)
        defer { shop.stop() }
        // A reserve no disk has: every download is refused by the space check.
        try Data(#"{"transfer": {"diskReserve": 1152921504606846976, "maxRetries": 1, "initialBackoff": 0.05}}"#.utf8)
            .write(to: shop.directory.appending("courier.json"))
        let receipt = try shop.receipt(Shop.products)
        let result = try shop.courier(shop.deliverArguments(receipt))
        #expect(result.status == 4, "\(result.stdout)\(result.stderr)")
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.filter { $0.contains("not enough disk space") }.count == 1, "\(result.stderr)")
        #expect(result.stderr.contains(" KiB + 1 EiB reserve (transfer.diskReserve) needed, "), "\(result.stderr)")
        #expect(result.stderr.contains("or lower transfer.diskReserve; then run the same command again"), "\(result.stderr)")
        #expect(!result.stderr.contains("statvfs"))
        #expect(!result.stderr.contains("1152921504606846976"))

        let file = shop.directory.appending("one.bin")
        let get = try CourierBinary.run(
            ["get", shop.nginx.url("com.example.levels.zip").absoluteString, "-o", file.path, "--length", "1000"],
            environment: ["COURIER_CONFIG": shop.directory.appending("courier.json").path])
        #expect(get.status == 4, "\(get.stderr)")
        #expect(get.stderr.contains("1000 B + 1 EiB reserve (transfer.diskReserve) needed"), "\(get.stderr)")
        #expect(get.stderr.contains("or lower transfer.diskReserve; then resume"), "\(get.stderr)")
    }

    @Test("a second deliver on the same store says at once who owns the downloads, waits, then prints the result")
    func secondDeliver() throws {
        let shop = try Shop(payloadSize: 3 << 20, rateLimit: "1m")
        defer { shop.stop() }
        let receipt = try shop.receipt(["com.example.levels"])
        let first = try shop.start(shop.deliverArguments(receipt))
        defer {
            if first.isRunning { kill(first.processIdentifier, SIGKILL) }
            first.waitUntilExit()
        }
        // Wait (bounded) until the first process holds the download's lease.
        var owner: Int32?
        for _ in 0..<600 where owner == nil {
            let listed = try shop.courier(["list", "--json"])
            let entries = (listed.events.first?["entries"] as? [[String: Any]]) ?? []
            owner = entries.compactMap { ($0["owner"] as? [String: Any])?["pid"] as? Int32 }.first
            if owner == nil { usleep(20_000) }
        }
        #expect(owner == first.processIdentifier)
        let second = try shop.courier(shop.deliverArguments(receipt))
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stderr.contains("another process (\(first.processIdentifier)@"), "\(second.stderr)")
        #expect(second.stderr.contains("is delivering com.example.levels; waiting for it to finish"))
        #expect(second.stdout.contains("delivered com.example.levels 1.0 to "), "\(second.stdout)")
        first.waitUntilExit()
        #expect(first.exitStatus == 0)
        #expect(shop.isPlaced("com.example.levels"))
    }
}
