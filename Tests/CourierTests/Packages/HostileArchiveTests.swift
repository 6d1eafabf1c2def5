import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Archives that no one in Courier wrote (issue 10): numbers built to overflow the zip reader,
/// and the public hostile archives in `shared/hostile-archives/`. Each is refused with exit 6,
/// without a crash, without unpacking, without a space check or a purge.
@Suite("Hostile archives")
struct HostileArchiveTests {
    static let keep = "com.example.keep"

    /// `../shared/hostile-archives` beside the clone, else the committed copy (SharedFixtures).
    static var corpus: URL { SharedFixtures.folder("hostile-archives") }

    static func corpusFiles() throws -> [URL] {
        let names = try FileManager.default.contentsOfDirectory(atPath: corpus.path)
        return names.filter { $0.hasSuffix(".zip") || $0.hasSuffix(".bin") }.sorted().map { corpus.appendingPathComponent($0) }
    }

    /// Runs `courier ARGS` with at most `maxFileSize` bytes per written file (RLIMIT_FSIZE via
    /// prlimit): a run that starts unpacking gigabytes dies of SIGXFSZ instead of exiting 6.
    static func runBounded(_ arguments: [String], maxFileSize: Int = 64 << 20, directory: URL) throws -> (Process.TerminationReason, Int32, String) {
        let err = directory.appendingPathComponent("stderr-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: err) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
        process.arguments = ["--fsize=\(maxFileSize)", CourierBinary.url.path] + arguments
        process.currentDirectoryURL = directory
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: err)
        try process.run()
        process.waitUntilExit()
        return (process.terminationReason, process.terminationStatus, (try? String(contentsOf: err, encoding: .utf8)) ?? "")
    }

    /// A fresh storage holding another product in Caches (the one a purge would take first).
    static func storageWithCachedProduct(_ directory: TemporaryDirectory) throws -> URL {
        let storage = directory.appending("Storage")
        let package = directory.appending("keep.zip")
        try PackageFixtures.infoZip(product: keep, version: "1.0", files: ["keep.txt": Data("keep".utf8)], at: package)
        let install = try CourierBinary.run(
            ["package", "install", package.path, "--placement", "cache", "--storage", storage.path], directory: directory.url)
        try #require(install.status == 0, "\(install.stderr)")
        try FileManager.default.removeItem(at: package)
        return storage
    }

    /// Refuses `file` through `inspect` and `install --placement cache` (with and without
    /// `--product`), checking exit 6, no crash, nothing written, the cached product kept.
    static func expectRefused(_ file: URL, label: String, configuration: String? = nil) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let storage = try storageWithCachedProduct(directory)
        var common = ["--storage", storage.path]
        if let configuration {
            let config = directory.appending("courier.json")
            try Data(configuration.utf8).write(to: config)
            common += ["--config", config.path]
        }
        let kept = storage.appendingPathComponent("Caches/\(keep)/Contents/keep.txt")
        let before = Set(PackageFixtures.snapshot(directory.url))
        let runs: [[String]] = [
            ["package", "inspect", file.path],
            ["package", "install", file.path, "--placement", "cache"],
            ["package", "install", file.path, "--placement", "cache", "--product", "com.example.x"],
        ]
        for arguments in runs {
            let started = Date()
            let (reason, status, stderr) = try runBounded(arguments + common, directory: directory.url)
            let took = Date().timeIntervalSince(started)
            #expect(reason == .exit && status == 6, "\(label) \(arguments[1]): \(reason) \(status) \(stderr)")
            #expect(took < 30, "\(label) \(arguments[1]) took \(took) s")
            #expect(FileManager.default.fileExists(atPath: kept.path), "\(label) \(arguments[1]) purged the cached product")
        }
        let after = Set(PackageFixtures.snapshot(directory.url))
        let transient: Set<String> = ["Storage/state.sqlite-wal", "Storage/state.sqlite-shm"]
        #expect(after.subtracting(before).subtracting(transient).isEmpty, "\(label) wrote \(after.subtracting(before).sorted())")
        let list = try CourierBinary.run(["content", "list", "--json"] + common, directory: directory.url)
        #expect(list.stdout.contains(keep), "\(label): \(list.stdout)")
    }

    @Test("the 106-byte Zip64 locator and the 2^64-1 Zip64 size are refused by the pure reader")
    func pureReaderRefusesOverflow() throws {
        #expect(PackageFixtures.zip64LocatorOverflow().count == 106)
        for bytes in [PackageFixtures.zip64LocatorOverflow(), PackageFixtures.zip64SizeOverflow()] {
            do {
                let directory = try ZipDirectory.parse([UInt8](bytes))
                try directory.check(PackageConfiguration())
                Issue.record("accepted")
            } catch let error as CourierError {
                #expect(error.code == .integrity || error.code == .hostilePackage, "\(error)")
            }
        }
    }

    @Test("overflowing Zip64 numbers: inspect and install exit 6, no crash, nothing purged",
          arguments: ["locator", "size"])
    func overflowThroughCLI(_ which: String) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.appending("\(which).zip")
        try (which == "locator" ? PackageFixtures.zip64LocatorOverflow() : PackageFixtures.zip64SizeOverflow()).write(to: file)
        try Self.expectRefused(file, label: which)
        // Limits raised as far as they go: the overflow itself must still be refused.
        try Self.expectRefused(
            file, label: "\(which) (loose limits)",
            configuration: #"{"packages": {"maxUnpackedSize": 9223372036854775807, "maxCompressionRatio": 1e300}}"#)
    }

    @Test("every public hostile archive: inspect and install --placement cache exit 6, nothing unpacked or purged")
    func publicCorpus() throws {
        let files = try Self.corpusFiles()
        try #require(
            files.count >= 5, "the hostile-archive corpus is missing at \(Self.corpus.path)")
        for file in files {
            try Self.expectRefused(file, label: file.lastPathComponent)
            // With the size and ratio limits lifted, the structure (overlaps, sizes past the
            // file, no ContentInfo.plist) still refuses it before anything is written.
            try Self.expectRefused(
                file, label: "\(file.lastPathComponent) (loose limits)",
                configuration: #"{"packages": {"maxUnpackedSize": 9223372036854775807, "maxCompressionRatio": 1e300}}"#)
        }
    }
}
