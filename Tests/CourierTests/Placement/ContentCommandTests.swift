import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The `courier package` and `courier content` commands as a user runs them.
@Suite("courier package / content")
struct ContentCommandTests {
    static let product = "com.example.levels.pack1"

    func courier(_ arguments: [String], in directory: TemporaryDirectory, environment: [String: String] = [:]) throws -> CourierBinary.Result {
        try CourierBinary.run(arguments + ["--storage", directory.appending("Storage").path], environment: environment, directory: directory.url)
    }

    @Test("content path of a subscription's product lists each delivered item's folder")
    func subscriptionItems() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for item in ["jan", "feb"] {
            let source = directory.appending("source-\(item)")
            try PackageFixtures.writeTree(["issue.txt": Data(item.utf8)], in: source)
            let package = directory.appending("\(item).zip")
            let product = "com.example.magazine.\(item)"
            #expect(try courier(["package", "create", source.path, "--product", product, "--version", "1.0", "-o", package.path], in: directory).status == 0)
            #expect(try courier(["package", "install", package.path, "--placement", "cache"], in: directory).status == 0)
        }
        let path = try courier(["content", "path", "com.example.magazine"], in: directory)
        #expect(path.status == 0, "\(path.stderr)")
        let lines = path.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2, "\(path.stdout)")
        #expect(lines.contains { $0.hasSuffix("/com.example.magazine.jan") } && lines.contains { $0.hasSuffix("/com.example.magazine.feb") })
        // A prefix that is not a whole product id names nothing.
        #expect(try courier(["content", "path", "com.example.maga"], in: directory).status == 1)
    }

    @Test("create, inspect, install, content path / list / delete")
    func roundTrip() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let source = directory.appending("source")
        try PackageFixtures.writeTree(["levels/1.json": Data("{}".utf8)], in: source)
        let package = directory.appending("pack.zip")
        let create = try courier(["package", "create", source.path, "--product", Self.product, "--version", "1.0", "-o", package.path], in: directory)
        #expect(create.status == 0, "\(create.stderr)")
        let inspect = try courier(["package", "inspect", package.path, "--json"], in: directory)
        #expect(inspect.status == 0, "\(inspect.stderr)")
        let info = try #require(inspect.events.first)
        #expect(info["productId"] as? String == Self.product)
        #expect(info["version"] as? String == "1.0")
        #expect(info["entryCount"] as? Int == 4)
        #expect((info["sha256"] as? String)?.count == 64)

        let install = try courier(["package", "install", package.path, "--placement", "documents"], in: directory)
        #expect(install.status == 0, "\(install.stderr)")
        let path = try courier(["content", "path", Self.product], in: directory)
        #expect(path.status == 0)
        let folder = path.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(folder.hasSuffix("Storage/Documents/\(Self.product)"))
        #expect(FileManager.default.fileExists(atPath: folder + "/Contents/levels/1.json"))
        let list = try courier(["content", "list", "--json"], in: directory)
        let listing = try #require(list.events.first)
        let content = try #require(listing["content"] as? [[String: Any]])
        #expect(content.first?["version"] as? String == "1.0")
        #expect(content.first?["placement"] as? String == "documents")
        #expect(listing["backupExclusion"] is [String: Any])
        let text = try courier(["content", "list"], in: directory)
        #expect(text.stderr.contains("backup exclusion of Documents:"), "a note, on standard error")
        #expect(try courier(["content", "delete", Self.product], in: directory).status == 0)
        #expect(!FileManager.default.fileExists(atPath: folder))
        #expect(try courier(["content", "path", Self.product], in: directory).status == 1)
    }

    @Test("UTF-8 names install correctly under LC_ALL=C")
    func utf8UnderCLocale() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let package = directory.appending("pack.zip")
        let names = ["été/ça.txt", "中文/文件.txt"]
        try PackageFixtures.infoZip(product: Self.product, version: "1", files: Dictionary(uniqueKeysWithValues: names.map { ($0, Data($0.utf8)) }), at: package)
        let result = try courier(["package", "install", package.path, "--placement", "cache"], in: directory, environment: ["LC_ALL": "C", "LANG": "C"])
        #expect(result.status == 0, "\(result.stderr)")
        for name in names {
            let url = directory.appending("Storage/Caches/\(Self.product)/Contents/\(name)")
            #expect(try Data(contentsOf: url) == Data(name.utf8))
        }
    }

    @Test("not enough space: exit 4 before anything is written")
    func insufficientSpace() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let package = directory.appending("pack.zip")
        try PackageFixtures.infoZip(product: Self.product, version: "1", files: ["a.txt": Data("a".utf8)], at: package)
        let config = directory.appending("courier.json")
        try Data(#"{"transfer": {"diskReserve": 1152921504606846976}}"#.utf8).write(to: config)
        let result = try courier(["package", "install", package.path, "--placement", "documents", "--config", config.path, "--json"], in: directory)
        #expect(result.status == 4, "\(result.stdout)")
        #expect(result.events.last?["code"] as? String == "insufficientSpace")
        #expect(PackageFixtures.snapshot(directory.appending("Storage/Documents")).allSatisfy { $0 == ".staging" })
    }

    @Test("kill -9 during extraction: the old version stays intact and staging is cleaned at the next start")
    func killDuringExtraction() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let storage = directory.appending("Storage")
        let old = directory.appending("old.zip")
        try PackageFixtures.infoZip(product: Self.product, version: "1.0", files: ["version.txt": Data("1.0".utf8), "level.json": Data("{\"v\":1}".utf8)], at: old)
        #expect(try courier(["package", "install", old.path, "--placement", "documents"], in: directory).status == 0)

        // A big new version: 32 files of 8 MiB of random bytes, stored.
        let source = directory.appending("big")
        try FileManager.default.createDirectory(at: source.appendingPathComponent("Contents"), withIntermediateDirectories: true)
        try Data(PackageFixtures.contentInfo(product: Self.product, version: "2.0").utf8).write(to: source.appendingPathComponent("ContentInfo.plist"))
        try Data("2.0".utf8).write(to: source.appendingPathComponent("Contents/version.txt"))
        for index in 0..<32 {
            let dd = try Shell.run("/bin/dd", ["if=/dev/urandom", "of=\(source.path)/Contents/blob\(index).bin", "bs=1M", "count=8", "status=none"])
            #expect(dd.status == 0)
        }
        let big = directory.appending("big.zip")
        #expect(try Shell.run("/usr/bin/zip", ["-q", "-0", "-r", big.path, "ContentInfo.plist", "Contents"], directory: source).status == 0)
        try FileManager.default.removeItem(at: source)

        let child = try CourierBinary.start(
            ["package", "install", big.path, "--placement", "documents", "--storage", storage.path], directory: directory.url
        )
        let staging = storage.appendingPathComponent("Documents/.staging")
        let deadline = Date().addingTimeInterval(120)
        var caught = false
        while child.isRunning && Date() < deadline {
            // Extraction has begun once a staging folder holds content.
            let names = (try? FileManager.default.contentsOfDirectory(atPath: staging.path)) ?? []
            if names.contains(where: { !$0.hasSuffix(".lock") && FileManager.default.fileExists(atPath: "\(staging.path)/\($0)/Contents") }) {
                kill(child.processIdentifier, SIGKILL)
                caught = true
                break
            }
            usleep(1_000)
        }
        child.waitUntilExit()
        try #require(caught, "the install ended before extraction could be interrupted")
        #expect(child.terminationReason == .uncaughtSignal)

        let folder = storage.appendingPathComponent("Documents/\(Self.product)")
        #expect(try String(contentsOf: folder.appendingPathComponent("Contents/version.txt"), encoding: .utf8) == "1.0")
        #expect(try String(contentsOf: folder.appendingPathComponent("Contents/level.json"), encoding: .utf8) == "{\"v\":1}")
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("Contents/blob0.bin").path))
        #expect(!PackageFixtures.snapshot(staging).isEmpty, "the killed install left its staging behind")

        // The next start recovers: staging cleaned, the record still the old version.
        let list = try courier(["content", "list", "--json"], in: directory)
        #expect(list.status == 0)
        #expect(PackageFixtures.snapshot(staging).isEmpty)
        let content = try #require(list.events.first?["content"] as? [[String: Any]])
        #expect(content.count == 1 && content.first?["version"] as? String == "1.0")
        // And the new version still installs afterwards.
        #expect(try courier(["package", "install", big.path, "--placement", "documents"], in: directory).status == 0)
        #expect(try String(contentsOf: folder.appendingPathComponent("Contents/version.txt"), encoding: .utf8) == "2.0")
    }
}
