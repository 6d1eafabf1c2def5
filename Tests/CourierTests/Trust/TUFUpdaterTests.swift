import Courier
import CourierTestSupport
import Crypto
import Foundation
import Logging
import Testing

/// The TUF client workflow against a repository served by nginx on loopback, through Courier's
/// libcurl transport: the client's store, root rotation, limits on downloads, targets.
@Suite("TUF: the client workflow over HTTP", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct TUFUpdaterTests {
    static func updater(_ directory: TemporaryDirectory, _ nginx: NginxServer, root: Data, limits: TUFLimits = .init()) throws -> TUFUpdater {
        let store = try TUFMetadataStore(directory: directory.appending("client"))
        try store.initialize(trustedRoot: root)
        return try TUFUpdater(
            store: store, metadataURL: nginx.url("/metadata/"), targetsURL: nginx.url("/targets/"), transport: try CurlHTTPTransport(),
            limits: limits, logger: Logger(label: "test"))
    }

    @Test("refresh trusts every role, stores it owner-only, and a target is fetched hash-prefixed and checked")
    func refreshAndFetch() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-tuf")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.appending("repo"))
        try repo.addTarget("catalog.json", Data(#"{"bundleId":"x","products":[]}"#.utf8))
        try repo.publish()
        let nginx = try NginxServer(root: repo.folder)
        defer { nginx.stop() }

        var updater = try Self.updater(directory, nginx, root: repo.roots[1]!)
        try await updater.refresh()
        for role in TUFSpecification.topLevelRoles {
            let file = directory.appending("client/\(role).json")
            let mode = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int
            #expect(mode == 0o600, "\(role).json")
        }
        let target = try #require(try await updater.targetInfo("catalog.json"))
        let data = try await updater.fetchTarget(target)
        #expect(String(decoding: data, as: UTF8.self).contains("bundleId"))
        let missing = try await updater.targetInfo("missing.json")
        #expect(missing == nil)
        #expect(nginx.accessLog().contains { $0.contains("/targets/\(target.hashes.sha256!).catalog.json") })

        // A target whose bytes changed on the server: the hash check refuses it.
        try Data(#"{"bundleId":"y","products":[]}"#.utf8).write(to: repo.targetsFolder.appendingPathComponent("\(target.hashes.sha256!).catalog.json"))
        do {
            _ = try await updater.fetchTarget(target)
            Issue.record("a changed target was accepted")
        } catch let error as TUFError { #expect(error.check == .hash) }
    }

    @Test("the root rotates through N.root.json, and new timestamp keys end the old timestamp's rollback protection (fast-forward recovery)")
    func rotation() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-tuf")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.appending("repo"))
        try repo.publish()
        let nginx = try NginxServer(root: repo.folder)
        defer { nginx.stop() }
        var updater = try Self.updater(directory, nginx, root: repo.roots[1]!)
        try await updater.refresh()

        // An attacker who held the timestamp key published version 1000; the publisher rotates
        // the timestamp key and starts again at 1.
        repo.timestampVersion = 999
        try repo.publish()
        updater = try Self.updater(directory, nginx, root: repo.roots[1]!)
        try await updater.refresh()
        #expect(updater.trusted.timestamp?.version == 1000)

        let oldRoot = repo.signers["root"]!
        repo.signers["timestamp"] = [try TUFSigner(Curve25519.Signing.PrivateKey())]
        repo.rootVersion = 2
        try repo.publishRoot(signedBy: oldRoot)
        repo.timestampVersion = 0
        try repo.publish()
        updater = try Self.updater(directory, nginx, root: repo.roots[1]!)
        try await updater.refresh()
        #expect(updater.trusted.root.version == 2)
        #expect(updater.trusted.timestamp?.version == 1)
    }

    @Test("metadata longer than its limit is cut off and refused (endless data)")
    func endlessData() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-tuf")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.appending("repo"))
        try repo.publish()
        // A timestamp padded with whitespace past the 16 KiB limit: still valid JSON, still signed.
        var padded = try repo.file("timestamp.json")
        padded.append(Data(repeating: 0x20, count: 20_000))
        try padded.write(to: repo.metadata.appendingPathComponent("timestamp.json"))
        let nginx = try NginxServer(root: repo.folder)
        defer { nginx.stop() }
        var updater = try Self.updater(directory, nginx, root: repo.roots[1]!)
        do {
            try await updater.refresh()
            Issue.record("an oversized timestamp was accepted")
        } catch let error as TUFError { #expect(error.check == .length) }
        #expect(!FileManager.default.fileExists(atPath: directory.appending("client/timestamp.json").path))
    }
}
