import Courier
import CourierTestSupport
import Foundation
import Testing

/// What `serve --catalog-root` checks before it serves a published catalog: the repository
/// `prestage` signed beside it, without the network.
@Suite("TUF: a published catalog checked against its local repository")
struct TUFLocalRepositoryTests {
    static let catalog = Data(#"{"bundleId":"com.example.app","products":[]}"#.utf8)

    struct Published {
        let directory: TemporaryDirectory
        let root: Data
        var metadata: URL { directory.appending("www/metadata") }
    }

    static func publish(expiry: TUFExpiry = .init()) throws -> Published {
        let directory = try TemporaryDirectory(prefix: "courier-tuflocal")
        let www = directory.appending("www")
        let keys = try TUFPublisher.createRepository(keys: directory.appending("keys"), metadata: www.appendingPathComponent("metadata"))
        try TUFPublisher.publish(
            target: catalog, named: "catalog.json", into: www, roots: www.appendingPathComponent("metadata"), keys: keys.online,
            expiry: expiry)
        return Published(directory: directory, root: try Data(contentsOf: www.appendingPathComponent("metadata/1.root.json")))
    }

    static func check(_ body: () throws -> Void) -> TUFError.Check? {
        do {
            try body()
            return nil
        } catch {
            return (error as? TUFError)?.check
        }
    }

    @Test("the signed catalog passes; other bytes (a row's catalog, say) fail the length or hash check")
    func signedAndTampered() throws {
        let published = try Self.publish()
        defer { published.directory.remove() }
        try TUFLocalRepository.verify(Self.catalog, as: "catalog.json", metadata: published.metadata, trustedRoot: published.root)
        let other = Data(#"{"bundleId":"com.example.app","products":[{"productId":"x"}]}"#.utf8)
        let check = Self.check {
            try TUFLocalRepository.verify(other, as: "catalog.json", metadata: published.metadata, trustedRoot: published.root)
        }
        #expect(check == .length || check == .hash)
        let sameLength = Data(#"{"bundleId":"com.example.apq","products":[]}"#.utf8)
        #expect(sameLength.count == Self.catalog.count)
        #expect(
            Self.check {
                try TUFLocalRepository.verify(sameLength, as: "catalog.json", metadata: published.metadata, trustedRoot: published.root)
            } == .hash)
    }

    @Test("expired timestamp, missing timestamp and another publisher's root are refused")
    func expiredMissingAndForeign() throws {
        var expiry = TUFExpiry()
        expiry.timestamp = -60
        let expired = try Self.publish(expiry: expiry)
        defer { expired.directory.remove() }
        #expect(
            Self.check {
                try TUFLocalRepository.verify(Self.catalog, as: "catalog.json", metadata: expired.metadata, trustedRoot: expired.root)
            } == .expired)

        let published = try Self.publish()
        defer { published.directory.remove() }
        // Another repository's root: its keys signed none of this metadata.
        #expect(
            Self.check {
                try TUFLocalRepository.verify(Self.catalog, as: "catalog.json", metadata: published.metadata, trustedRoot: expired.root)
            } == .signature)
        try FileManager.default.removeItem(at: published.metadata.appendingPathComponent("timestamp.json"))
        #expect(
            Self.check {
                try TUFLocalRepository.verify(Self.catalog, as: "catalog.json", metadata: published.metadata, trustedRoot: published.root)
            } == .notFound)
    }
}
