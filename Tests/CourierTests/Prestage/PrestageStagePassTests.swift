import Crypto
import Foundation
import Logging
import Synchronization
import Testing

@testable import Courier
import CourierTestSupport

/// One package's staging work: the check builds the manifest in its own pass (no second
/// preflight and whole-file hash), and the manifest and package are published in one batch, so
/// the tree syncs their folder once rather than once per file.
@Suite("Prestage stage pass")
struct PrestageStagePassTests {
    static let product = "com.example.pass"

    /// Copies a local package, as a verified download would leave it.
    struct CopyFetcher: PackageFetcher {
        let source: URL
        func fetch(_ task: PrestageTask, to destination: URL, workDirectory: URL, progress: @escaping @Sendable (Int64) -> Void) async throws -> Int64 {
            try FileManager.default.copyItem(at: source, to: destination)
            return task.content.length
        }
    }

    /// A local tree that records each `publishPackages` batch (paths only).
    final class RecordingTree: StagingTree, Sendable {
        let inner: LocalStagingTree
        let batches = Mutex<[[String]]>([])
        init(_ inner: LocalStagingTree) { self.inner = inner }
        func publishedCatalog() throws -> Catalog? { try inner.publishedCatalog() }
        func hasPackage(at path: String, length: Int64) throws -> Bool { try inner.hasPackage(at: path, length: length) }
        func publishPackage(_ file: URL, at path: String) throws { try publishPackages([(file, path)]) }
        func publishPackages(_ files: [(file: URL, path: String)]) throws {
            batches.withLock { $0.append(files.map(\.path)) }
            try inner.publishPackages(files)
        }
        func publishCatalog(_ catalog: Catalog) throws { try inner.publishCatalog(catalog) }
        func removeUnlisted(by catalog: Catalog, grace: TimeInterval) throws -> [String] { try inner.removeUnlisted(by: catalog, grace: grace) }
        var workDirectory: URL { inner.workDirectory }
        func publishedFile(at path: String) throws -> Data? { try inner.publishedFile(at: path) }
    }

    static func makePackage(in directory: TemporaryDirectory) throws -> (URL, PackageInfo) {
        let source = directory.appending("source")
        try FileManager.default.createDirectory(at: source, withIntermediateDirectories: true)
        try Data(repeating: 7, count: 70_000).write(to: source.appendingPathComponent("data.bin"))
        let zip = directory.appending("pack.zip")
        return (zip, try PackageBuilder.create(from: source, productId: product, version: "1.0", output: zip))
    }

    static func task(_ info: PackageInfo, source: URL) -> PrestageTask {
        let content = Catalog.Content(url: "http://127.0.0.1:9/pack.zip", sha256: info.sha256, length: info.packedSize, version: "1.0", placement: .cache)
        return PrestageTask(
            contentIdentifier: product, productId: product, itemId: nil, source: source, content: content,
            stagedPath: PrestagePlan.stagedPath(contentIdentifier: product, sha256: info.sha256))
    }

