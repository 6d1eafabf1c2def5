import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("PackageExtractor")
struct PackageExtractorTests {
    let product = "com.example.levels.pack1"

    func extract(_ package: URL, in directory: TemporaryDirectory, product: String? = nil, version: String? = nil,
                 configuration: PackageConfiguration = PackageConfiguration()) throws -> (PackageInfo, URL) {
        let staging = directory.appending("staging")
        let info = try PackageExtractor(configuration: configuration)
            .extract(package, into: staging, expectedProductId: product ?? self.product, expectedVersion: version)
        return (info, staging)
    }

    @Test("a package made by Info-ZIP unpacks with its content, sizes and hash")
    func infoZipPackage() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files: [String: Data] = [
            "levels/level1.json": Data("{\"level\":1}".utf8),
            "levels/level2.json": Data("{\"level\":2}".utf8),
            "art/noise.bin": PackageFixtures.noise(300_000),
        ]
        let package = directory.appending("pack.zip")
        try PackageFixtures.infoZip(product: product, version: "1.0", files: files, at: package)
        let (info, staging) = try extract(package, in: directory, version: "1.0")
        #expect(info.productId == product)
        #expect(info.version == "1.0")
        #expect(info.unpackedSize == Int64(files.values.reduce(0) { $0 + $1.count }) + Int64(PackageFixtures.contentInfo(product: product, version: "1.0").utf8.count))
        let expectedHash = try Shell.run("/usr/bin/sha256sum", [package.path]).stdout.prefix(64)
        #expect(info.sha256 == String(expectedHash))
        for (path, data) in files {
            #expect(try Data(contentsOf: staging.appendingPathComponent("Contents/" + path)) == data)
        }
        #expect(FileManager.default.fileExists(atPath: staging.appendingPathComponent("ContentInfo.plist").path))
    }

    @Test("a package made by bsdtar (names starting with ./) unpacks")
    func bsdtarPackage() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let package = directory.appending("pack.zip")
        try PackageFixtures.bsdtarZip(product: product, version: "2", files: ["a/b.txt": Data("b".utf8)], at: package)
        let (info, staging) = try extract(package, in: directory, version: "2")
        #expect(info.version == "2")
        #expect(try String(contentsOf: staging.appendingPathComponent("Contents/a/b.txt"), encoding: .utf8) == "b")
    }

    @Test("UTF-8 names survive although this process runs in the C locale")
    func utf8Names() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        #expect(String(cString: setlocale(LC_CTYPE, nil)) == "C")
        let names = ["niveau-été/château.txt", "日本語/ファイル.txt", "emoji-🎮.txt"]
        let package = directory.appending("pack.zip")
        try PackageFixtures.infoZip(
            product: product, version: "1", files: Dictionary(uniqueKeysWithValues: names.map { ($0, Data($0.utf8)) }), at: package
        )
        let (_, staging) = try extract(package, in: directory)
        for name in names {
            let url = staging.appendingPathComponent("Contents/" + name)
            #expect(try Data(contentsOf: url) == Data(name.utf8), "\(name)")
        }
    }

    @Test("executable, setuid-free modes are dropped to 0644 and modification times kept")
    func modesAndTimes() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let source = directory.appending("source")
        try PackageFixtures.writeTree(
            ["ContentInfo.plist": Data(PackageFixtures.contentInfo(product: product, version: "1").utf8),
             "Contents/run.sh": Data("#!/bin/sh\necho hi\n".utf8),
             "Contents/sub/data.txt": Data("x".utf8)],
            in: source
        )
        chmod(source.appendingPathComponent("Contents/run.sh").path, 0o755)
        let stamp: time_t = 1_600_000_000
        for path in ["Contents/run.sh", "Contents/sub/data.txt", "Contents/sub"] {
            var times = [timeval(tv_sec: stamp, tv_usec: 0), timeval(tv_sec: stamp, tv_usec: 0)]
            utimes(source.appendingPathComponent(path).path, &times)
        }
        let package = directory.appending("pack.zip")
        let zip = try Shell.run("/usr/bin/zip", ["-q", "-r", package.path, "ContentInfo.plist", "Contents"], directory: source)
        #expect(zip.status == 0)
        let (_, staging) = try extract(package, in: directory)
        var status = stat()
        #expect(stat(staging.appendingPathComponent("Contents/run.sh").path, &status) == 0)
        #expect(status.st_mode & 0o7777 == 0o644)
        #expect(status.st_mtim.tv_sec == stamp)
        #expect(stat(staging.appendingPathComponent("Contents/sub").path, &status) == 0)
        #expect(status.st_mode & 0o7777 == 0o755)
        #expect(status.st_mtim.tv_sec == stamp)
    }

    @Test("an internal symbolic link is kept")
    func internalSymlink() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let package = directory.appending("pack.zip")
        try PackageFixtures.handMade(
            [.contentInfo(product: product, version: "1"), .file("Contents/a.txt", "a"), .symlink("Contents/alias.txt", to: "a.txt")],
            at: package
        )
        let (_, staging) = try extract(package, in: directory)
        let link = staging.appendingPathComponent("Contents/alias.txt").path
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: link) == "a.txt")
        #expect(try String(contentsOfFile: link, encoding: .utf8) == "a")
    }

    @Test("package create is reproducible and inspect reads it without extracting")
    func reproducibleCreate() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let source = directory.appending("source")
        try PackageFixtures.writeTree(
            ["b.txt": Data("b".utf8), "a/z.bin": PackageFixtures.noise(70_000), "a/é.txt": Data("e".utf8)], in: source
        )
        let first = directory.appending("first.zip")
        let second = directory.appending("second.zip")
        let info = try PackageBuilder.create(from: source, productId: product, version: "3.1", output: first)
        // Touch the sources: timestamps must not leak into the package.
        var times = [timeval(tv_sec: 1_700_000_000, tv_usec: 0), timeval(tv_sec: 1_700_000_000, tv_usec: 0)]
        utimes(source.appendingPathComponent("b.txt").path, &times)
        _ = try PackageBuilder.create(from: source, productId: product, version: "3.1", output: second)
        #expect(try Data(contentsOf: first) == Data(contentsOf: second))
        #expect(info.productId == product && info.version == "3.1")
        #expect(info.entryCount == 6)  // plist, Contents/, Contents/a/, 2 files in a, b.txt
        let inspected = try PackageInspector.inspect(first, limits: PackageConfiguration())
        #expect(inspected == info)
        // Info-ZIP's own tester accepts it.
        #expect(try Shell.run("/usr/bin/unzip", ["-tq", first.path]).status == 0)
        let (extracted, staging) = try extract(first, in: directory, version: "3.1")
        #expect(extracted.sha256 == info.sha256)
        let plistSize = try Data(contentsOf: staging.appendingPathComponent("ContentInfo.plist")).count
        #expect(info.unpackedSize == 70_000 + 1 + 1 + Int64(plistSize))
        #expect(extracted.unpackedSize == info.unpackedSize)
        #expect(try Data(contentsOf: staging.appendingPathComponent("Contents/a/z.bin")) == PackageFixtures.noise(70_000))
    }

    @Test("a hostile entry is refused and the staging folder removed")
    func hostileRemovesStaging() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let package = directory.appending("pack.zip")
        try PackageFixtures.handMade(
            [.contentInfo(product: product, version: "1"), .file("Contents/ok.txt", "ok"), .file("Contents/../../evil.txt", "evil")],
            at: package
        )
        #expect {
            _ = try extract(package, in: directory)
        } throws: { ($0 as? CourierError)?.code == .hostilePackage }
        #expect(!FileManager.default.fileExists(atPath: directory.appending("staging").path))
        #expect(!FileManager.default.fileExists(atPath: directory.appending("evil.txt").path))
    }

    @Test("a wrong product or version in ContentInfo.plist is refused")
    func wrongProductOrVersion() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let package = directory.appending("pack.zip")
        try PackageFixtures.infoZip(product: product, version: "1.0", files: ["a.txt": Data("a".utf8)], at: package)
        #expect {
            _ = try extract(package, in: directory, product: "com.example.other")
        } throws: { ($0 as? CourierError)?.code == .hostilePackage }
        #expect {
            _ = try extract(package, in: directory, version: "2.0")
        } throws: { ($0 as? CourierError)?.code == .hostilePackage }
        #expect(!FileManager.default.fileExists(atPath: directory.appending("staging").path))
    }

    @Test("a digest the caller already verified is carried instead of hashing again")
    func verifiedDigest() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let package = directory.appending("pack.zip")
        try PackageFixtures.infoZip(product: product, version: "1", files: ["a.txt": Data("a".utf8)], at: package)
        let digest = String(repeating: "0f", count: 32)
        let info = try PackageExtractor(configuration: PackageConfiguration())
            .extract(package, into: directory.appending("staging"), expectedProductId: product, expectedVersion: "1", verifiedSHA256: digest)
        #expect(info.sha256 == digest)
    }

    @Test("ContentVersion orders numerically")
    func versionOrder() {
        #expect(ContentVersion.compare("1.10", "1.9") == .orderedDescending)
        #expect(ContentVersion.compare("1.0", "1") == .orderedSame)
        #expect(ContentVersion.compare("2.0", "10.0") == .orderedAscending)
        #expect(ContentVersion.compare("1.0-beta", "1.0-rc") == .orderedAscending)
    }
}
