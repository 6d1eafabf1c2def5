import Courier
import CourierServer
import CourierTestSupport
import Foundation
import Testing

@Suite("ContentOrigin: files, ranges, validators, catalog, gate, shutdown")
struct ContentOriginTests {
    static let pack = "com.example.levels.pack1"
    static let other = "com.example.levels.pack2"

    /// A content folder with two packages and a catalog, served publicly.
    private func publicOrigin(size: Int = 300_000) async throws -> (ContentFixture, RunningOrigin) {
        var fixture = try ContentFixture()
        try fixture.addPackage(Self.pack, size: size)
        try fixture.addPackage(Self.other, size: 1000)
        try fixture.publishCatalog(products: [Self.pack, Self.other])
        let origin = try await RunningOrigin.start(content: fixture.url, gate: PublicAccessGate(), chunkSize: 64 * 1024)
        return (fixture, origin)
    }

    @Test("GET serves the whole file with a strong ETag, Last-Modified, Content-Length and Accept-Ranges")
    func wholeFile() async throws {
        let (fixture, origin) = try await publicOrigin()
        defer { fixture.folder.remove() }
        let exchange = try await CurlExchange.run(origin.url(ContentFixture.path(Self.pack)))
        #expect(exchange.status == 200)
        #expect(exchange.body == fixture.packages[Self.pack])
        #expect(exchange.headers["content-length"] == "300000")
        #expect(exchange.headers["accept-ranges"] == "bytes")
        let etag = try #require(exchange.headers["etag"])
        #expect(etag.hasPrefix("\"") && !etag.hasPrefix("W/"))
        #expect(exchange.headers["last-modified"]?.hasSuffix("GMT") == true)
        try await origin.stop()
    }

    @Test("single byte ranges: closed, open-ended and suffix, with Content-Range")
    func ranges() async throws {
        let (fixture, origin) = try await publicOrigin()
        defer { fixture.folder.remove() }
        let data = try #require(fixture.packages[Self.pack])
        let url = origin.url(ContentFixture.path(Self.pack))
        let closed = try await CurlExchange.run(url, ["-r", "100-199"])
        #expect(closed.status == 206)
        #expect(closed.headers["content-range"] == "bytes 100-199/300000")
        #expect(closed.headers["content-length"] == "100")
        #expect(closed.body == data[100..<200])
        let open = try await CurlExchange.run(url, ["-r", "299990-"])
        #expect(open.status == 206)
        #expect(open.body == data[299_990...])
        let suffix = try await CurlExchange.run(url, ["-r", "-5"])
        #expect(suffix.status == 206)
        #expect(suffix.headers["content-range"] == "bytes 299995-299999/300000")
        #expect(suffix.body == data.suffix(5))
        let pastEnd = try await CurlExchange.run(url, ["-r", "299000-999999"])
        #expect(pastEnd.headers["content-range"] == "bytes 299000-299999/300000")
        #expect(pastEnd.body == data[299_000...])
        try await origin.stop()
    }

    @Test("a range starting past the end is 416 with Content-Range bytes */length")
    func unsatisfiable() async throws {
        let (fixture, origin) = try await publicOrigin()
        defer { fixture.folder.remove() }
        let exchange = try await CurlExchange.run(origin.url(ContentFixture.path(Self.pack)), ["-r", "300000-"])
        #expect(exchange.status == 416)
        #expect(exchange.headers["content-range"] == "bytes */300000")
        try await origin.stop()
    }

    @Test("If-Range: a matching ETag or date gives the range, a stale one the whole file")
    func ifRange() async throws {
        let (fixture, origin) = try await publicOrigin()
        defer { fixture.folder.remove() }
        let data = try #require(fixture.packages[Self.pack])
        let url = origin.url(ContentFixture.path(Self.pack))
        let head = try await CurlExchange.run(url, ["-I"])
        let etag = try #require(head.headers["etag"])
        let date = try #require(head.headers["last-modified"])
        let matching = try await CurlExchange.run(url, ["-r", "10-19", "-H", "If-Range: \(etag)"])
        #expect(matching.status == 206)
        #expect(matching.body == data[10..<20])
        let byDate = try await CurlExchange.run(url, ["-r", "10-19", "-H", "If-Range: \(date)"])
        #expect(byDate.status == 206)
        let stale = try await CurlExchange.run(url, ["-r", "10-19", "-H", "If-Range: \"0-0-0\""])
        #expect(stale.status == 200)
        #expect(stale.body == data)
        try await origin.stop()
    }

