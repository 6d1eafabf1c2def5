import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The README's multi-machine deployment, as a user follows it: `courier prestage` into a folder
/// under a traversable parent (as `/srv`), a `courier serve` gate over it, and Debian's nginx in
/// front with exactly what `courier origin nginx-config` prints, its workers running as Debian's
/// default `www-data` (the master as root), not as the tree's owner.
@Suite(
    "The documented deployment: prestage, a serve gate, nginx workers as www-data",
    .enabled(if: NginxServer.isAvailable && getuid() == 0 && getpwnam("www-data") != nil, "needs nginx, root and the www-data user")
)
struct DeploymentTests {
    static let big = "com.example.levels.big"
    static let small = "com.example.levels.small"
    /// The big package's files: 16 of 256 KiB, stored (noise does not compress).
    static let fileCount = 16
    static let fileSize = 256 << 10

    /// The files of `big` at `version`: file `changed` (if any) has other bytes.
    static func files(changed: Int? = nil) -> [String: Data] {
        var files: [String: Data] = [:]
        for index in 0..<fileCount {
            let seed = UInt64(index + 1) + (index == changed ? 1000 : 0)
            files[String(format: "data/f%02d.bin", index)] = PackageFixtures.noise(fileSize, seed: seed)
        }
        return files
    }

    /// The whole stack: an upstream nginx (the publisher's CDN), the deploy folder (0711, like
    /// `/srv`), the staged tree `courier prestage` writes, a gate, the edge nginx as www-data.
    final class Deployment {
        let deploy: TemporaryDirectory
        let upstream: URL
        let staged: URL
        let store: SandboxStore
        let upstreamServer: NginxServer
        var gate: (process: Process, port: Int, log: URL)?
        var edge: NginxServer?
        let gateScratch: TemporaryDirectory
        var printed = ""

        init() throws {
            deploy = try TemporaryDirectory(prefix: "courier-deploy")
            // A temporary folder is 0700; a deploy folder's parents must be traversable by
            // nginx's workers, as /srv is (docs/origin.md, "File modes").
            chmod(deploy.path, 0o711)
            upstream = deploy.appending("upstream")
            try FileManager.default.createDirectory(at: upstream, withIntermediateDirectories: true)
            // Below a folder prestage creates itself (`srv`), as `--dest /srv/staged` on a fresh machine.
            staged = deploy.appending("srv/staged")
            store = try SandboxStore.create(at: deploy.appending("sandbox"))
            gateScratch = try TemporaryDirectory(prefix: "courier-deploy-gate")
            upstreamServer = try NginxServer(root: upstream)
            do {
                try publishUpstream(version: "1.0", changed: nil)
                try prestage()
                let (gateProcess, gatePort, gateLog) = try ServeCommandTests.startServe(
                    [
                        "--content", staged.path, "--trust-root", store.rootCertificateFile.path, "--bundle-id", "com.example.app",
                        "--environment", "Sandbox", "--storage", deploy.appending("gate-storage").path,
                    ],
                    scratch: gateScratch
                )
                gate = (gateProcess, gatePort, gateLog)
                let content = staged.path
                let decisions = deploy.appending("decisions").path
                var printed = ""
                edge = try NginxServer(root: staged, workerUser: "www-data") { port in
                    let result = try CourierBinary.run(
                        [
                            "origin", "nginx-config", "--content", content, "--gate", "127.0.0.1:\(gatePort)", "--listen", "127.0.0.1:\(port)",
                            "--decision-cache-path", decisions,
                        ])
                    guard result.status == 0 else {
                        throw CourierError(.internal, "courier origin nginx-config failed", cause: result.stderr)
                    }
                    printed = result.stdout
                    return result.stdout
                }
                self.printed = printed
            } catch {
                stop()
                throw error
            }
        }

