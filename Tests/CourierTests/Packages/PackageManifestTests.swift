import Crypto
import Foundation
import Logging
import Testing

@testable import Courier
import CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

@Suite("PackageManifest")
struct PackageManifestTests {
    static let product = "com.example.manifest"

    static func makePackage(in directory: TemporaryDirectory, files: [String: Data], version: String = "1.0") throws -> (URL, PackageInfo) {
        let source = directory.appending("source-\(version)")
        for (path, data) in files {
            let url = source.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try data.write(to: url)
        }
        let zip = directory.appending("pack-\(version).zip")
        return (zip, try PackageBuilder.create(from: source, productId: product, version: version, output: zip))
    }

    @Test("package create writes a manifest beside the zip: every entry, digests, and ranges that hold local headers")
    func builderWritesManifest() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files = ["a.txt": Data("alpha".utf8), "sub/b.bin": Data(repeating: 9, count: 100_000), "sub/empty": Data()]
        let (zip, info) = try Self.makePackage(in: directory, files: files)
        let manifestURL = PackageManifest.url(besidePackage: zip)
        #expect(manifestURL.lastPathComponent == "pack-1.0.manifest.json")
        let manifest = try PackageManifest.decode(Data(contentsOf: manifestURL))
        #expect(manifest.productId == Self.product && manifest.version == "1.0")
        #expect(manifest.package.sha256 == info.sha256 && manifest.package.length == info.packedSize)
        #expect(Set(manifest.entries.map(\.path)) == ["ContentInfo.plist", "Contents/", "Contents/sub/", "Contents/a.txt", "Contents/sub/b.bin", "Contents/sub/empty"])
        let bytes = [UInt8](try Data(contentsOf: zip))
        for (path, data) in files {
            let entry = try #require(manifest.files["Contents/" + path])
            #expect(entry.sha256 == SHA256.hash(data: data).hex)
            #expect(entry.size == Int64(data.count))
            let range = try #require(entry.range)
            #expect(Array(bytes[Int(range.lowerBound)..<Int(range.lowerBound) + 4]) == [0x50, 0x4B, 0x03, 0x04])
        }
        // The same folder gives the same manifest bytes (reproducible).
        let again = try PackageManifest.build(package: zip)
        #expect(try again.encoded() == Data(contentsOf: manifestURL))
    }

    @Test("encoded() writes what JSONEncoder writes (sorted keys, `/` unescaped), for built and random manifests")
    func encodedMatchesJSONEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (zip, _) = try Self.makePackage(in: directory, files: ["a.txt": Data("alpha".utf8), "sub/b.bin": Data(count: 1000)])
        var manifests = [try PackageManifest.build(package: zip)]
        var generator = SystemRandomNumberGenerator()
        func text() -> String {
            var scalars = String.UnicodeScalarView()
            for _ in 0..<Int.random(in: 0...12, using: &generator) {
                let range: ClosedRange<UInt32> = [0...0x7F, 0x80...0xD7FF, 0xE000...0x10_FFFF].randomElement(using: &generator)!
                if let scalar = UnicodeScalar(UInt32.random(in: range, using: &generator)) { scalars.append(scalar) }
            }
            return String(scalars)
        }
        func maybe<T>(_ value: T) -> T? { Bool.random(using: &generator) ? value : nil }
        for _ in 0..<300 {
            let entries = (0..<Int.random(in: 0...4, using: &generator)).map { _ in
                PackageManifest.Entry(
                    path: text(), type: Bool.random(using: &generator) ? .file : .directory,
                    size: maybe(Int64.random(in: 0 ... .max, using: &generator)), sha256: maybe(text()),
                    crc32: maybe(UInt32.random(in: 0 ... .max, using: &generator)), method: maybe(Int.random(in: -9...9, using: &generator)),
                    compressedSize: maybe(Int64.random(in: .min ... .max, using: &generator)),
                    offset: maybe(Int64.random(in: 0...1_000_000, using: &generator)), length: maybe(Int64.random(in: 30...1000, using: &generator)))
            }
            manifests.append(
                PackageManifest(
                    format: Int.random(in: -2...2, using: &generator), productId: text(), version: text(),
                    package: .init(sha256: text(), length: Int64.random(in: 0 ... .max, using: &generator)), entries: entries))
        }
        for manifest in manifests {
            #expect(try manifest.encoded() == encoder.encode(manifest))
        }
    }

    @Test("decode refuses traversal, overlaps, ranges outside the package, bad digests and methods")
    func decodeRefuses() throws {
        let digest = String(repeating: "ab", count: 32)
        func document(_ entry: String, length: Int64 = 1000) -> Data {
            Data(
                """
                {"format":1,"productId":"p","version":"1","package":{"sha256":"\(digest)","length":\(length)},"entries":[\(entry)]}
                """.utf8)
        }
        func file(_ path: String, offset: Int64 = 0, length: Int64 = 100, sha: String = digest, method: Int = 8) -> String {
            """
            {"path":"\(path)","type":"file","size":10,"sha256":"\(sha)","crc32":1,"method":\(method),"compressedSize":10,"offset":\(offset),"length":\(length)}
            """
        }
        #expect(throws: Never.self) { try PackageManifest.decode(document(file("Contents/a"))) }
        let refused = [
            document(file("../evil")),
            document(file("/abs")),
            document(file("Contents/a") + "," + file("Contents/b", offset: 50)),
            document(file("Contents/a", offset: 950)),
            document(file("Contents/a", offset: Int64.max - 10)),
            document(file("Contents/a", sha: "XYZ")),
            document(file("Contents/a", method: 12)),
            document(file("Contents/a") + "," + file("Contents/a", offset: 200)),
            Data("not json".utf8),
        ]
        for data in refused {
            #expect(throws: CourierError.self) { try PackageManifest.decode(data) }
            PackageManifest.fuzz(data)
        }
    }

    @Test("prestage publishes the manifest beside the package and the catalog names it with its digest and length")
    func prestagePublishesManifest() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (zip, info) = try Self.makePackage(in: directory, files: ["x.bin": Data(repeating: 1, count: 5000)])
        let tree = try LocalStagingTree(root: directory.appending("tree"))
        let path = PrestagePlan.stagedPath(contentIdentifier: Self.product, sha256: info.sha256)
        let copy = directory.appending("copy.zip")
        try FileManager.default.copyItem(at: zip, to: copy)
        #expect(try PrestageManifests.publish(for: copy, packagePath: path, in: tree, limits: PackageConfiguration()))
        try tree.publishPackage(copy, at: path)
        let content = Catalog.Content(url: path, sha256: info.sha256, length: info.packedSize, version: "1.0", placement: .cache)
        let catalog = PrestageManifests.attach(
            to: Catalog(bundleId: "b", products: [Catalog.Product(productId: Self.product, content: content)]), tree: tree)
        let manifest = try #require(catalog.products[0].content?.manifest)
        #expect(manifest.url == "packages/\(Self.product)/\(info.sha256).manifest.json")
        let published = try Data(contentsOf: directory.appending("tree").appendingPathComponent(manifest.url))
        #expect(manifest.sha256 == SHA256.hash(data: published).hex)
        #expect(manifest.length == Int64(published.count))
        // The catalog round-trips with the field, and an old catalog without it still decodes.
        #expect(try Catalog.decode(catalog.encoded()) == catalog)
        let old = #"{"bundleId":"b","products":[{"productId":"p","content":{"url":"p.zip","sha256":"\#(info.sha256)","length":1,"version":"1","placement":"cache"}}]}"#
        #expect(try Catalog.decode(Data(old.utf8)).products[0].content?.manifest == nil)
        // A manifest kept by removeUnlisted while its package is listed.
        #expect(try tree.removeUnlisted(by: catalog, grace: -1).isEmpty)
    }

    @Test("courier prestage publishes a manifest beside each package it stages, named in its catalog", .enabled(if: NginxServer.isAvailable))
    func prestageCommandPublishesManifests() throws {
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        for index in 1...2 { try upstream.addProduct("com.example.pack\(index)", bytes: 30_000) }
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url)
        defer { nginx.stop() }
        let dest = try TemporaryDirectory(prefix: "courier-stage")
        defer { dest.remove() }
        let result = try CourierBinary.run(["prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path])
        #expect(result.status == 0, "\(result.stderr)")
        let catalog = try Catalog.decode(Data(contentsOf: dest.appending("catalog.json")))
        #expect(catalog.products.count == 2)
        for product in catalog.products {
            let content = try #require(product.content)
            let link = try #require(content.manifest, "\(product.productId) has no manifest")
            #expect(link.url == content.url.replacingOccurrences(of: ".zip", with: ".manifest.json"))
            let data = try Data(contentsOf: dest.url.appendingPathComponent(link.url))
            #expect(link.sha256 == SHA256.hash(data: data).hex && link.length == Int64(data.count))
            let manifest = try PackageManifest.decode(data)
            #expect(manifest.package.sha256 == content.sha256 && manifest.package.length == content.length)
            #expect(manifest.files["Contents/data.bin"]?.size == 30_000)
        }
    }

    @Test("install records each file's SHA-256 as written and its identity; a touched file no longer matches")
    func installRecordsFiles() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files = ["a.txt": Data("alpha".utf8), "deep/b.bin": Data(repeating: 3, count: 70_000)]
        let (zip, _) = try Self.makePackage(in: directory, files: files)
        let layout = StorageLayout(root: directory.appending("Storage"))
        let placer = ContentPlacer(
            layout: layout, store: try StateStore(layout: layout), packages: PackageConfiguration(),
            placement: PlacementConfiguration(), logger: Logger(label: "test"))
        let content = try placer.install(
            package: zip, contentIdentifier: Self.product, productId: Self.product, version: "1.0", placement: .cache, force: false)
        let records = try placer.installedFiles(Self.product)
        #expect(records.map(\.path) == ["ContentInfo.plist", "Contents/a.txt", "Contents/deep/b.bin"])
        for (path, data) in files {
            let record = try #require(records.first { $0.path == "Contents/" + path })
            #expect(record.sha256 == SHA256.hash(data: data).hex)
            var status = stat()
            #expect(lstat(content.url.appendingPathComponent(record.path).path, &status) == 0)
            #expect(record.isUnchanged(status))
        }
        let a = content.url.appendingPathComponent("Contents/a.txt")
        try Data("alpha".utf8).write(to: a)
        var status = stat()
        #expect(lstat(a.path, &status) == 0)
        #expect(try #require(records.first { $0.path == "Contents/a.txt" }).isUnchanged(status) == false)
        // Deleting the content deletes its records.
        try placer.delete(Self.product)
        #expect(try placer.installedFiles(Self.product).isEmpty)
    }

    @Test("FileClone copies where FICLONE is refused (ext4, tmpfs) and reflinks where supported")
    func fileClone() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var generator = SplitMix(seed: 3)
        let data = Data((0..<(3 << 20) + 17).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        let source = directory.appending("source")
        try data.write(to: source)
        for allowReflink in [false, true] {
            let target = directory.appending("target-\(allowReflink)")
            let input = open(source.path, O_RDONLY)
            let output = open(target.path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
            defer {
                close(input)
                close(output)
            }
            let method = try FileClone.clone(from: input, to: output, size: Int64(data.count), allowReflink: allowReflink)
            if !allowReflink { #expect(method == .copy) }
            #expect(try Data(contentsOf: target) == data)
        }
        // A source shorter than its record is an error, not a short file.
        let input = open(source.path, O_RDONLY)
        let output = open(directory.appending("short").path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
        defer {
            close(input)
            close(output)
        }
        #expect(throws: CourierError.self) {
            try FileClone.clone(from: input, to: output, size: Int64(data.count) + 1, allowReflink: false)
        }
    }
}