    @Test("a replaced file gets a new ETag, so a resume against the old one starts over")
    func replacedFile() async throws {
        var (fixture, origin) = try await publicOrigin()
        defer { fixture.folder.remove() }
        let url = origin.url(ContentFixture.path(Self.pack))
        let before = try #require(try await CurlExchange.run(url, ["-I"]).headers["etag"])
        try fixture.addPackage(Self.pack, size: 300_001)
        let after = try await CurlExchange.run(url, ["-r", "0-9", "-H", "If-Range: \(before)"])
        #expect(after.headers["etag"] != before)
        #expect(after.status == 200)
        #expect(after.body.count == 300_001)
        try await origin.stop()
    }

    @Test("HEAD gives the headers of GET and no body")
    func head() async throws {
        let (fixture, origin) = try await publicOrigin()
        defer { fixture.folder.remove() }
        let exchange = try await CurlExchange.run(origin.url(ContentFixture.path(Self.pack)), ["-I"])
        #expect(exchange.status == 200)
        #expect(exchange.headers["content-length"] == "300000")
        #expect(exchange.headers["etag"] != nil)
        // A HEAD then a GET on the same connection: a body sent after the HEAD would corrupt the GET.
        let target = origin.url(ContentFixture.path(Self.pack))
        let file = fixture.url.appendingPathComponent("after-head.bin")
        let result = try await offPool {
            try Shell.run("/usr/bin/curl", ["-s", "-I", "-o", "/dev/null", target, "--next", "-s", "-o", file.path, target])
        }
        #expect(result.status == 0)
        #expect(try Data(contentsOf: file) == fixture.packages[Self.pack])
        try await origin.stop()
    }

    @Test("curl -C - resumes a partial download to the same bytes")
    func curlResume() async throws {
        let (fixture, origin) = try await publicOrigin(size: 2_000_000)
        defer { fixture.folder.remove() }
        let data = try #require(fixture.packages[Self.pack])
        let file = fixture.url.appendingPathComponent("partial.bin")
        try data.prefix(777_777).write(to: file)
        let target = origin.url(ContentFixture.path(Self.pack))
        let result = try await offPool { try Shell.run("/usr/bin/curl", ["-s", "-C", "-", "-o", file.path, target]) }
        #expect(result.status == 0)
        #expect(try Data(contentsOf: file) == data)
        try await origin.stop()
    }

    @Test("the catalog has a strong ETag, 304 for If-None-Match, and a new ETag once republished")
    func catalog() async throws {
        var (fixture, origin) = try await publicOrigin()
        defer { fixture.folder.remove() }
        let first = try await CurlExchange.run(origin.url("catalog.json"))
        #expect(first.status == 200)
        #expect(first.headers["content-type"] == "application/json")
        let etag = try #require(first.headers["etag"])
        let catalog = try Catalog.decode(first.body)
        #expect(catalog.product(Self.pack)?.content?.url == ContentFixture.path(Self.pack))
        let again = try await CurlExchange.run(origin.url("catalog.json"), ["-H", "If-None-Match: \(etag)"])
        #expect(again.status == 304)
        #expect(again.body.isEmpty)
        try fixture.addPackage("com.example.levels.pack3", size: 10)
        try fixture.publishCatalog(products: [Self.pack, Self.other, "com.example.levels.pack3"])
        let changed = try await CurlExchange.run(origin.url("catalog.json"), ["-H", "If-None-Match: \(etag)"])
        #expect(changed.status == 200)
        #expect(changed.headers["etag"] != etag)
        #expect(try Catalog.decode(changed.body).products.count == 3)
        try await origin.stop()
    }

