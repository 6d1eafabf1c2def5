@testable import Courier
import CourierTestSupport
import Foundation
import Logging
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Delivery classes, pins and purge order through the built `courier` binary (issue 32 items
/// 1-2): the sandbox's signed purchases and real zips, a catalog carrying classes, and space
/// pressure from a placer whose free-space probe sees a disk of fixed capacity.
@Suite("delivery classes, content open/close, pins and purges (the built courier binary)")
struct DeliveryClassCLITests {
    typealias Shop = RestoreCLITests.Shop
    static let levels = "com.example.levels.pack1"
    static let soundtrack = "com.example.soundtrack"

    /// The sandbox catalog with `change` applied to each product's content, written beside it
    /// (its relative package URLs still resolve).
    static func catalog(_ shop: Shop, _ change: (String, inout Catalog.Content) -> Void) throws -> String {
        var catalog = try Catalog.decode(Data(contentsOf: shop.catalogFile))
        for index in catalog.products.indices {
            if var content = catalog.products[index].content {
                change(catalog.products[index].productId, &content)
                catalog.products[index].content = content
            }
        }
        let file = shop.sandbox.directory.appendingPathComponent("catalog-classes.json")
        try catalog.encoded().write(to: file)
        return file.path
    }

    /// A placer over the shop's store whose disk holds what the storage holds plus `spare` bytes.
    static func placer(_ shop: Shop, spare: Int64 = 4096) throws -> (ContentPlacer, FreeSpaceProbe) {
        let root = shop.storage
        let used: @Sendable () -> Int64 = {
            PackageFixtures.snapshot(root).reduce(Int64(0)) { total, path in
                var status = stat()
                return lstat(root.appendingPathComponent(path).path, &status) == 0 && status.st_mode & S_IFMT == S_IFREG
                    ? total + Int64(status.st_size) : total
            }
        }
        let capacity = used() + spare
        let probe = FreeSpaceProbe { _ in capacity - used() }
        var configuration = PlacementConfiguration()
        configuration.diskReserve = 0
        let layout = StorageLayout(root: root)
        let placer = ContentPlacer(
            layout: layout, store: try StateStore(layout: layout), packages: PackageConfiguration(), placement: configuration,
            logger: Logger(label: "test"), freeSpace: probe)
        return (placer, probe)
    }

    /// Makes room for one byte more than is free: purges the first content of the purge order.
    static func squeeze(_ placer: ContentPlacer, _ probe: FreeSpaceProbe) throws {
        try placer.ensureSpace(bytes: try probe.available(placer.layout.root) + 1, inUse: [])
    }

    @Test("on-demand content is not fetched by deliver; content open places, pins and prints it; close unpins")
    func onDemand() throws {
        let shop = try Shop(products: [Self.levels, Self.soundtrack])
        defer { shop.directory.remove() }
        let catalog = try Self.catalog(shop) { product, content in
            if product == Self.soundtrack {
                content.delivery = .onDemand
                content.preservation = .high
            }
        }
        let delivered = try shop.deliver([], catalog: catalog)
        #expect(delivered.status == 0, "\(delivered.stderr)")
        #expect(shop.placed(Self.levels))
        #expect(!shop.placed(Self.soundtrack, "Caches"))
        // Finished with only the essential content: nothing essential is left to wait for.
        #expect(try shop.transaction().state == .finished)
        #expect(try shop.courier(["wait", "--essential", "--timeout", "0"]).status == 0)

        let opened = try shop.courier(["content", "open", Self.soundtrack, "--catalog", catalog])
        #expect(opened.status == 0, "\(opened.stderr)")
        let path = shop.storage.appendingPathComponent("Caches/\(Self.soundtrack)").path
        #expect(opened.stdout.split(separator: "\n").last.map(String.init) == path)
        #expect(shop.placed(Self.soundtrack, "Caches"))

        let listing = try shop.courier(["content", "list", "--json"])
        let entries = try #require(
            (try JSONSerialization.jsonObject(with: Data(listing.stdout.utf8)) as? [String: Any])?["content"] as? [[String: Any]])
        let entry = try #require(entries.first { $0["contentIdentifier"] as? String == Self.soundtrack })
        #expect(entry["delivery"] as? String == "onDemand" && entry["preservation"] as? String == "high")
        #expect((entry["pin"] as? [String: Any])?["open"] as? Bool == true)
        let plain = try shop.courier(["content", "list"])
        #expect(plain.stdout.contains("CLASS") && plain.stdout.contains("onDemand") && plain.stdout.contains("open"))

        // Placed: a lookup, the same path again.
        let again = try shop.courier(["content", "open", Self.soundtrack])
        #expect(again.status == 0 && again.stdout.hasSuffix(path + "\n"))
        let json = try shop.courier(["content", "open", Self.soundtrack, "--json"])
        let result = try #require(json.events.last)
        #expect(result["event"] as? String == "result" && result["contentPath"] as? String == path)
        #expect(result["fetched"] as? Bool == false && result["pin"] as? String == "open" && result["delivery"] as? String == "onDemand")
        let closed = try shop.courier(["content", "close", Self.soundtrack])
        #expect(closed.status == 0)
        let (placer, _) = try Self.placer(shop)
        #expect(try placer.pins.state(Self.soundtrack) == ContentPins.State(open: false, holders: 0))
        // Not entitled: exit 3.
        let other = try shop.courier(["content", "open", "com.example.magazine.2026-01", "--catalog", catalog])
        #expect(other.status == 3, "\(other.stderr)")
    }

    @Test("a held pin survives a purge while its holder lives, not after kill -9; purge order; purged content returns")
    func pinsAndPurges() async throws {
        let shop = try Shop(products: [Self.levels, Self.soundtrack])
        defer { shop.directory.remove() }
        let catalog = try Self.catalog(shop) { product, content in
            content.placement = .cache
            content.preservation = product == Self.soundtrack ? .low : .high
        }
        #expect(try shop.deliver([], catalog: catalog).status == 0)
        #expect(shop.placed(Self.levels, "Caches") && shop.placed(Self.soundtrack, "Caches"))

        // The low-preservation soundtrack is held by a live `content open --hold`.
        let out = shop.directory.appending("hold.out")
        let holder = try CourierBinary.start(
            ["content", "open", Self.soundtrack, "--hold", "--storage", shop.storage.path, "--config",
             shop.directory.appending("courier.json").path],
            stdout: out)
        #expect(try await eventually { (try? String(contentsOf: out, encoding: .utf8))?.contains(Self.soundtrack) == true })
        let (placer, probe) = try Self.placer(shop)
        #expect(try placer.pins.state(Self.soundtrack).holders == 1)
        try Self.squeeze(placer, probe)
        // Pinned content is never purged: the high-preservation levels went instead.
        #expect(shop.placed(Self.soundtrack, "Caches"))
        #expect(!shop.placed(Self.levels, "Caches"))

        kill(holder.processIdentifier, SIGKILL)
        holder.waitUntilExit()
        #expect(try placer.pins.state(Self.soundtrack).holders == 0)
        try Self.squeeze(placer, probe)
        #expect(!shop.placed(Self.soundtrack, "Caches"))
        #expect(try placer.list().isEmpty)

        // Both were purged for space while entitled: the next deliver brings them back.
        let again = try shop.deliver([], catalog: catalog)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(shop.placed(Self.levels, "Caches") && shop.placed(Self.soundtrack, "Caches"))
        #expect(Set(try placer.list().map(\.preservation)) == [.low, .high])

        // Preservation before recency: the soundtrack (low) goes first though used last.
        _ = try placer.content(Self.soundtrack)
        let (roomy, roomyProbe) = try Self.placer(shop)
        try Self.squeeze(roomy, roomyProbe)
        #expect(!shop.placed(Self.soundtrack, "Caches") && shop.placed(Self.levels, "Caches"))

        // And content open brings purged content back, pinned.
        let opened = try shop.courier(["content", "open", Self.soundtrack, "--catalog", catalog])
        #expect(opened.status == 0, "\(opened.stderr)")
        #expect(shop.placed(Self.soundtrack, "Caches"))
        #expect(try placer.pins.state(Self.soundtrack).open)
    }

    @Test("the library call: openContent fetches on-demand content and holds a pin until released")
    func libraryOpen() async throws {
        let shop = try Shop(products: [Self.levels, Self.soundtrack])
        defer { shop.directory.remove() }
        let catalog = try Self.catalog(shop) { product, content in
            if product == Self.soundtrack { content.delivery = .onDemand }
        }
        #expect(try shop.deliver([], catalog: catalog).status == 0)
        var configuration = try CourierConfiguration.decode(Data("{}".utf8))
        configuration.catalog = catalog
        let client = try CourierClient(configuration: configuration, layout: StorageLayout(root: shop.storage), logger: Logger(label: "test"))
        defer { client.shutdown() }
        let opened = try await client.openContent(productID: Self.soundtrack)
        #expect(opened.fetched && opened.content.delivery == .onDemand)
        #expect(opened.content.path == shop.storage.appendingPathComponent("Caches/\(Self.soundtrack)").path)
        let (placer, probe) = try Self.placer(shop)
        #expect(try placer.pins.state(Self.soundtrack) == ContentPins.State(open: false, holders: 1))
        // Only the pinned soundtrack is cache content: nothing can be purged while it is held.
        #expect(throws: CourierError.self) { try Self.squeeze(placer, probe) }
        let again = try await client.openContent(productID: Self.soundtrack)
        let holders = try placer.pins.state(Self.soundtrack).holders
        #expect(!again.fetched && holders == 2)
        opened.pin?.release()
        again.pin?.release()
        #expect(try placer.pins.state(Self.soundtrack).holders == 0)
        try Self.squeeze(placer, probe)
        #expect(!shop.placed(Self.soundtrack, "Caches"))
        // Not in the store and not entitled: notEntitled.
        await #expect(throws: CourierError.self) { _ = try await client.openContent(productID: "com.example.unknown") }
    }

    @Test("wait --essential: exit 7 on timeout while essential content waits, 0 with none")
    func waitEssential() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let storage = directory.appending("Storage").path
        #expect(try CourierBinary.run(["wait", "--essential", "--timeout", "0", "--storage", storage]).status == 0)
        let t = QueueFixtures.transaction("w1")
        var later = QueueFixtures.content(for: t, identifier: "com.example.pack.later")
        later.delivery = .prefetch
        try queue.add([t], content: [QueueFixtures.content(for: t), later])
        let waited = try CourierBinary.run(["wait", "--essential", "--timeout", "0", "--storage", storage])
        #expect(waited.status == 7)
        #expect(waited.stderr.contains("courier: timed out") && waited.stderr.contains("com.example.pack"))
        #expect(!waited.stderr.contains("later"))
        let usage = try CourierBinary.run(["wait", "--storage", storage])
        #expect(usage.status == 2)
    }
}