        /// The upstream's catalog at `version`: `big` (16 files, `changed` of them other than
        /// 1.0's) and `small`.
        func publishUpstream(version: String, changed: Int?) throws {
            var products: [Catalog.Product] = []
            let packages: [(String, [String: Data])] = [
                (DeploymentTests.big, DeploymentTests.files(changed: changed)),
                (DeploymentTests.small, ["note.txt": Data("small".utf8)]),
            ]
            for (productId, files) in packages {
                let file = upstream.appendingPathComponent("\(productId)-\(version).zip")
                try PackageFixtures.infoZip(product: productId, version: version, files: files, at: file, level: 0)
                let length = try Data(contentsOf: file).count
                let digest = String(try Shell.run("/usr/bin/sha256sum", [file.path]).stdout.prefix(64))
                products.append(
                    Catalog.Product(
                        productId: productId,
                        content: Catalog.Content(
                            url: file.lastPathComponent, sha256: digest, length: Int64(length), version: version, placement: .documents)))
            }
            // As a careful publisher does (StagingTree.publishCatalog): nginx's ETag is
            // "mtime-size" at one-second resolution, and a new catalog of the old one's size
            // written within the same second would be answered 304 to prestage.
            let catalogFile = upstream.appendingPathComponent("catalog.json")
            let previous = (try? FileManager.default.attributesOfItem(atPath: catalogFile.path)[.modificationDate]) as? Date
            try Catalog(bundleId: "com.example.app", products: products).encoded().write(to: catalogFile)
            if let previous {
                let later = max(Date(), previous.addingTimeInterval(1)).timeIntervalSince1970.rounded(.up)
                try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: later)], ofItemAtPath: catalogFile.path)
            }
        }

        func prestage() throws {
            let result = try CourierBinary.run(["prestage", "--catalog", upstreamServer.url("catalog.json").absoluteString, "--dest", staged.path])
            #expect(result.status == 0, "\(result.stderr)")
        }

        /// The catalog `prestage` published.
        func published() throws -> Catalog {
            try Catalog.decode(Data(contentsOf: staged.appendingPathComponent("catalog.json")))
        }

        var receiptOptions: [String] {
            ["--trust-root", store.rootCertificateFile.path, "--bundle-id", "com.example.app", "--environment", "Sandbox"]
        }

        /// The gate's access-log entries so far.
        func gateAccess() -> [[String: Any]] {
            guard let gate else { return [] }
            return ServeCommandTests.events(gate.log).filter { $0["message"] as? String == "access" }
        }

        func stop() {
            edge?.stop()
            if let gate, gate.process.isRunning {
                kill(gate.process.processIdentifier, SIGTERM)
                gate.process.waitUntilExit()
            }
            upstreamServer.stop()
            gateScratch.remove()
            deploy.remove()
        }
    }

    /// The permission bits of `path`.
    static func mode(_ path: String) -> mode_t {
        var status = stat()
        guard lstat(path, &status) == 0 else { return 0 }
        return status.st_mode & 0o7777
    }

    @Test("nginx as www-data serves what prestage wrote: 200 catalog, 200 with an entitling token, 401 without, 403 for another purchase")
    func servesAsDocumented() throws {
        let stack = try Deployment()
        defer { stack.stop() }
        let edge = try #require(stack.edge)
        // The workers are www-data, as Debian's packaged nginx.conf has them; not root.
        let workers = edge.workerUsers()
        #expect(!workers.isEmpty && workers.allSatisfy { $0 == "www-data" }, "\(workers)")
        #expect(
            !stack.printed.split(separator: "\n").contains { $0.trimmingCharacters(in: .whitespaces).hasPrefix("user ") },
            "the printed configuration names no worker user")

        let catalog = try CurlExchange.runBlocking(edge.url("catalog.json").absoluteString, [])
        #expect(catalog.status == 200, "\(edge.errorLog())")
        #expect(catalog.body == (try Data(contentsOf: stack.staged.appendingPathComponent("catalog.json"))))

        let published = try stack.published()
        let big = try #require(published.product(Self.big)?.content)
        let manifest = try #require(big.manifest, "prestage names the package's manifest")
        let purchase = try stack.store.purchase(productId: Self.big)
        let other = try stack.store.purchase(productId: Self.small)
        let package = edge.url(big.url).absoluteString
        let whole = try CurlExchange.runBlocking(package, ["-H", "Authorization: Bearer \(purchase)"])
        #expect(whole.status == 200, "\(edge.errorLog())")
        #expect(whole.body == (try Data(contentsOf: stack.upstream.appendingPathComponent("\(Self.big)-1.0.zip"))))
        #expect(try CurlExchange.runBlocking(package, []).status == 401)
        #expect(try CurlExchange.runBlocking(package, ["-H", "Authorization: Bearer \(other)"]).status == 403)
        // The manifest, gated as its package.
        let manifestURL = edge.url(manifest.url).absoluteString
        let fetched = try CurlExchange.runBlocking(manifestURL, ["-H", "Authorization: Bearer \(purchase)"])
        #expect(fetched.status == 200, "\(edge.errorLog())")
        #expect(fetched.body == (try Data(contentsOf: stack.staged.appendingPathComponent(manifest.url))))
        #expect(try CurlExchange.runBlocking(manifestURL, []).status == 401)
        #expect(try CurlExchange.runBlocking(manifestURL, ["-H", "Authorization: Bearer \(other)"]).status == 403)
        // The work folder stays private (gated by path too).
        #expect(try CurlExchange.runBlocking(edge.url(".prestage/").absoluteString, ["-H", "Authorization: Bearer \(purchase)"]).status == 403)
        #expect(!edge.errorLog().contains("Permission denied"), "\(edge.errorLog())")

        // The published tree is readable by the worker; the work folder, state and keys are not.
        let staged = stack.staged.path
        #expect(Self.mode(stack.deploy.appending("srv").path) == 0o711)
        #expect(Self.mode(staged) == 0o755)
        #expect(Self.mode(staged + "/catalog.json") == 0o644)
        #expect(Self.mode(staged + "/packages") == 0o755)
        #expect(Self.mode(staged + "/" + big.url) == 0o644)
        #expect(Self.mode((staged + "/" + big.url as NSString).deletingLastPathComponent) == 0o755)
        #expect(Self.mode(staged + "/" + manifest.url) == 0o644)
        #expect(Self.mode(staged + "/.prestage") == 0o700)
        let gateStorage = stack.deploy.appending("gate-storage").path
        #expect(Self.mode(gateStorage) == 0o700)
        let stored = FileManager.default.enumerator(atPath: gateStorage)?.allObjects.compactMap { $0 as? String } ?? []
        #expect(stored.contains("origin.sqlite"), "\(stored)")
        for name in stored {
            #expect(Self.mode(gateStorage + "/" + name) & 0o077 == 0, "the gate's \(name) is open to others")
        }
    }

    /// Bytes nginx sent after the first `skip` lines of its access log (combined format:
    /// `"GET /path HTTP/1.1" STATUS BYTES`), and the lines.
    static func bytesSent(_ log: [String], after skip: Int) -> (bytes: Int, lines: [String]) {
        let lines = Array(log.dropFirst(skip))
        var bytes = 0
        for line in lines {
            guard let quote = line.range(of: "HTTP/1.1\" ") else { continue }
            let fields = line[quote.upperBound...].split(separator: " ")
            if fields.count >= 2, let sent = Int(fields[1]) { bytes += sent }
        }
        return (bytes, lines)
    }

    @Test("an update of 1 changed file of 16 through serve and through nginx fetches at most 10% of the package; a fallback is said")
    func deltaThroughServeAndEdge() throws {
        let stack = try Deployment()
        defer { stack.stop() }
        let edge = try #require(stack.edge)
        let gatePort = try #require(stack.gate?.port)
        let receipt = stack.deploy.appending("purchase.jws")
        try Data(stack.store.purchase(productId: Self.big).utf8).write(to: receipt)
        let throughGate = "http://127.0.0.1:\(gatePort)/catalog.json"
        let throughEdge = edge.url("catalog.json").absoluteString
        // Three clients with 1.0: two update through the gate, one through nginx.
        let clients = [
            ("gate", throughGate, stack.deploy.appending("client-gate")), ("edge", throughEdge, stack.deploy.appending("client-edge")),
            ("fallback", throughGate, stack.deploy.appending("client-fallback")),
        ]
        for (name, catalog, storage) in clients {
            let delivered = try CourierBinary.run(
                ["deliver", "--storage", storage.path, "--receipt", receipt.path, "--catalog", catalog, "--product", Self.big] + stack.receiptOptions)
            #expect(delivered.status == 0, "\(name): \(delivered.stderr)")
        }

        try stack.publishUpstream(version: "2.0", changed: 7)
        try stack.prestage()
        let v2 = try #require(try stack.published().product(Self.big)?.content)
        #expect(v2.version == "2.0")
        let expected = Self.files(changed: 7)
        func placed(_ storage: URL) throws -> [String: Data] {
            let path = try CourierBinary.run(["content", "path", Self.big, "--storage", storage.path])
            let folder = URL(fileURLWithPath: path.stdout.trimmingCharacters(in: .whitespacesAndNewlines)).appendingPathComponent("Contents")
            var files: [String: Data] = [:]
            for name in expected.keys { files[name] = try? Data(contentsOf: folder.appendingPathComponent(name)) }
            return files
        }

        // Through the gate: the bytes its access log says it sent for this update.
        let gateBefore = stack.gateAccess().count
        let viaGate = try CourierBinary.run(["update", "--storage", clients[0].2.path, "--catalog", throughGate] + stack.receiptOptions)
        #expect(viaGate.status == 0, "\(viaGate.stderr)")
        #expect(viaGate.stdout.contains("updated \(Self.big) from 1.0 to 2.0"), "\(viaGate.stdout)")
        #expect(!viaGate.stderr.contains("whole package"), "\(viaGate.stderr)")
        #expect(try placed(clients[0].2) == expected)
        let gateEntries = stack.gateAccess().dropFirst(gateBefore)
        let gateBytes = gateEntries.compactMap { $0["http.bytes"] as? Int }.reduce(0, +)
        #expect(gateEntries.contains { ($0["http.target"] as? String) == "/" + (v2.manifest?.url ?? "?") && $0["http.status"] as? Int == 200 })
        #expect(gateBytes > 0 && Int64(gateBytes) * 10 <= v2.length, "the gate sent \(gateBytes) of \(v2.length) bytes: \(Array(gateEntries))")

        // Through nginx: the bytes its access log says it sent.
        let edgeBefore = edge.accessLog().count
        let viaEdge = try CourierBinary.run(["update", "--storage", clients[1].2.path, "--catalog", throughEdge] + stack.receiptOptions)
        #expect(viaEdge.status == 0, "\(viaEdge.stderr)")
        #expect(!viaEdge.stderr.contains("whole package"), "\(viaEdge.stderr)")
        #expect(try placed(clients[1].2) == expected)
        let edgeSent = Self.bytesSent(edge.accessLog(atLeast: edgeBefore + 3), after: edgeBefore)
        #expect(edgeSent.lines.contains { $0.contains("GET /\(v2.manifest?.url ?? "?") ") && $0.contains("\" 200 ") }, "\(edgeSent.lines)")
        #expect(edgeSent.bytes > 0 && Int64(edgeSent.bytes) * 10 <= v2.length, "nginx sent \(edgeSent.bytes) of \(v2.length): \(edgeSent.lines)")

        // Without the manifest the update still happens, whole, and says so without -v.
        let manifestFile = stack.staged.appendingPathComponent(try #require(v2.manifest?.url))
        try FileManager.default.removeItem(at: manifestFile)
        let whole = try CourierBinary.run(["update", "--storage", clients[2].2.path, "--catalog", throughGate] + stack.receiptOptions)
        #expect(whole.status == 0, "\(whole.stderr)")
        #expect(try placed(clients[2].2) == expected)
        let notes = whole.stderr.split(separator: "\n").filter { $0.contains("whole package") }
        #expect(notes.count == 1, "\(whole.stderr)")
        #expect(notes.first?.hasPrefix("courier: \(Self.big): ") == true, "\(whole.stderr)")
        #expect(notes.first?.contains("the manifest could not be fetched (HTTP 404)") == true, "\(whole.stderr)")
    }
}
