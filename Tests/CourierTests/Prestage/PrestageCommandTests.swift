import Courier
import CourierTestSupport
import Crypto
import Foundation
import Testing

/// An upstream like a publisher's CDN: real zips (Info-ZIP) and a catalog served by nginx.
struct UpstreamFixture {
    let root: TemporaryDirectory
    var products: [Catalog.Product] = []

    init() throws {
        root = try TemporaryDirectory(prefix: "courier-upstream")
    }

    /// Adds a product whose package is made by `zip`; `plistProduct` lets a package lie about its product.
    mutating func addProduct(
        _ productId: String,
        bytes: Int = 20_000,
        plistProduct: String? = nil,
        version: String = "1.0",
        folder: String = "",
        corruptDigest: Bool = false
    ) throws {
        let name = folder + productId + ".zip"
        let file = root.appending(name)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try PackageFixtures.infoZip(
            product: plistProduct ?? productId,
            version: version,
            files: ["data.bin": PackageFixtures.noise(bytes, seed: UInt64(products.count + 1))],
            at: file,
            level: 0
        )
        let data = try Data(contentsOf: file)
        var digest = SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
        if corruptDigest { digest = String(digest.reversed()) }
        products.append(
            Catalog.Product(
                productId: productId,
                content: Catalog.Content(url: name, sha256: digest, length: Int64(data.count), version: version, placement: .cache)
            )
        )
    }

    /// Lists a product whose package is not on the server (404).
    mutating func addMissingProduct(_ productId: String) {
        products.append(
            Catalog.Product(
                productId: productId,
                content: Catalog.Content(url: "missing/\(productId).zip", sha256: String(repeating: "0", count: 64), length: 10, version: "1.0", placement: .cache)
            )
        )
    }

    func writeCatalog() throws {
        try Catalog(bundleId: "com.example.app", products: products).encoded().write(to: root.appending("catalog.json"))
    }

    func data(_ productId: String) throws -> Data {
        try Data(contentsOf: root.appending(productId + ".zip"))
    }
}