    @Test("health answers; unlisted paths and traversal are 404; other methods 405")
    func healthAndUnlisted() async throws {
        let (fixture, origin) = try await publicOrigin()
        defer { fixture.folder.remove() }
        try Data("secret".utf8).write(to: fixture.url.appendingPathComponent("packages/unlisted.zip"))
        let health = try await CurlExchange.run(origin.url("health"))
        #expect(health.status == 200)
        #expect(health.json?["status"] as? String == "ok")
        #expect(try await CurlExchange.run(origin.url("packages/unlisted.zip")).status == 404)
        #expect(try await CurlExchange.run(origin.url("packages/../../../etc/passwd"), ["--path-as-is"]).status == 404)
        #expect(try await CurlExchange.run(origin.url(".prestage/x"), []).status == 404)
        let post = try await CurlExchange.run(origin.url(ContentFixture.path(Self.pack)), ["-X", "POST"])
        #expect(post.status == 405)
        #expect(post.headers["allow"] == "GET, HEAD")
        try await origin.stop()
    }

    @Test("the gate: 401 without or with a bad token, 403 for another product, 200 for the purchase")
    func gate() async throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        try fixture.addPackage(Self.pack, size: 5000)
        try fixture.addPackage(Self.other, size: 5000)
        try fixture.addPackage("com.example.magazine.2026-01", size: 100)
        try fixture.addPackage("com.example.magazine.2026-02", size: 100)
        try fixture.publishCatalog(products: [Self.pack, Self.other], subscriptions: ["com.example.magazine": ["2026-01", "2026-02"]])
        let gate = ReceiptAccessGate(
            verifier: TableVerifier(purchases: ["buyer": [Self.pack], "reader": ["com.example.magazine"]]),
            entitlements: { transactions, _, _ in
                // The reader's period covers only the January issue.
                Set(transactions.map { $0.productId == "com.example.magazine" ? "com.example.magazine.2026-01" : $0.productId })
            }
        )
        let origin = try await RunningOrigin.start(content: fixture.url, gate: gate)
        let url = origin.url(ContentFixture.path(Self.pack))
        let anonymous = try await CurlExchange.run(url)
        #expect(anonymous.status == 401)
        #expect(anonymous.json?["error"] as? String == "serverRejected")
        #expect(anonymous.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
        let forged = try await CurlExchange.run(url, ["-H", "Authorization: Bearer forged"])
        #expect(forged.status == 401)
        let basic = try await CurlExchange.run(url, ["-u", "buyer:x"])
        #expect(basic.status == 401)
        let otherProduct = try await CurlExchange.run(origin.url(ContentFixture.path(Self.other)), ["-H", "Authorization: Bearer buyer"])
        #expect(otherProduct.status == 403)
        #expect(otherProduct.json?["error"] as? String == "notEntitled")
        #expect(otherProduct.body.count < 1000)
        let allowed = try await CurlExchange.run(url, ["-H", "Authorization: Bearer buyer"])
        #expect(allowed.status == 200)
        #expect(allowed.body == fixture.packages[Self.pack])
        let january = try await CurlExchange.run(origin.url(ContentFixture.path("com.example.magazine.2026-01")), ["-H", "Authorization: Bearer reader"])
        #expect(january.status == 200)
        let february = try await CurlExchange.run(origin.url(ContentFixture.path("com.example.magazine.2026-02")), ["-H", "Authorization: Bearer reader"])
        #expect(february.status == 403)
        // The catalog and health stay public.
        #expect(try await CurlExchange.run(origin.url("catalog.json")).status == 200)
        try await origin.stop()
    }

    @Test("the receipt gate with App Store-shaped signed transactions: valid, tampered, revoked, other bundle")
    func receiptGate() async throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        try fixture.addPackage(Self.pack, size: 5000)
        try fixture.addPackage(Self.other, size: 5000)
        try fixture.publishCatalog(products: [Self.pack, Self.other])
        let store = try SandboxStore.create(at: fixture.url.appendingPathComponent("sandbox"))
        let verifier = SignedTransactionVerifier(trustedRoots: [store.root], bundleId: "com.example.app", environments: ["Sandbox"], clockSkew: 300)
        let origin = try await RunningOrigin.start(content: fixture.url, gate: ReceiptAccessGate(verifier: verifier))
        let url = origin.url(ContentFixture.path(Self.pack))
        func status(_ token: String) async throws -> Int {
            try await CurlExchange.run(url, ["-H", "Authorization: Bearer \(token)"]).status
        }
        let valid = try store.purchase(productId: Self.pack)
        #expect(try await status(valid) == 200)
        #expect(try await status(try store.purchase(productId: Self.other)) == 403)
        #expect(try await status(try store.purchase(productId: Self.pack, revocationDate: Date().addingTimeInterval(-60))) == 403)
        #expect(try await status(try store.purchase(productId: Self.pack, bundleId: "com.example.otherapp")) == 401)
        var parts = valid.split(separator: ".").map(String.init)
        parts[2] = String(parts[2].reversed())
        #expect(try await status(parts.joined(separator: ".")) == 401)
        #expect(try await status("not-a-jws") == 401)
        try await origin.stop()
    }

    @Test("graceful shutdown lets a response in flight finish, then refuses connections")
    func gracefulShutdown() async throws {
        let (fixture, origin) = try await publicOrigin(size: 4_000_000)
        defer { fixture.folder.remove() }
        let file = fixture.url.appendingPathComponent("slow.bin")
        let curl = Process()
        curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        curl.arguments = ["-s", "--limit-rate", "2M", "-o", file.path, origin.url(ContentFixture.path(Self.pack))]
        try curl.run()
        // Wait until the transfer is under way.
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, ((try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int) ?? 0) == 0 {
            try await Task.sleep(for: .milliseconds(20))
        }
        try await origin.stop()
        let status = try await offPool {
            curl.waitUntilExit()
            return curl.terminationStatus
        }
        #expect(status == 0)
        #expect(try Data(contentsOf: file) == fixture.packages[Self.pack])
        let port = origin.port
        #expect(try await offPool { !Loopback.waitUntilListening(port: port, timeout: 0.2) })
    }
}

