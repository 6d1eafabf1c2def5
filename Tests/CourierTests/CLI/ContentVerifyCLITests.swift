@testable import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `courier content verify [PRODUCT] [--repair]` (issue 28, section 5): placed files checked
/// against what their install recorded; a repair fetches only what is missing or damaged (by
/// entries where the package has a manifest), the purchase staying finished. The sandbox's
/// store and packages, a real nginx, the built binary.
@Suite("content verify and repair (the built courier binary)", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct ContentVerifyCLITests {
    static let product = "com.example.levels.pack1"

    /// Delivers the sandbox's level pack from `nginx` (its catalog at `catalogPath`).
    static func delivered(_ shop: RestoreCLITests.Shop, _ nginx: NginxServer, catalogPath: String = "catalog.json") throws {
        let result = try shop.deliver([], catalog: nginx.url(catalogPath).absoluteString)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(shop.placed(product))
    }

    static func folder(_ shop: RestoreCLITests.Shop) -> URL {
        shop.storage.appendingPathComponent("Documents/\(product)")
    }

    /// Overwrites `count` bytes of `file` in the middle with zeros (its size unchanged).
    static func damage(_ file: URL, count: Int = 16) throws {
        let handle = try FileHandle(forUpdating: file)
        defer { try? handle.close() }
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: size / 2)
        try handle.write(contentsOf: Data(repeating: 0, count: count))
    }

    static func verified(_ result: CourierBinary.Result) -> [[String: Any]] {
        result.events.filter { $0["event"] as? String == "verified" }
    }

    @Test("ok, then a changed byte and a removed file are found (exit 6); --repair fetches the package, the purchase stays finished")
    func wholePackageRepair() throws {
        let shop = try RestoreCLITests.Shop()
        defer { shop.directory.remove() }
        let nginx = try NginxServer(root: shop.sandbox.directory)
        defer { nginx.stop() }
        try Self.delivered(shop, nginx)
        let finishedAt = try shop.transaction().finishedAt

        let ok = try shop.courier(["content", "verify"])
        #expect(ok.status == 0, "\(ok.stdout)\(ok.stderr)")
        #expect(ok.stdout.contains("\(Self.product) 1.0: ok"), "\(ok.stdout)")

        let folder = Self.folder(shop)
        try Self.damage(folder.appendingPathComponent("Contents/data.bin"))
        try FileManager.default.removeItem(at: folder.appendingPathComponent("Contents/README.txt"))
        let bad = try shop.courier(["content", "verify", Self.product, "--json"])
        #expect(bad.status == 6, "\(bad.stdout)\(bad.stderr)")
        let check = try #require(Self.verified(bad).first)
        #expect(check["status"] as? String == "damaged")
        #expect(check["damagedFiles"] as? [String] == ["Contents/data.bin"], "\(check)")
        #expect(check["missingFiles"] as? [String] == ["Contents/README.txt"], "\(check)")
        #expect(bad.events.last?["event"] as? String == "error")
        #expect(bad.events.last?["exitCode"] as? Int == 6)

        let before = nginx.accessLog().count
        let repair = try shop.courier(["content", "verify", "--repair", "--json"])
        #expect(repair.status == 0, "\(repair.stdout)\(repair.stderr)")
        let repaired = repair.events.first { $0["event"] as? String == "repair" }
        #expect(repaired?["method"] as? String == "package", "\(repair.stdout)")
        #expect(Self.verified(repair).last?["status"] as? String == "ok", "\(repair.stdout)")
        #expect(Self.verified(repair).last?["repaired"] as? Bool == true, "\(repair.stdout)")
        #expect(repair.events.last?["event"] as? String == "result")
        #expect(nginx.accessLog(atLeast: before + 1).dropFirst(before).contains { $0.contains("levels-pack1.zip") })
        #expect(try shop.courier(["content", "verify"]).status == 0)
        let after = try shop.transaction()
        #expect(after.state == .finished)
        #expect(after.finishedAt == finishedAt)
    }

    @Test("deleted content named by its product is missing (exit 6); --repair brings it back")
    func missingAfterDelete() throws {
        let shop = try RestoreCLITests.Shop()
        defer { shop.directory.remove() }
        let nginx = try NginxServer(root: shop.sandbox.directory)
        defer { nginx.stop() }
        try Self.delivered(shop, nginx)
        #expect(try shop.courier(["content", "delete", Self.product]).status == 0)
        let missing = try shop.courier(["content", "verify", Self.product])
        #expect(missing.status == 6, "\(missing.stdout)\(missing.stderr)")
        #expect(missing.stdout.contains("missing"), "\(missing.stdout)")
        #expect(missing.stderr.contains("--repair"), "\(missing.stderr)")
        let repair = try shop.courier(["content", "verify", Self.product, "--repair"])
        #expect(repair.status == 0, "\(repair.stdout)\(repair.stderr)")
        #expect(shop.placed(Self.product))
        #expect(try shop.transaction().state == .finished)
        // Nothing delivered under that name: not found (exit 1).
        #expect(try shop.courier(["content", "verify", "com.example.nothing"]).status == 1)
    }

    @Test("with a manifest (a prestaged package), a damaged small file is repaired by its entry, not the whole package")
    func entryRepair() throws {
        let shop = try RestoreCLITests.Shop()
        defer { shop.directory.remove() }
        // Prestage the sandbox's catalog (a file: its packages are copied from its folder), so
        // each package gets a manifest, then serve the staged tree.
        let staged = shop.directory.appending("staged")
        let prestage = try shop.courier(["prestage", "--catalog", shop.catalogFile.path, "--dest", staged.path])
        #expect(prestage.status == 0, "\(prestage.stdout)\(prestage.stderr)")
        let nginx = try NginxServer(root: staged)
        defer { nginx.stop() }
        try Self.delivered(shop, nginx)
        let package = try #require(try shop.queue().lastDelivery(of: Self.product))
        #expect(package.manifest != nil, "the prestaged catalog names no manifest")

        try Self.damage(Self.folder(shop).appendingPathComponent("Contents/README.txt"), count: 4)
        let repair = try shop.courier(["content", "verify", "--repair", "--json"])
        #expect(repair.status == 0, "\(repair.stdout)\(repair.stderr)")
        let repaired = try #require(repair.events.first { $0["event"] as? String == "repair" })
        #expect(repaired["method"] as? String == "entries", "\(repair.stdout)")
        let fetched = try #require(repaired["bytesFetched"] as? Int)
        #expect(Int64(fetched) < package.length / 10, "\(fetched) of \(package.length) bytes fetched for one small file")
        #expect(try shop.courier(["content", "verify"]).status == 0)
        let text = try String(contentsOf: Self.folder(shop).appendingPathComponent("Contents/README.txt"), encoding: .utf8)
        #expect(text.hasPrefix("Level pack 1"), "\(text)")
    }
}
