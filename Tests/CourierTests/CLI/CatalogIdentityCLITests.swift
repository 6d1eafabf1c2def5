import Courier
import CourierTestSupport
import Foundation
import Testing

/// One identifier, one content (issue 28, section 7): a subscription `com.example.levels` with
/// the item `pack1` and a product `com.example.levels.pack1` both name the content
/// `com.example.levels.pack1` (one folder, one gate path). Such a catalog is refused where it is
/// loaded, by the client, prestage and serve alike: exit 2, naming both.
@Suite("a catalog in which two contents share an identifier is refused (the built courier binary)")
struct CatalogIdentityCLITests {
    /// The colliding catalog, written as a publisher would (relative package URLs).
    static let collidingCatalog = """
        { "bundleId": "com.example.app",
          "products": [
            { "productId": "com.example.levels", "type": "autoRenewable",
              "items": [ { "itemId": "pack1", "publishedAt": "2026-01-01",
                           "content": { "url": "issue.zip", "sha256": "\(String(repeating: "ab", count: 32))",
                                        "length": 10, "version": "1.0", "placement": "cache" } } ] },
            { "productId": "com.example.levels.pack1",
              "content": { "url": "pack1.zip", "sha256": "\(String(repeating: "cd", count: 32))",
                           "length": 10, "version": "1.0", "placement": "documents" } } ] }
        """

    static func expectNamesBoth(_ result: CourierBinary.Result, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(result.status == 2, "\(result.stdout)\(result.stderr)", sourceLocation: sourceLocation)
        #expect(result.stderr.hasPrefix("courier: "), "\(result.stderr)", sourceLocation: sourceLocation)
        #expect(result.stderr.contains("com.example.levels.pack1"), "\(result.stderr)", sourceLocation: sourceLocation)
        #expect(result.stderr.contains("product com.example.levels.pack1"), "\(result.stderr)", sourceLocation: sourceLocation)
        #expect(result.stderr.contains("item pack1 of com.example.levels"), "\(result.stderr)", sourceLocation: sourceLocation)
    }

    @Test("deliver: exit 2 naming both contents, nothing queued")
    func client() throws {
        let directory = try TemporaryDirectory(prefix: "courier-identity")
        defer { directory.remove() }
        let sandbox = try SandboxStore.create(at: directory.appending("sandbox"))
        let catalog = directory.appending("catalog.json")
        try Data(Self.collidingCatalog.utf8).write(to: catalog)
        let receipt = directory.appending("receipt.txt")
        try Data((try sandbox.purchase(productId: "com.example.levels.pack1") + "\n").utf8).write(to: receipt)
        let storage = directory.appending("Storage")
        let result = try CourierBinary.run([
            "deliver", "--receipt", receipt.path, "--catalog", catalog.path, "--trust-root", sandbox.rootCertificateDERFile.path,
            "--environment", "Sandbox", "--storage", storage.path,
        ])
        Self.expectNamesBoth(result)
        let list = try CourierBinary.run(["list", "--json", "--storage", storage.path])
        #expect(!list.stdout.contains("com.example.levels"), "the purchase was queued: \(list.stdout)")
    }

    @Test("prestage: exit 2 naming both contents, nothing published")
    func prestage() throws {
        let directory = try TemporaryDirectory(prefix: "courier-identity")
        defer { directory.remove() }
        let catalog = directory.appending("catalog.json")
        try Data(Self.collidingCatalog.utf8).write(to: catalog)
        let dest = directory.appending("staged")
        let result = try CourierBinary.run(["prestage", "--catalog", catalog.path, "--dest", dest.path])
        Self.expectNamesBoth(result)
        #expect(!FileManager.default.fileExists(atPath: dest.appendingPathComponent("catalog.json").path))
    }

    @Test("serve: a published catalog with a shared identifier is refused at start, exit 2 naming both")
    func serve() throws {
        let directory = try TemporaryDirectory(prefix: "courier-identity")
        defer { directory.remove() }
        let content = directory.appending("content")
        try FileManager.default.createDirectory(at: content, withIntermediateDirectories: true)
        try Data(Self.collidingCatalog.utf8).write(to: content.appendingPathComponent("catalog.json"))
        let result = try CourierBinary.run(["serve", "--content", content.path, "--port", "0", "--public"], timeout: 60)
        Self.expectNamesBoth(result)
    }

    @Test("a product listed twice, or an item id used twice in one subscription, is refused too")
    func duplicatesWithinOneKind() throws {
        let content = #"{"url": "a.zip", "sha256": "\#(String(repeating: "ab", count: 32))", "length": 1, "version": "1", "placement": "cache"}"#
        let twice = #"{"bundleId": "b", "products": [{"productId": "p", "content": \#(content)}, {"productId": "p", "content": \#(content)}]}"#
        #expect(throws: CourierError.self) { try Catalog.decode(Data(twice.utf8)) }
        let item = #"{"itemId": "i", "publishedAt": "2026-01-01", "content": \#(content)}"#
        let items = #"{"bundleId": "b", "products": [{"productId": "s", "type": "autoRenewable", "items": [\#(item), \#(item)]}]}"#
        do {
            _ = try Catalog.decode(Data(items.utf8))
            Issue.record("a subscription listing item i twice was accepted")
        } catch let error as CourierError {
            #expect(error.code == .usage)
            #expect(error.message.contains("item i of s and item i of s"), "\(error.message)")
        }
        // Distinct identifiers stay fine, an item and a product of different names included.
        let fine = #"{"bundleId": "b", "products": [{"productId": "s", "type": "autoRenewable", "items": [\#(item)]}, {"productId": "s.j", "content": \#(content)}]}"#
        #expect(try Catalog.decode(Data(fine.utf8)).products.count == 2)
    }
}