@Suite("ByteRangeRequest")
struct ByteRangeRequestTests {
    @Test("parses single ranges and ignores what it does not serve")
    func parsing() {
        #expect(ByteRangeRequest(header: nil, length: 10) == .whole)
        #expect(ByteRangeRequest(header: "bytes=0-4", length: 10) == .partial(0...4))
        #expect(ByteRangeRequest(header: "bytes=5-", length: 10) == .partial(5...9))
        #expect(ByteRangeRequest(header: "bytes=-3", length: 10) == .partial(7...9))
        #expect(ByteRangeRequest(header: "bytes=-30", length: 10) == .partial(0...9))
        #expect(ByteRangeRequest(header: "bytes=8-100", length: 10) == .partial(8...9))
        #expect(ByteRangeRequest(header: "bytes=10-", length: 10) == .unsatisfiable)
        #expect(ByteRangeRequest(header: "bytes=-0", length: 10) == .unsatisfiable)
        #expect(ByteRangeRequest(header: "bytes=0-", length: 0) == .unsatisfiable)
        #expect(ByteRangeRequest(header: "bytes=0-1,3-4", length: 10) == .whole)
        #expect(ByteRangeRequest(header: "items=0-1", length: 10) == .whole)
        #expect(ByteRangeRequest(header: "bytes=5-2", length: 10) == .whole)
        #expect(ByteRangeRequest(header: "bytes=+1-2", length: 10) == .whole)
        #expect(ByteRangeRequest(header: "bytes=99999999999999999999-", length: 10) == .whole)
        #expect(ByteRangeRequest(header: "bytes=0-", length: -5) == .unsatisfiable)
        #expect(ByteRangeRequest(header: "bytes=0-", length: .min) == .unsatisfiable)
    }

    @Test("the fuzz entry: length from the first 8 bytes, the header from the rest; hostile input never traps")
    func fuzzEntry() {
        let ten: [UInt8] = [10, 0, 0, 0, 0, 0, 0, 0]
        #expect(ByteRangeRequest.parse(fuzzInput: ten + Array("bytes=2-4".utf8)) == .partial(2...4))
        #expect(ByteRangeRequest.parse(fuzzInput: [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF] + Array("bytes=-1".utf8)) == .unsatisfiable)
        #expect(ByteRangeRequest.parse(fuzzInput: [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F] + Array("bytes=-1".utf8)) == .partial(Int64.max - 1...Int64.max - 1))
        #expect(ByteRangeRequest.parse(fuzzInput: []) == .whole)
        #expect(ByteRangeRequest.parse(fuzzInput: ten + [0x62, 0xC3, 0x28]) == .whole)
    }
}
