@testable import Courier
import CourierTestSupport
import Foundation
import GRDB
import Logging
import Testing

/// An install's record written by its caller's commit (`PaymentQueue.installed(placement:)`):
/// what another process's recovery and a failing commit leave.
@Suite("Placement record in the caller's commit")
struct PlacementRecordTests {
    static let product = "com.example.levels.pack1"

    typealias Fixture = ContentPlacerTests.Fixture

    @Test("the new version is in place before the record; another process's recovery leaves the live install alone")
    func recoveryWaitsForTheLiveInstall() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        _ = try fixture.install(version: "1.0") { placement in try fixture.store.pool.write { db in try placement.record(db) } }
        var seen: (version: String, recorded: String?, intents: Int)?
        let delivered = try fixture.install(version: "2.0") { placement in
            // Between the rename and the caller's commit: the folder is new, the record old, the
            // intent there; recovery (another process starting) must not touch it.
            try fixture.placer().recover()
            seen = (try fixture.placedVersion(), try fixture.placer().list().first?.version, try fixture.intents())
            try fixture.store.pool.write { db in try placement.record(db) }
        }
        #expect(seen?.version == "2.0")
        #expect(seen?.recorded == "1.0")
        #expect(seen?.intents == 1)
        #expect(delivered.version == "2.0")
        #expect(try fixture.placer().list().map(\.version) == ["2.0"])
        #expect(try fixture.intents() == 0)
    }

    @Test("a caller's commit that fails: the placed version is recorded alone, and the error is thrown")
    func failingCommitRecordsAlone() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        _ = try fixture.install(version: "1.0") { placement in try fixture.store.pool.write { db in try placement.record(db) } }
        #expect {
            _ = try fixture.install(version: "2.0") { _ in throw CourierError(.io, "simulated commit failure") }
        } throws: { ($0 as? CourierError)?.message == "simulated commit failure" }
        #expect(try fixture.placedVersion() == "2.0")
        #expect(try fixture.placer().list().map(\.version) == ["2.0"])
        #expect(try fixture.intents() == 0)
        let attempts = try fixture.store.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM content_install_attempt") }
        #expect(attempts == 0)
    }
}

/// What these tests need beside `ContentPlacerTests.Fixture`: an install whose record the test
/// writes itself, and what it left.
extension ContentPlacerTests.Fixture {
    func install(version: String, recording: (PlacementRecord) throws -> Void) throws -> DeliveredContent {
        try placer().install(
            package: try package(version: version), contentIdentifier: PlacementRecordTests.product,
            productId: PlacementRecordTests.product, version: version, placement: .documents, force: false,
            verifiedSHA256: nil, recording: recording)
    }

    func placedVersion() throws -> String {
        let folder = layout.documents.appendingPathComponent(PlacementRecordTests.product)
        return try String(contentsOf: folder.appendingPathComponent("Contents/version.txt"), encoding: .utf8)
    }

    func intents() throws -> Int {
        try store.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM content_installation") ?? -1 }
    }
}
