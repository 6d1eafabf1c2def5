import Courier
import CourierTestSupport
import Foundation

/// A sandbox store and an nginx origin serving three versions of one product's package (0.9,
/// 1.0, 2.0; made by Info-ZIP `zip`) and a catalog per version, for the update tests.
struct UpdateShop {
    let directory: TemporaryDirectory
    let sandbox: SandboxStore
    let nginx: NginxServer
    /// The one transaction id of the purchase (a refund reuses it).
    let transactionId = SandboxStore.newTransactionId()
    /// Bytes of each payload file.
    let fileSize: Int

    static let product = "com.example.levels"
    static let versions = ["0.9", "1.0", "2.0"]

    /// The files of `version` under Contents/: 2.0 keeps a.bin, changes b.bin, drops c.txt, adds d.txt.
    static func files(_ version: String, size: Int) -> [String: Data] {
        switch version {
        case "2.0":
            return [
                "a.bin": PackageFixtures.noise(size, seed: 1), "b.bin": PackageFixtures.noise(size, seed: 3),
                "levels/d.txt": Data("new in 2.0\n".utf8),
            ]
        default:
            return [
                "a.bin": PackageFixtures.noise(size, seed: 1), "b.bin": PackageFixtures.noise(size, seed: 2),
                "levels/c.txt": Data("level \(version)\n".utf8),
            ]
        }
    }

    /// `fileSize` bytes per payload file; `rateLimit` throttles nginx (`limit_rate`). With
    /// `manifests`, packages are made by `PackageBuilder` (`courier package create`), which writes
    /// each one's manifest beside it, and the catalogs name them: updates go by changed entries.
    init(fileSize: Int = 64 << 10, rateLimit: String? = nil, manifests: Bool = false) throws {
        self.fileSize = fileSize
        directory = try TemporaryDirectory(prefix: "courier-update")
        sandbox = try SandboxStore.create(at: directory.appending("sandbox"))
        let www = directory.appending("www")
        try FileManager.default.createDirectory(at: www, withIntermediateDirectories: true)
        for version in Self.versions {
            let package = www.appendingPathComponent("pack-\(version).zip")
            var manifest: Catalog.Manifest?
            if manifests {
                let source = directory.appending("source-\(version)")
                try PackageFixtures.writeTree(Self.files(version, size: fileSize), in: source)
                _ = try PackageBuilder.create(from: source, productId: Self.product, version: version, output: package)
                let written = try Data(contentsOf: PackageManifest.url(besidePackage: package))
                manifest = Catalog.Manifest(
                    url: PackageManifest.url(besidePackage: package).lastPathComponent, sha256: QueueFixtures.sha256(written),
                    length: Int64(written.count))
            } else {
                try PackageFixtures.infoZip(
                    product: Self.product, version: version, files: Self.files(version, size: fileSize), at: package, level: 0)
            }
            let bytes = try Data(contentsOf: package)
            let content = Catalog.Content(
                url: "pack-\(version).zip", sha256: QueueFixtures.sha256(bytes), length: Int64(bytes.count), version: version,
                placement: .documents, manifest: manifest)
            try Catalog(bundleId: "com.example.app", products: [Catalog.Product(productId: Self.product, content: content)])
                .encoded().write(to: www.appendingPathComponent("catalog-\(version).json"))
        }
        // A catalog whose 2.0 names the wrong SHA-256 (a tampered or corrupt package).
        var tampered = try Catalog.decode(Data(contentsOf: www.appendingPathComponent("catalog-2.0.json")))
        tampered.products[0].content?.sha256 = String(repeating: "0", count: 64)
        try tampered.encoded().write(to: www.appendingPathComponent("catalog-tampered.json"))
        nginx = try NginxServer(root: www, extraLocations: rateLimit.map { "limit_rate \($0);" } ?? "")
        let config = #"{"queue": {"heartbeatInterval": 0.5, "leaseDuration": 4}, "transfer": {"maxRetries": 2, "initialBackoff": 0.1}}"#
        try Data(config.utf8).write(to: configFile)
    }

    var configFile: URL { directory.appending("courier.json") }
    var storage: URL { directory.appending("Storage") }
    var environment: [String: String] { ["COURIER_CONFIG": configFile.path] }

    func catalog(_ version: String) -> String { nginx.url("catalog-\(version).json").absoluteString }

    /// A receipt file with the purchase (refunded now when `refunded`).
    func receipt(refunded: Bool = false, name: String = "receipt.txt") throws -> URL {
        let line = try sandbox.purchase(
            productId: Self.product, revocationDate: refunded ? Date() : nil, transactionId: transactionId,
            originalTransactionId: transactionId)
        let file = directory.appending(name)
        try Data((line + "\n").utf8).write(to: file)
        return file
    }

    var receiptOptions: [String] {
        ["--trust-root", sandbox.rootCertificateDERFile.path, "--environment", "Sandbox"]
    }

    func courier(_ arguments: [String], storage: URL? = nil) throws -> CourierBinary.Result {
        try CourierBinary.run(arguments + ["--storage", (storage ?? self.storage).path], environment: environment, directory: directory.url)
    }

    func start(_ arguments: [String], storage: URL? = nil) throws -> Process {
        try CourierBinary.start(
            arguments + ["--storage", (storage ?? self.storage).path], environment: environment, directory: directory.url)
    }

    /// Delivers version 1.0 of the purchase into `storage`.
    func deliverV1(storage: URL? = nil) throws -> CourierBinary.Result {
        try courier(["deliver", "--receipt", receipt().path, "--catalog", catalog("1.0")] + receiptOptions, storage: storage)
    }

    /// The installed content folder of the product under `storage`.
    func contentFolder(storage: URL? = nil) -> URL {
        (storage ?? self.storage).appendingPathComponent("Documents").appendingPathComponent(Self.product)
    }

    /// Every path under the content folder with the SHA-256 of each file ("/" for a folder): two
    /// trees are the same version exactly when these are equal.
    func tree(storage: URL? = nil) -> [String: String] {
        let root = contentFolder(storage: storage)
        var result: [String: String] = [:]
        guard let walker = FileManager.default.enumerator(atPath: root.path) else { return result }
        while let path = walker.nextObject() as? String {
            let url = root.appendingPathComponent(path)
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder) else { continue }
            result[path] = isFolder.boolValue ? "/" : ((try? Data(contentsOf: url)).map(QueueFixtures.sha256) ?? "?")
        }
        return result
    }

    /// The tree a version's package unpacks to (ContentInfo.plist and Contents/).
    func expectedTree(_ version: String) -> [String: String] {
        // The plist as the package holds it (Info-ZIP's and PackageBuilder's differ).
        let package = directory.appending("www").appendingPathComponent("pack-\(version).zip")
        let plist = (try? Shell.run("/usr/bin/unzip", ["-p", package.path, "ContentInfo.plist"]))?.stdout ?? ""
        var result: [String: String] = ["ContentInfo.plist": QueueFixtures.sha256(Data(plist.utf8)), "Contents": "/"]
        for (path, data) in Self.files(version, size: fileSize) {
            result["Contents/" + path] = QueueFixtures.sha256(data)
            var folder = ("Contents/" + path as NSString).deletingLastPathComponent
            while folder != "Contents" && !folder.isEmpty {
                result[folder] = "/"
                folder = (folder as NSString).deletingLastPathComponent
            }
        }
        return result
    }

    func stop() {
        nginx.stop()
        directory.remove()
    }
}
