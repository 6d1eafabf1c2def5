import Courier
import CourierServer
import Foundation
import Synchronization
import Testing

/// The gate's cache of verified tokens: bounded, expiring, and never in the way of a refund.
@Suite("VerifiedTokenCache: bound, expiry, revocation")
struct VerifiedTokenCacheTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    static func transaction(_ id: String, signed: Date = start, expires: Date? = nil) -> VerifiedTransaction {
        VerifiedTransaction(
            transactionId: id, originalTransactionId: id, productId: "com.example.pack1", bundleId: "com.example.app",
            type: expires == nil ? .nonConsumable : .autoRenewable, purchaseDate: signed, expiresDate: expires,
            environment: "Sandbox", signedDate: signed
        )
    }

    @Test("holds at most `capacity` tokens and drops the least recently used first")
    func bound() {
        let cache = VerifiedTokenCache(capacity: 3)
        let now = Self.start
        for token in ["a", "b", "c"] {
            cache.store([Self.transaction(token)], for: token, now: now, maxTokenAge: nil)
        }
        #expect(cache.count == 3)
        // Touch "a": "b" is now the least recently used.
        #expect(cache.transactions(for: "a", now: now)?.first?.transactionId == "a")
        cache.store([Self.transaction("d")], for: "d", now: now, maxTokenAge: nil)
        #expect(cache.count == 3)
        #expect(cache.transactions(for: "b", now: now) == nil)
        for token in ["a", "c", "d"] {
            #expect(cache.transactions(for: token, now: now)?.first?.transactionId == token)
        }
        // Many more than the bound: the count never passes it.
        for index in 0..<1000 {
            cache.store([Self.transaction("t\(index)")], for: "t\(index)", now: now, maxTokenAge: nil)
        }
        #expect(cache.count == 3)
        #expect(cache.transactions(for: "t999", now: now) != nil)
        #expect(cache.transactions(for: "t996", now: now) == nil)
        #expect(VerifiedTokenCache().capacity == 10_000)
    }

    @Test("an entry expires with the cache lifetime, the token's expiresDate and signedDate + maxTokenAge")
    func expiry() {
        let cache = VerifiedTokenCache(capacity: 10, lifetime: 600)
        let now = Self.start
        cache.store([Self.transaction("plain")], for: "plain", now: now, maxTokenAge: nil)
        #expect(cache.transactions(for: "plain", now: now.addingTimeInterval(599)) != nil)
        #expect(cache.transactions(for: "plain", now: now.addingTimeInterval(601)) == nil)
        #expect(cache.count == 0)

        cache.store([Self.transaction("sub", expires: now.addingTimeInterval(60))], for: "sub", now: now, maxTokenAge: nil)
        #expect(cache.transactions(for: "sub", now: now.addingTimeInterval(59)) != nil)
        #expect(cache.transactions(for: "sub", now: now.addingTimeInterval(61)) == nil)

        cache.store([Self.transaction("aged", signed: now.addingTimeInterval(-100))], for: "aged", now: now, maxTokenAge: 130)
        #expect(cache.transactions(for: "aged", now: now.addingTimeInterval(29)) != nil)
        #expect(cache.transactions(for: "aged", now: now.addingTimeInterval(31)) == nil)

        // Already expired: not stored at all.
        cache.store([Self.transaction("gone", expires: now.addingTimeInterval(-1))], for: "gone", now: now, maxTokenAge: nil)
        #expect(cache.transactions(for: "gone", now: now) == nil)
    }

    /// Counts verifications; tokens from a table as in `TableVerifier`.
    final class CountingVerifier: BearerTokenVerifier {
        let calls = Mutex(0)
        let expires: Date?

        init(expires: Date? = nil) {
            self.expires = expires
        }

        func transactions(proving token: String, now: Date) async throws -> [VerifiedTransaction] {
            calls.withLock { $0 += 1 }
            guard token == "buyer" else { throw CourierError(.receiptInvalid, "the signed transaction does not verify (signature)") }
            return [VerifiedTokenCacheTests.transaction("t1", signed: VerifiedTokenCacheTests.start, expires: expires)]
        }

        var count: Int { calls.withLock { $0 } }
    }

    /// Refunds that can be recorded during a test.
    final class Refunds: RevocationSource {
        let ids = Mutex(Set<String>())
        func isRevoked(_ transactionId: String) -> Bool { ids.withLock { $0.contains(transactionId) } }
        func revoke(_ id: String) { _ = ids.withLock { $0.insert(id) } }
    }

    static let content = ServedContent(
        path: "/packages/com.example.pack1/x.zip", contentIdentifier: "com.example.pack1", productId: "com.example.pack1",
        itemId: nil, content: Catalog.Content(url: "packages/com.example.pack1/x.zip", sha256: "ab", length: 1, version: "1", placement: .documents)
    )
    static let catalog = Catalog(bundleId: "com.example.app", products: [])

    @Test("the gate verifies a token once, but a refund recorded after it was cached is refused at once")
    func revocationAfterCaching() async {
        let verifier = CountingVerifier()
        let refunds = Refunds()
        let clock = Mutex(Self.start)
        let gate = ReceiptAccessGate(
            verifier: verifier,
            entitlements: { transactions, _, _ in Set(transactions.map(\.productId)) },
            revocations: refunds,
            cache: VerifiedTokenCache(capacity: 100),
            clock: { clock.withLock { $0 } }
        )
        for _ in 0..<5 {
            #expect(await gate.authorize(bearer: "buyer", content: Self.content, catalog: Self.catalog) == .allowed(subject: "t1", reason: .entitled))
        }
        #expect(verifier.count == 1)
        refunds.revoke("t1")
        let refused = await gate.authorize(bearer: "buyer", content: Self.content, catalog: Self.catalog)
        #expect(refused.code == .revoked)
        // A bad token is never cached: each try is verified (and refused).
        for _ in 0..<2 {
            #expect(await gate.authorize(bearer: "forged", content: Self.content, catalog: Self.catalog).code == .invalidToken)
        }
        #expect(verifier.count == 3)
        // Past the cache lifetime the token is verified again.
        clock.withLock { $0 = Self.start.addingTimeInterval(VerifiedTokenCache.defaultLifetime + 1) }
        _ = await gate.authorize(bearer: "buyer", content: Self.content, catalog: Self.catalog)
        #expect(verifier.count == 4)
    }

    @Test("a cached subscription token is verified again once it has expired")
    func expiredSubscriptionVerifiedAgain() async {
        let verifier = CountingVerifier(expires: Self.start.addingTimeInterval(30))
        let clock = Mutex(Self.start)
        let gate = ReceiptAccessGate(
            verifier: verifier,
            entitlements: { transactions, _, now in Set(transactions.filter { ($0.expiresDate ?? .distantFuture) > now }.map(\.productId)) },
            cache: VerifiedTokenCache(capacity: 100),
            clock: { clock.withLock { $0 } }
        )
        #expect(await gate.authorize(bearer: "buyer", content: Self.content, catalog: Self.catalog).code == .entitled)
        #expect(await gate.authorize(bearer: "buyer", content: Self.content, catalog: Self.catalog).code == .entitled)
        #expect(verifier.count == 1)
        clock.withLock { $0 = Self.start.addingTimeInterval(31) }
        #expect(await gate.authorize(bearer: "buyer", content: Self.content, catalog: Self.catalog).code == .notEntitled)
        #expect(verifier.count == 2)
    }
}
