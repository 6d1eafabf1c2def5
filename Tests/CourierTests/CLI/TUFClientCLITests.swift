import Courier
import CourierTestSupport
import Crypto
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `courier tuf-client` (the conformance suite's client-under-test protocol) and the durability
/// of the trusted metadata it keeps: a kill -9 at any moment of an update leaves a root that
/// parses and verifies, and the next update finishes the rotation.
@Suite("courier tuf-client: the protocol, and kill -9 during root rotation", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct TUFClientCLITests {
    @Test("init, refresh and download over nginx; a second download of the same target is not fetched again")
    func protocolRoundTrip() throws {
        let directory = try TemporaryDirectory(prefix: "courier-tufclient")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.appending("repo"))
        try repo.addTarget("dir/file.txt", Data("hello".utf8))
        try repo.publish()
        let nginx = try NginxServer(root: repo.folder)
        defer { nginx.stop() }
        let metadata = directory.appending("client")
        try FileManager.default.createDirectory(at: metadata, withIntermediateDirectories: true)
        let root = directory.appending("root.json")
        try repo.roots[1]!.write(to: root)
        #expect(try CourierBinary.run(["tuf-client", "--metadata-dir", metadata.path, "init", root.path]).status == 0)
        let download = [
            "tuf-client", "--metadata-dir", metadata.path, "--metadata-url", nginx.url("/metadata").absoluteString, "--target-name",
            "dir/file.txt", "--target-base-url", nginx.url("/targets").absoluteString, "--target-dir", directory.appending("out").path,
            "download",
        ]
        let first = try CourierBinary.run(download)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try Data(contentsOf: directory.appending("out/dir%2Ffile.txt")) == Data("hello".utf8))
        let fetchedBefore = nginx.accessLog().filter { $0.contains("/targets/") }.count
        #expect(try CourierBinary.run(download).status == 0)
        #expect(nginx.accessLog(atLeast: 1).filter { $0.contains("/targets/") }.count == fetchedBefore)
        // A target the repository does not list: exit 1.
        var missing = download
        missing[missing.firstIndex(of: "dir/file.txt")!] = "nothing.txt"
        #expect(try CourierBinary.run(missing).status == 1)
    }

    /// Its requests take the configuration's transfer settings, as every command's do (the
    /// client core's transport factory), not a transport of its own with the defaults.
    @Test(
        "the configuration's transfer.proxy carries its metadata and target requests",
        .enabled(if: ForwardProxy.isAvailable, "python3 is not installed"))
    func configuredProxy() throws {
        let directory = try TemporaryDirectory(prefix: "courier-tufproxy")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.appending("repo"))
        try repo.addTarget("file.txt", Data("hello".utf8))
        try repo.publish()
        let nginx = try NginxServer(root: repo.folder)
        defer { nginx.stop() }
        let proxy = try ForwardProxy()
        defer { proxy.stop() }
        let metadata = directory.appending("client")
        try FileManager.default.createDirectory(at: metadata, withIntermediateDirectories: true)
        let root = directory.appending("root.json")
        try repo.roots[1]!.write(to: root)
        #expect(try CourierBinary.run(["tuf-client", "--metadata-dir", metadata.path, "init", root.path]).status == 0)
        let config = directory.appending("courier.json")
        try Data(#"{"transfer": {"proxy": "\#(proxy.url)"}}"#.utf8).write(to: config)
        let download = try CourierBinary.run([
            "tuf-client", "--config", config.path, "--metadata-dir", metadata.path, "--metadata-url",
            nginx.url("/metadata").absoluteString, "--target-name", "file.txt", "--target-base-url",
            nginx.url("/targets").absoluteString, "--target-dir", directory.appending("out").path, "download",
        ])
        #expect(download.status == 0, "\(download.stderr)")
        #expect(try Data(contentsOf: directory.appending("out/file.txt")) == Data("hello".utf8))
        let requests = proxy.requests
        #expect(requests.contains { $0.hasPrefix("GET \(nginx.url("/metadata").absoluteString)") }, "\(requests)")
        #expect(requests.contains { $0.hasPrefix("GET \(nginx.url("/targets").absoluteString)") }, "\(requests)")
        #expect(requests.contains { $0.contains("timestamp.json") }, "\(requests)")
    }

    @Test("8 processes refreshing one trusted metadata folder at once, fresh and mid-rotation: all succeed, one state")
    func concurrentRefresh() throws {
        let directory = try TemporaryDirectory(prefix: "courier-tufmany")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.appending("repo"))
        let first = repo.roots[1]!
        for version in 2...6 {
            let old = repo.signers["root"]!
            let new = try TUFSigner(Curve25519.Signing.PrivateKey())
            repo.signers["root"] = [new]
            repo.rootVersion = Int64(version)
            try repo.publishRoot(signedBy: old + [new])
        }
        try repo.addTarget("catalog.json", Data("{}".utf8))
        try repo.publish()
        let nginx = try NginxServer(root: repo.folder)
        defer { nginx.stop() }
        let rootFile = directory.appending("root.json")
        try first.write(to: rootFile)
        // Issue 33: every store Courier keeps, the trusted metadata too, opened by many at once.
        for round in 0..<20 {
            let metadata = directory.appending("client-\(round)")
            try FileManager.default.createDirectory(at: metadata, withIntermediateDirectories: true)
            #expect(try CourierBinary.run(["tuf-client", "--metadata-dir", metadata.path, "init", rootFile.path]).status == 0)
            let refresh = ["tuf-client", "--metadata-dir", metadata.path, "--metadata-url", nginx.url("/metadata/").absoluteString, "refresh"]
            let outputs = (0..<8).map { directory.appending("refresh-\(round)-\($0)") }
            let processes = try outputs.map { try CourierBinary.start(refresh, stdout: $0, stderr: $0.appendingPathExtension("err")) }
            for (index, process) in processes.enumerated() {
                process.waitUntilExit()
                let said = (try? String(contentsOf: outputs[index].appendingPathExtension("err"), encoding: .utf8)) ?? ""
                #expect(process.exitStatus == 0, "round \(round), process \(index): \(said)")
            }
            let trusted = try TUFTrustedSet(trustedRoot: try Data(contentsOf: metadata.appendingPathComponent("root.json")), referenceTime: Date())
            #expect(trusted.root.version == 6, "round \(round)")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: metadata.path).filter { $0.hasSuffix(".tmp") }
            #expect(leftovers.isEmpty, "round \(round): \(leftovers)")
        }
    }

    @Test("kill -9 at any point of a 40-version root rotation never leaves a half-written or unverified root")
    func killDuringRotation() throws {
        let directory = try TemporaryDirectory(prefix: "courier-tufkill")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.appending("repo"))
        let first = repo.roots[1]!
        for version in 2...40 {
            let old = repo.signers["root"]!
            let new = try TUFSigner(Curve25519.Signing.PrivateKey())
            repo.signers["root"] = [new]
            repo.rootVersion = Int64(version)
            try repo.publishRoot(signedBy: old + [new])
        }
        try repo.publish()
        let nginx = try NginxServer(root: repo.folder)
        defer { nginx.stop() }
        let metadata = directory.appending("client")
        try FileManager.default.createDirectory(at: metadata, withIntermediateDirectories: true)
        let rootFile = directory.appending("root.json")
        try first.write(to: rootFile)
        #expect(try CourierBinary.run(["tuf-client", "--metadata-dir", metadata.path, "init", rootFile.path]).status == 0)
        let refresh = ["tuf-client", "--metadata-dir", metadata.path, "--metadata-url", nginx.url("/metadata/").absoluteString, "refresh"]

        var generator = SystemRandomNumberGenerator()
        var seenVersions = Set<Int64>()
        for _ in 0..<12 {
            let process = try CourierBinary.start(refresh)
            usleep(UInt32.random(in: 0...150_000, using: &generator))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            // Whatever moment it died at, root.json is a complete root that verifies itself.
            let data = try Data(contentsOf: metadata.appendingPathComponent("root.json"))
            let trusted = try TUFTrustedSet(trustedRoot: data, referenceTime: Date())
            seenVersions.insert(trusted.root.version)
            #expect(try FileManager.default.attributesOfItem(atPath: metadata.appendingPathComponent("root.json").path)[.posixPermissions] as? Int == 0o600)
        }
        let finished = try CourierBinary.run(refresh)
        #expect(finished.status == 0, "\(finished.stderr)")
        let final = try TUFTrustedSet(trustedRoot: try Data(contentsOf: metadata.appendingPathComponent("root.json")), referenceTime: Date())
        #expect(final.root.version == 40)
        #expect(seenVersions.allSatisfy { (1...40).contains($0) })
    }
}
