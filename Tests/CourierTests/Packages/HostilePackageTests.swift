import Courier
import CourierTestSupport
import Foundation
import Testing

/// Every rule of issue 4, through the real `courier package install`: exit 6, the right error code,
/// and nothing written anywhere but the storage skeleton (the staging folder is gone).
@Suite("Hostile packages")
struct HostilePackageTests {
    static let product = "com.example.levels.pack1"

    enum Case: String, CaseIterable, Sendable {
        case dotDot, dotDotInside, absolutePath, backslash, symlinkOutRelative, symlinkOutAbsolute
        case writeThroughSymlink, symlinkChainOut, hardLink, characterDevice, blockDevice, fifo, setuid, setgid
        case totalSize, entryCount, zipBomb, lyingSize, missingPlist, wrongProduct, wrongVersion, invalidPlist
        case duplicateEntry, truncated, corrupt, notAZip
        case combiningDotDot, combiningSymlinkOut, equivalentProduct
    }

    struct Setup {
        var expected: Set<CourierError.Code> = [.hostilePackage]
        var arguments: [String] = []
        var configuration: String?
    }

    /// Makes the package of `hostile` at `package`; `outside` is a folder the package aims at.
    static func make(_ hostile: Case, at package: URL, outside: URL) throws -> Setup {
        typealias E = PackageFixtures.Entry
        let info = E.contentInfo(product: product, version: "1.0")
        let ok = E.file("Contents/ok.txt", "ok")
        var setup = Setup()
        func zip(_ entries: [E]) throws { try PackageFixtures.handMade(entries, at: package) }
        switch hostile {
        case .dotDot: try zip([info, ok, .file("../evil.txt", "evil")])
        case .dotDotInside: try zip([info, ok, .file("Contents/../../../evil.txt", "evil")])
        case .absolutePath: try zip([info, ok, .file(outside.appendingPathComponent("evil.txt").path, "evil")])
        case .backslash: try zip([info, ok, .file("Contents\\..\\..\\evil.txt", "evil")])
        case .combiningDotDot:
            // "/" then U+0301 is one Character to Swift, not "/": still a separator to the kernel
            // (this wrote `.staging/\u{301}evil.txt`, beside the package's staging folder).
            try zip([info, ok, .file("../\u{301}evil.txt", "evil")])
        case .equivalentProduct:
            // U+212A KELVIN SIGN is canonically equivalent to "K": `==` on String took this
            // ContentInfo.plist for the product it names with a "K"; StoreKit compares literally.
            try zip([E.contentInfo(product: "com.example.levels.pac\u{212A}1", version: "1.0"), ok])
            setup.arguments = ["--product", "com.example.levels.pacK1"]
        case .combiningSymlinkOut:
            // Absolute to the kernel, which resolves "/\u{301}/../" to "/".
            try zip([info, ok, .symlink("Contents/out", to: "/\u{301}/.." + outside.path)])
        case .symlinkOutRelative: try zip([info, ok, .symlink("Contents/out", to: "../../../outside")])
        case .symlinkOutAbsolute:
            try zip([info, ok, .symlink("Contents/out", to: outside.path), .file("Contents/out/evil.txt", "evil")])
        case .writeThroughSymlink:
            try zip([info, ok, .symlink("Contents/alias", to: "."), .file("Contents/alias/evil.txt", "evil")])
        case .symlinkChainOut:
            // Each link alone stays inside; together `a` climbs out through `s` (created after it).
            try zip([info, ok, .symlink("a", to: "s/../evil"), .symlink("s", to: ".")])
        case .hardLink:
            // Zip cannot express hard links; a tar holding one, named .zip, must be refused too.
            let scratch = try TemporaryDirectory(prefix: "courier-hardlink")
            defer { scratch.remove() }
            try PackageFixtures.writeTree(["ContentInfo.plist": Data(PackageFixtures.contentInfo(product: product, version: "1.0").utf8), "Contents/a.txt": Data("a".utf8)], in: scratch.url)
            _ = link(scratch.appending("Contents/a.txt").path, scratch.appending("Contents/b.txt").path)
            let tar = try Shell.run("/usr/bin/bsdtar", ["-cf", package.path, "-C", scratch.path, "ContentInfo.plist", "Contents"])
            #expect(tar.status == 0)
            setup.expected = [.integrity]
        case .characterDevice: try zip([info, ok, E(name: "Contents/tty", mode: 0o020644)])
        case .blockDevice: try zip([info, ok, E(name: "Contents/sda", mode: 0o060644)])
        case .fifo: try zip([info, ok, E(name: "Contents/pipe", mode: 0o010644)])
        case .setuid: try zip([info, ok, .file("Contents/tool", "#!/bin/sh\n", mode: 0o104755)])
        case .setgid: try zip([info, ok, .file("Contents/tool", "#!/bin/sh\n", mode: 0o102755)])
        case .totalSize:
            try zip([info, E(name: "Contents/big.bin", data: PackageFixtures.noise(2 << 20))])
            setup.configuration = #"{"packages": {"maxUnpackedSize": 1048576}}"#
        case .entryCount:
            try zip([info] + (0..<20).map { E.file("Contents/f\($0).txt", "\($0)") })
            setup.configuration = #"{"packages": {"maxEntryCount": 10}}"#
        case .zipBomb: try zip([info, E(name: "Contents/zeros.bin", zeros: 1 << 30)])
        case .lyingSize:
            try zip([info, E(name: "Contents/zeros.bin", zeros: 64 << 20, declaredSize: 1000)])
            setup.expected = [.hostilePackage, .integrity]
        case .missingPlist: try zip([ok, .file("Contents/Info.plist", "x")])
        case .wrongProduct:
            try zip([info, ok])
            setup.arguments = ["--product", "com.example.other"]
        case .wrongVersion:
            try zip([info, ok])
            setup.arguments = ["--product", product, "--version", "2.0"]
        case .invalidPlist: try zip([.file("ContentInfo.plist", "<plist><dict><key>"), ok])
        case .duplicateEntry: try zip([info, ok, .file("Contents/ok.txt", "again")])
        case .truncated, .corrupt:
            try PackageFixtures.infoZip(product: product, version: "1.0", files: ["noise.bin": PackageFixtures.noise(400_000)], at: package)
            var data = try Data(contentsOf: package)
            if hostile == .truncated {
                data = data.prefix(data.count / 2)
            } else {
                for offset in stride(from: 150_000, to: 150_064, by: 1) { data[offset] ^= 0x5A }
            }
            try data.write(to: package)
            setup.expected = [.integrity]
            setup.arguments = ["--product", product]
        case .notAZip:
            try PackageFixtures.noise(50_000).write(to: package)
            setup.expected = [.integrity]
            setup.arguments = ["--product", product]
        }
        return setup
    }

