import Courier
import Foundation
import Testing

/// Which delivered content an update moves (issue 13, "Updates"): newer catalog versions the
/// stored purchases still entitle; never a downgrade, a refund or an expired subscription.
@Suite("UpdatePlanner: newer, entitled content only")
struct UpdatePlannerTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func installed(_ identifier: String, version: String, product: String? = nil) -> DeliveredContent {
        DeliveredContent(
            contentIdentifier: identifier, productId: product ?? identifier, version: version, placement: .documents,
            path: "/nowhere/\(identifier)", size: 1, sha256: String(repeating: "0", count: 64), installedAt: now, lastUsedAt: now)
    }

    static func catalog(_ products: [(String, String, Catalog.ProductType)], mirrors: [String]? = nil) -> Catalog {
        Catalog(
            bundleId: "com.example.app",
            products: products.map { id, version, type in
                Catalog.Product(
                    productId: id, type: type,
                    content: Catalog.Content(
                        url: "\(id)-\(version).zip", sha256: String(repeating: "a", count: 64), length: 10, version: version,
                        placement: .documents, mirrors: mirrors))
            })
    }

    static func purchase(
        _ id: String, product: String, type: Catalog.ProductType = .nonConsumable, expires: Date? = nil, revoked: Date? = nil,
        signed: Date = Date(timeIntervalSince1970: 1_700_000_001)
    ) -> VerifiedTransaction {
        VerifiedTransaction(
            transactionId: id, originalTransactionId: id, productId: product, bundleId: "com.example.app", type: type,
            purchaseDate: Date(timeIntervalSince1970: 1_700_000_000), expiresDate: expires, revocationDate: revoked,
            environment: "Sandbox", signedDate: signed)
    }

    @Test("newer: updated by the entitling transaction, URL and mirrors resolved; same: up to date; older: a refused downgrade")
    func versions() throws {
        let catalog = Self.catalog(
            [("com.a", "2.0", .nonConsumable), ("com.b", "1.0", .nonConsumable), ("com.c", "0.9", .nonConsumable)],
            mirrors: ["https://mirror.example.net/pack.zip"])
        let plan = try UpdatePlanner.plan(
            installed: [Self.installed("com.a", version: "1.0"), Self.installed("com.b", version: "1.0"), Self.installed("com.c", version: "1.0")],
            transactions: ["com.a", "com.b", "com.c"].map { Self.purchase("t-\($0)", product: $0) }, catalog: catalog,
            catalogLocation: URL(string: "https://cdn.example.com/catalog.json"), now: Self.now)
        #expect(plan.updates.map(\.contentIdentifier) == ["com.a"])
        let update = try #require(plan.updates.first)
        #expect(update.fromVersion == "1.0" && update.toVersion == "2.0")
        #expect(update.content.transactionId == "t-com.a")
        #expect(update.content.url.absoluteString == "https://cdn.example.com/com.a-2.0.zip")
        #expect(update.content.mirrors.map(\.absoluteString) == ["https://mirror.example.net/pack.zip"])
        #expect(plan.upToDate.map(\.contentIdentifier) == ["com.b"])
        #expect(plan.skipped.map(\.contentIdentifier) == ["com.c"])
        #expect(plan.skipped.first?.reason == .downgrade)
    }

    @Test("a refund (a later, revoked copy of the transaction) stops the update")
    func refunded() throws {
        let catalog = Self.catalog([("com.a", "2.0", .nonConsumable)])
        let plan = try UpdatePlanner.plan(
            installed: [Self.installed("com.a", version: "1.0")],
            transactions: [
                Self.purchase("t1", product: "com.a"),
                Self.purchase("t1", product: "com.a", revoked: Self.now, signed: Self.now),
            ],
            catalog: catalog, catalogLocation: nil, now: Self.now)
        #expect(plan.updates.isEmpty)
        #expect(plan.skipped.first?.reason == .notEntitled)
        #expect(plan.skipped.first?.message.contains("refunded or revoked") == true)
    }

    @Test("an expired subscription's content is not updated; an active one's is")
    func subscriptions() throws {
        let catalog = Self.catalog([("com.sub", "2.0", .autoRenewable)])
        let installed = [Self.installed("com.sub", version: "1.0")]
        let expired = try UpdatePlanner.plan(
            installed: installed,
            transactions: [Self.purchase("s1", product: "com.sub", type: .autoRenewable, expires: Self.now.addingTimeInterval(-1))],
            catalog: catalog, catalogLocation: nil, now: Self.now)
        #expect(expired.updates.isEmpty)
        #expect(expired.skipped.first?.message.contains("subscription expired") == true)
        let active = try UpdatePlanner.plan(
            installed: installed,
            transactions: [Self.purchase("s1", product: "com.sub", type: .autoRenewable, expires: Self.now.addingTimeInterval(60))],
            catalog: catalog, catalogLocation: nil, now: Self.now)
        #expect(active.updates.map(\.contentIdentifier) == ["com.sub"])
    }

    @Test("--product limits the plan; content without a purchase in the store is not updated")
    func productsAndNoPurchase() throws {
        let catalog = Self.catalog([("com.a", "2.0", .nonConsumable), ("com.b", "2.0", .nonConsumable)])
        let installed = [Self.installed("com.a", version: "1.0"), Self.installed("com.b", version: "1.0")]
        let plan = try UpdatePlanner.plan(
            installed: installed, transactions: [Self.purchase("t1", product: "com.a")], catalog: catalog,
            catalogLocation: nil, products: ["com.b"], now: Self.now)
        #expect(plan.updates.isEmpty)
        #expect(plan.skipped.first?.message.contains("no purchase of it in this store") == true)
    }

    @Test("catalog mirrors: absolute http(s) URLs only; a catalog without them still decodes")
    func catalogMirrors() throws {
        func decode(_ mirrors: String) throws -> Catalog {
            try Catalog.decode(
                Data(
                    """
                    {"bundleId": "b", "products": [{"productId": "p", "content": {"url": "p.zip", "sha256": "\(String(repeating: "a", count: 64))",
                     "length": 1, "version": "1", "placement": "cache"\(mirrors)}}]}
                    """.utf8))
        }
        #expect(try decode("").products[0].content?.mirrors == nil)
        #expect(try decode(#", "mirrors": ["https://m1.example/p.zip", "http://127.0.0.1:8080/p.zip"]"#).products[0].content?.mirrors?.count == 2)
        for bad in [#"["ftp://m.example/p.zip"]"#, #"["p.zip"]"#, #"["file:///etc/passwd"]"#, #"["https://"]"#, #""https://m.example""#] {
            #expect(throws: CourierError.self, "\(bad)") { try decode(", \"mirrors\": \(bad)") }
        }
    }
}
