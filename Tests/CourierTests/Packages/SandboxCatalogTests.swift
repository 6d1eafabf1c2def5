import Courier
import CourierTestSupport
import Foundation
import Testing

@Suite("Sandbox sample content")
struct SandboxCatalogTests {
    @Test("sandbox init's catalog lists real packages whose digests, lengths and plists match")
    func catalogMatchesPackages() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        try SandboxCatalog.write(into: folder.url)
        let catalog = try Catalog.decode(Data(contentsOf: folder.appending("catalog.json")))
        #expect(catalog.bundleId == SandboxCatalog.bundleId)
        #expect(
            Set(catalog.products.map(\.productId)) == [
                "com.example.levels.pack1", "com.example.soundtrack", "com.example.magazine", "com.example.artbook",
            ])
        var contents: [(String, Catalog.Content)] = []
        for product in catalog.products {
            if let content = product.content { contents.append((product.productId, content)) }
            for item in product.items ?? [] { contents.append((product.productId, item.content)) }
        }
        #expect(contents.count == 15)
        // The on-demand sample (docs/delivery-classes.md): fetched only by `content open`.
        let artbook = try #require(catalog.product("com.example.artbook")?.content)
        #expect(artbook.delivery == .onDemand && artbook.preservation == .low)
        for (productId, content) in contents {
            let file = try #require(Catalog.resolve(content.url, relativeTo: folder.url.appendingPathComponent("catalog.json")))
            let info = try PackageInspector.inspect(file, limits: PackageConfiguration())
            #expect(info.productId == productId)
            #expect(info.version == content.version)
            #expect(info.sha256 == content.sha256)
            #expect(info.packedSize == content.length)
            #expect(info.unpackedSize == content.unpackedLength)
        }
        let magazine = try #require(catalog.product("com.example.magazine"))
        #expect(magazine.type == .autoRenewable)
        #expect(magazine.items?.count == 12)
    }

    @Test("the sample packages are reproducible")
    func reproducible() throws {
        let first = try TemporaryDirectory()
        let second = try TemporaryDirectory()
        defer {
            first.remove()
            second.remove()
        }
        let a = try SandboxCatalog.write(into: first.url)
        let b = try SandboxCatalog.write(into: second.url)
        #expect(a == b)
    }
}
