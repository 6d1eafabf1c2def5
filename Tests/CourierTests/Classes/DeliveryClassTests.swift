@testable import Courier
import CourierTestSupport
import Foundation
import Logging
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Delivery classes in the catalog and the queue (issue 32, docs/delivery-classes.md): the
/// catalog keys, the finish that waits only for essential content, the claim order, and the
/// purge order as a pure function.
@Suite("delivery classes: catalog, finish, purge order")
struct DeliveryClassTests {
    static let sha = String(repeating: "a", count: 64)

    static func catalogText(_ content: String) -> Data {
        Data(#"{"bundleId":"b","products":[{"productId":"p","content":{"url":"p.zip","sha256":"\#(sha)","length":1,"version":"1","placement":"cache"\#(content)}}]}"#.utf8)
    }

    @Test("an old catalog without classes is essential and normal, and encodes as it was")
    func oldCatalog() throws {
        let data = Self.catalogText("")
        let catalog = try Catalog.decode(data)
        let content = try #require(catalog.products[0].content)
        #expect(content.delivery == nil && content.deliveryClass == .essential)
        #expect(content.preservation == nil && content.preservationPriority == .normal)
        #expect(!String(decoding: try catalog.encoded(), as: UTF8.self).contains("delivery"))
    }

    @Test("every class and preservation decodes, and round-trips through the encoder")
    func everyValue() throws {
        for delivery in Catalog.DeliveryClass.allCases {
            for preservation in Catalog.Preservation.allCases {
                let catalog = try Catalog.decode(
                    Self.catalogText(#","delivery":"\#(delivery.rawValue)","preservation":"\#(preservation.rawValue)""#))
                let content = try #require(catalog.products[0].content)
                #expect(content.deliveryClass == delivery && content.preservationPriority == preservation)
                #expect(try Catalog.decode(catalog.encoded()) == catalog)
            }
        }
    }

    @Test("an unknown class or preservation is a catalog error naming the key (exit 2)")
    func unknownValues() throws {
        for (extra, key) in [
            (#","delivery":"ondemand""#, "delivery"), (#","preservation":"HIGH""#, "preservation"),
            (#","preservation":3"#, "preservation"), (#","delivery":"""#, "delivery"),
        ] {
            #expect {
                try Catalog.decode(Self.catalogText(extra), name: "shop.json")
            } throws: { error in
                guard let error = error as? CourierError else { return false }
                let text = error.message + (error.cause ?? "")
                return error.exitCode == 2 && text.contains("shop.json") && text.contains(key)
            }
        }
    }

    @Test("a transaction finishes once its essential content is placed, a prefetch download still in flight")
    func finishWithPrefetchInFlight() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let downloader = MemoryDownloader()
        let t = QueueFixtures.transaction("c1", product: "com.example.game")
        let essential = Data(repeating: 1, count: 4096)
        let prefetch = Data(repeating: 2, count: 8192)
        let onDemand = Data(repeating: 3, count: 1024)
        downloader.serve("com.example.game", essential)
        downloader.serve("com.example.game.extra", prefetch, behaviour: .hangHalfway)
        downloader.serve("com.example.game.ondemand", onDemand)
        var extra = QueueFixtures.content(for: t, identifier: "com.example.game.extra", payload: prefetch)
        extra.delivery = .prefetch
        extra.preservation = .low
        var later = QueueFixtures.content(for: t, identifier: "com.example.game.ondemand", payload: onDemand)
        later.delivery = .onDemand
        // The prefetch content listed first: the claim order still takes the essential first.
        try queue.add([t], content: [extra, QueueFixtures.content(for: t, payload: essential), later])
        let downloads = try queue.downloads(transactionId: "c1")
        // On-demand content is not queued.
        #expect(Set(downloads.map(\.contentIdentifier)) == ["com.example.game", "com.example.game.extra"])
        let claimed = try queue.claim(scope: .all, limit: 1)
        #expect(claimed.map(\.contentIdentifier) == ["com.example.game"])
        #expect(claimed.first?.isBackgroundWork == false)
        queue.releaseLease(claimed[0].id)
        try queue.transition(claimed[0].id, .pause(.interrupted))

        let pipeline = DeliveryPipeline(
            queue: queue, downloader: downloader, installer: CopyInstaller(layout: queue.layout), logger: Logger(label: "test"))
        let run = Task { try await pipeline.run() }
        #expect(try await eventually { try queue.transaction("c1")?.state == .finished })
        let extraId = DownloadRecord.makeId(transactionId: "c1", contentIdentifier: "com.example.game.extra")
        #expect(try await eventually { try queue.download(extraId)?.durableOffset == 4096 })
        let inFlight = try #require(try queue.download(extraId))
        #expect(inFlight.state == .active && inFlight.delivery == .prefetch && inFlight.isBackgroundWork)
        // Its lease survived the finish: its worker still holds it.
        #expect(try queue.holdsLease(extraId))
        #expect(try queue.essentialProgress().isComplete)
        downloader.setBehaviour("com.example.game.extra", .deliver)
        try queue.pause([extraId])
        _ = try await run.value
        try queue.resume([extraId])
        let summary = try await pipeline.run()
        #expect(summary.finishedDownloads == [extraId])
        #expect(try queue.download(extraId)?.state == .finished)
        #expect(try queue.transaction("c1")?.state == .finished)
    }

    @Test("wait --essential's answer: pending while an essential download waits, failed when one fails")
    func essentialProgress() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let t = QueueFixtures.transaction("e1")
        var extra = QueueFixtures.content(for: t, identifier: "com.example.pack.extra")
        extra.delivery = .prefetch
        try queue.add([t], content: [QueueFixtures.content(for: t), extra])
        let progress = try queue.essentialProgress()
        #expect(progress.pending.map(\.contentIdentifier) == ["com.example.pack"] && progress.failed.isEmpty)
        let id = DownloadRecord.makeId(transactionId: "e1", contentIdentifier: "com.example.pack")
        _ = try queue.claim(scope: .downloads([id]), limit: 1)
        try queue.transition(id, .failed(CourierError(.network, "gone")))
        #expect(try queue.essentialProgress().failed.map(\.id) == [id])
    }

    static func content(_ id: String, _ preservation: Catalog.Preservation, used: Double, placement: Catalog.Placement = .cache)
        -> DeliveredContent
    {
        DeliveredContent(
            contentIdentifier: id, productId: id, version: "1", placement: placement, path: "/x/\(id)", size: 1, sha256: sha,
            installedAt: Date(timeIntervalSince1970: 0), lastUsedAt: Date(timeIntervalSince1970: used), preservation: preservation)
    }

    @Test("purge order: low before normal before high, least recently used within each, pinned and documents never")
    func purgeOrder() {
        let contents = [
            Self.content("high-old", .high, used: 1), Self.content("normal-new", .normal, used: 50),
            Self.content("low-new", .low, used: 90), Self.content("normal-old", .normal, used: 10),
            Self.content("low-old", .low, used: 5), Self.content("low-pinned", .low, used: 0),
            Self.content("docs", .low, used: 0, placement: .documents), Self.content("in-use", .low, used: 0),
            Self.content("tie-b", .high, used: 70), Self.content("tie-a", .high, used: 70),
        ]
        let order = PurgeOrder.candidates(contents, pinned: ["low-pinned"], inUse: ["in-use"]).map(\.contentIdentifier)
        #expect(order == ["low-old", "low-new", "normal-old", "normal-new", "high-old", "tie-a", "tie-b"])
        #expect(PurgeOrder.candidates(contents.reversed(), pinned: ["low-pinned"], inUse: ["in-use"]).map(\.contentIdentifier) == order)
        #expect(PurgeOrder.candidates([], pinned: []).isEmpty)
    }
}