    /// What a refused install may leave: the storage skeleton, nothing else.
    static let skeleton: Set<String> = [
        "Storage", "Storage/state.sqlite", "Storage/state.sqlite-wal", "Storage/state.sqlite-shm",
        "Storage/Downloads", "Storage/Caches", "Storage/Caches/CACHEDIR.TAG", "Storage/Documents",
        "Storage/Caches/.staging", "Storage/Documents/.staging",
    ]

    @Test("refused with exit 6, nothing written outside staging, staging gone", arguments: Case.allCases)
    func refused(_ hostile: Case) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let outside = directory.appending("outside")
        try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: true)
        let package = directory.appending("package.zip")
        let setup = try Self.make(hostile, at: package, outside: outside)
        var arguments = ["--json", "--storage", directory.appending("Storage").path]
        if let configuration = setup.configuration {
            let file = directory.appending("courier.json")
            try Data(configuration.utf8).write(to: file)
            arguments += ["--config", file.path]
        }
        let before = Set(PackageFixtures.snapshot(directory.url))
        for placement in ["documents", "cache"] {
            let result = try CourierBinary.run(
                ["package", "install", package.path, "--placement", placement] + setup.arguments + arguments,
                directory: directory.url
            )
            #expect(result.status == 6, "\(hostile) \(placement): \(result.stdout) \(result.stderr)")
            let code = result.events.last?["code"] as? String
            #expect(setup.expected.map(\.rawValue).contains(code ?? "none"), "\(hostile): \(result.stdout)")
        }
        let added = Set(PackageFixtures.snapshot(directory.url)).subtracting(before)
        #expect(added.isSubset(of: Self.skeleton), "\(hostile) wrote \(added.subtracting(Self.skeleton).sorted())")
        #expect(PackageFixtures.snapshot(outside).isEmpty)
    }

    @Test("inspect refuses the same packages without extracting", arguments: [Case.dotDot, .combiningDotDot, .symlinkOutAbsolute, .setuid, .zipBomb, .fifo])
    func inspectRefuses(_ hostile: Case) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let package = directory.appending("package.zip")
        _ = try Self.make(hostile, at: package, outside: directory.appending("outside"))
        let result = try CourierBinary.run(["package", "inspect", package.path, "--json"], directory: directory.url)
        #expect(result.status == 6, "\(result.stdout) \(result.stderr)")
        #expect(result.events.last?["code"] as? String == "hostilePackage")
    }
}
