import Courier
import CourierPostgres
import CourierTestSupport
import Foundation
import Logging
import Testing

/// A catalog published by a run shared through PostgreSQL carries the publisher's TUF signature
/// (issue 29, §5): the process that publishes signs what it computed, and a row cannot change what
/// clients with the trusted root accept. Real PostgreSQL, nginx (upstream, and the staging tree
/// served to Courier's TUF client), real ed25519 keys.
@Suite(
    "courier prestage --queue --tuf-keys: a shared run publishes a signed catalog", .serialized,
    .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct PostgresSignedPrestageTests {
    static let products = ["com.example.a", "com.example.b", "com.example.c"]
    static let added = "com.example.d"

    /// An upstream with three products, a staging tree, a TUF repository's keys (the root key
    /// removed from the online folder, as on a worker host) and a PostgreSQL queue.
    struct Setup {
        let server: PostgresServer
        var upstream: UpstreamFixture
        let nginx: NginxServer
        let scratch: TemporaryDirectory
        let dest: URL
        let keys: URL
        let roots: URL

        init() throws {
            server = try PostgresServer()
            upstream = try UpstreamFixture()
            for product in PostgresSignedPrestageTests.products { try upstream.addProduct(product) }
            try upstream.writeCatalog()
            nginx = try NginxServer(root: upstream.root.url)
            scratch = try TemporaryDirectory(prefix: "courier-signed-queue")
            dest = scratch.url.appendingPathComponent("dest", isDirectory: true)
            try FileManager.default.createDirectory(at: dest, withIntermediateDirectories: true)
            keys = scratch.appending("online-keys")
            roots = scratch.appending("roots")
            try TUFPublisher.createRepository(keys: keys, metadata: roots)
            // A worker host holds the online keys only; the root key stays offline.
            try FileManager.default.removeItem(at: keys.appendingPathComponent("root.json"))
        }

        var catalogURL: URL { nginx.url("catalog.json") }

        func arguments(signed: Bool = true, products: [String] = []) -> [String] {
            [
                "prestage", "--catalog", catalogURL.absoluteString, "--dest", dest.path, "--queue", server.url, "--json",
                "--storage", scratch.appending("storage").path,
            ] + (signed ? ["--tuf-keys", keys.path, "--tuf-roots", roots.path] : []) + products.flatMap { ["--product", $0] }
        }

        /// Records an open run of `document` (a plan of `products`) with one task, as a coordinator would.
        func insertRun(_ document: Data, task: PrestageTask, signed: Bool, products: Set<String>? = nil) throws {
            let runKey = PostgresPrestage.runKey(dest: dest, products: products)
            try server.psql(
                """
                WITH run AS (
                    INSERT INTO prestage_run (run_key, plan, signed)
                    VALUES (\(PostgresStoredPlanTests.literal(runKey)), decode('\(PostgresStoredPlanTests.hex(document))', 'hex'), \(signed))
                    RETURNING run_id)
                INSERT INTO prestage_task (run_id, download_id, content_identifier)
                SELECT run_id, \(PostgresStoredPlanTests.literal(task.downloadId)), \(PostgresStoredPlanTests.literal(task.contentIdentifier))
                FROM run
                """)
        }

        /// Upstream gains `added`; the plan a coordinator would make now (one task).
        mutating func planWithAddedProduct(products: Set<String>? = nil) throws -> PrestagePlan {
            try upstream.addProduct(PostgresSignedPrestageTests.added)
            try upstream.writeCatalog()
            let plan = try PrestagePlan(
                upstream: Catalog.decode(Data(contentsOf: upstream.root.appending("catalog.json"))), upstreamLocation: catalogURL,
                tree: LocalStagingTree(root: dest), products: products)
            try #require(plan.tasks.map(\.contentIdentifier) == [PostgresSignedPrestageTests.added])
            return plan
        }

        func stop() {
            nginx.stop()
            server.stop()
            upstream.root.remove()
            scratch.remove()
        }
    }

    /// The catalog Courier's TUF client gets from the staging tree served by nginx, trusting
    /// `roots/1.root.json` (its trusted metadata kept in `client`, as a client's store).
    static func clientCatalog(_ setup: Setup, client: URL) async throws -> Catalog {
        let edge = try NginxServer(root: setup.dest)
        defer { edge.stop() }
        let loader = CatalogLoader(
            transport: try CurlHTTPTransport(), layout: StorageLayout(root: client),
            trust: CatalogTrust(trustedRoot: setup.roots.appendingPathComponent("1.root.json")), logger: Logger(label: "test"))
        return try await loader.load(edge.url("/catalog.json").absoluteString, relativeTo: setup.scratch.url).catalog
    }

    static func events(_ stdout: String, _ name: String) -> [[String: Any]] {
        stdout.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                object["event"] as? String == name
            else { return nil }
            return object
        }
    }

    @Test("the publisher signs; a run read back from the database is checked, then signed; the client accepts both; runs do not mix keyed and keyless processes")
    func signedRuns() async throws {
        #expect(PostgresServer.isAvailable, "\(PostgresServer.unavailableReason)")
        var setup = try Setup()
        defer { setup.stop() }
        let client = setup.scratch.appending("client")

        let first = try CourierBinary.run(setup.arguments())
        try #require(first.status == 0, "\(first.stderr)\(first.stdout)")
        let signed = try #require(Self.events(first.stdout, "signed").first)
        #expect(signed["targets"] as? Int == 1 && signed["timestamp"] as? Int == 1)
        #expect(try await Self.clientCatalog(setup, client: client).products.map(\.productId) == Self.products)

        // A run another (signing) process planned and recorded, then left: this process reads the
        // plan from the row, checks it against the upstream catalog it loaded, stages, publishes
        // and signs.
        let plan = try setup.planWithAddedProduct()
        try setup.insertRun(try plan.encoded(), task: plan.tasks[0], signed: false)
        // Recorded as an unsigned run: a signing process does not join it.
        let unsignedRun = try CourierBinary.run(setup.arguments())
        #expect(unsignedRun.status == 2, "exit \(unsignedRun.status): \(unsignedRun.stderr)\(unsignedRun.stdout)")
        #expect((unsignedRun.stderr + unsignedRun.stdout).contains("publishes an unsigned catalog; this process signs"))
        try setup.server.psql("UPDATE prestage_run SET signed = true WHERE state = 'running'")
        let second = try CourierBinary.run(setup.arguments())
        try #require(second.status == 0, "\(second.stderr)\(second.stdout)")
        #expect(Self.events(second.stdout, "staged").map { $0["contentIdentifier"] as? String } == [Self.added])
        let again = try #require(Self.events(second.stdout, "signed").first)
        #expect(again["targets"] as? Int == 2 && again["timestamp"] as? Int == 2)
        #expect(try setup.server.psql("SELECT state || ',' || signed FROM prestage_run ORDER BY run_id DESC LIMIT 1") == "published,true")
        let catalog = try await Self.clientCatalog(setup, client: client)
        #expect(catalog.products.map(\.productId) == Self.products + [Self.added])
        try TUFLocalRepository.verify(
            try Data(contentsOf: setup.dest.appendingPathComponent("catalog.json")), as: "catalog.json",
            metadata: setup.dest.appendingPathComponent("metadata"), trustedRoot: try Data(contentsOf: setup.roots.appendingPathComponent("1.root.json")))
    }

    enum Attack: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// The plan's upstream catalog leaves a product out: its catalog would drop it.
        case dropped
        /// The plan's upstream catalog gives one product another's package.
        case moved

        var testDescription: String { rawValue }
    }

    @Test("a row whose plan is not the upstream's is refused by the signer; published unsigned, clients never accept it", arguments: Attack.allCases)
    func tamperedRow(_ attack: Attack) async throws {
        #expect(PostgresServer.isAvailable, "\(PostgresServer.unavailableReason)")
        var setup = try Setup()
        defer { setup.stop() }
        let client = setup.scratch.appending("client")
        let first = try CourierBinary.run(setup.arguments())
        try #require(first.status == 0, "\(first.stderr)\(first.stdout)")
        let genuine = try await Self.clientCatalog(setup, client: client)
        let metadata = setup.dest.appendingPathComponent("metadata")
        let timestampBefore = try Data(contentsOf: metadata.appendingPathComponent("timestamp.json"))
        let catalogBefore = try Data(contentsOf: setup.dest.appendingPathComponent("catalog.json"))

        let plan = try setup.planWithAddedProduct()
        // Consistent in itself (it passes every check `decodeStored` makes), but not made from
        // the upstream catalog.
        let document = try PostgresStoredPlanTests.edited(try plan.encoded()) { plan in
            var upstream = try #require(plan["upstream"] as? [String: Any])
            var products = try #require(upstream["products"] as? [[String: Any]])
            switch attack {
            case .dropped:
                products.removeAll { $0["productId"] as? String == "com.example.c" }
                plan["unchanged"] = (plan["unchanged"] as? [String] ?? []).filter { $0 != "com.example.c" }
            case .moved:
                let b = try #require(products.first { $0["productId"] as? String == "com.example.b" })
                let a = try #require(products.firstIndex { $0["productId"] as? String == "com.example.a" })
                products[a]["content"] = b["content"]
            }
            upstream["products"] = products
            plan["upstream"] = upstream
        }
        try #require(try PrestagePlan.decodeStored(document, tree: LocalStagingTree(root: setup.dest), products: nil).tasks.count == 1)
        try setup.insertRun(document, task: plan.tasks[0], signed: true)

        // The signing process refuses the row: nothing fetched, published or signed.
        let refused = try CourierBinary.run(setup.arguments())
        #expect(refused.status == 6, "exit \(refused.status): \(refused.stderr)\(refused.stdout)")
        #expect((refused.stderr + refused.stdout).contains("its upstream catalog is not the one this process loaded"), "\(refused.stderr)\(refused.stdout)")
        #expect(try Data(contentsOf: setup.dest.appendingPathComponent("catalog.json")) == catalogBefore)
        #expect(try Data(contentsOf: metadata.appendingPathComponent("timestamp.json")) == timestampBefore)
        #expect(!setup.nginx.accessLog().contains { $0.contains(Self.added) }, "a package of the crafted run was fetched")

        // A process without the keys does not join a signed run...
        let keyless = try CourierBinary.run(setup.arguments(signed: false))
        #expect(keyless.status == 2, "exit \(keyless.status): \(keyless.stderr)\(keyless.stdout)")
        #expect((keyless.stderr + keyless.stdout).contains("publishes a signed catalog; this process has no --tuf-keys"))
        // ...and when the row also says it is unsigned, what it publishes is not signed: the
        // client keeps the signed catalog, and the local check `serve --catalog-root` makes fails.
        try setup.server.psql("UPDATE prestage_run SET signed = false WHERE state = 'running'")
        let unsigned = try CourierBinary.run(setup.arguments(signed: false))
        #expect(unsigned.status == 0 || unsigned.status == 1, "exit \(unsigned.status): \(unsigned.stderr)\(unsigned.stdout)")
        let tampered = try Data(contentsOf: setup.dest.appendingPathComponent("catalog.json"))
        #expect(tampered != catalogBefore)
        #expect(try Data(contentsOf: metadata.appendingPathComponent("timestamp.json")) == timestampBefore)
        #expect(try await Self.clientCatalog(setup, client: client) == genuine)
        #expect(throws: TUFError.self) {
            try TUFLocalRepository.verify(
                tampered, as: "catalog.json", metadata: metadata,
                trustedRoot: try Data(contentsOf: setup.roots.appendingPathComponent("1.root.json")))
        }
    }

    @Test("a row's own published catalog does not reach what is signed: products not selected keep the tree's entries")
    func rowPublishedCatalogIsNotSigned() async throws {
        #expect(PostgresServer.isAvailable, "\(PostgresServer.unavailableReason)")
        var setup = try Setup()
        defer { setup.stop() }
        let client = setup.scratch.appending("client")
        let first = try CourierBinary.run(setup.arguments())
        try #require(first.status == 0, "\(first.stderr)\(first.stdout)")
        let genuine = try await Self.clientCatalog(setup, client: client)

        // A run of `--product com.example.d` whose recorded `published` catalog lists only
        // com.example.a (every entry still at its own digest's path, so it passes the plan's checks).
        let selection: Set<String> = [Self.added]
        let plan = try setup.planWithAddedProduct(products: selection)
        let document = try PostgresStoredPlanTests.edited(try plan.encoded()) { plan in
            var published = try #require(plan["published"] as? [String: Any])
            let products = try #require(published["products"] as? [[String: Any]])
            published["products"] = products.filter { $0["productId"] as? String == "com.example.a" }
            plan["published"] = published
        }
        try setup.insertRun(document, task: plan.tasks[0], signed: true, products: selection)
        let run = try CourierBinary.run(setup.arguments(products: [Self.added]))
        try #require(run.status == 0, "\(run.stderr)\(run.stdout)")
        #expect(!Self.events(run.stdout, "signed").isEmpty)
        let signed = try await Self.clientCatalog(setup, client: client)
        // The selected product first, then the others as the tree had published them.
        #expect(signed.products.map(\.productId) == [Self.added] + Self.products)
        for productId in Self.products {
            #expect(signed.product(productId) == genuine.product(productId))
        }
    }
}
