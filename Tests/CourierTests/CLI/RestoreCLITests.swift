@testable import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Content that was deleted or purged comes back (issue 28, section 5), and a wrong catalog does
/// not spoil a purchase (section 6): the sandbox's store and catalog, served by a real nginx or
/// read as a file, and the built `courier` binary.
@Suite("restore, and purchases that follow the run's catalog (the built courier binary)")
struct RestoreCLITests {
    /// The sandbox (signing chain, sample packages, catalog) in a temporary folder, a receipt
    /// for `products`, and the options every deliver here takes.
    struct Shop {
        let directory: TemporaryDirectory
        let sandbox: SandboxStore
        let receipt: URL
        let storage: URL

        init(products: [String] = ["com.example.levels.pack1"]) throws {
            directory = try TemporaryDirectory(prefix: "courier-restore")
            let store = try SandboxStore.create(at: directory.appending("sandbox"))
            sandbox = store
            try SandboxCatalog.write(into: store.directory)
            receipt = directory.appending("receipt.txt")
            let tokens = try products.map { try store.purchase(productId: $0) }
            try Data((tokens.joined(separator: "\n") + "\n").utf8).write(to: receipt)
            storage = directory.appending("Storage")
            // No retries: a wrong origin fails at once.
            try Data(#"{"transfer": {"maxRetries": 0}}"#.utf8).write(to: directory.appending("courier.json"))
        }

        var catalogFile: URL { sandbox.directory.appendingPathComponent("catalog.json") }

        func deliver(_ extra: [String], catalog: String) throws -> CourierBinary.Result {
            try CourierBinary.run(
                [
                    "deliver", "--receipt", receipt.path, "--catalog", catalog, "--trust-root", sandbox.rootCertificateDERFile.path,
                    "--environment", "Sandbox", "--storage", storage.path, "--config", directory.appending("courier.json").path,
                ] + extra, directory: directory.url)
        }

        func courier(_ arguments: [String]) throws -> CourierBinary.Result {
            try CourierBinary.run(
                arguments + ["--storage", storage.path, "--config", directory.appending("courier.json").path], directory: directory.url)
        }

        func queue() throws -> PaymentQueue {
            try PaymentQueue(layout: StorageLayout(root: storage), configuration: QueueConfiguration(), logger: .init(label: "test"))
        }

        /// The content folder of `product` in `placement`, when its ContentInfo.plist is there.
        func placed(_ product: String, _ placement: String = "Documents") -> Bool {
            FileManager.default.fileExists(atPath: storage.appendingPathComponent("\(placement)/\(product)/ContentInfo.plist").path)
        }

        /// The first transaction's record (its state and finish time).
        func transaction() throws -> TransactionRecord {
            let queue = try queue()
            return try #require(try queue.entries(includeFinished: true).first.flatMap { try queue.transaction($0.transactionId) })
        }

        /// A copy of the sandbox catalog whose package URLs are absolute under `base`.
        func catalog(packagesAt base: String, name: String) throws -> URL {
            var catalog = try Catalog.decode(Data(contentsOf: catalogFile))
            for index in catalog.products.indices {
                if var content = catalog.products[index].content {
                    content.url = base + content.url
                    catalog.products[index].content = content
                }
            }
            let file = directory.appending(name)
            try catalog.encoded().write(to: file)
            return file
        }
    }

    static func events(_ result: CourierBinary.Result) -> [[String: Any]] { result.events }

