import Courier
import CourierServer
import CourierTestSupport
import Foundation
import Testing

/// `GET /authorize`: the gate alone, as nginx's `auth_request` asks it; and the origin's metrics.
@Suite("GET /authorize (nginx auth_request) and the origin's metrics")
struct AuthorizeTests {
    static let pack = "com.example.levels.pack1"
    static let other = "com.example.levels.pack2"

    /// An origin over two packages; the token "buyer" proves a purchase of `pack` only.
    static func start(metrics: OriginMetrics? = nil) async throws -> (RunningOrigin, ContentFixture) {
        var fixture = try ContentFixture()
        try fixture.addPackage(pack, size: 5000)
        try fixture.addPackage(other, size: 5000)
        try fixture.publishCatalog(products: [pack, other])
        let gate = ReceiptAccessGate(
            verifier: TableVerifier(purchases: ["buyer": [pack]]),
            entitlements: { transactions, _, _ in Set(transactions.map(\.productId)) },
            cache: VerifiedTokenCache(metrics: metrics)
        )
        let origin = try await RunningOrigin.start(content: fixture.url, gate: gate, metrics: metrics)
        return (origin, fixture)
    }

    /// Asks `/authorize` about `target` (nil: no X-Original-URI) with `token` (nil: none).
    static func ask(_ origin: RunningOrigin, _ target: String?, token: String?, method: String = "GET") async throws -> CurlExchange {
        var arguments = method == "HEAD" ? ["-I"] : ["-X", method]
        if let target { arguments += ["-H", "X-Original-URI: \(target)"] }
        if let token { arguments += ["-H", "Authorization: Bearer \(token)"] }
        return try await CurlExchange.run(origin.url("authorize"), arguments)
    }

    @Test("204 allowed, 401 no or bad token (WWW-Authenticate), 403 not entitled or not listed; never a body")
    func decisions() async throws {
        let (origin, fixture) = try await Self.start()
        defer { fixture.folder.remove() }
        let packPath = "/" + ContentFixture.path(Self.pack)
        let cases: [(String?, String?, Int, String)] = [
            (packPath, "buyer", 204, "entitled"),
            (packPath + "?x=1", "buyer", 204, "a query is ignored"),
            (packPath, nil, 401, "no token"),
            (packPath, "forged", 401, "a token that does not verify"),
            ("/" + ContentFixture.path(Self.other), "buyer", 403, "another product"),
            ("/packages/unlisted.zip", "buyer", 403, "not in the catalog (404 on a direct GET)"),
            ("/.prestage/x", "buyer", 403, "the staging area"),
            ("/catalog.json", nil, 204, "the public catalog"),
            (nil, "buyer", 403, "no X-Original-URI"),
            ("packages/x.zip", "buyer", 403, "not absolute"),
            ("/packages/../" + ContentFixture.path(Self.pack), "buyer", 403, "dot segments"),
            ("/" + ContentFixture.path(Self.pack).replacingOccurrences(of: "levels", with: "%6cevels"), "buyer", 403, "percent-encoding"),
            ("//" + ContentFixture.path(Self.pack), "buyer", 403, "a repeated slash"),
        ]
        for (target, token, status, name) in cases {
            let answer = try await Self.ask(origin, target, token: token)
            #expect(answer.status == status, "\(name)")
            #expect(answer.body.isEmpty, "\(name)")
            if status == 401 {
                #expect(answer.headers["www-authenticate"]?.hasPrefix("Bearer") == true, "\(name)")
            }
        }
        // The same decision as a direct GET of that path.
        #expect(try await CurlExchange.run(origin.url(ContentFixture.path(Self.pack)), ["-H", "Authorization: Bearer buyer"]).status == 200)
        #expect(try await CurlExchange.run(origin.url(ContentFixture.path(Self.other)), ["-H", "Authorization: Bearer buyer"]).status == 403)
        // HEAD gets the same answers.
        #expect(try await Self.ask(origin, packPath, token: "buyer", method: "HEAD").status == 204)
        #expect(try await Self.ask(origin, packPath, token: nil, method: "HEAD").status == 401)
        try await origin.stop()
    }

