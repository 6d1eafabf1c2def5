import Courier
import CourierTestSupport
import Foundation
import Testing

@Suite("Entitlements: transactions plus catalog give content")
struct EntitlementsTests {
    static func content(_ name: String) -> Catalog.Content {
        Catalog.Content(
            url: "\(name).zip",
            sha256: String(repeating: "0", count: 64),
            length: 100,
            version: "1.0",
            placement: .documents
        )
    }

    static func transaction(
        _ id: String,
        product: String,
        type: Catalog.ProductType,
        from start: Date,
        to end: Date? = nil,
        revoked: Date? = nil
    ) -> VerifiedTransaction {
        VerifiedTransaction(
            transactionId: id,
            originalTransactionId: "1",
            productId: product,
            bundleId: "com.example.app",
            type: type,
            purchaseDate: start,
            expiresDate: end,
            revocationDate: revoked,
            environment: "Sandbox",
            signedDate: start
        )
    }

    /// Monthly issues published on the 1st, January to August 2026.
    static let magazine: Catalog = {
        let months = ["01", "02", "03", "04", "05", "06", "07", "08"]
        let items = months.map { month in
            Catalog.Item(
                itemId: "2026-\(month)",
                publishedAt: day("2026-\(month)-01"),
                content: content("issue-\(month)")
            )
        }
        return Catalog(
            bundleId: "com.example.app",
            products: [Catalog.Product(productId: "com.example.magazine", type: .autoRenewable, items: items)]
        )
    }()

    @Test("the In-App Purchase guide's magazine timeline")
    func magazineTimeline() {
        let transactions = [
            Self.transaction(
                "t1",
                product: "com.example.magazine",
                type: .autoRenewable,
                from: day("2026-02-20"),
                to: day("2026-03-20")
            ),
            Self.transaction(
                "t2",
                product: "com.example.magazine",
                type: .autoRenewable,
                from: day("2026-03-20"),
                to: day("2026-04-20")
            ),
            Self.transaction(
                "t3",
                product: "com.example.magazine",
                type: .autoRenewable,
                from: day("2026-06-17"),
                to: day("2026-07-17")
            ),
        ]
        let entitled = Entitlements.content(for: transactions, catalog: Self.magazine, now: day("2026-09-15"))
        #expect(entitled.compactMap(\.itemId) == ["2026-02", "2026-03", "2026-04", "2026-06", "2026-07"])
        #expect(entitled.map(\.contentIdentifier).first == "com.example.magazine.2026-02")
        #expect(entitled.first { $0.itemId == "2026-02" }?.transactionId == "t1")
        #expect(entitled.first { $0.itemId == "2026-06" }?.transactionId == "t3")
        #expect(entitled.first { $0.itemId == "2026-07" }?.content.url == "issue-07.zip")
    }

    @Test("the magazine timeline from the catalog's JSON, with date-only publication dates")
    func magazineFromJSON() throws {
        let json = """
            { "bundleId": "com.example.app",
              "products": [ { "productId": "com.example.magazine", "type": "autoRenewable",
                "items": [
                  { "itemId": "jan", "publishedAt": "2026-01-01", "content": { "url": "jan.zip", "sha256": "00", "length": 1, "version": "1", "placement": "cache" } },
                  { "itemId": "feb", "publishedAt": "2026-02-01T00:00:00Z", "content": { "url": "feb.zip", "sha256": "00", "length": 1, "version": "1", "placement": "cache" } },
                  { "itemId": "mar", "publishedAt": "2026-03-01T00:00:00.000Z", "content": { "url": "mar.zip", "sha256": "00", "length": 1, "version": "1", "placement": "cache" } }
                ] } ] }
            """
        let catalog = try Catalog.decode(Data(json.utf8))
        let subscribed = [
            Self.transaction(
                "t1",
                product: "com.example.magazine",
                type: .autoRenewable,
                from: day("2026-02-20"),
                to: day("2026-03-20")
            )
        ]
        let entitled = Entitlements.content(for: subscribed, catalog: catalog, now: day("2026-12-01"))
        #expect(entitled.compactMap(\.itemId) == ["feb", "mar"])
    }

    @Test("an active period unlocks only what is already published")
    func notYetPublished() {
        let subscribed = [
            Self.transaction(
                "t1",
                product: "com.example.magazine",
                type: .autoRenewable,
                from: day("2026-06-17"),
                to: day("2026-08-17")
            )
        ]
        let entitled = Entitlements.content(for: subscribed, catalog: Self.magazine, now: day("2026-07-10"))
        #expect(entitled.compactMap(\.itemId) == ["2026-06", "2026-07"])
    }

