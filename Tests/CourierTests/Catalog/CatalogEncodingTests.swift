import Courier
import CourierTestSupport
import Foundation
import Testing

/// `Catalog.encoded()` and `PrestagePlan.encoded()` are written by hand (`JSONText`): they must
/// say what `JSONEncoder` says, for any catalog.
@Suite("Catalog and plan encoding")
struct CatalogEncodingTests {
    /// Up to `count` scalars from all of Unicode, control characters, quotes and slashes included.
    static func text(_ generator: inout some RandomNumberGenerator, upTo count: Int = 12) -> String {
        var scalars = String.UnicodeScalarView()
        for _ in 0..<Int.random(in: 0...count, using: &generator) {
            let ranges: [ClosedRange<UInt32>] = [0...0x1F, 0x20...0x7F, 0x22...0x22, 0x2F...0x2F, 0x5C...0x5C, 0x80...0xD7FF, 0xE000...0x10_FFFF]
            if let scalar = UnicodeScalar(UInt32.random(in: ranges.randomElement(using: &generator)!, using: &generator)) {
                scalars.append(scalar)
            }
        }
        return String(scalars)
    }


    static func content(_ generator: inout some RandomNumberGenerator, safe: Bool = false) -> Catalog.Content {
        let hex = Array("0123456789abcdefABCDEF")
        let url = safe ? "p/\(Int.random(in: 0...999, using: &generator)).zip" : text(&generator)
        let sha256 = safe || Bool.random(using: &generator) ? String((0..<64).map { _ in hex.randomElement(using: &generator)! }) : text(&generator)
        var content = Catalog.Content(
            url: url, sha256: sha256, length: Int64.random(in: 0...Catalog.Content.maxLength, using: &generator),
            version: text(&generator), placement: Catalog.Placement.allCases.randomElement(using: &generator)!)
        if Bool.random(using: &generator) { content.unpackedLength = Int64.random(in: 0...Catalog.Content.maxLength, using: &generator) }
        if Bool.random(using: &generator) {
            // A plan's catalogs were read from documents: their mirrors are http(s) URLs.
            content.mirrors = (0..<Int.random(in: 0...3, using: &generator)).map { _ in
                safe ? "https://mirror\(Int.random(in: 0...9, using: &generator)).example.com/p.zip" : text(&generator)
            }
        }
        if Bool.random(using: &generator) {
            let url = text(&generator)
            let sha256 = text(&generator)
            let length = Int64.random(in: 0...Int64(PackageManifest.maxDocumentSize), using: &generator)
            content.manifest = Catalog.Manifest(url: url, sha256: sha256, length: length)
        }
        return content
    }

    static func catalog(_ generator: inout some RandomNumberGenerator, products count: Int, safe: Bool = false) -> Catalog {
        let types: [Catalog.ProductType] = [.consumable, .nonConsumable, .nonRenewable, .autoRenewable]
        var products: [Catalog.Product] = []
        for index in 0..<count {
            let productId = safe ? "com.example.p\(index)" : text(&generator)
            var product = Catalog.Product(productId: productId, type: types.randomElement(using: &generator)!)
            if Bool.random(using: &generator) { product.content = content(&generator, safe: safe) }
            if Bool.random(using: &generator) {
                var items: [Catalog.Item] = []
                for item in 0..<Int.random(in: 0...3, using: &generator) {
                    let itemId = safe ? "i\(item)" : text(&generator)
                    // Whole seconds and fractions, before 1970 and far ahead.
                    var seconds = Double(Int64.random(in: -2_000_000_000...9_000_000_000, using: &generator))
                    if Bool.random(using: &generator) { seconds /= 1000 }
                    items.append(Catalog.Item(itemId: itemId, publishedAt: Date(timeIntervalSince1970: seconds), content: content(&generator, safe: safe)))
                }
                product.items = items
            }
            products.append(product)
        }
        return Catalog(bundleId: text(&generator), products: products)
    }