    @Test(
        "content delete, then deliver --restore fetches it again; the transaction stays finished once",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func restoreAfterDelete() throws {
        let shop = try Shop()
        defer { shop.directory.remove() }
        let nginx = try NginxServer(root: shop.sandbox.directory)
        defer { nginx.stop() }
        let catalog = nginx.url("catalog.json").absoluteString
        let product = "com.example.levels.pack1"

        let first = try shop.deliver([], catalog: catalog)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(shop.placed(product))
        let finished = try shop.transaction()
        #expect(finished.state == .finished)

        let delete = try shop.courier(["content", "delete", product])
        #expect(delete.status == 0, "\(delete.stderr)")
        #expect(!shop.placed(product))

        // A plain second run leaves deleted content alone (deleting it was the user's choice).
        let again = try shop.deliver([], catalog: catalog)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("Nothing to do"), "\(again.stdout)")
        #expect(!shop.placed(product))

        let restore = try shop.deliver(["--restore", "--product", product, "--json"], catalog: catalog)
        #expect(restore.status == 0, "\(restore.stdout)\(restore.stderr)")
        #expect(shop.placed(product), "the restore did not bring the content back: \(restore.stdout)")
        let result = try #require(restore.events.last)
        #expect(result["event"] as? String == "result")
        #expect((result["finishedDownloads"] as? [String])?.count == 1, "\(result)")
        #expect((result["finishedTransactions"] as? [String]) == [], "the transaction was finished again: \(result)")
        // Finished once: no transaction event says it finished again, and its record is as it was.
        let finishes = restore.events.filter { $0["event"] as? String == "transaction" && $0["state"] as? String == "finished" }
        #expect(finishes.isEmpty, "\(finishes)")
        let after = try shop.transaction()
        #expect(after.state == .finished)
        #expect(after.finishedAt == finished.finishedAt)
        let content = try shop.courier(["content", "list", "--json"])
        #expect(content.stdout.contains(product), "\(content.stdout)")

        // Delivered and in place: a second restore has nothing to do.
        let twice = try shop.deliver(["--restore", "--product", product], catalog: catalog)
        #expect(twice.status == 0, "\(twice.stderr)")
        #expect(twice.stdout.contains("Nothing to do"), "\(twice.stdout)")
    }