    @Test("non-consumables and non-renewing subscriptions unlock their content once")
    func products() {
        let catalog = Catalog(
            bundleId: "com.example.app",
            products: [
                Catalog.Product(productId: "pack1", content: Self.content("pack1")),
                Catalog.Product(productId: "season", type: .nonRenewable, content: Self.content("season")),
            ]
        )
        let start = day("2026-01-10")
        let transactions = [
            Self.transaction("a", product: "pack1", type: .nonConsumable, from: start),
            Self.transaction("a", product: "pack1", type: .nonConsumable, from: start),
            Self.transaction("b", product: "pack1", type: .nonConsumable, from: start.addingTimeInterval(60)),
            Self.transaction("c", product: "season", type: .nonRenewable, from: start),
            Self.transaction("d", product: "unknown", type: .nonConsumable, from: start),
        ]
        let entitled = Entitlements.content(for: transactions, catalog: catalog, now: day("2026-02-01"))
        #expect(entitled.map(\.contentIdentifier) == ["pack1", "season"])
        #expect(entitled.first?.transactionId == "a")
        #expect(entitled.allSatisfy { $0.itemId == nil })
    }

    @Test("a subscription with plain content unlocks it only while a period is active")
    func activeSubscriptionContent() {
        let catalog = Catalog(
            bundleId: "com.example.app",
            products: [Catalog.Product(productId: "pro", type: .autoRenewable, content: Self.content("pro"))]
        )
        let period = [
            Self.transaction("p1", product: "pro", type: .autoRenewable, from: day("2026-03-01"), to: day("2026-04-01"))
        ]
        #expect(
            Entitlements.content(for: period, catalog: catalog, now: day("2026-03-15")).map(\.contentIdentifier) == [
                "pro"
            ]
        )
        #expect(Entitlements.content(for: period, catalog: catalog, now: day("2026-04-02")).isEmpty)
    }

    @Test("a revoked transaction unlocks nothing")
    func revoked() {
        let catalog = Catalog(
            bundleId: "com.example.app",
            products: [Catalog.Product(productId: "pack1", content: Self.content("pack1"))]
        )
        let refunded = Self.transaction(
            "a",
            product: "pack1",
            type: .nonConsumable,
            from: day("2026-01-10"),
            revoked: day("2026-01-12")
        )
        #expect(Entitlements.content(for: [refunded], catalog: catalog, now: day("2026-02-01")).isEmpty)
        let cancelledSubscription = Self.transaction(
            "s",
            product: "com.example.magazine",
            type: .autoRenewable,
            from: day("2026-02-20"),
            to: day("2026-03-20"),
            revoked: day("2026-02-25")
        )
        #expect(
            Entitlements.content(for: [cancelledSubscription], catalog: Self.magazine, now: day("2026-09-01")).isEmpty
        )
    }

    @Test("a refund is not hidden by an older copy of its purchase, in any order")
    func refundWinsOverOlderCopy() {
        let catalog = Catalog(
            bundleId: "com.example.app",
            products: [
                Catalog.Product(productId: "pack1", content: Self.content("pack1")),
                Catalog.Product(productId: "pack2", content: Self.content("pack2")),
            ]
        )
        let purchase = Self.transaction("a", product: "pack1", type: .nonConsumable, from: day("2026-01-10"))
        var refund = Self.transaction(
            "a", product: "pack1", type: .nonConsumable, from: day("2026-01-10"), revoked: day("2026-01-12"))
        refund.signedDate = day("2026-01-12")
        let other = Self.transaction("b", product: "pack2", type: .nonConsumable, from: day("2026-01-11"))
        for transactions in [[purchase, refund, other], [refund, purchase, other], [other, refund, purchase]] {
            let entitled = Entitlements.content(for: transactions, catalog: catalog, now: day("2026-02-01"))
            #expect(entitled.map(\.contentIdentifier) == ["pack2"])
        }
        // An older revoked copy still wins over a newer unrevoked one: a revocation is final.
        var staleRefund = refund
        staleRefund.signedDate = day("2026-01-09")
        for transactions in [[purchase, staleRefund], [staleRefund, purchase]] {
            #expect(Entitlements.content(for: transactions, catalog: catalog, now: day("2026-02-01")).isEmpty)
        }
    }

    @Test("the same content bought twice at the same time is credited to one transaction whatever the order")
    func orderIndependentTies() {
        let catalog = Catalog(
            bundleId: "com.example.app",
            products: [Catalog.Product(productId: "pack1", content: Self.content("pack1"))]
        )
        let start = day("2026-01-10")
        let x = Self.transaction("x", product: "pack1", type: .nonConsumable, from: start)
        let y = Self.transaction("y", product: "pack1", type: .nonConsumable, from: start)
        let forward = Entitlements.content(for: [x, y], catalog: catalog, now: day("2026-02-01"))
        let backward = Entitlements.content(for: [y, x], catalog: catalog, now: day("2026-02-01"))
        #expect(forward == backward)
        #expect(forward.first?.transactionId == "x")
    }
}
