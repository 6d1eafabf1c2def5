import Courier
import CourierTestSupport
import Foundation
import Logging
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("ContentPlacer")
struct ContentPlacerTests {
    static let product = "com.example.levels.pack1"

    struct Fixture {
        let directory: TemporaryDirectory
        let layout: StorageLayout
        let store: StateStore

        init() throws {
            directory = try TemporaryDirectory()
            layout = StorageLayout(root: directory.appending("Storage"))
            store = try StateStore(layout: layout)
        }

        func placer(
            _ placement: PlacementConfiguration = PlacementConfiguration(),
            freeSpace: FreeSpaceProbe = .statvfs
        ) -> ContentPlacer {
            ContentPlacer(
                layout: layout, store: store, packages: PackageConfiguration(), placement: placement,
                logger: Logger(label: "test"), freeSpace: freeSpace
            )
        }

        /// A package of `product` `version` with one file `version.txt` holding the version.
        func package(_ product: String = ContentPlacerTests.product, version: String, extra: [String: Data] = [:]) throws -> URL {
            let url = directory.appending("\(product)-\(version)-\(UUID().uuidString).zip")
            var files = extra
            files["version.txt"] = Data(version.utf8)
            try PackageFixtures.infoZip(product: product, version: version, files: files, at: url)
            return url
        }

        func stagingIsEmpty() -> Bool {
            [layout.caches, layout.documents].allSatisfy {
                PackageFixtures.snapshot($0.appendingPathComponent(".staging")).isEmpty
            }
        }
    }