@Suite("courier prestage", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct PrestageCommandTests {
    static func packageRequests(_ nginx: NginxServer) -> [String] {
        nginx.accessLog().filter { $0.contains(".zip") }
    }

    @Test("stages every package from nginx, publishes a catalog with relative URLs; a second run fetches nothing")
    func stagesAndIsIdempotent() throws {
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        for index in 1...3 { try upstream.addProduct("com.example.pack\(index)") }
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url)
        defer { nginx.stop() }
        let dest = try TemporaryDirectory(prefix: "courier-stage")
        defer { dest.remove() }

        let first = try CourierBinary.run(["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path, "--json", "--jobs", "4"])
        #expect(first.status == 0, "\(first.stderr)")
        let published = try Catalog.decode(Data(contentsOf: dest.appending("catalog.json")))
        #expect(published.products.map(\.productId) == ["com.example.pack1", "com.example.pack2", "com.example.pack3"])
        for product in published.products {
            let content = try #require(product.content)
            #expect(content.url.hasPrefix("packages/\(product.productId)/"))
            let staged = try Data(contentsOf: dest.url.appendingPathComponent(content.url))
            #expect(staged == (try upstream.data(product.productId)))
            #expect(SHA256.hash(data: staged).map { String(format: "%02x", $0) }.joined() == content.sha256)
            #expect(content.unpackedLength != nil)
        }
        let summary = try #require(first.events.last)
        #expect(summary["event"] as? String == "result")
        #expect(summary["staged"] as? Int == 3)
        #expect(Self.packageRequests(nginx).count == 3)

        let catalogBefore = try Data(contentsOf: dest.appending("catalog.json"))
        let second = try CourierBinary.run(["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path, "--json"])
        #expect(second.status == 0)
        #expect(second.events.last?["unchanged"] as? Int == 3)
        #expect(second.events.last?["catalogChanged"] as? Bool == false)
        #expect(Self.packageRequests(nginx).count == 3, "a second run fetched packages again")
        #expect(try Data(contentsOf: dest.appending("catalog.json")) == catalogBefore)
    }

    @Test("the published tree is readable by a web server's worker (0755/0644), the work folder owner-only, whatever the umask")
    func publishedModes() throws {
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        try upstream.addProduct("com.example.pack1")
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url)
        defer { nginx.stop() }
        let scratch = try TemporaryDirectory(prefix: "courier-stage")
        defer { scratch.remove() }
        // `--dest` below a folder that does not exist yet, as /srv/courier/staged on a fresh machine.
        let dest = scratch.appending("srv/staged")
        let result = try CourierBinary.run(["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path])
        #expect(result.status == 0, "\(result.stderr)")
        func mode(_ path: String) -> Int {
            ((try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? NSNumber)?.intValue ?? -1
        }
        let content = try #require(try Catalog.decode(Data(contentsOf: dest.appendingPathComponent("catalog.json"))).products.first?.content)
        let manifest = try #require(content.manifest)
        let root = dest.path
        let expected: [(String, Int)] = [
            (scratch.appending("srv").path, 0o711), (root, 0o755), (root + "/catalog.json", 0o644), (root + "/packages", 0o755),
            (root + "/packages/com.example.pack1", 0o755), (root + "/" + content.url, 0o644), (root + "/" + manifest.url, 0o644),
            (root + "/.prestage", 0o700),
        ]
        for (path, bits) in expected {
            #expect(mode(path) == bits, "\(path) is \(String(mode(path), radix: 8)), not \(String(bits, radix: 8))")
        }
        // Nothing under the work folder is open to others.
        let work = FileManager.default.enumerator(atPath: root + "/.prestage")
        while let name = work?.nextObject() as? String {
            #expect(mode(root + "/.prestage/" + name) & 0o077 == 0, "\(name)")
        }

        // A tree an earlier Courier published owner-only (which nginx's workers cannot read):
        // the next run, with nothing new to fetch, opens what the catalog lists as above.
        for file in [root + "/catalog.json", root + "/" + content.url, root + "/" + manifest.url] { chmod(file, 0o600) }
        for folder in [root, root + "/packages/com.example.pack1"] { chmod(folder, 0o700) }
        let again = try CourierBinary.run(["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path])
        #expect(again.status == 0, "\(again.stderr)")
        for (path, bits) in expected {
            #expect(mode(path) == bits, "after a rerun, \(path) is \(String(mode(path), radix: 8)), not \(String(bits, radix: 8))")
        }
    }

    @Test("one package's failure does not stop the others: exit 1 naming each failure, the rest published")
    func failuresAreIsolated() throws {
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        try upstream.addProduct("com.example.good1")
        try upstream.addProduct("com.example.baddigest", corruptDigest: true)
        try upstream.addProduct("com.example.liar", plistProduct: "com.example.other")
        upstream.addMissingProduct("com.example.missing")
        try upstream.addProduct("com.example.good2")
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url)
        defer { nginx.stop() }
        let dest = try TemporaryDirectory(prefix: "courier-stage")
        defer { dest.remove() }

        let result = try CourierBinary.run(["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path])
        #expect(result.status == 1)
        for name in ["com.example.baddigest", "com.example.liar", "com.example.missing"] {
            #expect(result.stderr.contains(name), "the failure message should name \(name): \(result.stderr)")
            #expect(result.stdout.contains(name))
        }
        #expect(result.stdout.contains("STATUS"))
        let published = try Catalog.decode(Data(contentsOf: dest.appending("catalog.json")))
        #expect(published.products.map(\.productId) == ["com.example.good1", "com.example.good2"])
        // Nothing of the refused packages is staged.
        let staged = try FileManager.default.contentsOfDirectory(atPath: dest.appending("packages").path).sorted()
        #expect(staged == ["com.example.good1", "com.example.good2"])
    }

    @Test("--json gives NDJSON events and the failures with their codes")
    func jsonEvents() throws {
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        try upstream.addProduct("com.example.good")
        try upstream.addProduct("com.example.liar", plistProduct: "com.example.other")
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url)
        defer { nginx.stop() }
        let dest = try TemporaryDirectory(prefix: "courier-stage")
        defer { dest.remove() }
        let result = try CourierBinary.run(["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path, "--json"])
        #expect(result.status == 1)
        let events = result.events
        #expect(events.first?["event"] as? String == "planned")
        #expect(events.contains { $0["event"] as? String == "staged" && $0["contentIdentifier"] as? String == "com.example.good" })
        #expect(events.contains { $0["event"] as? String == "failed" && $0["code"] as? String == "hostilePackage" })
        let summary = try #require(events.first { $0["event"] as? String == "summary" })
        let failed = try #require(summary["failed"] as? [[String: Any]])
        #expect(failed.map { $0["contentIdentifier"] as? String } == ["com.example.liar"])
    }

    @Test("--product stages only the named products and keeps what is published for the others")
    func productSelection() throws {
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        try upstream.addProduct("com.example.a")
        try upstream.addProduct("com.example.b")
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url)
        defer { nginx.stop() }
        let dest = try TemporaryDirectory(prefix: "courier-stage")
        defer { dest.remove() }
        let catalogURL = nginx.url("catalog.json").absoluteString
        let onlyA = try CourierBinary.run(["prestage", "--catalog", catalogURL, "--dest", dest.path, "--product", "com.example.a"])
        #expect(onlyA.status == 0)
        #expect(try Catalog.decode(Data(contentsOf: dest.appending("catalog.json"))).products.map(\.productId) == ["com.example.a"])
        let onlyB = try CourierBinary.run(["prestage", "--catalog", catalogURL, "--dest", dest.path, "--product", "com.example.b"])
        #expect(onlyB.status == 0)
        let published = try Catalog.decode(Data(contentsOf: dest.appending("catalog.json")))
        #expect(Set(published.products.map(\.productId)) == ["com.example.a", "com.example.b"])
        #expect(Self.packageRequests(nginx).count == 2)
    }

    @Test("kill -9 mid-download, then the same command resumes with a range and stages the package")
    func resumesAfterKill() throws {
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        try upstream.addProduct("com.example.big", bytes: 6 << 20, folder: "slow/")
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url, extraLocations: "location /slow/ { limit_rate 1m; }")
        defer { nginx.stop() }
        let dest = try TemporaryDirectory(prefix: "courier-stage")
        defer { dest.remove() }
        let arguments = ["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path, "--json"]
        let process = try CourierBinary.start(arguments)
        // Wait until at least 1 MiB is durable (a journal says so), then kill -9.
        let downloads = dest.appending(".prestage/downloads")
        let durable = ResumeJournalProbe.waitForDurable(1 << 20, in: downloads, while: process)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(durable >= 1 << 20)
        #expect(!FileManager.default.fileExists(atPath: dest.appending("catalog.json").path))

        let resumed = try CourierBinary.run(arguments)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        let published = try Catalog.decode(Data(contentsOf: dest.appending("catalog.json")))
        let content = try #require(published.product("com.example.big")?.content)
        #expect(try Data(contentsOf: dest.url.appendingPathComponent(content.url)) == (try upstream.data("slow/com.example.big")))
        let requests = Self.packageRequests(nginx)
        #expect(requests.count == 2)
        #expect(requests.last?.contains("\" 206 ") == true, "the second run should resume with a range: \(requests)")
        let fetched = resumed.events.first { $0["event"] as? String == "staged" }?["bytesFetched"] as? Int ?? Int.max
        #expect(fetched <= (try upstream.data("slow/com.example.big")).count - Int(durable), "a resume must not fetch again what was durable")
    }

    @Test("a package torn by a power cut before the catalog was published is fetched again, never published torn")
    func tornPackageIsFetchedAgain() throws {
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        try upstream.addProduct("com.example.torn")
        try upstream.addProduct("com.example.kept")
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url)
        defer { nginx.stop() }
        let dest = try TemporaryDirectory(prefix: "courier-stage")
        defer { dest.remove() }
        let arguments = ["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path, "--json"]
        let first = try CourierBinary.run(arguments)
        #expect(first.status == 0, "\(first.stderr)")
        let staged = try Catalog.decode(Data(contentsOf: dest.appending("catalog.json")))
        let torn = try #require(staged.product("com.example.torn")?.content)
        let tornManifest = try #require(torn.manifest)
        // As after a power cut between the packages' renames and the sync before the catalog:
        // no catalog, one package zeroed at its full length, its manifest garbage.
        try FileManager.default.removeItem(at: dest.appending("catalog.json"))
        try Data(count: Int(torn.length)).write(to: dest.url.appendingPathComponent(torn.url))
        try Data("{\"torn".utf8).write(to: dest.url.appendingPathComponent(tornManifest.url))

        let second = try CourierBinary.run(arguments)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.events.last?["staged"] as? Int == 1)
        #expect(second.events.last?["unchanged"] as? Int == 1)
        let requests = Self.packageRequests(nginx)
        #expect(requests.filter { $0.contains("com.example.torn.zip") }.count == 2, "the torn package is fetched again: \(requests)")
        #expect(requests.filter { $0.contains("com.example.kept.zip") }.count == 1, "the intact package is not: \(requests)")
        let published = try Catalog.decode(Data(contentsOf: dest.appending("catalog.json")))
        let content = try #require(published.product("com.example.torn")?.content)
        #expect(try Data(contentsOf: dest.url.appendingPathComponent(content.url)) == (try upstream.data("com.example.torn")))
        let manifest = try #require(content.manifest)
        let manifestData = try Data(contentsOf: dest.url.appendingPathComponent(manifest.url))
        #expect(try PackageManifest.decode(manifestData).package.sha256 == content.sha256)
        #expect(SHA256.hash(data: manifestData).map { String(format: "%02x", $0) }.joined() == manifest.sha256)
    }

    @Test("SIGINT pauses: exit 7, what was staged is published, the next run finishes the rest")
    func interruptPublishesWhatIsStaged() throws {
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        try upstream.addProduct("com.example.small")
        try upstream.addProduct("com.example.big", bytes: 6 << 20, folder: "slow/")
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url, extraLocations: "location /slow/ { limit_rate 1m; }")
        defer { nginx.stop() }
        let dest = try TemporaryDirectory(prefix: "courier-stage")
        defer { dest.remove() }
        let arguments = ["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path, "--jobs", "2"]
        let process = try CourierBinary.start(arguments)
        let durable = ResumeJournalProbe.waitForDurable(1 << 20, in: dest.appending(".prestage/downloads"), while: process)
        #expect(durable >= 1 << 20)
        kill(process.processIdentifier, SIGINT)
        process.waitUntilExit()
        #expect(process.exitStatus == 7)
        let paused = try Catalog.decode(Data(contentsOf: dest.appending("catalog.json")))
        #expect(paused.products.map(\.productId) == ["com.example.small"])
        let resumed = try CourierBinary.run(arguments)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        let published = try Catalog.decode(Data(contentsOf: dest.appending("catalog.json")))
        #expect(published.products.map(\.productId) == ["com.example.small", "com.example.big"])
    }
}
