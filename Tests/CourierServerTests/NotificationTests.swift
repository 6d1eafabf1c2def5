import Courier
import CourierServer
import CourierTestSupport
import Foundation
import Testing

/// App Store Server Notifications V2 at `POST /notifications`: refunds reach the gate.
@Suite("POST /notifications: refunds and revocations reach the gate")
struct NotificationTests {
    static let pack = "com.example.levels.pack1"
    static let transactionId = "2000000000000777"

    /// A content folder, a test signing chain whose root the gate trusts, the origin's state
    /// folder, and an origin with the receipt gate fed by the notification receiver.
    struct Stack {
        var fixture: ContentFixture
        let chain: TestSigningChain
        let verifier: SignedTransactionVerifier
        let stateFolder: URL

        init() throws {
            fixture = try ContentFixture()
            try fixture.addPackage(NotificationTests.pack, size: 5000)
            try fixture.publishCatalog(products: [NotificationTests.pack])
            chain = try TestSigningChain()
            verifier = SignedTransactionVerifier(
                trustedRoots: [chain.root], bundleId: "com.example.app", environments: ["Sandbox"], clockSkew: 300
            )
            stateFolder = fixture.url.appendingPathComponent("state")
        }

        /// Opens the state (again) and starts an origin over it.
        func start(maxTokenAge: Double? = nil) async throws -> (RunningOrigin, OriginStateStore) {
            let store = try OriginStateStore(directory: stateFolder)
            let origin = try await RunningOrigin.start(
                content: fixture.url,
                gate: ReceiptAccessGate(verifier: verifier, revocations: store, maxTokenAge: maxTokenAge),
                notifications: NotificationReceiver(verifier: verifier, store: store)
            ) { $0.maxTokenAge = maxTokenAge }
            return (origin, store)
        }

        /// A signed transaction for the pack (the token a client presents).
        func purchase(
            revoked: Date? = nil, bundleId: String = "com.example.app", signedDate: Date = Date().addingTimeInterval(-600),
            transactionId: String = NotificationTests.transactionId, originalTransactionId: String? = nil
        ) throws -> String {
            try chain.token(
                TestSigningChain.payload(
                    productId: NotificationTests.pack, transactionId: transactionId, originalTransactionId: originalTransactionId,
                    bundleId: bundleId, revocationDate: revoked, environment: "Sandbox", signedDate: signedDate
                )
            )
        }

        /// Apple's POST body for a notification about the pack's transaction.
        func body(
            _ type: String,
            uuid: String = UUID().uuidString.lowercased(),
            bundleId: String = "com.example.app",
            transactionBundleId: String = "com.example.app",
            signedDate: Date = Date(),
            forgedBy forger: TestSigningChain? = nil,
            transactionId: String = NotificationTests.transactionId,
            originalTransactionId: String? = nil
        ) throws -> Data {
            let revoked = type == "REFUND_REVERSED" ? nil : signedDate.addingTimeInterval(-5)
            let info = try chain.token(
                TestSigningChain.payload(
                    productId: NotificationTests.pack, transactionId: transactionId, originalTransactionId: originalTransactionId,
                    bundleId: transactionBundleId, revocationDate: revoked, environment: "Sandbox", signedDate: signedDate
                )
            )
            let payload: [String: Any] = [
                "notificationType": type,
                "notificationUUID": uuid,
                "version": "2.0",
                "signedDate": Int64(signedDate.timeIntervalSince1970 * 1000),
                "data": [
                    "appAppleId": 1_234_567_890, "bundleId": bundleId, "bundleVersion": "1", "environment": "Sandbox",
                    "signedTransactionInfo": info,
                ] as [String: Any],
            ]
            return try JSONSerialization.data(withJSONObject: ["signedPayload": try chain.token(payload, key: forger?.leafKey)])
        }
    }

    /// POSTs `body` to the origin's `/notifications`.
    static func post(_ body: Data, to origin: RunningOrigin, in folder: URL) async throws -> CurlExchange {
        let file = folder.appendingPathComponent("notification-\(UUID().uuidString).json")
        try body.write(to: file)
        return try await CurlExchange.run(
            origin.url("notifications"), ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@\(file.path)"]
        )
    }

    static func download(_ origin: RunningOrigin, token: String) async throws -> Int {
        try await CurlExchange.run(origin.url(ContentFixture.path(pack)), ["-H", "Authorization: Bearer \(token)"]).status
    }

