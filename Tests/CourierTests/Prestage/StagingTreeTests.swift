import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Prestage: staging tree and plan")
struct StagingTreeTests {
    static func content(_ name: String, sha: Character, length: Int64, version: String = "1.0") -> Catalog.Content {
        Catalog.Content(url: "\(name).zip", sha256: String(repeating: sha, count: 64), length: length, version: version, placement: .documents)
    }

    static func upstream(_ entries: [(String, Catalog.Content)]) -> Catalog {
        Catalog(bundleId: "com.example.app", products: entries.map { Catalog.Product(productId: $0.0, content: $0.1) })
    }

    /// Publishes `bytes` as a package through the tree, as the job does.
    static func stage(_ tree: LocalStagingTree, _ bytes: Data, at path: String) throws {
        let file = tree.workDirectory.appendingPathComponent(UUID().uuidString)
        try bytes.write(to: file)
        try tree.publishPackage(file, at: path)
    }

    @Test("a package is published by rename, consuming the local file, and is then reported staged")
    func publishPackage() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let tree = try LocalStagingTree(root: folder.url)
        let path = PrestagePlan.stagedPath(contentIdentifier: "com.example.pack1", sha256: String(repeating: "a", count: 64))
        #expect(try !tree.hasPackage(at: path, length: 5))
        let file = tree.workDirectory.appendingPathComponent("fetched.zip")
        try Data("hello".utf8).write(to: file)
        try tree.publishPackage(file, at: path)
        #expect(!FileManager.default.fileExists(atPath: file.path))
        #expect(try Data(contentsOf: folder.url.appendingPathComponent(path)) == Data("hello".utf8))
        #expect(try tree.hasPackage(at: path, length: 5))
        #expect(try !tree.hasPackage(at: path, length: 6))
        // No temporary names are left beside it.
        let siblings = try FileManager.default.contentsOfDirectory(atPath: folder.url.appendingPathComponent(path).deletingLastPathComponent().path)
        #expect(siblings == [String(repeating: "a", count: 64) + ".zip"])
    }

    @Test("paths that would leave the tree are refused")
    func refusesEscapes() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let tree = try LocalStagingTree(root: folder.url)
        for path in [
            "../x.zip", "/etc/x.zip", "packages/../../x.zip", "packages//x.zip", "./x", "", ".", "..", "/", "packages/",
            "packages/a/.", "packages/./x.zip", "packages/a/..", "a\u{0}/../x",
        ] {
            #expect(throws: CourierError.self, "\(path.debugDescription)") { try tree.hasPackage(at: path, length: 1) }
        }
        // Dots inside a name, or more than two, name a file like any other.
        for path in ["...", "packages/.../x.zip", "packages/a../x.zip", "packages/..a/.x.zip", "x"] {
            #expect(throws: Never.self, "\(path.debugDescription)") { try tree.hasPackage(at: path, length: 1) }
        }
    }

    @Test("the catalog is replaced whole: a reader sees the old or the new one, never a mix")
    func catalogAtomic() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let tree = try LocalStagingTree(root: folder.url)
        #expect(try tree.publishedCatalog() == nil)
        let small = Self.upstream([("a", Self.content("a", sha: "1", length: 1))])
        let large = Self.upstream((0..<2000).map { ("p\($0)", Self.content("p\($0)", sha: "2", length: 2)) })
        try tree.publishCatalog(small)
        let reader = Task.detached { () -> Int in
            var reads = 0
            let deadline = Date().addingTimeInterval(20)
            while reads < 300 && Date() < deadline {
                let data = try Data(contentsOf: tree.catalogFile)
                let count = try Catalog.decode(data).products.count
                #expect(count == 1 || count == 2000)
                reads += 1
            }
            return reads
        }
        for round in 0..<100 { try tree.publishCatalog(round % 2 == 0 ? large : small) }
        let reads = try await reader.value
        #expect(reads > 0)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".tmp") }
        #expect(leftovers.isEmpty)
    }

    @Test("a changed catalog published within the same second gets a later modification time (nginx's ETag)")
    func catalogValidatorsChange() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let tree = try LocalStagingTree(root: folder.url)
        // The same length, as a new version's catalog often is: nginx's ETag is "mtime-size".
        let first = Self.upstream([("a", Self.content("a", sha: "1", length: 1, version: "1.0"))])
        let second = Self.upstream([("a", Self.content("a", sha: "2", length: 1, version: "2.0"))])
        func modified() throws -> Int {
            var info = stat()
            #expect(stat(tree.catalogFile.path, &info) == 0)
            return info.st_mtim.tv_sec
        }
        try tree.publishCatalog(first)
        let before = try modified()
        try tree.publishCatalog(second)
        let after = try modified()
        #expect(try Data(contentsOf: tree.catalogFile).count == (try first.encoded()).count)
        #expect(after > before, "the new catalog must not keep the old one's ETag and Last-Modified")
        // The same catalog again keeps its validators.
        try tree.publishCatalog(second)
        #expect(try modified() == after)
    }

    @Test("the plan fetches what is new or changed and nothing already staged")
    func plan() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let tree = try LocalStagingTree(root: folder.url)
        let upstreamURL = URL(string: "http://127.0.0.1:9/catalogs/catalog.json")
        var catalog = Self.upstream([
            ("com.example.a", Self.content("a", sha: "1", length: 3)),
            ("com.example.b", Self.content("b", sha: "2", length: 4)),
        ])
        let first = try PrestagePlan(upstream: catalog, upstreamLocation: upstreamURL, tree: tree)
        #expect(first.tasks.map(\.contentIdentifier) == ["com.example.a", "com.example.b"])
        #expect(first.tasks[0].source.absoluteString == "http://127.0.0.1:9/catalogs/a.zip")
        for task in first.tasks {
            try Self.stage(tree, Data(count: Int(task.content.length)), at: task.stagedPath)
        }
        try tree.publishCatalog(first.catalog(staged: Set(first.tasks.map(\.contentIdentifier))))
        let again = try PrestagePlan(upstream: catalog, upstreamLocation: upstreamURL, tree: tree)
        #expect(again.tasks.isEmpty)
        #expect(again.unchanged == ["com.example.a", "com.example.b"])
        #expect(again.catalog(staged: []) == (try tree.publishedCatalog()))
        // b changes upstream: only b is fetched.
        catalog.products[1].content = Self.content("b", sha: "3", length: 5, version: "1.1")
        let changed = try PrestagePlan(upstream: catalog, upstreamLocation: upstreamURL, tree: tree)
        #expect(changed.tasks.map(\.contentIdentifier) == ["com.example.b"])
    }

    @Test("the published catalog: staged paths, old versions kept on failure, unselected products untouched")
    func publishedCatalog() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let tree = try LocalStagingTree(root: folder.url)
        let v1 = Self.upstream([
            ("com.example.a", Self.content("a", sha: "1", length: 3)),
            ("com.example.b", Self.content("b", sha: "2", length: 4)),
        ])
        let plan1 = try PrestagePlan(upstream: v1, upstreamLocation: URL(string: "http://127.0.0.1:9/c.json"), tree: tree)
        let published1 = plan1.catalog(staged: ["com.example.a", "com.example.b"], unpackedLengths: ["com.example.a": 99])
        #expect(published1.product("com.example.a")?.content?.url == "packages/com.example.a/\(String(repeating: "1", count: 64)).zip")
        #expect(published1.product("com.example.a")?.content?.unpackedLength == 99)
        try tree.publishCatalog(published1)
        // v2 changes both; b fails: b keeps v1, a moves on.
        let v2 = Self.upstream([
            ("com.example.a", Self.content("a", sha: "3", length: 3, version: "2.0")),
            ("com.example.b", Self.content("b", sha: "4", length: 4, version: "2.0")),
            ("com.example.c", Self.content("c", sha: "5", length: 4)),
        ])
        let plan2 = try PrestagePlan(upstream: v2, upstreamLocation: URL(string: "http://127.0.0.1:9/c.json"), tree: tree)
        let published2 = plan2.catalog(staged: ["com.example.a"])
        #expect(published2.product("com.example.a")?.content?.version == "2.0")
        #expect(published2.product("com.example.b")?.content?.version == "1.0")
        #expect(published2.product("com.example.c") == nil)
        // --product c only: a and b stay as published.
        try tree.publishCatalog(published2)
        let plan3 = try PrestagePlan(upstream: v2, upstreamLocation: URL(string: "http://127.0.0.1:9/c.json"), tree: tree, products: ["com.example.c"])
        #expect(plan3.tasks.map(\.contentIdentifier) == ["com.example.c"])
        let published3 = plan3.catalog(staged: ["com.example.c"])
        #expect(Set(published3.products.map(\.productId)) == ["com.example.a", "com.example.b", "com.example.c"])
        #expect(published3.product("com.example.b")?.content?.version == "1.0")
    }

    @Test("a plan made before a run published is no longer current; one made after is")
    func planCurrency() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let tree = try LocalStagingTree(root: folder.url)
        let upstream = Self.upstream([("com.example.pack1", Self.content("pack1", sha: "a", length: 3))])
        let location = URL(string: "http://127.0.0.1:9/catalog.json")
        let early = try PrestagePlan(upstream: upstream, upstreamLocation: location, tree: tree)
        #expect(try early.isCurrent(in: tree))
        // Another run stages the package and publishes: the early plan would fetch it again.
        let path = PrestagePlan.stagedPath(contentIdentifier: "com.example.pack1", sha256: String(repeating: "a", count: 64))
        try Self.stage(tree, Data("zip".utf8), at: path)
        try tree.publishCatalog(early.catalog(staged: ["com.example.pack1"]))
        #expect(try !early.isCurrent(in: tree))
        let late = try PrestagePlan(upstream: upstream, upstreamLocation: location, tree: tree)
        #expect(try late.isCurrent(in: tree))
        #expect(late.tasks.isEmpty && late.unchanged == ["com.example.pack1"])
    }

    @Test("entries that cannot be staged safely are refused, not fetched")
    func refusesBadEntries() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let tree = try LocalStagingTree(root: folder.url)
        let catalog = Self.upstream([
            ("../evil", Self.content("a", sha: "1", length: 3)),
            ("com.example.ok", Self.content("b", sha: "2", length: 4)),
            ("com.example.ok", Self.content("b", sha: "2", length: 4)),
            ("com.example.badsha", Catalog.Content(url: "x.zip", sha256: "zz", length: 1, version: "1", placement: .cache)),
        ])
        let plan = try PrestagePlan(upstream: catalog, upstreamLocation: URL(string: "http://127.0.0.1:9/c.json"), tree: tree)
        #expect(plan.tasks.map(\.contentIdentifier) == ["com.example.ok"])
        #expect(Set(plan.refused.map(\.contentIdentifier)) == ["../evil", "com.example.ok", "com.example.badsha"])
    }

    @Test("unlisted packages are removed after the grace period, listed ones never")
    func removeUnlisted() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let tree = try LocalStagingTree(root: folder.url)
        let keep = PrestagePlan.stagedPath(contentIdentifier: "com.example.a", sha256: String(repeating: "1", count: 64))
        let old = PrestagePlan.stagedPath(contentIdentifier: "com.example.a", sha256: String(repeating: "0", count: 64))
        try Self.stage(tree, Data(count: 3), at: keep)
        try Self.stage(tree, Data(count: 3), at: old)
        let catalog = Catalog(
            bundleId: "b",
            products: [Catalog.Product(productId: "com.example.a", content: Catalog.Content(url: keep, sha256: String(repeating: "1", count: 64), length: 3, version: "1", placement: .cache))]
        )
        // Every product folder is listed, hidden files are left, names are kept as they are.
        let other = "packages/com.example.\u{e9}t\u{e9}/\(String(repeating: "2", count: 64)).zip"
        try Self.stage(tree, Data(count: 3), at: other)
        let hidden = folder.url.appendingPathComponent("packages/com.example.a/.partial")
        try Data(count: 1).write(to: hidden)
        try Data(count: 1).write(to: folder.url.appendingPathComponent("packages/stray-file"))
        #expect(try tree.removeUnlisted(by: catalog, grace: 3600).isEmpty)
        #expect(try tree.removeUnlisted(by: catalog, grace: -1) == [old, other].sorted())
        #expect(try tree.hasPackage(at: keep, length: 3))
        #expect(FileManager.default.fileExists(atPath: hidden.path))
    }
}