    @Test("a package's manifest is gated as its package: GET 200 JSON, 401, 403; /authorize 204, 401, 403; unnamed ones 404")
    func manifestGatedAsItsPackage() async throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        try fixture.addPackage(Self.pack, size: 5000)
        try fixture.addPackage(Self.other, size: 5000)
        let manifest = Data(#"{"format":1,"note":"a manifest's bytes, served as they are"}"#.utf8)
        var products: [Catalog.Product] = []
        for id in [Self.pack, Self.other] {
            let path = "packages/\(id)/\(ContentFixture.digest).manifest.json"
            try manifest.write(to: fixture.url.appendingPathComponent(path))
            products.append(
                Catalog.Product(
                    productId: id,
                    content: Catalog.Content(
                        url: ContentFixture.path(id), sha256: ContentFixture.digest, length: 5000, version: "1.0", placement: .documents,
                        manifest: Catalog.Manifest(url: path, sha256: String(repeating: "cd", count: 32), length: Int64(manifest.count)))))
        }
        // A manifest-shaped file the catalog does not name stays unserved.
        try manifest.write(to: fixture.url.appendingPathComponent("packages/\(Self.pack)/unnamed.manifest.json"))
        try Catalog(bundleId: "com.example.app", products: products).encoded().write(to: fixture.url.appendingPathComponent("catalog.json"))
        let gate = ReceiptAccessGate(
            verifier: TableVerifier(purchases: ["buyer": [Self.pack]]),
            entitlements: { transactions, _, _ in Set(transactions.map(\.productId)) }
        )
        let origin = try await RunningOrigin.start(content: fixture.url, gate: gate)
        let own = "/packages/\(Self.pack)/\(ContentFixture.digest).manifest.json"
        let others = "/packages/\(Self.other)/\(ContentFixture.digest).manifest.json"

        let served = try await CurlExchange.run(origin.url(String(own.dropFirst())), ["-H", "Authorization: Bearer buyer"])
        #expect(served.status == 200)
        #expect(served.body == manifest)
        #expect(served.headers["content-type"] == "application/json")
        let range = try await CurlExchange.run(origin.url(String(own.dropFirst())), ["-H", "Authorization: Bearer buyer", "-r", "0-9"])
        #expect(range.status == 206)
        #expect(range.body == manifest.prefix(10))
        #expect(try await CurlExchange.run(origin.url(String(own.dropFirst())), []).status == 401)
        #expect(try await CurlExchange.run(origin.url(String(others.dropFirst())), ["-H", "Authorization: Bearer buyer"]).status == 403)
        let unnamed = "packages/\(Self.pack)/unnamed.manifest.json"
        #expect(try await CurlExchange.run(origin.url(unnamed), ["-H", "Authorization: Bearer buyer"]).status == 404)

        #expect(try await Self.ask(origin, own, token: "buyer").status == 204)
        #expect(try await Self.ask(origin, own, token: nil).status == 401)
        #expect(try await Self.ask(origin, others, token: "buyer").status == 403)
        #expect(try await Self.ask(origin, "/" + unnamed, token: "buyer").status == 403)
        try await origin.stop()
    }