    /// Rows in the origin's notification table, read with sqlite3 as an outsider would.
    static func recordedNotifications(_ store: OriginStateStore) throws -> Int {
        let result = try Shell.run("/usr/bin/sqlite3", [store.url.path, "SELECT count(*) FROM notifications"])
        return Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    @Test("REFUND → 200, then 403 for a token signed before it; replay changes nothing; REFUND_REVERSED lets it in again")
    func refundFlow() async throws {
        let stack = try Stack()
        defer { stack.fixture.folder.remove() }
        let (origin, store) = try await stack.start()
        let token = try stack.purchase()
        #expect(try await Self.download(origin, token: token) == 200)

        let refund = try stack.body("REFUND", signedDate: Date().addingTimeInterval(-60))
        let answer = try await Self.post(refund, to: origin, in: stack.fixture.url)
        #expect(answer.status == 200)
        #expect(answer.json?["result"] as? String == "revoked")
        #expect(answer.json?["transactionId"] as? String == Self.transactionId)
        let refused = try await CurlExchange.run(origin.url(ContentFixture.path(Self.pack)), ["-H", "Authorization: Bearer \(token)"])
        #expect(refused.status == 403)
        #expect(refused.json?["error"] as? String == "notEntitled")
        #expect((refused.json?["message"] as? String)?.contains("refunded") == true)

        // Apple retries: the same notification again is acknowledged and changes nothing.
        let replay = try await Self.post(refund, to: origin, in: stack.fixture.url)
        #expect(replay.status == 200)
        #expect(replay.json?["result"] as? String == "duplicate")
        #expect(try await Self.download(origin, token: token) == 403)

        let reversed = try await Self.post(try stack.body("REFUND_REVERSED", signedDate: Date().addingTimeInterval(-30)), to: origin, in: stack.fixture.url)
        #expect(reversed.status == 200)
        #expect(reversed.json?["result"] as? String == "reinstated")
        #expect(try await Self.download(origin, token: token) == 200)

        // The refund replayed after its reversal still changes nothing.
        #expect(try await Self.post(refund, to: origin, in: stack.fixture.url).json?["result"] as? String == "duplicate")
        #expect(try await Self.download(origin, token: token) == 200)
        // Other types are acknowledged and ignored.
        let other = try await Self.post(try stack.body("DID_CHANGE_RENEWAL_PREF"), to: origin, in: stack.fixture.url)
        #expect(other.status == 200)
        #expect(other.json?["result"] as? String == "ignored")
        #expect(try await Self.download(origin, token: token) == 200)
        #expect(try Self.recordedNotifications(store) == 3)
        try await origin.stop()
    }

    /// An original purchase and two restored copies of it (their `originalTransactionId` is the
    /// original's), as StoreKit hands them to three devices.
    static let original = "2000000000000100"
    static let copies = ["2000000000000101", "2000000000000102"]

    /// The three tokens of one purchase: the original's, then the copies'.
    static func purchaseTokens(_ stack: Stack) throws -> [String] {
        try [stack.purchase(transactionId: original, originalTransactionId: original)]
            + copies.map { try stack.purchase(transactionId: $0, originalTransactionId: original) }
    }

    @Test("a refund of a restored copy refuses the original purchase and every copy; its reversal lets them all in again")
    func refundOfARestoredCopy() async throws {
        let stack = try Stack()
        defer { stack.fixture.folder.remove() }
        let (origin, _) = try await stack.start()
        let tokens = try Self.purchaseTokens(stack)
        for token in tokens { #expect(try await Self.download(origin, token: token) == 200) }
        // Apple's REFUND names the copy the user asked about, with the original's id.
        let refund = try stack.body(
            "REFUND", signedDate: Date().addingTimeInterval(-60), transactionId: Self.copies[0], originalTransactionId: Self.original)
        let answer = try await Self.post(refund, to: origin, in: stack.fixture.url)
        #expect(answer.json?["result"] as? String == "revoked")
        for (index, token) in tokens.enumerated() {
            #expect(try await Self.download(origin, token: token) == 403, "token \(index) still downloads after the refund")
        }
        let reversed = try stack.body(
            "REFUND_REVERSED", signedDate: Date().addingTimeInterval(-30), transactionId: Self.copies[0],
            originalTransactionId: Self.original)
        #expect(try await Self.post(reversed, to: origin, in: stack.fixture.url).json?["result"] as? String == "reinstated")
        for token in tokens { #expect(try await Self.download(origin, token: token) == 200) }
        // A refund of the original refuses the copies too; the set survives a restart.
        let original = try stack.body(
            "REFUND", signedDate: Date().addingTimeInterval(-10), transactionId: Self.original, originalTransactionId: Self.original)
        #expect(try await Self.post(original, to: origin, in: stack.fixture.url).json?["result"] as? String == "revoked")
        try await origin.stop()
        let (restarted, _) = try await stack.start()
        for token in tokens { #expect(try await Self.download(restarted, token: token) == 403) }
        try await restarted.stop()
    }

    @Test("the gate: a refunded subscription renewal refuses that renewal only; a one-time purchase's refund refuses every copy")
    func gateRules() async throws {
        struct Tokens: BearerTokenVerifier {
            let transactions: [String: VerifiedTransaction]
            func transactions(proving token: String, now: Date) async throws -> [VerifiedTransaction] {
                guard let transaction = transactions[token] else { throw CourierError(.receiptInvalid, "unknown") }
                return [transaction]
            }
        }
        func transaction(_ id: String, original: String, type: Catalog.ProductType) -> VerifiedTransaction {
            VerifiedTransaction(
                transactionId: id, originalTransactionId: original, productId: "p", bundleId: "com.example.app", type: type,
                purchaseDate: Date().addingTimeInterval(-60), expiresDate: nil, revocationDate: nil, environment: "Sandbox",
                signedDate: Date().addingTimeInterval(-60))
        }
        let tokens: [String: VerifiedTransaction] = [
            "renewal1": transaction("R1", original: "R1", type: .autoRenewable),
            "renewal2": transaction("R2", original: "R1", type: .autoRenewable),
            "original": transaction("T1", original: "T1", type: .nonConsumable),
            "copy": transaction("T2", original: "T1", type: .nonConsumable),
        ]
        let revoked = RevokedSet([
            .init(transactionId: "R2", originalTransactionId: "R1"), .init(transactionId: "T2", originalTransactionId: "T1"),
        ])
        struct Source: RevocationSource {
            let set: RevokedSet
            func isRevoked(_ transactionId: String) -> Bool { set.contains(transactionId) }
            func isPurchaseRevoked(originalTransactionId: String) -> Bool { set.containsPurchase(originalTransactionId) }
        }
        let gate = ReceiptAccessGate(
            verifier: Tokens(transactions: tokens), entitlements: { transactions, _, _ in transactions.isEmpty ? [] : ["p"] },
            revocations: Source(set: revoked))
        let catalog = Catalog(bundleId: "com.example.app", products: [])
        let content = ServedContent(
            path: "/packages/p/x.zip", contentIdentifier: "p", productId: "p",
            content: Catalog.Content(url: "packages/p/x.zip", sha256: String(repeating: "0", count: 64), length: 1, version: "1", placement: .cache))
        func code(_ token: String) async -> GateReason {
            let decision: GateDecision = await gate.authorize(bearer: token, content: content, catalog: catalog)
            return decision.code
        }
        #expect(await code("renewal1") == .entitled)
        #expect(await code("renewal2") == .revoked)
        #expect(await code("original") == .revoked)
        #expect(await code("copy") == .revoked)
        revoked.set(.init(transactionId: "T2", originalTransactionId: "T1"), revoked: false)
        #expect(await code("original") == .entitled)
        #expect(await code("copy") == .entitled)
    }

    @Test("REVOKE revokes too; a notification older than the last applied one does not undo it")
    func revokeAndOrder() async throws {
        let stack = try Stack()
        defer { stack.fixture.folder.remove() }
        let (origin, _) = try await stack.start()
        let token = try stack.purchase()
        #expect(try await Self.post(try stack.body("REVOKE", signedDate: Date().addingTimeInterval(-10)), to: origin, in: stack.fixture.url).status == 200)
        #expect(try await Self.download(origin, token: token) == 403)
        let stale = try await Self.post(try stack.body("REFUND_REVERSED", signedDate: Date().addingTimeInterval(-100)), to: origin, in: stack.fixture.url)
        #expect(stale.status == 200)
        #expect(stale.json?["result"] as? String == "ignored")
        #expect(try await Self.download(origin, token: token) == 403)
        try await origin.stop()
    }

    @Test("a bad signature, another bundle, a transaction of another bundle or a malformed body → 400 and nothing recorded")
    func refusals() async throws {
        let stack = try Stack()
        defer { stack.fixture.folder.remove() }
        let (origin, store) = try await stack.start()
        let token = try stack.purchase()
        let bodies: [(String, Data)] = [
            ("forged signature", try stack.body("REFUND", forgedBy: try TestSigningChain())),
            ("another bundle", try stack.body("REFUND", bundleId: "com.example.otherapp")),
            ("transaction of another bundle", try stack.body("REFUND", transactionBundleId: "com.example.otherapp")),
            ("untrusted chain", try {
                let stranger = try TestSigningChain()
                var body = try JSONSerialization.jsonObject(with: try stack.body("REFUND")) as? [String: String] ?? [:]
                let payload = try CompactJWS(body["signedPayload"] ?? "").payload
                body["signedPayload"] = try stranger.token(try JSONSerialization.jsonObject(with: payload) as? [String: Any] ?? [:])
                return try JSONSerialization.data(withJSONObject: body)
            }()),
            ("not JSON", Data("signedPayload=x".utf8)),
            ("no signedPayload", Data(#"{"payload":"a.b.c"}"#.utf8)),
        ]
        for (name, body) in bodies {
            let answer = try await Self.post(body, to: origin, in: stack.fixture.url)
            #expect(answer.status == 400, "\(name)")
            #expect(answer.json?["error"] as? String == "receiptInvalid", "\(name)")
        }
        #expect(try Self.recordedNotifications(store) == 0)
        #expect(try await Self.download(origin, token: token) == 200)
        // GET is not how notifications arrive.
        #expect(try await CurlExchange.run(origin.url("notifications")).status == 405)
        try await origin.stop()
    }

    @Test("a body over 256 KiB is 413; a state that cannot be written is 503 (Apple retries); neither records anything")
    func tooLargeAndUnwritable() async throws {
        let stack = try Stack()
        defer { stack.fixture.folder.remove() }
        let (origin, store) = try await stack.start()
        let token = try stack.purchase()
        var huge = try JSONSerialization.jsonObject(with: try stack.body("REFUND")) as? [String: String] ?? [:]
        huge["padding"] = String(repeating: "x", count: ServerNotification.maximumBodyLength)
        let tooLarge = try await Self.post(try JSONSerialization.data(withJSONObject: huge), to: origin, in: stack.fixture.url)
        #expect(tooLarge.status == 413)
        #expect(try Self.recordedNotifications(store) == 0)

        // The state breaks under the origin (here: its table is gone): a valid refund is not
        // acknowledged, so Apple sends it again; the gate still serves (nothing was recorded).
        _ = try Shell.run("/usr/bin/sqlite3", [store.url.path, "DROP TABLE notifications"])
        let unwritable = try await Self.post(try stack.body("REFUND"), to: origin, in: stack.fixture.url)
        #expect(unwritable.status == 503)
        #expect(unwritable.json?["result"] == nil)
        #expect(try await Self.download(origin, token: token) == 200)
        let status = try Shell.run("/usr/bin/sqlite3", [store.url.path, "SELECT count(*) FROM transactionStatus"])
        #expect(status.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        try await origin.stop()
    }

    @Test("the revocation survives a restart; the state file is owner-only")
    func durable() async throws {
        let stack = try Stack()
        defer { stack.fixture.folder.remove() }
        let token = try stack.purchase()
        do {
            let (origin, _) = try await stack.start()
            #expect(try await Self.post(try stack.body("REFUND"), to: origin, in: stack.fixture.url).status == 200)
            try await origin.stop()
        }
        let (origin, store) = try await stack.start()
        #expect(try await Self.download(origin, token: token) == 403)
        let file = try FileManager.default.attributesOfItem(atPath: store.url.path)
        #expect((file[.posixPermissions] as? Int) == 0o600)
        let folder = try FileManager.default.attributesOfItem(atPath: stack.stateFolder.path)
        #expect((folder[.posixPermissions] as? Int) == 0o700)
        try await origin.stop()
    }

    @Test("maxTokenAge: an older token gets 401 with a hint to refresh; a fresh one is served")
    func maxTokenAge() async throws {
        let stack = try Stack()
        defer { stack.fixture.folder.remove() }
        let (origin, _) = try await stack.start(maxTokenAge: 3600)
        let old = try await CurlExchange.run(
            origin.url(ContentFixture.path(Self.pack)),
            ["-H", "Authorization: Bearer \(try stack.purchase(signedDate: Date().addingTimeInterval(-7200)))"]
        )
        #expect(old.status == 401)
        #expect((old.json?["message"] as? String)?.contains("fresh") == true)
        #expect(try await Self.download(origin, token: try stack.purchase(signedDate: Date().addingTimeInterval(-60))) == 200)
        try await origin.stop()
    }

    /// Apple's own test notification and a real App Store notification verify as notifications.
    @Test("Apple's notifications: testNotification (TEST) and a real CONSUMPTION_REQUEST are acknowledged; wrongBundleId is 400")
    func appleNotifications() async throws {
        let vectors = SharedFixtures.folder("apple-vectors")
        try #require(
            FileManager.default.fileExists(atPath: vectors.path),
            "the Apple conformance vectors are missing: expected \(vectors.path)"
        )
        func body(_ path: String) throws -> Data {
            let token = try String(contentsOf: vectors.appendingPathComponent(path), encoding: .utf8)
            return try JSONSerialization.data(withJSONObject: ["signedPayload": token.trimmingCharacters(in: .whitespacesAndNewlines)])
        }
        let scratch = try TemporaryDirectory(prefix: "courier-apple-notifications")
        defer { scratch.remove() }

        // Apple's library test data, with Apple's test root (the reissue the fixture carries).
        let testRoot = try TrustRoots.load(vectors.appendingPathComponent("roots/apple-test-root-2023-01-04.der"))
        let test = SignedTransactionVerifier(trustedRoots: testRoot, bundleId: "com.example", environments: ["Sandbox"], clockSkew: 300)
        let testReceiver = NotificationReceiver(verifier: test, store: try OriginStateStore(directory: scratch.appending("test")))
        let acknowledged = await testReceiver.receive(body: try body("apple-lib/mock_signed_data/testNotification"))
        #expect(acknowledged.status == 200, "\(acknowledged.body)")
        #expect(acknowledged.body["notificationType"] == "TEST")
        #expect(acknowledged.body["result"] == "ignored")
        let wrongBundle = await testReceiver.receive(body: try body("apple-lib/mock_signed_data/wrongBundleId"))
        #expect(wrongBundle.status == 400)
        #expect(wrongBundle.body["message"]?.hasPrefix("bundle check failed") == true, "\(wrongBundle.body)")

        // A real Production notification signed by the App Store (Apple Root CA - G3), whose
        // signedTransactionInfo is verified too.
        let appleRoot = try TrustRoots.load(vectors.appendingPathComponent("roots/apple-root-ca-g3.der"))
        let production = SignedTransactionVerifier(trustedRoots: appleRoot, bundleId: "com.jrjj.keysns", environments: ["Production"], clockSkew: 300)
        let realReceiver = NotificationReceiver(verifier: production, store: try OriginStateStore(directory: scratch.appending("real")))
        let real = await realReceiver.receive(body: try body("real/2021leaf-consumption-request-notification.jws"))
        #expect(real.status == 200, "\(real.body)")
        #expect(real.body["notificationType"] == "CONSUMPTION_REQUEST")
        #expect(real.body["transactionId"] != nil)
        // The same notification for another app's origin is refused.
        let otherApp = SignedTransactionVerifier(trustedRoots: appleRoot, bundleId: "com.example.app", environments: ["Production"], clockSkew: 300)
        let refused = await NotificationReceiver(verifier: otherApp, store: try OriginStateStore(directory: scratch.appending("other")))
            .receive(body: try body("real/2021leaf-consumption-request-notification.jws"))
        #expect(refused.status == 400)
    }

    @Test("the body decoder: Apple's shape decoded without verification; anything else is a format failure")
    func decoder() throws {
        let chain = try TestSigningChain()
        let token = try chain.token([
            "notificationType": "REFUND", "notificationUUID": "u-1", "signedDate": 1_700_000_000_000,
            "data": ["bundleId": "com.example.app", "environment": "Sandbox", "signedTransactionInfo": "a.b.c"] as [String: Any],
        ])
        let (signedPayload, notification) = try ServerNotification.decode(
            body: try JSONSerialization.data(withJSONObject: ["signedPayload": token])
        )
        #expect(signedPayload == token)
        #expect(notification.notificationType == "REFUND")
        #expect(notification.bundleId == "com.example.app")
        #expect(notification.signedTransactionInfo == "a.b.c")
        #expect(notification.signedDate == Date(timeIntervalSince1970: 1_700_000_000))
        for hostile in [Data(), Data("[]".utf8), Data(#"{"signedPayload":7}"#.utf8), Data(#"{"signedPayload":"a.b"}"#.utf8), Data(count: 300_000)] {
            #expect(throws: CourierError.self) { try ServerNotification.decode(body: hostile) }
        }
    }
}
