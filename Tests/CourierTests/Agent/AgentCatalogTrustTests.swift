import CourierTestSupport
import Foundation
import Logging
import Testing

@testable import Courier

/// The agent and a signed catalog (issue 29, section 2): when the catalog's TUF timestamp has
/// expired, automatic updates stop and the store says so (`list`/`status` print the notice);
/// once the publisher signs again they resume and the notice goes.
@Suite("The agent stops automatic updates on an expired TUF timestamp")
struct AgentCatalogTrustTests {
    @Test("expired timestamp: no catalog, a notice naming the check; re-signed: the catalog, no notice")
    func expiredTimestampStopsUpdates() async throws {
        let folder = try TemporaryDirectory(prefix: "courier-agenttrust")
        defer { folder.remove() }
        let www = folder.appending("www")
        let catalogData = try Catalog(bundleId: "com.example.app", products: []).encoded()
        try FileManager.default.createDirectory(at: www, withIntermediateDirectories: true)
        try catalogData.write(to: www.appendingPathComponent("catalog.json"))
        let metadata = www.appendingPathComponent("metadata")
        let keys = try TUFPublisher.createRepository(keys: folder.appending("keys"), metadata: metadata).online
        var expired = TUFExpiry()
        expired.timestamp = -60
        try TUFPublisher.publish(target: catalogData, named: "catalog.json", into: www, roots: metadata, keys: keys, expiry: expired)

        var configuration = try CourierConfiguration.decode(Data(#"{"queue": {"autoUpdate": true}}"#.utf8))
        configuration.catalog = www.appendingPathComponent("catalog.json").path
        configuration.catalogTrust.trustedRoot = metadata.appendingPathComponent("1.root.json").path
        let layout = StorageLayout(root: folder.appending("Storage"))
        let client = try CourierClient(configuration: configuration, layout: layout, logger: Logger(label: "test"))
        defer { client.shutdown() }

        #expect(await client.agent().updateIfCatalogChanged(since: nil) == nil)
        let notice = try #require(CatalogTrustNotice.read(layout))
        #expect(notice.contains("automatic updates stopped"), "\(notice)")
        #expect(notice.contains("expired check failed"), "\(notice)")

        try TUFPublisher.publish(target: catalogData, named: "catalog.json", into: www, roots: metadata, keys: keys)
        #expect(await client.agent().updateIfCatalogChanged(since: nil) != nil)
        #expect(CatalogTrustNotice.read(layout) == nil)
    }
}