    @Test("/authorize follows a refund recorded by POST /notifications at once, with the token cached")
    func refundReachesAuthorize() async throws {
        let stack = try NotificationTests.Stack()
        defer { stack.fixture.folder.remove() }
        let store = try OriginStateStore(directory: stack.stateFolder)
        let origin = try await RunningOrigin.start(
            content: stack.fixture.url,
            gate: ReceiptAccessGate(verifier: stack.verifier, revocations: store, cache: VerifiedTokenCache()),
            notifications: NotificationReceiver(verifier: stack.verifier, store: store)
        )
        let token = try stack.purchase()
        let path = "/" + ContentFixture.path(NotificationTests.pack)
        #expect(try await Self.ask(origin, path, token: token).status == 204)
        #expect(try await Self.ask(origin, path, token: token).status == 204)
        let refund = try await NotificationTests.post(try stack.body("REFUND", signedDate: Date().addingTimeInterval(-60)), to: origin, in: stack.fixture.url)
        #expect(refund.status == 200)
        #expect(try await Self.ask(origin, path, token: token).status == 403)
        try await origin.stop()
    }

    @Test("with X-Courier-Decision-Cache, nginx may reuse an answer for that long, an allow never past its token's end")
    func decisionCacheHeaders() async throws {
        var fixture = try ContentFixture()
        try fixture.addPackage(Self.pack, size: 5000)
        try fixture.addPackage(Self.other, size: 5000)
        try fixture.publishCatalog(products: [Self.pack, Self.other])
        defer { fixture.folder.remove() }
        let packPath = "/" + ContentFixture.path(Self.pack)
        // A token signed now that the gate takes for `maxTokenAge` seconds.
        func origin(maxTokenAge: TimeInterval?) async throws -> RunningOrigin {
            let gate = ReceiptAccessGate(
                verifier: TableVerifier(purchases: ["buyer": [Self.pack]]),
                entitlements: { transactions, _, _ in Set(transactions.map(\.productId)) },
                maxTokenAge: maxTokenAge
            )
            return try await RunningOrigin.start(content: fixture.url, gate: gate)
        }
        func ask(_ origin: RunningOrigin, _ target: String, token: String?, window: String?) async throws -> CurlExchange {
            var arguments = ["-H", "X-Original-URI: \(target)"]
            if let token { arguments += ["-H", "Authorization: Bearer \(token)"] }
            if let window { arguments += ["-H", "X-Courier-Decision-Cache: \(window)"] }
            return try await CurlExchange.run(origin.url("authorize"), arguments)
        }

        let lasting = try await origin(maxTokenAge: nil)
        // Without the header: nothing may be cached.
        let plain = try await ask(lasting, packPath, token: "buyer", window: nil)
        #expect(plain.status == 204)
        #expect(plain.headers["cache-control"] == "no-store")
        #expect(plain.headers["x-accel-expires"] == nil)
        // With it: allows and refusals alike for the window, capped at an hour.
        for (target, token, status) in [(packPath, "buyer", 204), (packPath, nil, 401), ("/" + ContentFixture.path(Self.other), "buyer", 403)] {
            let answer = try await ask(lasting, target, token: token, window: "30")
            #expect(answer.status == status)
            #expect(answer.headers["x-accel-expires"] == "30", "\(status)")
            #expect(answer.headers["cache-control"] == "max-age=30", "\(status)")
        }
        #expect(try await ask(lasting, packPath, token: "buyer", window: "86400").headers["x-accel-expires"] == "3600")
        let off = try await ask(lasting, packPath, token: "buyer", window: "0")
        #expect(off.headers["x-accel-expires"] == "0")
        #expect(off.headers["cache-control"] == "no-store")
        #expect(try await ask(lasting, packPath, token: "buyer", window: "soon").headers["cache-control"] == "no-store")
        try await lasting.stop()

        // A token good for 10 more seconds: cached 2 s short of its end (nginx counts whole
        // seconds from a little later); one with less than 3 s left is not cached at all.
        let short = try await origin(maxTokenAge: 10)
        let capped = try await ask(short, packPath, token: "buyer", window: "30")
        #expect(capped.status == 204)
        let seconds = capped.headers["x-accel-expires"].flatMap { Int($0) } ?? -1
        #expect((6...7).contains(seconds), "\(capped.headers)")
        try await short.stop()
        let ending = try await origin(maxTokenAge: 2.5)
        let last = try await ask(ending, packPath, token: "buyer", window: "30")
        #expect(last.status == 204)
        #expect(last.headers["x-accel-expires"] == "0")
        #expect(last.headers["cache-control"] == "no-store")
        try await ending.stop()
    }

