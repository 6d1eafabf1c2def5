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
}
