import Courier
import CourierTestSupport
import Crypto
import Foundation
import Testing

/// The catalog as a TUF target (issue 29, section 2), through the built `courier`: with
/// `--catalog-root`, `deliver` takes the catalog only through TUF from nginx on loopback; an
/// unsigned, tampered, rolled-back, expired or oversized catalog is refused with exit 6 and a
/// message naming the check, and nothing is queued or placed.
@Suite("deliver with a signed catalog (TUF), the built courier binary", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct SignedCatalogCLITests {
    struct Repository {
        let directory: TemporaryDirectory
        let nginx: NginxServer
        let www: URL
        let keys: TUFPublisherKeys
        let receipt: URL
        let trustRoot: URL
        var catalogRoot: URL { www.appendingPathComponent("metadata/1.root.json") }
        var storage: URL { directory.appending("Storage") }

        init() throws {
            directory = try TemporaryDirectory(prefix: "courier-tufcli")
            // A configuration of defaults only: nothing from the machine's own configuration.
            try Data("{}".utf8).write(to: directory.appending("none.json"))
            let sandbox = try SandboxStore.create(at: directory.appending("sandbox"))
            www = directory.appending("www")
            try FileManager.default.createDirectory(at: www, withIntermediateDirectories: true)
            let package = www.appendingPathComponent("levels.zip")
            try PackageFixtures.infoZip(
                product: "com.example.levels", version: "1.0", files: ["data.bin": PackageFixtures.noise(4096)], at: package)
            let bytes = try Data(contentsOf: package)
            let catalog = Catalog(
                bundleId: "com.example.app",
                products: [
                    Catalog.Product(
                        productId: "com.example.levels",
                        content: Catalog.Content(
                            url: "levels.zip", sha256: SHA256.hash(data: bytes).hex, length: Int64(bytes.count), version: "1.0",
                            placement: .documents))
                ])
            try catalog.encoded().write(to: www.appendingPathComponent("catalog.json"))
            keys = try TUFPublisher.createRepository(keys: directory.appending("keys"), metadata: www.appendingPathComponent("metadata")).online
            receipt = directory.appending("receipt.txt")
            try Data((try sandbox.purchase(productId: "com.example.levels") + "\n").utf8).write(to: receipt)
            trustRoot = sandbox.rootCertificateDERFile
            nginx = try NginxServer(root: www)
            try publish(try catalog.encoded())
        }

        /// Signs `catalog` as the target `catalog.json` (a new timestamp each time).
        @discardableResult
        func publish(_ catalog: Data, expiry: TUFExpiry = .init()) throws -> TUFPublisher.Published {
            try TUFPublisher.publish(
                target: catalog, named: "catalog.json", into: www, roots: www.appendingPathComponent("metadata"), keys: keys,
                expiry: expiry)
        }

        func deliver(catalogRoot: Bool = true) throws -> CourierBinary.Result {
            var arguments = [
                "deliver", "--receipt", receipt.path, "--catalog", nginx.url("/catalog.json").absoluteString, "--trust-root",
                trustRoot.path, "--environment", "Sandbox", "--storage", storage.path,
            ]
            if catalogRoot { arguments += ["--catalog-root", self.catalogRoot.path] }
            return try CourierBinary.run(arguments, environment: ["COURIER_CONFIG": directory.appending("none.json").path])
        }

        /// Whether anything was placed or queued.
        var placedAnything: Bool {
            FileManager.default.fileExists(atPath: storage.appendingPathComponent("Documents/com.example.levels").path)
        }

        func queued() throws -> String {
            try CourierBinary.run(["list", "--storage", storage.path, "--json"]).stdout
        }

        func remove() {
            nginx.stop()
            directory.remove()
        }
    }

    @Test("a signed catalog is delivered; the catalog came from targets/<sha256>.catalog.json after the metadata")
    func signedDelivers() throws {
        let repo = try Repository()
        defer { repo.remove() }
        let result = try repo.deliver()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(repo.placedAnything)
        let paths = repo.nginx.accessLog().compactMap { $0.split(separator: "\"").dropFirst().first?.split(separator: " ").dropFirst().first }
        #expect(paths.contains { $0 == "/metadata/timestamp.json" })
        #expect(paths.contains { $0.hasPrefix("/targets/") && $0.hasSuffix(".catalog.json") })
        #expect(!paths.contains("/catalog.json"), "the unsigned path was used: \(paths)")
        // The client's trusted metadata is owner-only.
        let trust = repo.storage.appendingPathComponent("Trust")
        let folder = try #require(try FileManager.default.contentsOfDirectory(atPath: trust.path).first)
        let mode = try FileManager.default.attributesOfItem(atPath: trust.appendingPathComponent("\(folder)/root.json").path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    @Test("receipt entitlements takes --catalog-root too: the signed catalog's content is listed, a tampered one refused (exit 6)")
    func entitlements() throws {
        let repo = try Repository()
        defer { repo.remove() }
        // Each in a store of its own: a store keeps the last verified catalog and does not fetch it again.
        func entitlements(_ storage: String) throws -> CourierBinary.Result {
            try CourierBinary.run(
                [
                    "receipt", "entitlements", repo.receipt.path, "--catalog", repo.nginx.url("/catalog.json").absoluteString,
                    "--catalog-root", repo.catalogRoot.path, "--trust-root", repo.trustRoot.path, "--environment", "Sandbox", "--json",
                    "--storage", repo.directory.appending(storage).path,
                ], environment: ["COURIER_CONFIG": repo.directory.appending("none.json").path])
        }
        let signed = try entitlements("first")
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect(signed.stdout.contains("com.example.levels"), "\(signed.stdout)")
        let paths = repo.nginx.accessLog().compactMap { $0.split(separator: "\"").dropFirst().first?.split(separator: " ").dropFirst().first }
        #expect(paths.contains { $0.hasPrefix("/targets/") && $0.hasSuffix(".catalog.json") })
        #expect(!paths.contains("/catalog.json"), "the unsigned path was used: \(paths)")

        let targets = repo.www.appendingPathComponent("targets")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: targets.path).first)
        try Data(#"{"bundleId":"com.example.app","products":[]}"#.utf8).write(to: targets.appendingPathComponent(name))
        let tampered = try entitlements("second")
        #expect(tampered.status == 6, "\(tampered.stderr)\(tampered.stdout)")
        #expect((tampered.stderr + tampered.stdout).contains("check failed"), "\(tampered.stderr)\(tampered.stdout)")
    }

    @Test("a catalog changed on the server without the targets key is refused (hash check), exit 6, nothing queued")
    func tampered() throws {
        let repo = try Repository()
        defer { repo.remove() }
        let targets = repo.www.appendingPathComponent("targets")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: targets.path).first)
        let evil = #"{"bundleId":"com.example.app","products":[{"productId":"com.example.levels","content":{"url":"https://evil.example/x.zip","sha256":"00","length":1,"version":"9","placement":"documents"}}]}"#
        try Data(evil.utf8).write(to: targets.appendingPathComponent(name))
        let result = try repo.deliver()
        #expect(result.status == 6, "\(result.stderr)")
        #expect(result.stderr.contains("length check failed") || result.stderr.contains("hash check failed"), "\(result.stderr)")
        #expect(!repo.placedAnything)
        #expect(!(try repo.queued()).contains("com.example.levels"))
    }

    @Test("a catalog with no signed metadata is refused (exit 6), and so is a non-loopback catalog nobody signed")
    func unsigned() throws {
        let repo = try Repository()
        defer { repo.remove() }
        try FileManager.default.removeItem(at: repo.www.appendingPathComponent("metadata/timestamp.json"))
        let result = try repo.deliver()
        #expect(result.status == 6, "\(result.stderr)")
        #expect(result.stderr.contains("timestamp"), "\(result.stderr)")
        #expect(!repo.placedAnything)

        let remote = try CourierBinary.run(
            [
                "deliver", "--receipt", repo.receipt.path, "--catalog", "https://catalog.example.invalid/app/catalog.json", "--trust-root",
                repo.trustRoot.path, "--environment", "Sandbox", "--storage", repo.storage.path,
            ], environment: ["COURIER_CONFIG": repo.directory.appending("none.json").path])
        #expect(remote.status == 6, "\(remote.stderr)")
        #expect(remote.stderr.contains("unsigned"), "\(remote.stderr)")
        #expect(!(try repo.queued()).contains("com.example.levels"))

        let allow = repo.directory.appending("allow.json")
        try Data(#"{"catalog": {"allowUnsigned": true}}"#.utf8).write(to: allow)
        let allowed = try CourierBinary.run(
            [
                "deliver", "--receipt", repo.receipt.path, "--catalog", "https://catalog.example.invalid/app/catalog.json", "--trust-root",
                repo.trustRoot.path, "--environment", "Sandbox", "--storage", repo.storage.path,
            ], environment: ["COURIER_CONFIG": allow.path])
        #expect(allowed.status == 5, "\(allowed.stderr)")  // no such host: the network fails, after the warning
        #expect(allowed.stderr.contains("unsigned"), "\(allowed.stderr)")
    }

    @Test("an older timestamp served after a newer one was seen is refused (rollback check)")
    func rollback() throws {
        let repo = try Repository()
        defer { repo.remove() }
        let timestamp = repo.www.appendingPathComponent("metadata/timestamp.json")
        let old = try Data(contentsOf: timestamp)
        try repo.publish(try Data(contentsOf: repo.www.appendingPathComponent("catalog.json")))
        #expect(try repo.deliver().status == 0)
        try old.write(to: timestamp)
        let result = try repo.deliver()
        #expect(result.status == 6, "\(result.stderr)")
        #expect(result.stderr.contains("rollback check failed"), "\(result.stderr)")
    }

    @Test("expired metadata is refused (expired check): a frozen repository is not trusted")
    func expired() throws {
        let repo = try Repository()
        defer { repo.remove() }
        var expiry = TUFExpiry()
        expiry.timestamp = -60
        try repo.publish(try Data(contentsOf: repo.www.appendingPathComponent("catalog.json")), expiry: expiry)
        let result = try repo.deliver()
        #expect(result.status == 6, "\(result.stderr)")
        #expect(result.stderr.contains("expired check failed"), "\(result.stderr)")
        #expect(!repo.placedAnything)
    }

    @Test("metadata past its size limit is refused (length check): endless data ends at the limit")
    func oversized() throws {
        let repo = try Repository()
        defer { repo.remove() }
        let timestamp = repo.www.appendingPathComponent("metadata/timestamp.json")
        var data = try Data(contentsOf: timestamp)
        data.append(Data(repeating: 0x20, count: 1 << 20))
        try data.write(to: timestamp)
        let result = try repo.deliver()
        #expect(result.status == 6, "\(result.stderr)")
        #expect(result.stderr.contains("length check failed"), "\(result.stderr)")
    }
}

/// Issue 29, section 2: every command that takes `--catalog` takes `--catalog-root` too. Read from
/// docs/courier.1, which `ManPageCLITests` keeps equal to the binary's help, so a new command
/// with a catalog cannot leave it out.
@Suite("--catalog-root beside every --catalog (docs/courier.1)")
struct CatalogRootEverywhereTests {
    @Test("each (sub)command of the man page that lists --catalog lists --catalog-root")
    func everyCatalogHasItsRoot() throws {
        let page = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("docs/courier.1")
        let text = try String(contentsOf: page, encoding: .utf8)
        var sections: [(name: String, lines: [Substring])] = []
        for line in text.split(separator: "\n") {
            if line.hasPrefix(".It Em ") {
                sections.append((String(line.dropFirst(7)), []))
            } else if !sections.isEmpty {
                sections[sections.count - 1].lines.append(line)
            }
        }
        let withCatalog = sections.filter { $0.lines.contains { $0.hasPrefix(".It Fl -catalog Ar") } }
        #expect(withCatalog.count >= 6, "the man page's sections were not found: \(sections.map(\.name))")
        for section in withCatalog {
            #expect(section.lines.contains { $0.hasPrefix(".It Fl -catalog-root Ar") }, "\(section.name) takes --catalog but not --catalog-root")
        }
    }
}
