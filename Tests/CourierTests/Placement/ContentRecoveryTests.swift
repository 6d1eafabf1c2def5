import Courier
import CourierTestSupport
import Foundation
import GRDB
import Logging
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `ContentPlacer.recover()` on the states a crash can leave between the intent being written and
/// the install being recorded (reproduced on disk and in the store, as a killed process leaves them).
@Suite("Content recovery")
struct ContentRecoveryTests {
    static let product = "com.example.levels.pack1"

    func makePlacer(_ directory: TemporaryDirectory) throws -> (ContentPlacer, StorageLayout, StateStore) {
        let layout = StorageLayout(root: directory.appending("Storage"))
        let store = try StateStore(layout: layout)
        let placer = ContentPlacer(
            layout: layout, store: store, packages: PackageConfiguration(), placement: PlacementConfiguration(),
            logger: Logger(label: "test")
        )
        return (placer, layout, store)
    }

    func install(_ placer: ContentPlacer, _ directory: TemporaryDirectory, version: String) throws {
        let package = directory.appending("v\(version).zip")
        try PackageFixtures.infoZip(product: Self.product, version: version, files: ["version.txt": Data(version.utf8)], at: package)
        _ = try placer.install(package: package, contentIdentifier: Self.product, productId: Self.product, version: version, placement: .documents, force: false)
    }

    /// A content folder of `version` at `url`, as an extraction leaves it.
    func folder(_ url: URL, version: String) throws {
        try PackageFixtures.writeTree(
            ["ContentInfo.plist": Data(PackageFixtures.contentInfo(product: Self.product, version: version).utf8),
             "Contents/version.txt": Data(version.utf8)],
            in: url
        )
    }

    func insertIntent(_ store: StateStore, id: String, version: String, inode: (Int64, Int64)) throws {
        try store.pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO content_installation (id, contentIdentifier, productId, version, placement, previousPlacement,
                        size, sha256, stagingDevice, stagingInode, createdAt)
                    VALUES (?, ?, ?, ?, 'documents', 'documents', 3, ?, ?, ?, ?)
                    """,
                arguments: [id, Self.product, Self.product, version, String(repeating: "ab", count: 32), inode.0, inode.1, Date()]
            )
        }
    }

    func inode(_ url: URL) -> (Int64, Int64) {
        var status = stat()
        _ = lstat(url.path, &status)
        return (Int64(status.st_dev), Int64(status.st_ino))
    }

    func version(at url: URL) throws -> String {
        try String(contentsOf: url.appendingPathComponent("Contents/version.txt"), encoding: .utf8)
    }

    @Test("killed after the swap, before the record: the new version is recorded, the old removed")
    func rollForward() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (placer, layout, store) = try makePlacer(directory)
        try install(placer, directory, version: "1.0")
        let destination = layout.documents.appendingPathComponent(Self.product)
        let staging = layout.documents.appendingPathComponent(".staging")
        // The state after renameat2(RENAME_EXCHANGE): new at the destination, old in staging.
        let id = "0f0e0d0c-0000-4000-8000-000000000001"
        let old = staging.appendingPathComponent(id)
        try FileManager.default.moveItem(at: destination, to: old)
        try folder(destination, version: "2.0")
        try Data().write(to: staging.appendingPathComponent("\(id).lock"))
        try insertIntent(store, id: id, version: "2.0", inode: inode(destination))

        try placer.recover()
        #expect(try version(at: destination) == "2.0")
        #expect(try placer.content(Self.product)?.version == "2.0")
        #expect(PackageFixtures.snapshot(staging).isEmpty)
        #expect(try store.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM content_installation") } == 0)
    }

    @Test("killed before the swap: staging is dropped and the old version stays recorded")
    func rollBack() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (placer, layout, store) = try makePlacer(directory)
        try install(placer, directory, version: "1.0")
        let destination = layout.documents.appendingPathComponent(Self.product)
        let staging = layout.documents.appendingPathComponent(".staging")
        let id = "0f0e0d0c-0000-4000-8000-000000000002"
        let staged = staging.appendingPathComponent(id)
        try folder(staged, version: "2.0")
        try insertIntent(store, id: id, version: "2.0", inode: inode(staged))

        try placer.recover()
        #expect(try version(at: destination) == "1.0")
        #expect(try placer.content(Self.product)?.version == "1.0")
        #expect(PackageFixtures.snapshot(staging).isEmpty)
    }

    @Test("killed between the two renames of the no-exchange fallback: the old version is moved back")
    func fallbackRollBack() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (placer, layout, store) = try makePlacer(directory)
        try install(placer, directory, version: "1.0")
        let destination = layout.documents.appendingPathComponent(Self.product)
        let staging = layout.documents.appendingPathComponent(".staging")
        let id = "0f0e0d0c-0000-4000-8000-000000000003"
        let staged = staging.appendingPathComponent(id)
        try folder(staged, version: "2.0")
        try insertIntent(store, id: id, version: "2.0", inode: inode(staged))
        try FileManager.default.moveItem(at: destination, to: staging.appendingPathComponent("\(id).old"))

        try placer.recover()
        #expect(try version(at: destination) == "1.0")
        #expect(try placer.content(Self.product)?.version == "1.0")
        #expect(PackageFixtures.snapshot(staging).isEmpty)
    }

    @Test("a live install's staging (lock held) is left alone")
    func liveInstallUntouched() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (placer, layout, _) = try makePlacer(directory)
        try layout.prepare()
        let staging = layout.documents.appendingPathComponent(".staging")
        let id = "0f0e0d0c-0000-4000-8000-000000000004"
        try folder(staging.appendingPathComponent(id), version: "2.0")
        let lock = open(staging.appendingPathComponent("\(id).lock").path, O_RDWR | O_CREAT, 0o600)
        defer { close(lock) }
        #expect(flock(lock, LOCK_EX) == 0)
        // A leftover of a dead install beside it.
        try folder(staging.appendingPathComponent("dead"), version: "3.0")

        try placer.recover()
        #expect(FileManager.default.fileExists(atPath: staging.appendingPathComponent("\(id)/Contents/version.txt").path))
        #expect(!FileManager.default.fileExists(atPath: staging.appendingPathComponent("dead").path))
    }
}