    @Test("Catalog.encoded() writes what JSONEncoder writes (pretty, sorted keys, `/` unescaped, ISO 8601 dates)")
    func catalogMatchesJSONEncoder() throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        var generator = SystemRandomNumberGenerator()
        var catalogs = [
            Catalog(bundleId: "com.example.app", products: []),
            Catalog(bundleId: "", products: [Catalog.Product(productId: "p", items: [])]),
            Catalog(
                bundleId: "a/b", products: [
                    Catalog.Product(
                        productId: "p",
                        content: Catalog.Content(
                            url: "https://cdn.example.com/p.zip", sha256: String(repeating: "a", count: 64), length: 0, version: "1.0",
                            placement: .cache, mirrors: []))
                ]),
        ]
        for _ in 0..<300 { catalogs.append(Self.catalog(&generator, products: Int.random(in: 0...5, using: &generator))) }
        for catalog in catalogs {
            let expected = try encoder.encode(catalog)
            let written = try catalog.encoded()
            #expect(written == expected, "\(String(decoding: written, as: UTF8.self))\n---\n\(String(decoding: expected, as: UTF8.self))")
        }
    }

    @Test("a plan's encoding reads back as the same plan: tasks, unchanged, refused and the catalog it publishes")
    func planRoundTrips() throws {
        var generator = SystemRandomNumberGenerator()
        var seen = (tasks: 0, items: 0, unchanged: 0, refused: 0, selected: 0)
        for round in 0..<40 {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let tree = try LocalStagingTree(root: folder.url)
            // A published catalog in half the rounds, and some of its packages already staged.
            if round % 2 == 1 {
                var published = Self.catalog(&generator, products: 4, safe: true)
                for index in published.products.indices {
                    // Products of their own, with small packages (so that these can be written) at
                    // their staged paths, as a run publishes them.
                    let productId = "com.example.published\(index)"
                    published.products[index].productId = productId
                    if let sha256 = published.products[index].content?.sha256 {
                        published.products[index].content?.length = 3
                        published.products[index].content?.url = PrestagePlan.stagedPath(contentIdentifier: productId, sha256: sha256)
                    }
                    published.products[index].items = published.products[index].items?.map { item in
                        var item = item
                        item.content.length = 3
                        item.content.url = PrestagePlan.stagedPath(contentIdentifier: "\(productId).\(item.itemId)", sha256: item.content.sha256)
                        return item
                    }
                }
                for entry in published.allContent.prefix(2) {
                    let path = PrestagePlan.stagedPath(contentIdentifier: entry.contentIdentifier, sha256: entry.content.sha256)
                    try FileManager.default.createDirectory(
                        at: folder.url.appendingPathComponent(path).deletingLastPathComponent(), withIntermediateDirectories: true)
                    try Data("zip".utf8).write(to: folder.appending(path))
                }
                try tree.publishCatalog(published)
            }
            // Safe entries (tasks) and unsafe ones (refused, their reasons quoting the bad values).
            var upstream = Self.catalog(&generator, products: 6, safe: true)
            upstream.products += Self.catalog(&generator, products: 3).products.map { product in
                // Any identifiers and values but mirrors, which a catalog document cannot hold.
                var product = product
                product.content?.mirrors = nil
                product.items = product.items?.map { item in
                    var item = item
                    item.content.mirrors = nil
                    return item
                }
                return product
            }
            if let published = try tree.publishedCatalog() { upstream.products += published.products.prefix(2) }
            let selection: Set<String>? = round % 3 == 0 ? Set(upstream.products.prefix(4).map(\.productId)) : nil
            let plan = try PrestagePlan(
                upstream: upstream, upstreamLocation: URL(string: "http://127.0.0.1:9/a b/catalog.json"), tree: tree, products: selection)
            seen.tasks += plan.tasks.count
            seen.items += plan.tasks.filter { $0.itemId != nil }.count
            seen.unchanged += plan.unchanged.count
            seen.refused += plan.refused.count
            seen.selected += selection == nil ? 0 : 1
            let decoded = try PrestagePlan.decode(plan.encoded())
            #expect(decoded.tasks == plan.tasks)
            #expect(decoded.unchanged == plan.unchanged)
            #expect(decoded.refused.map(\.contentIdentifier) == plan.refused.map(\.contentIdentifier))
            #expect(decoded.refused.map(\.reason) == plan.refused.map(\.reason))
            let staged = Set(plan.tasks.prefix(plan.tasks.count / 2).map(\.contentIdentifier))
            #expect(decoded.catalog(staged: staged) == plan.catalog(staged: staged))
        }
        // The rounds covered every part of a plan.
        #expect(seen.tasks > 0 && seen.items > 0 && seen.unchanged > 0 && seen.refused > 0 && seen.selected > 0, "\(seen)")
    }
}