    @Test("install places, records, answers content() and list(), and delete removes")
    func installAndDelete() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let placer = fixture.placer()
        try placer.recover()
        let delivered = try placer.install(
            package: try fixture.package(version: "1.0"), contentIdentifier: Self.product, productId: Self.product,
            version: "1.0", placement: .cache, force: false
        )
        let folder = fixture.layout.caches.appendingPathComponent(Self.product)
        #expect(delivered.path == folder.path)
        #expect(delivered.placement == .cache)
        #expect(try String(contentsOf: folder.appendingPathComponent("Contents/version.txt"), encoding: .utf8) == "1.0")
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("ContentInfo.plist").path))
        let used = try #require(try placer.content(Self.product))
        #expect(used.lastUsedAt >= delivered.lastUsedAt)
        #expect(try placer.list().map(\.contentIdentifier) == [Self.product])
        #expect(fixture.stagingIsEmpty())
        try placer.delete(Self.product)
        #expect(!FileManager.default.fileExists(atPath: folder.path))
        #expect(try placer.content(Self.product) == nil)
        #expect(try placer.list().isEmpty)
        #expect { try placer.delete(Self.product) } throws: { ($0 as? CourierError)?.code == .notFound }
    }

    @Test("a newer version replaces the old one; a downgrade is refused unless forced")
    func replaceAndDowngrade() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let placer = fixture.placer()
        func install(_ version: String, force: Bool = false, placement: Catalog.Placement = .documents) throws -> DeliveredContent {
            try placer.install(
                package: try fixture.package(version: version), contentIdentifier: Self.product, productId: Self.product,
                version: nil, placement: placement, force: force
            )
        }
        _ = try install("1.0")
        _ = try install("1.2")
        let folder = fixture.layout.documents.appendingPathComponent(Self.product)
        #expect(try String(contentsOf: folder.appendingPathComponent("Contents/version.txt"), encoding: .utf8) == "1.2")
        #expect { _ = try install("1.1") } throws: { ($0 as? CourierError)?.code == .usage }
        #expect(try String(contentsOf: folder.appendingPathComponent("Contents/version.txt"), encoding: .utf8) == "1.2")
        #expect(try install("1.1", force: true).version == "1.1")
        #expect(try String(contentsOf: folder.appendingPathComponent("Contents/version.txt"), encoding: .utf8) == "1.1")
        // Moving between placements leaves one copy.
        #expect(try install("1.3", placement: .cache).placement == .cache)
        #expect(!FileManager.default.fileExists(atPath: folder.path))
        #expect(FileManager.default.fileExists(atPath: fixture.layout.caches.appendingPathComponent(Self.product).path))
        #expect(try placer.list().count == 1)
        #expect(fixture.stagingIsEmpty())
    }

    @Test("space: cache content is purged least recently used first, never documents or content in use")
    func lruPurge() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        // A disk of fixed capacity: what is free is the capacity minus what the storage holds.
        let root = fixture.layout.root
        let capacity = Int64(16 << 20)
        let probe = FreeSpaceProbe { _ in
            let used = PackageFixtures.snapshot(root).reduce(Int64(0)) { total, path in
                var status = stat()
                return lstat(root.appendingPathComponent(path).path, &status) == 0 && status.st_mode & S_IFMT == S_IFREG
                    ? total + Int64(status.st_size) : total
            }
            return capacity - used
        }
        var configuration = PlacementConfiguration()
        configuration.diskReserve = 0
        let placer = fixture.placer(configuration, freeSpace: probe)
        let megabyte = 1 << 20
        for (name, placement) in [("a", Catalog.Placement.cache), ("b", .cache), ("c", .cache), ("d", .documents)] {
            let id = "com.example.\(name)"
            _ = try placer.install(
                package: try fixture.package(id, version: "1", extra: ["blob.bin": PackageFixtures.noise(megabyte, seed: UInt64(name.utf8.first ?? 1))]),
                contentIdentifier: id, productId: id, version: "1", placement: placement, force: false
            )
        }
        _ = try placer.content("com.example.a")  // a is now the most recently used
        let free = try probe.available(root)
        // Needs two megabytes more than free: purging c alone is not enough, then a (b is in use).
        try placer.ensureSpace(bytes: free + Int64(megabyte) + Int64(megabyte) / 2, inUse: ["com.example.b"])
        let left = try placer.list().map(\.contentIdentifier)
        #expect(left == ["com.example.b", "com.example.d"])
        #expect(!FileManager.default.fileExists(atPath: fixture.layout.caches.appendingPathComponent("com.example.c").path))
        #expect(!FileManager.default.fileExists(atPath: fixture.layout.caches.appendingPathComponent("com.example.a").path))
        // Far too much: refused, and documents and content in use stay.
        #expect {
            try placer.ensureSpace(bytes: capacity * 4, inUse: ["com.example.b"])
        } throws: { ($0 as? CourierError)?.code == .insufficientSpace }
        #expect(try placer.list().map(\.contentIdentifier) == ["com.example.b", "com.example.d"])
        // Without purging allowed, nothing is removed.
        var strict = configuration
        strict.purgeCaches = false
        #expect {
            try fixture.placer(strict, freeSpace: probe).ensureSpace(bytes: try probe.available(root) + 1, inUse: [])
        } throws: { ($0 as? CourierError)?.code == .insufficientSpace }
        #expect(try placer.list().count == 2)
    }

    @Test("documents carry the backup-exclusion marks, read back with getfattr and lsattr")
    func backupMarks() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let placer = fixture.placer()
        let support = placer.backupExclusionSupport
        try #require(support.isSupported, "the filesystem of \(fixture.directory.path) supports neither mark: \(support.problems)")
        let delivered = try placer.install(
            package: try fixture.package(version: "1"), contentIdentifier: Self.product, productId: Self.product,
            version: nil, placement: .documents, force: false
        )
        if support.extendedAttribute {
            let result = try Shell.run("/usr/bin/getfattr", ["--only-values", "-n", "user.xdg.robots.backup", delivered.path])
            #expect(result.status == 0 && result.stdout == "false", "\(result.stderr)")
        }
        if support.nodump {
            let result = try Shell.run("/usr/bin/lsattr", ["-d", delivered.path])
            let flags = result.stdout.split(separator: " ").first ?? ""
            #expect(result.status == 0 && flags.contains("d"), "\(result.stdout)")
            let documents = try Shell.run("/usr/bin/lsattr", ["-d", fixture.layout.documents.path])
            #expect((documents.stdout.split(separator: " ").first ?? "").contains("d"))
        }
    }

    @Test("GNU tar --exclude-caches skips cached content and keeps documents")
    func tarExcludeCaches() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let placer = fixture.placer()
        _ = try placer.install(
            package: try fixture.package("com.example.cached", version: "1"), contentIdentifier: "com.example.cached",
            productId: "com.example.cached", version: nil, placement: .cache, force: false
        )
        _ = try placer.install(
            package: try fixture.package("com.example.kept", version: "1"), contentIdentifier: "com.example.kept",
            productId: "com.example.kept", version: nil, placement: .documents, force: false
        )
        let archive = fixture.directory.appending("backup.tar")
        let create = try Shell.run("/usr/bin/tar", ["--exclude-caches", "-cf", archive.path, "-C", fixture.layout.root.path, "."])
        #expect(create.status == 0, "\(create.stderr)")
        let listing = try Shell.run("/usr/bin/tar", ["-tf", archive.path]).stdout
        #expect(listing.contains("Documents/com.example.kept/Contents/version.txt"))
        #expect(!listing.contains("com.example.cached"))
    }
}