    static let allowed = GateDecision.allowed(subject: "t1", reason: .entitled)

    @Test("decision cache seconds: the window, at most an hour, and 2 s short of the decision's end")
    func decisionCacheSeconds() {
        let now = Date(timeIntervalSince1970: 1_000_000)
        #expect(GateAnswer(decision: Self.allowed, validUntil: nil).cacheSeconds(window: nil, now: now) == nil)
        #expect(GateAnswer(decision: Self.allowed, validUntil: nil).cacheSeconds(window: -1, now: now) == nil)
        #expect(GateAnswer(decision: Self.allowed, validUntil: nil).cacheSeconds(window: 5, now: now) == 5)
        #expect(GateAnswer(decision: Self.allowed, validUntil: nil).cacheSeconds(window: 90_000, now: now) == 3600)
        #expect(GateAnswer(decision: Self.allowed, validUntil: now.addingTimeInterval(100)).cacheSeconds(window: 5, now: now) == 5)
        #expect(GateAnswer(decision: Self.allowed, validUntil: now.addingTimeInterval(6.9)).cacheSeconds(window: 5, now: now) == 4)
        #expect(GateAnswer(decision: Self.allowed, validUntil: now.addingTimeInterval(2.9)).cacheSeconds(window: 5, now: now) == 0)
        #expect(GateAnswer(decision: Self.allowed, validUntil: now.addingTimeInterval(-50)).cacheSeconds(window: 5, now: now) == 0)
        #expect(GateAnswer(decision: Self.allowed, validUntil: .distantPast).cacheSeconds(window: 5, now: now) == 0)
    }

    @Test("metrics: requests by status, bytes, gate decisions by reason, decision time, token cache hits and misses")
    func metrics() async throws {
        let (metrics, registry) = OriginMetrics.standalone()
        let (origin, fixture) = try await Self.start(metrics: metrics)
        defer { fixture.folder.remove() }
        let packPath = "/" + ContentFixture.path(Self.pack)
        for _ in 0..<3 { _ = try await Self.ask(origin, packPath, token: "buyer") }
        _ = try await Self.ask(origin, packPath, token: nil)
        _ = try await Self.ask(origin, "/packages/unlisted.zip", token: "buyer")
        let download = try await CurlExchange.run(origin.url(ContentFixture.path(Self.pack)), ["-H", "Authorization: Bearer buyer", "-r", "0-99"])
        #expect(download.status == 206)
        try await origin.stop()
        let text = registry.emitToString()
        let lines = Set(text.split(separator: "\n").map(String.init))
        #expect(lines.contains(#"courier_requests_total{status="204"} 3"#), "\(text)")
        #expect(lines.contains(#"courier_requests_total{status="401"} 1"#))
        #expect(lines.contains(#"courier_requests_total{status="403"} 1"#))
        #expect(lines.contains(#"courier_requests_total{status="206"} 1"#))
        #expect(lines.contains("courier_response_bytes_total 100"))
        #expect(lines.contains(#"courier_gate_decisions_total{decision="allowed",reason="entitled"} 4"#))
        #expect(lines.contains(#"courier_gate_decisions_total{decision="unauthorized",reason="missingToken"} 1"#))
        #expect(lines.contains(#"courier_gate_decisions_total{decision="forbidden",reason="notInCatalog"} 1"#))
        #expect(lines.contains("courier_gate_decision_seconds_count 6"))
        #expect(lines.contains(#"courier_gate_decision_seconds_bucket{le="+Inf"} 6"#))
        // The first "buyer" missed the cache and was verified; the other three were hits.
        #expect(lines.contains("courier_token_cache_misses_total 1"))
        #expect(lines.contains("courier_token_cache_hits_total 3"))
    }
}