    @Test("the inspecting checker's manifest is the one built from the package file, and its rules still refuse")
    func checkerDescribes() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (zip, info) = try Self.makePackage(in: directory)
        let checker = InspectingPackageChecker(limits: PackageConfiguration())
        let task = Self.task(info, source: zip)
        let checked = try checker.checkAndDescribe(zip, task: task)
        #expect(checked.unpackedLength == info.unpackedSize)
        #expect(checked.unpackedLength == (try checker.check(zip, task: task)))
        #expect(checked.manifest == (try PackageManifest.build(package: zip)))
        var other = task
        other.productId = "com.example.other"
        #expect(throws: CourierError.self) { try checker.checkAndDescribe(zip, task: other) }
        other = task
        other.content.version = "2.0"
        #expect(throws: CourierError.self) { try checker.checkAndDescribe(zip, task: other) }
    }

    @Test("the check hashes the entries in its one pass; damaged entry data leaves the check as it was and gives no manifest")
    func oneLibarchivePass() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let source = directory.appending("source")
        try FileManager.default.createDirectory(at: source, withIntermediateDirectories: true)
        // Random bytes: deflate stores them as they are, so a byte of the zip can be damaged.
        var generator = SystemRandomNumberGenerator()
        let bytes = Data((0..<70_000).map { _ in UInt8.random(in: 0...255, using: &generator) })
        try bytes.write(to: source.appendingPathComponent("data.bin"))
        let zip = directory.appending("pack.zip")
        let info = try PackageBuilder.create(from: source, productId: Self.product, version: "1.0", output: zip)
        let preflight = try PackageInspector.preflight(zip, limits: PackageConfiguration(), hashingEntries: true)
        let manifest = try PackageManifest.build(package: zip)
        #expect(!preflight.entryDigests.isEmpty)
        for entry in manifest.entries where entry.type == .file {
            #expect(preflight.entryDigests[entry.path] == entry.sha256)
        }
        // One byte of data.bin damaged: the CRC no longer matches.
        var damaged = try Data(contentsOf: zip)
        let at = try #require(damaged.range(of: bytes[30_000..<30_064])).lowerBound
        damaged[at] ^= 0xFF
        try damaged.write(to: zip)
        var task = Self.task(info, source: zip)
        task.content.sha256 = SHA256.hash(data: damaged).hex
        let checker = InspectingPackageChecker(limits: PackageConfiguration())
        let checked = try checker.checkAndDescribe(zip, task: task)
        #expect(checked.unpackedLength == (try checker.check(zip, task: task)))
        #expect(checked.manifest == nil)
        #expect(throws: CourierError.self) { try PackageManifest.build(package: zip) }
        #expect(try PackageInspector.preflight(zip, limits: PackageConfiguration(), hashingEntries: true).entryDigests.isEmpty)
    }

    @Test("the hashing pass checks each entry's CRC-32 itself: zips by zip and bsdtar pass, a damaged ContentInfo.plist does not")
    func hashingPassChecksCRC() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files = ["a.bin": PackageFixtures.noise(100_000), "b/c.txt": Data("text".utf8), "empty": Data()]
        let stored = directory.appending("stored.zip")
        let deflated = directory.appending("deflated.zip")
        let bsdtar = directory.appending("bsdtar.zip")
        try PackageFixtures.infoZip(product: Self.product, version: "1.0", files: files, at: stored, level: 0)
        try PackageFixtures.infoZip(product: Self.product, version: "1.0", files: files, at: deflated)
        // Data descriptors: the local headers carry no CRC, the central directory does.
        try PackageFixtures.bsdtarZip(product: Self.product, version: "1.0", files: files, at: bsdtar)
        var expected = files.reduce(into: [String: String]()) { $0["Contents/" + $1.key] = SHA256.hash(data: $1.value).hex }
        expected["ContentInfo.plist"] = SHA256.hash(data: Data(PackageFixtures.contentInfo(product: Self.product, version: "1.0").utf8)).hex
        for (zip, prefix) in [(stored, ""), (deflated, ""), (bsdtar, "./")] {
            let digests = Dictionary(uniqueKeysWithValues: expected.map { (prefix + $0.key, $0.value) })
            let preflight = try PackageInspector.preflight(zip, limits: PackageConfiguration(), hashingEntries: true)
            let fromMemory = try PackageInspector.preflight(
                zip, bytes: [UInt8](try Data(contentsOf: zip)), limits: PackageConfiguration(), hashingEntries: true)
            #expect(preflight.entryDigests == digests, "\(zip.lastPathComponent)")
            #expect(fromMemory.entryDigests == digests, "\(zip.lastPathComponent)")
        }
        // The stored ContentInfo.plist says 1.1 where its CRC-32 is that of 1.0: the same verdict
        // as the pass whose reader checks the CRC (libarchive's), from the file and from memory.
        var damaged = try Data(contentsOf: stored)
        let version = try #require(damaged.range(of: Data("<string>1.0</string>".utf8)))
        damaged[version.lowerBound + 10] = UInt8(ascii: "1")
        try damaged.write(to: stored)
        let checked = Result { try PackageInspector.preflight(stored, limits: PackageConfiguration()) }
        guard case .failure(let expected as CourierError) = checked else {
            Issue.record("a damaged ContentInfo.plist passed libarchive's check: \(checked)")
            return
        }
        for hashing in [
            Result { try PackageInspector.preflight(stored, limits: PackageConfiguration(), hashingEntries: true) },
            Result { try PackageInspector.preflight(stored, bytes: [UInt8](damaged), limits: PackageConfiguration(), hashingEntries: true) },
        ] {
            guard case .failure(let error as CourierError) = hashing else {
                Issue.record("the hashing pass accepted a damaged ContentInfo.plist: \(hashing)")
                continue
            }
            #expect(error.code == expected.code)
        }
    }

    @Test("given the bytes its download wrote, the check reads them, not the file, and finds what it finds in the file")
    func checkFromMemory() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (zip, info) = try Self.makePackage(in: directory)
        let bytes = [UInt8](try Data(contentsOf: zip))
        let checker = InspectingPackageChecker(limits: PackageConfiguration())
        let task = Self.task(info, source: zip)
        let fromFile = try checker.checkAndDescribe(zip, task: task)
        // A path that does not exist: the check never opens it.
        let absent = directory.appending("absent.zip")
        let fromMemory = try checker.checkAndDescribe(absent, bytes: bytes, task: task)
        #expect(fromMemory.unpackedLength == fromFile.unpackedLength)
        #expect(fromMemory.manifest == fromFile.manifest)
        #expect(fromMemory.manifest != nil)
        var other = task
        other.productId = "com.example.other"
        #expect(throws: CourierError.self) { try checker.checkAndDescribe(absent, bytes: bytes, task: other) }
        // Damaged entry data: the same verdict as from the file (checked, no manifest).
        var damaged = bytes
        damaged[damaged.count / 2] ^= 0xFF
        try Data(damaged).write(to: zip)
        let damagedFromFile = Result { try PackageInspector.preflight(zip, limits: PackageConfiguration(), hashingEntries: true) }
        let damagedFromMemory = Result { try PackageInspector.preflight(absent, bytes: damaged, limits: PackageConfiguration(), hashingEntries: true) }
        switch (damagedFromFile, damagedFromMemory) {
        case (.success(let file), .success(let memory)):
            #expect(file.entryDigests == memory.entryDigests && file.entryCount == memory.entryCount)
        case (.failure(let file as CourierError), .failure(let memory as CourierError)):
            #expect(file.code == memory.code)
        default:
            Issue.record("from the file: \(damagedFromFile), from memory: \(damagedFromMemory)")
        }
    }

    @Test("every archive of the hostile corpus gets the same verdict from memory as from its file")
    func hostileCorpusFromMemory() throws {
        let folder = SharedFixtures.folder("hostile-archives")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
            .filter { $0.hasSuffix(".zip") || $0.hasSuffix(".bin") }.sorted()
        #expect(!names.isEmpty)
        let limits = PackageConfiguration()
        for name in names {
            let file = folder.appendingPathComponent(name)
            let bytes = [UInt8](try Data(contentsOf: file))
            for hashing in [false, true] {
                let fromFile = Result { try PackageInspector.preflight(file, limits: limits, hashingEntries: hashing) }
                let fromMemory = Result { try PackageInspector.preflight(file, bytes: bytes, limits: limits, hashingEntries: hashing) }
                switch (fromFile, fromMemory) {
                case (.success(let a), .success(let b)):
                    #expect(a.info == b.info && a.entryCount == b.entryCount && a.entryDigests == b.entryDigests, "\(name)")
                case (.failure(let a as CourierError), .failure(let b as CourierError)):
                    #expect(a.code == b.code, "\(name): \(a) against \(b)")
                default:
                    Issue.record("\(name): from the file \(fromFile), from memory \(fromMemory)")
                }
            }
        }
    }

    @Test("the hashing check refuses an entry that unpacks past its declared size, and a package naming no ContentInfo.plist before reading data")
    func hashingIsBounded() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let zip = directory.appending("lying.zip")
        // 1 MiB of zeros, deflated; then its declared size (local header and central directory)
        // is cut to 4 KiB, as a 32-bit size that wrapped would be. The CRC still matches the data.
        try PackageFixtures.infoZip(product: Self.product, version: "1.0", files: ["big.bin": Data(count: 1 << 20)], at: zip)
        var bytes = [UInt8](try Data(contentsOf: zip))
        func u32(_ at: Int) -> UInt32 { (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[at + $1]) << (8 * $1) } }
        func put32(_ value: UInt32, at: Int) { for i in 0..<4 { bytes[at + i] = UInt8(truncatingIfNeeded: value >> (8 * i)) } }
        var patched = 0
        for at in 0..<(bytes.count - 46) {
            if u32(at) == 0x0403_4b50, u32(at + 22) == 1 << 20 { put32(4096, at: at + 22); patched += 1 }
            if u32(at) == 0x0201_4b50, u32(at + 24) == 1 << 20 { put32(4096, at: at + 24); patched += 1 }
        }
        try #require(patched == 2)
        try Data(bytes).write(to: zip)
        for source in [nil, bytes] {
            do {
                _ = try PackageInspector.preflight(zip, bytes: source, limits: PackageConfiguration(), hashingEntries: true)
                Issue.record("an entry unpacking past its declared size was hashed and accepted")
            } catch let error as CourierError {
                #expect(error.code == .hostilePackage, "\(error)")
                #expect(error.message.contains("more than its declared"), "\(error)")
            }
        }
        // No ContentInfo.plist named anywhere: refused from the central directory alone.
        let bare = directory.appending("bare.zip")
        let source = directory.appending("bare")
        try FileManager.default.createDirectory(at: source, withIntermediateDirectories: true)
        try Data(count: 1 << 20).write(to: source.appendingPathComponent("zeros.bin"))
        let made = try Shell.run("/usr/bin/zip", ["-q", "-r", bare.path, "zeros.bin"], directory: source)
        try #require(made.status == 0)
        #expect(throws: CourierError.self) {
            try PackageInspector.preflight(bare, limits: PackageConfiguration(), hashingEntries: true)
        }
    }

    @Test("a staged package and its manifest are published in one batch, manifest first, and the catalog names both")
    func oneBatch() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (zip, info) = try Self.makePackage(in: directory)
        let tree = RecordingTree(try LocalStagingTree(root: directory.appending("tree")))
        let task = Self.task(info, source: zip)
        let upstream = Catalog(bundleId: "b", products: [Catalog.Product(productId: Self.product, content: task.content)])
        let plan = try PrestagePlan(upstream: upstream, upstreamLocation: nil, tree: tree)
        try #require(plan.tasks.count == 1)
        let job = PrestageJob(
            tree: tree, fetcher: CopyFetcher(source: zip), checker: InspectingPackageChecker(limits: PackageConfiguration()),
            logger: Logger(label: "test"))
        let summary = try await job.run(plan) { _ in }
        #expect(summary.rows.map(\.status) == [.staged])
        let staged = plan.tasks[0].stagedPath
        #expect(tree.batches.withLock { $0 } == [[PrestageManifests.path(besidePackage: staged), staged]])
        let content = try #require(try tree.publishedCatalog()?.products.first?.content)
        let manifest = try #require(content.manifest)
        let manifestData = try #require(try tree.publishedFile(at: manifest.url))
        // Named as the job wrote it: its digest and length are the file's.
        #expect(manifest.sha256 == SHA256.hash(data: manifestData).hex && manifest.length == Int64(manifestData.count))
        let published = try PackageManifest.decode(manifestData)
        #expect(published == (try PackageManifest.build(package: zip)))
        #expect(try tree.hasPackage(at: staged, length: info.packedSize))
    }
}
