import Courier
import CourierTestSupport
import Foundation
import Testing

/// What the process that publishes a pre-staging run signs (`PrestageSigner`): only the catalog
/// it computed, with keys the published root names.
@Suite("TUF: the pre-staging signer")
struct PrestageSignerTests {
    static let catalog = Catalog(bundleId: "com.example.app", products: [Catalog.Product(productId: "com.example.a")])

    struct Fixture {
        let directory: TemporaryDirectory
        let tree: LocalStagingTree
        let keys: URL
        let roots: URL

        init() throws {
            directory = try TemporaryDirectory(prefix: "courier-signer")
            tree = try LocalStagingTree(root: directory.appending("dest"))
            keys = directory.appending("keys")
            roots = directory.appending("roots")
            try TUFPublisher.createRepository(keys: keys, metadata: roots)
        }

        var root: Data { get throws { try Data(contentsOf: roots.appendingPathComponent("1.root.json")) } }
    }

    @Test("signs the catalog the run published; the local check serve makes accepts it")
    func signsWhatWasPublished() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        try fixture.tree.publishCatalog(Self.catalog)
        let signer = try PrestageSigner.load(keys: fixture.keys, roots: fixture.roots, tree: fixture.tree)
        let published = try signer.sign(Self.catalog)
        #expect(published.targets == 1 && published.timestamp == 1)
        try TUFLocalRepository.verify(
            try Data(contentsOf: fixture.tree.catalogFile), as: "catalog.json", metadata: fixture.tree.root.appendingPathComponent("metadata"),
            trustedRoot: try fixture.root)
    }

    @Test("refuses to sign a catalog.json that is not the catalog the run computed (integrity), signing nothing")
    func refusesAnotherCatalog() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        // Another writer replaced the catalog between the publish and the signature.
        try fixture.tree.publishCatalog(Catalog(bundleId: "com.example.app", products: []))
        let signer = try PrestageSigner.load(keys: fixture.keys, roots: fixture.roots, tree: fixture.tree)
        #expect {
            try signer.sign(Self.catalog)
        } throws: { error in
            (error as? CourierError)?.code == .integrity && (error as? CourierError)?.message.contains("is not the catalog this run published") == true
        }
        #expect(!FileManager.default.fileExists(atPath: fixture.tree.root.appendingPathComponent("metadata/timestamp.json").path))
    }

    @Test("keys the newest root does not name are refused before anything is fetched (usage)")
    func foreignKeys() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        let other = fixture.directory.appending("other-keys")
        try TUFPublisher.createRepository(keys: other, metadata: fixture.directory.appending("other-roots"))
        #expect {
            try PrestageSigner.load(keys: other, roots: fixture.roots, tree: fixture.tree)
        } throws: { error in
            (error as? CourierError)?.code == .usage && (error as? CourierError)?.message.contains("is not one root version 1 names") == true
        }
    }
}