    @Test(
        "a cache folder removed behind Courier's back (a purge) comes back with --restore",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func restoreAfterPurge() throws {
        let product = "com.example.soundtrack"
        let shop = try Shop(products: [product])
        defer { shop.directory.remove() }
        let nginx = try NginxServer(root: shop.sandbox.directory)
        defer { nginx.stop() }
        let catalog = nginx.url("catalog.json").absoluteString
        #expect(try shop.deliver([], catalog: catalog).status == 0)
        #expect(shop.placed(product, "Caches"))
        try FileManager.default.removeItem(at: shop.storage.appendingPathComponent("Caches/\(product)"))
        let restore = try shop.deliver(["--restore", "--product", product], catalog: catalog)
        #expect(restore.status == 0, "\(restore.stdout)\(restore.stderr)")
        #expect(!restore.stdout.contains("Nothing to do"), "\(restore.stdout)")
        #expect(shop.placed(product, "Caches"))
        #expect(try shop.transaction().state == .finished)
    }

    @Test("a catalog given as a file path or a file: URL delivers, its relative package URLs read from its folder")
    func fileCatalog() throws {
        let product = "com.example.levels.pack1"
        for form in ["path", "url"] {
            let shop = try Shop()
            defer { shop.directory.remove() }
            // Relative to the current directory (the shop's folder), as a newcomer types it.
            let catalog = form == "path" ? "sandbox/catalog.json" : shop.catalogFile.absoluteString
            let result = try shop.deliver(["--json"], catalog: catalog)
            #expect(result.status == 0, "\(form): \(result.stdout)\(result.stderr)")
            #expect(shop.placed(product), "\(form)")
            let placed = try Data(contentsOf: shop.storage.appendingPathComponent("Documents/\(product)/ContentInfo.plist"))
            #expect(String(decoding: placed, as: UTF8.self).contains(product))
            #expect(try shop.transaction().state == .finished)
        }
    }

    @Test(
        "a purchase first queued from a wrong catalog is delivered by the next run's right one, resume and cancel+resume too",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func wrongCatalogThenRight() throws {
        let shop = try Shop()
        defer { shop.directory.remove() }
        let nginx = try NginxServer(root: shop.sandbox.directory)
        defer { nginx.stop() }
        // The wrong one names packages where nginx has none (404).
        let wrong = try shop.catalog(packagesAt: nginx.url("nowhere/").absoluteString, name: "wrong.json")
        let first = try shop.deliver([], catalog: wrong.path)
        #expect(first.status != 0, "\(first.stdout)")
        #expect(!shop.placed("com.example.levels.pack1"))

        let right = try shop.deliver([], catalog: nginx.url("catalog.json").absoluteString)
        #expect(right.status == 0, "the right catalog did not deliver: \(right.stdout)\(right.stderr)")
        #expect(shop.placed("com.example.levels.pack1"))
        #expect(try shop.transaction().state == .finished)
    }

    @Test(
        "cancelled under a wrong catalog: deliver with the right one moves it there, and resume delivers it",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func cancelledThenResumed() throws {
        let shop = try Shop()
        defer { shop.directory.remove() }
        let nginx = try NginxServer(root: shop.sandbox.directory)
        defer { nginx.stop() }
        let wrong = try shop.catalog(packagesAt: nginx.url("nowhere/").absoluteString, name: "wrong.json")
        #expect(try shop.deliver([], catalog: wrong.path).status != 0)
        let download = try #require(try shop.queue().entries().first?.download)
        #expect(try shop.courier(["cancel", download.id]).status == 0)
        // The right catalog takes the cancelled download over (it stays cancelled: the user's).
        _ = try shop.deliver([], catalog: nginx.url("catalog.json").absoluteString)
        let moved = try #require(try shop.queue().download(download.id))
        #expect(moved.url.absoluteString.hasPrefix(nginx.url("packages/").absoluteString), "\(moved.url)")
        let resume = try shop.courier(["resume", download.id])
        #expect(resume.status == 0, "\(resume.stdout)\(resume.stderr)")
        #expect(shop.placed("com.example.levels.pack1"))
    }

    @Test(
        "the same package from another catalog keeps the bytes fetched; another package starts over",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func samePackageKeepsBytes() throws {
        let shop = try Shop()
        defer { shop.directory.remove() }
        // A slow origin, then a fast one serving the same bytes.
        let slow = try NginxServer(root: shop.sandbox.directory, extraLocations: "limit_rate 256k;")
        defer { slow.stop() }
        let fast = try NginxServer(root: shop.sandbox.directory)
        defer { fast.stop() }
        let process = try CourierBinary.start(
            [
                "deliver", "--receipt", shop.receipt.path, "--catalog", slow.url("catalog.json").absoluteString, "--trust-root",
                shop.sandbox.rootCertificateDERFile.path, "--environment", "Sandbox", "--storage", shop.storage.path, "--config",
                shop.directory.appending("courier.json").path,
            ], directory: shop.directory.url)
        // Until a checkpoint has recorded some bytes.
        let deadline = Date().addingTimeInterval(60)
        var fetched: Int64 = 0
        while Date() < deadline, process.isRunning {
            fetched = (try? shop.queue().entries().first?.download?.durableOffset) ?? 0
            if fetched > 0 { break }
            usleep(50_000)
        }
        kill(process.processIdentifier, SIGINT)
        process.waitUntilExit()
        #expect(process.terminationStatus == 7)
        let paused = try #require(try shop.queue().entries().first?.download)
        #expect(paused.state == .paused)
        #expect(paused.durableOffset > 0, "nothing was checkpointed before the pause")

        let resumed = try shop.deliver([], catalog: fast.url("catalog.json").absoluteString)
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        #expect(shop.placed("com.example.levels.pack1"))
        // The fast origin was asked for the rest only.
        let requests = fast.accessLog().filter { $0.contains("levels-pack1.zip") }
        #expect(requests.count == 1, "\(requests)")
        #expect(requests.first?.contains(" 206 ") == true, "the package was fetched again from byte 0: \(requests)")
    }
}
