import CourierTestSupport
import Foundation
import Logging
import Testing

@testable import Courier

/// A client's delta update, run by its pipeline, transfers its ranges as its download: in the
/// client's one engine, under the download's id, at its priority, and `courier priority`
/// (`LocalQueueControl`) changes them while they run.
@Suite("A client's delta update transfers as its download")
struct UpdatePriorityTests {
    @Test("courier priority on a running delta update reaches its range fetches", .enabled(if: NginxServer.isAvailable))
    func priorityReachesRangeFetches() async throws {
        // b.bin (1 MiB) changes in 2.0: its range takes seconds at 128 KiB/s.
        let shop = try UpdateShop(fileSize: 1 << 20, manifests: true)
        defer { shop.stop() }
        #expect(try shop.deliverV1().status == 0)
        var configuration = try CourierConfiguration.load(file: shop.configFile, required: true)
        configuration.transfer.maxRate = try ByteRate(parsing: "128k")
        let client = try CourierClient(
            configuration: configuration, layout: StorageLayout(root: shop.storage), logger: Logger(label: "test"))
        defer { client.shutdown() }
        let run = try await client.prepareUpdates(.init(catalog: shop.catalog("2.0")))
        let update = try #require(run.downloads.first)
        #expect(update.isUpdate && update.manifest != nil && update.priority == nil)
        let limiter = client.engine.rateLimiter
        let logged = shop.nginx.accessLog().count
        let delivering = Task { try await client.deliver(scope: run.scope) }
        defer { delivering.cancel() }

        // Unset, a foreground client transfers an update at high, its ranges too.
        #expect(await Self.eventually { limiter.priorities(of: update.id) == [.high] })
        // `courier priority ID low` in this process: the running range fetch follows at once.
        let changed = try await client.control.perform(.priority(.ids([update.id]), .low))
        #expect(changed.downloads.map(\.id) == [update.id])
        #expect(limiter.priorities(of: update.id) == [.low])

        delivering.cancel()
        _ = try? await delivering.value
        #expect(await Self.eventually { limiter.priorities(of: update.id).isEmpty })
        // What ran were the update's range requests (206), not the whole package. nginx logs the
        // aborted range request once its connection closes, and a line of the requests before
        // `logged` was read may come later still: so wait for the package's line itself, not for
        // a count of lines.
        func packageRequests() -> [String] {
            shop.nginx.accessLog().dropFirst(logged).filter { $0.contains("GET /pack-2.0.zip") }
        }
        #expect(await Self.eventually { !packageRequests().isEmpty })
        let package = packageRequests()
        #expect(!package.isEmpty && package.allSatisfy { $0.contains("\" 206 ") }, "\(package)")
    }

    /// Whether `condition` holds within 60 s, asked every 5 ms (without blocking a thread).
    static func eventually(_ condition: () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(nanoseconds: 5_000_000)
        }
        return condition()
    }
}
