import Courier
import CourierTestSupport
import Foundation
import Logging
import Testing

/// The python environment of the interop tests (apart from the suite: its trait reads it).
enum TUFPython {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()
    static let scripts = repositoryRoot.appendingPathComponent("Tests/Fixtures/tuf-interop")

    /// The python of the suite's virtual environment, made on first use; nil when it cannot be made.
    static let python: String? = {
        let venv = ProcessInfo.processInfo.environment["COURIER_TUF_VENV"]
            ?? (NSTemporaryDirectory() as NSString).appendingPathComponent("courier-tuf-venv")
        let process = Process()
        process.executableURL = repositoryRoot.appendingPathComponent("scripts/tuf-conformance")
        process.arguments = ["--venv-only"]
        process.environment = ProcessInfo.processInfo.environment.merging(["COURIER_TUF_VENV": venv]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        process.waitUntilExit()
        let python = venv + "/bin/python"
        return process.terminationStatus == 0 && FileManager.default.isExecutableFile(atPath: python) ? python : nil
    }()

    static func runPython(_ arguments: [String]) throws -> (status: Int32, stdout: Data, stderr: String) {
        let directory = try TemporaryDirectory(prefix: "courier-python")
        defer { directory.remove() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try #require(python))
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(["PYTHONDONTWRITEBYTECODE": "1"]) { $1 }
        let out = directory.appending("out")
        let err = directory.appending("err")
        try Data().write(to: out)
        try Data().write(to: err)
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        try process.run()
        process.waitUntilExit()
        return (process.terminationStatus, try Data(contentsOf: out), (try? String(contentsOf: err, encoding: .utf8)) ?? "")
    }
}

/// Courier's TUF repositories and python-tuf 7's, both ways (issue 29, section 3): a repository
/// made with python-tuf's Metadata API is accepted by Courier's catalog loader, and one Courier's
/// publisher made is accepted by python-tuf's ngclient `Updater`. Python comes from the virtual
/// environment `scripts/tuf-conformance --venv-only` makes (PyPI); without PyPI the suite is
/// skipped and says why.
@Suite(
    "TUF interoperability with python-tuf 7", .enabled(if: NginxServer.isAvailable, "nginx is not installed"),
    .enabled(if: TUFPython.python != nil, "python-tuf 7 cannot be installed (is PyPI reachable?): scripts/tuf-conformance --venv-only"))
struct TUFInteropTests {
    static let catalog = Data(#"{"bundleId":"com.example.app","products":[{"productId":"com.example.levels"}]}"#.utf8)

    @Test("a repository made with python-tuf's Metadata API (ed25519 and ECDSA keys) gives Courier its catalog")
    func pythonToCourier() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-interop")
        defer { directory.remove() }
        let www = directory.appending("www")
        let catalogFile = directory.appending("catalog.json")
        try Self.catalog.write(to: catalogFile)
        let made = try TUFPython.runPython([TUFPython.scripts.appendingPathComponent("make_repository.py").path, www.path, catalogFile.path])
        #expect(made.status == 0, "\(made.stderr)")
        let nginx = try NginxServer(root: www)
        defer { nginx.stop() }

        let layout = StorageLayout(root: directory.appending("Storage"))
        let loader = CatalogLoader(
            transport: try CurlHTTPTransport(), layout: layout,
            trust: CatalogTrust(trustedRoot: www.appendingPathComponent("metadata/1.root.json")), logger: Logger(label: "test"))
        let loaded = try await loader.load(nginx.url("/catalog.json").absoluteString, relativeTo: directory.url)
        #expect(loaded.catalog.products.map(\.productId) == ["com.example.levels"])
        #expect(loaded.signedVersion == 1)
    }

    @Test("a repository Courier published is accepted by python-tuf's ngclient Updater")
    func courierToPython() throws {
        let directory = try TemporaryDirectory(prefix: "courier-interop")
        defer { directory.remove() }
        let www = directory.appending("www")
        let keys = try TUFPublisher.createRepository(keys: directory.appending("keys"), metadata: www.appendingPathComponent("metadata"))
        try TUFPublisher.publish(
            target: Self.catalog, named: "catalog.json", into: www, roots: www.appendingPathComponent("metadata"), keys: keys.online)
        // A second publish (a new catalog): python-tuf must follow the new versions too.
        let second = Data(#"{"bundleId":"com.example.app","products":[]}"#.utf8)
        try TUFPublisher.publish(
            target: second, named: "catalog.json", into: www, roots: www.appendingPathComponent("metadata"), keys: keys.online)
        let nginx = try NginxServer(root: www)
        defer { nginx.stop() }
        let client = directory.appending("client")
        let targets = directory.appending("downloads")
        try FileManager.default.createDirectory(at: client, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: targets, withIntermediateDirectories: true)
        let fetched = try TUFPython.runPython([
            TUFPython.scripts.appendingPathComponent("fetch_catalog.py").path, client.path,
            www.appendingPathComponent("metadata/1.root.json").path, nginx.url("/metadata/").absoluteString,
            nginx.url("/targets/").absoluteString, targets.path,
        ])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        #expect(fetched.stdout == second)
    }

    /// Starts `courier serve --json --port 0 ARGS`; returns it and its port.
    static func startServe(_ arguments: [String], scratch: TemporaryDirectory) throws -> (Process, Int) {
        let stdout = scratch.appending("serve.out")
        let process = try CourierBinary.start(
            ["serve", "--json", "--port", "0"] + arguments, stdout: stdout, stderr: scratch.appending("serve.err"))
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, process.isRunning {
            for line in ((try? String(contentsOf: stdout, encoding: .utf8)) ?? "").split(separator: "\n") {
                if let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    object["event"] as? String == "listening", let port = object["port"] as? Int
                {
                    return (process, port)
                }
            }
            usleep(20_000)
        }
        process.terminate()
        throw CourierError(
            .internal, "courier serve did not report a port", cause: try? String(contentsOf: scratch.appending("serve.err"), encoding: .utf8))
    }

    @Test("serve --catalog-root follows delegations as the client does: a catalog a delegated role signs is served")
    func serveDelegatedCatalog() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-interop")
        defer { directory.remove() }
        let catalogFile = directory.appending("catalog.json")
        try Self.catalog.write(to: catalogFile)
        let script = TUFPython.scripts.appendingPathComponent("make_delegated_repository.py").path
        let www = directory.appending("www")
        let made = try TUFPython.runPython([script, www.path, catalogFile.path])
        try #require(made.status == 0, "\(made.stderr)")
        let root = www.appendingPathComponent("metadata/1.root.json")

        let (serve, port) = try Self.startServe(["--content", www.path, "--catalog-root", root.path, "--public"], scratch: directory)
        defer {
            serve.terminate()
            serve.waitUntilExit()
        }
        let transport = try CurlHTTPTransport()
        let origin = "http://127.0.0.1:\(port)"
        let served = try await transport.send(HTTPRequest(url: try #require(URL(string: origin + "/catalog.json"))))
        #expect(served.status == 200, "\(String(decoding: served.body, as: UTF8.self))")
        #expect(served.body == Self.catalog)
        // Courier's client, through the metadata serve publishes (the delegated role's too).
        let loader = CatalogLoader(
            transport: transport, layout: StorageLayout(root: directory.appending("Storage")), trust: CatalogTrust(trustedRoot: root),
            logger: Logger(label: "test"))
        let loaded = try await loader.load(origin + "/catalog.json", relativeTo: directory.url)
        #expect(loaded.catalog.products.map(\.productId) == ["com.example.levels"])

        // Other bytes under the same name (a row's catalog, say) are not served.
        let other = Data(#"{"bundleId":"com.example.app","products":[{"productId":"com.example.other"}]}"#.utf8)
        try other.write(to: www.appendingPathComponent("catalog.json"))
        let refused = try await transport.send(HTTPRequest(url: try #require(URL(string: origin + "/catalog.json"))))
        #expect(refused.status == 503)
        #expect(String(decoding: refused.body, as: UTF8.self).contains("is not served"))
    }

    @Test("serve --catalog-root refuses a catalog whose delegated role is signed by a key the delegation does not name")
    func serveForeignDelegate() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-interop")
        defer { directory.remove() }
        let catalogFile = directory.appending("catalog.json")
        try Self.catalog.write(to: catalogFile)
        let script = TUFPython.scripts.appendingPathComponent("make_delegated_repository.py").path
        let www = directory.appending("www")
        let made = try TUFPython.runPython([script, www.path, catalogFile.path, "--foreign-delegate"])
        try #require(made.status == 0, "\(made.stderr)")
        let root = try Data(contentsOf: www.appendingPathComponent("metadata/1.root.json"))
        // What serve checks, without the network: the signature check of the delegated role fails.
        do {
            try TUFLocalRepository.verify(Self.catalog, as: "catalog.json", metadata: www.appendingPathComponent("metadata"), trustedRoot: root)
            Issue.record("a catalog signed by a foreign key was accepted")
        } catch let error as TUFError {
            #expect(error.check == .signature, "\(error)")
        }
        let (serve, port) = try Self.startServe(
            ["--content", www.path, "--catalog-root", www.appendingPathComponent("metadata/1.root.json").path, "--public"], scratch: directory)
        defer {
            serve.terminate()
            serve.waitUntilExit()
        }
        let refused = try await CurlHTTPTransport().send(HTTPRequest(url: try #require(URL(string: "http://127.0.0.1:\(port)/catalog.json"))))
        #expect(refused.status == 503)
    }
}
