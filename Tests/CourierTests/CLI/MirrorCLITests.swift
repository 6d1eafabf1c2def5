import Courier
import CourierTestSupport
import Foundation
import Testing

/// Mirrors from the command line (issue 13): `get --mirror URL`, and a catalog's `mirrors`
/// carried through the queue to the transfer engine, with `list`/`status` naming the one in use.
/// The first origin (the fault-injecting one) dies mid-transfer; the mirror (nginx) resumes
/// where it stopped.
@Suite("Mirrors: get --mirror and catalog mirrors (the built courier binary)", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct MirrorCLITests {
    @Test("get --mirror: the origin dies mid-transfer; the mirror serves only the rest")
    func getHandsOverToTheMirror() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = PackageFixtures.noise(3 << 20, seed: 41)
        try content.write(to: site.appending("pack.zip"))
        var behavior = FaultOrigin.Behavior()
        behavior.dropAfterBytes = 1_000_000
        behavior.faultyResponses = 1000
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let mirror = try NginxServer(root: site.url)
        defer { mirror.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let file = folder.appending("pack.zip")
        let result = try CourierBinary.run([
            "get", origin.url().absoluteString, "--mirror", mirror.url("pack.zip").absoluteString, "-o", file.path,
            "--sha256", QueueFixtures.sha256(content), "--length", "\(content.count)", "--json", "--config", config.path,
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try Data(contentsOf: file) == content)
        #expect(origin.requests.count == 1)
        let lines = mirror.accessLog(atLeast: 1)
        #expect(lines.count == 1 && lines[0].contains("\" 206 \(content.count - 1_000_000) "), "\(lines)")
        // The switch is said (the failed URL, its cause, the next URL) and the result names the
        // URL that served the file.
        let switched = try #require(result.events.first { $0["event"] as? String == "mirror" }, "\(result.stdout)")
        #expect(switched["from"] as? String == origin.url().absoluteString)
        #expect(switched["to"] as? String == mirror.url("pack.zip").absoluteString)
        #expect(switched["code"] as? String == "network")
        #expect(result.events.last?["url"] as? String == mirror.url("pack.zip").absoluteString)

        try FileManager.default.removeItem(at: file)
        let plain = try CourierBinary.run([
            "get", origin.url().absoluteString, "--mirror", mirror.url("pack.zip").absoluteString, "-o", file.path,
            "--sha256", QueueFixtures.sha256(content), "--config", config.path,
        ])
        #expect(plain.status == 0, "\(plain.stderr)")
        let line = try #require(plain.stderr.split(separator: "\n").first { $0.contains("switching to") }, "\(plain.stderr)")
        #expect(line.hasPrefix("courier: pack.zip: ") && line.contains(origin.url().absoluteString), "\(line)")
        #expect(line.contains("curl"), "the cause is named: \(line)")
        #expect(line.hasSuffix("switching to \(mirror.url("pack.zip").absoluteString)"), "\(line)")
        #expect(plain.stdout.contains("saved \(file.path) from \(mirror.url("pack.zip").absoluteString) ("), "\(plain.stdout)")

        let refused = try CourierBinary.run(["get", origin.url().absoluteString, "--mirror", "ftp://elsewhere/pack.zip", "-o", file.path])
        #expect(refused.status == 2, "\(refused.stderr)")
    }

    @Test("a catalog's mirrors reach the transfer: deliver resumes on the mirror; list and status name it")
    func catalogMirrorsThroughTheQueue() throws {
        let folder = try TemporaryDirectory(prefix: "courier-mirror")
        defer { folder.remove() }
        let sandbox = try SandboxStore.create(at: folder.appending("sandbox"))
        let www = folder.appending("www")
        try FileManager.default.createDirectory(at: www, withIntermediateDirectories: true)
        let product = "com.example.maps"
        let package = www.appendingPathComponent("maps.zip")
        try PackageFixtures.infoZip(
            product: product, version: "1.0", files: ["data.bin": PackageFixtures.noise(2 << 20, seed: 42)], at: package, level: 0)
        let bytes = try Data(contentsOf: package)
        var behavior = FaultOrigin.Behavior()
        behavior.dropAfterBytes = 700_000
        behavior.faultyResponses = 1000
        let origin = try FaultOrigin(content: bytes, behavior: behavior)
        defer { origin.stop() }
        let nginx = try NginxServer(root: www)
        defer { nginx.stop() }
        let mirrorURL = nginx.url("maps.zip").absoluteString
        let content = Catalog.Content(
            url: origin.url("/maps.zip").absoluteString, sha256: QueueFixtures.sha256(bytes), length: Int64(bytes.count),
            version: "1.0", placement: .documents, mirrors: [mirrorURL])
        try Catalog(bundleId: "com.example.app", products: [Catalog.Product(productId: product, content: content)]).encoded()
            .write(to: www.appendingPathComponent("catalog.json"))
        let receipt = folder.appending("receipt.txt")
        try Data((try sandbox.purchase(productId: product) + "\n").utf8).write(to: receipt)
        let config = folder.appending("courier.json")
        try Data(#"{"transfer": {"maxRetries": 2, "initialBackoff": 0.1}}"#.utf8).write(to: config)
        let storage = folder.appending("Storage")
        func courier(_ arguments: [String]) throws -> CourierBinary.Result {
            try CourierBinary.run(arguments + ["--storage", storage.path, "--config", config.path], directory: folder.url)
        }

        let delivered = try courier([
            "deliver", "--receipt", receipt.path, "--catalog", nginx.url("catalog.json").absoluteString,
            "--trust-root", sandbox.rootCertificateDERFile.path, "--environment", "Sandbox",
        ])
        #expect(delivered.status == 0, "\(delivered.stderr)")
        let placed = storage.appendingPathComponent("Documents/\(product)/Contents/data.bin")
        #expect(try Data(contentsOf: placed) == PackageFixtures.noise(2 << 20, seed: 42))
        #expect(origin.requests.count == 1)
        let resumed = nginx.accessLog().filter { $0.contains("maps.zip") }
        #expect(resumed.count == 1 && resumed[0].contains("\" 206 \(bytes.count - 700_000) "), "\(resumed)")

        let listed = try courier(["list", "--all", "--json"])
        let entry = try #require((listed.events.first?["entries"] as? [[String: Any]])?.first)
        #expect(entry["source"] as? String == mirrorURL, "\(entry)")
        #expect(entry["mirrors"] as? [String] == [mirrorURL], "\(entry)")
        let table = try courier(["list", "--all"])
        #expect(table.stdout.contains("SOURCE") && table.stdout.contains("(mirror 1/1)"), "\(table.stdout)")
        let status = try courier(["status", try #require(entry["downloadId"] as? String)])
        #expect(status.stdout.contains("source \(mirrorURL) (mirror 1 of 1)"), "\(status.stdout)")
    }
}
