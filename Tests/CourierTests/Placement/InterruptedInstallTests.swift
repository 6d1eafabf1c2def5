import Courier
import CourierTestSupport
import Foundation
import GRDB
import Logging
import Testing

/// An install that a crash interrupted, again and again (issue 10): a package that crashes
/// Courier while it is unpacked must not crash it forever. Each crash leaves its
/// `content_install_attempt` row behind with no live install lock; the state is written here the
/// way a killed process leaves it.
@Suite("Interrupted installs")
struct InterruptedInstallTests {
    static let product = "com.example.levels.pack1"

    func makePlacer(_ directory: TemporaryDirectory) throws -> (ContentPlacer, StateStore) {
        let layout = StorageLayout(root: directory.appending("Storage"))
        let store = try StateStore(layout: layout)
        let placer = ContentPlacer(
            layout: layout, store: store, packages: PackageConfiguration(), placement: PlacementConfiguration(),
            logger: Logger(label: "test")
        )
        return (placer, store)
    }

    /// What a process killed while installing `contentIdentifier` leaves, after `interruptions`
    /// earlier interrupted attempts: its attempt row, and its lock file, which no one holds.
    static func leaveInterruptedAttempt(
        _ store: StateStore, storage: URL, contentIdentifier: String, package: String, placement: Catalog.Placement,
        interruptions: Int
    ) throws {
        let lockId = UUID().uuidString.lowercased()
        let staging = storage.appendingPathComponent(placement == .cache ? "Caches/.staging" : "Documents/.staging")
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: staging.appendingPathComponent("\(lockId).lock").path, contents: nil)
        try store.pool.write { db in
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO content_install_attempt
                        (contentIdentifier, package, lockId, placement, interruptions, startedAt)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                arguments: [contentIdentifier, package, lockId, placement.rawValue, interruptions, Date()]
            )
        }
    }

    static func attempts(_ store: StateStore) throws -> Int {
        try store.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM content_install_attempt") ?? 0 }
    }

    @Test("one interrupted attempt is retried; after two in a row the install is refused (integrity), then starts over")
    func refusedAfterTwoInterruptions() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (placer, store) = try makePlacer(directory)
        let storage = directory.appending("Storage")
        let package = directory.appending("pack.zip")
        try PackageFixtures.infoZip(product: Self.product, version: "1.0", files: ["a.txt": Data("a".utf8)], at: package)
        let fingerprint = ContentPlacer.fingerprint(package, verifiedSHA256: nil)
        func install() throws -> DeliveredContent {
            try placer.install(
                package: package, contentIdentifier: Self.product, productId: Self.product, version: "1.0",
                placement: .documents, force: true)
        }

        // One crash: the next attempt is its second, and runs.
        try Self.leaveInterruptedAttempt(
            store, storage: storage, contentIdentifier: Self.product, package: fingerprint, placement: .documents, interruptions: 0)
        _ = try install()
        #expect(try Self.attempts(store) == 0)

        // Two crashes in a row: refused before the package is read, clearly.
        try placer.delete(Self.product)
        try Self.leaveInterruptedAttempt(
            store, storage: storage, contentIdentifier: Self.product, package: fingerprint, placement: .documents, interruptions: 1)
        do {
            _ = try install()
            Issue.record("installed a package that crashed Courier twice")
        } catch let error as CourierError {
            #expect(error.code == .integrity)
            #expect(error.message.contains("interrupted 2 times in a row"), "\(error.message)")
        }
        #expect(try placer.list().isEmpty)
        #expect(try Self.attempts(store) == 0)
        // Asked again (a resume), the count has started over.
        _ = try install()

        // Another package for the same content does not inherit the count.
        try Self.leaveInterruptedAttempt(
            store, storage: storage, contentIdentifier: Self.product, package: "sha256:other", placement: .documents, interruptions: 5)
        _ = try install()
        #expect(try Self.attempts(store) == 0)
    }
}

@Suite("Interrupted installs, delivered", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct InterruptedDeliveryTests {
    @Test("deliver: a download whose install crashed twice in a row fails clearly; the others are delivered")
    func deliverGoesOn() throws {
        let shop = try Shop()
        defer { shop.stop() }
        let crashing = Shop.products[1]
        _ = try shop.courier(["list", "--json"])  // creates and migrates the store
        let store = try StateStore(layout: StorageLayout(root: shop.storage))
        let bytes = try Data(contentsOf: shop.directory.appending("www/\(crashing).zip"))
        try InterruptedInstallTests.leaveInterruptedAttempt(
            store, storage: shop.storage, contentIdentifier: crashing, package: "sha256:\(QueueFixtures.sha256(bytes))",
            placement: shop.placements[crashing] ?? .cache, interruptions: 1)

        let receipt = try shop.receipt(Shop.products)
        let result = try shop.courier(shop.deliverArguments(receipt) + ["--json"])
        #expect(result.status == 6, "\(result.stdout) \(result.stderr)")
        for product in Shop.products where product != crashing {
            #expect(shop.isPlaced(product), "\(product)")
        }
        #expect(!shop.isPlaced(crashing))
        let list = try shop.courier(["list", "--all", "--json"])
        let entries = try #require(list.events.first?["entries"] as? [[String: Any]])
        let failed = try #require(entries.first { $0["productId"] as? String == crashing || $0["contentIdentifier"] as? String == crashing })
        #expect(failed["state"] as? String == "failed", "\(failed)")
        #expect("\(failed)".contains("interrupted 2 times in a row"), "\(failed)")
        #expect(try InterruptedInstallTests.attempts(store) == 0)
    }
}
