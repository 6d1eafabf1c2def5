import Courier
import CourierPostgres
import CourierTestSupport
import Foundation
import Testing

/// A PostgreSQL row is untrusted input (issue 29, §5): a run row another process could have
/// written is checked like the network's bytes before any worker acts on it. Each case writes a
/// crafted open run into a real PostgreSQL beside a tree a real run published, then runs
/// `courier prestage --queue` on it: the run is refused (exit 6, the check named), nothing is
/// written outside `--dest` and the published catalog is left as it was.
@Suite(
    "courier prestage --queue: a recorded run is untrusted input", .serialized,
    .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct PostgresStoredPlanTests {
    enum Attack: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// A task whose content identifier climbs out of the work folder.
        case traversal
        /// A plan whose upstream catalog lists nothing: its catalog would be empty.
        case emptied
        /// A plan whose `published` catalog stages one product's entry at another's package.
        case moved

        var testDescription: String { rawValue }
    }

    static let products = ["com.example.a", "com.example.b", "com.example.c"]
    static let added = "com.example.d"

    /// A JSON object's text with `edit` applied.
    static func edited(_ data: Data, _ edit: (inout [String: Any]) throws -> Void) throws -> Data {
        var object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        try edit(&object)
        return try JSONSerialization.data(withJSONObject: object)
    }

    static func hex(_ data: Data) -> String { data.map { String(format: "%02x", $0) }.joined() }

    /// A SQL expression for `text` that needs no quoting.
    static func literal(_ text: String) -> String { "convert_from(decode('\(hex(Data(text.utf8)))', 'hex'), 'UTF8')" }

    /// Files under `folder` whose name starts with `prefix`, outside `excluding`.
    static func files(under folder: URL, named prefix: String, excluding: URL) -> [String] {
        let enumerator = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)
        var found: [String] = []
        while let url = enumerator?.nextObject() as? URL {
            if url.path.hasPrefix(excluding.path + "/") { continue }
            if url.lastPathComponent.hasPrefix(prefix) { found.append(url.path) }
        }
        return found
    }

    @Test("a crafted open run is refused before any worker acts on it", arguments: Attack.allCases)
    func craftedRunIsRefused(_ attack: Attack) throws {
        #expect(PostgresServer.isAvailable, "\(PostgresServer.unavailableReason)")
        let server = try PostgresServer()
        defer { server.stop() }
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        for product in Self.products { try upstream.addProduct(product) }
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url)
        defer { nginx.stop() }
        let scratch = try TemporaryDirectory(prefix: "courier-stored-plan")
        defer { scratch.remove() }
        // Deep enough that six `..` from the work folder stay inside the scratch folder.
        let dest = scratch.url.appendingPathComponent("one/two/three/dest", isDirectory: true)
        try FileManager.default.createDirectory(at: dest, withIntermediateDirectories: true)
        let catalogURL = nginx.url("catalog.json")
        let arguments = [
            "prestage", "--catalog", catalogURL.absoluteString, "--dest", dest.path, "--queue", server.url, "--json",
            "--storage", scratch.appending("storage").path,
        ]
        let first = try CourierBinary.run(arguments)
        try #require(first.status == 0, "\(first.stderr)")
        let publishedBefore = try Data(contentsOf: dest.appendingPathComponent("catalog.json"))

        // Upstream gains a product: a plan made now has one task, as a coordinator's would.
        try upstream.addProduct(Self.added)
        try upstream.writeCatalog()
        let selection: Set<String>? = attack == .moved ? [Self.added] : nil
        var plan = try PrestagePlan(
            upstream: Catalog.decode(Data(contentsOf: upstream.root.appending("catalog.json"))), upstreamLocation: catalogURL,
            tree: LocalStagingTree(root: dest), products: selection)
        try #require(plan.tasks.map(\.contentIdentifier) == [Self.added])
        let document: Data
        switch attack {
        case .traversal:
            plan.tasks[0].contentIdentifier = "../../../../../../x"
            document = try plan.encoded()
        case .emptied:
            document = try Self.edited(try plan.encoded()) { plan in
                var upstream = try #require(plan["upstream"] as? [String: Any])
                upstream["products"] = [Any]()
                plan["upstream"] = upstream
            }
        case .moved:
            // The tree's catalog with com.example.a's entry pointing at com.example.b's package.
            document = try Self.edited(try plan.encoded()) { plan in
                var published = try #require(plan["published"] as? [String: Any])
                var products = try #require(published["products"] as? [[String: Any]])
                let b = try #require(products.first { $0["productId"] as? String == "com.example.b" })
                let a = try #require(products.firstIndex { $0["productId"] as? String == "com.example.a" })
                products[a]["content"] = b["content"]
                published["products"] = products
                plan["published"] = published
            }
        }
        let task = plan.tasks[0]
        let runKey = PostgresPrestage.runKey(dest: dest, products: selection)
        try server.psql(
            """
            WITH run AS (
                INSERT INTO prestage_run (run_key, plan) VALUES (\(Self.literal(runKey)), decode('\(Self.hex(document))', 'hex'))
                RETURNING run_id)
            INSERT INTO prestage_task (run_id, download_id, content_identifier)
            SELECT run_id, \(Self.literal(task.downloadId)), \(Self.literal(task.contentIdentifier)) FROM run
            """)

        let again = try CourierBinary.run(arguments + (selection.map { ["--product", $0.sorted()[0]] } ?? []))
        #expect(again.status == 6, "exit \(again.status): \(again.stderr)")
        // With --json the error is a JSON event on stdout; the message is the same.
        let output = again.stderr + again.stdout
        // "a recorded pre-staging task is not valid: …" or "the recorded pre-staging plan is not valid: …"
        #expect(output.contains("recorded pre-staging") && output.contains("is not valid"), "\(output)")
        // Nothing written outside --dest, nothing fetched, the catalog as it was.
        #expect(Self.files(under: scratch.url, named: "x-", excluding: dest).isEmpty)
        #expect(Self.files(under: dest, named: "prestage-..", excluding: scratch.appending("none")).isEmpty)
        #expect(try Data(contentsOf: dest.appendingPathComponent("catalog.json")) == publishedBefore)
        let published = try Catalog.decode(publishedBefore)
        for entry in published.allContent {
            #expect(entry.content.url == PrestagePlan.stagedPath(contentIdentifier: entry.contentIdentifier, sha256: entry.content.sha256))
        }
        #expect(!nginx.accessLog().contains { $0.contains(Self.added) }, "a package of the crafted run was fetched")
    }

    @Test("a recorded failure's message, cause and hint are printable: no escape sequences, bounded length")
    func recordedFailureText() throws {
        let hostile = #"{"status":"failed","code":"network","message":"\u001b[2J\u001b]0;owned\u0007gone\r\nnext","cause":"\u009b31m\tred","hint":"\#(String(repeating: "x", count: 5_000))"}"#
        let outcome = try JSONDecoder().decode(PrestageOutcome.self, from: Data(hostile.utf8))
        guard case .failed(let error) = outcome else {
            Issue.record("not a failure: \(outcome)")
            return
        }
        #expect(error.code == .network)
        #expect(error.message == "\u{FFFD}[2J\u{FFFD}]0;owned\u{FFFD}gone\u{FFFD} next")
        #expect(error.cause == "\u{FFFD}31m red")
        #expect(error.hint == String(repeating: "x", count: 2_000) + "…")
        for text in [error.message, error.cause ?? "", error.hint ?? ""] {
            #expect(!text.unicodeScalars.contains { $0.properties.generalCategory == .control })
        }
    }

    @Test("a run row's own published catalog is not what a run keeps: the tree's is")
    func publishKeepsTheTreesCatalog() throws {
        // A plan whose `published` copy is older than the tree's (another run key published
        // since): products it does not select keep what the tree has now.
        let tree = try TemporaryDirectory(prefix: "courier-stage")
        defer { tree.remove() }
        let staging = try LocalStagingTree(root: tree.url)
        func content(_ digit: Character) -> Catalog.Content {
            let digest = String(repeating: digit, count: 64)
            return Catalog.Content(url: "u/\(digit).zip", sha256: digest, length: 10, version: "1", placement: .cache)
        }
        func staged(_ id: String, _ content: Catalog.Content) -> Catalog.Product {
            var own = content
            own.url = PrestagePlan.stagedPath(contentIdentifier: id, sha256: content.sha256)
            return Catalog.Product(productId: id, content: own)
        }
        try staging.publishCatalog(Catalog(bundleId: "com.example.app", products: [staged("com.example.a", content("1"))]))
        let upstream = Catalog(
            bundleId: "com.example.app",
            products: [Catalog.Product(productId: "com.example.a", content: content("1")), Catalog.Product(productId: "com.example.b", content: content("2"))])
        let plan = try PrestagePlan(
            upstream: upstream, upstreamLocation: URL(string: "http://127.0.0.1:9/catalog.json"), tree: staging,
            products: ["com.example.b"])
        // Meanwhile another run key publishes com.example.a's next version.
        let newer = Catalog(bundleId: "com.example.app", products: [staged("com.example.a", content("3"))])
        try staging.publishCatalog(newer)
        let catalog = plan.keeping(published: try staging.publishedCatalog()).catalog(staged: ["com.example.b"])
        #expect(catalog.product("com.example.a") == newer.product("com.example.a"))
        #expect(catalog.product("com.example.b")?.content?.sha256 == String(repeating: "2", count: 64))
    }
}

