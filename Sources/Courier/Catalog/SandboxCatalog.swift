import Foundation

/// The sandbox store's sample content: real hosted content packages and a catalog that lists
/// them, written beside the sandbox signing chain (`courier sandbox init`).
///
/// Four products show the kinds of delivery: a non-consumable placed in Documents
/// (`com.example.levels.pack1`), a non-consumable placed in Caches (`com.example.soundtrack`), an
/// auto-renewable subscription (`com.example.magazine`) with a monthly issue published on the
/// 1st of each month of `year`, and an on-demand non-consumable (`com.example.artbook`, delivery
/// class `onDemand`, preservation `low`: fetched only by `courier content open`,
/// docs/delivery-classes.md). Package URLs in the catalog are relative (`packages/NAME.zip`),
/// so the folder can be served as it is or pre-staged from.
public enum SandboxCatalog {
    /// The bundle id of the sample catalog (the receipts configuration's default too).
    public static let bundleId = "com.example.app"

    /// One sample product: what is packed and how it is listed.
    struct Sample {
        var productId: String
        var version: String
        var placement: Catalog.Placement
        /// Bytes of payload: a text file plus pseudo-random data (incompressible, like media).
        var payloadBytes: Int
    }

    /// Writes `packages/*.zip` and `catalog.json` into `directory` and returns the catalog.
    /// Idempotent: the packages are reproducible, so running it again gives the same bytes.
    @discardableResult
    public static func write(into directory: URL, bundleId: String = bundleId, year: Int = 2026) throws -> Catalog {
        let fileManager = FileManager.default
        let packages = directory.appendingPathComponent("packages", isDirectory: true)
        let scratch = directory.appendingPathComponent(".payload-\(UUID().uuidString)", isDirectory: true)
        try CourierError.wrapping(.io, "cannot create \(packages.path)") {
            try fileManager.createDirectory(at: packages, withIntermediateDirectories: true)
        }
        defer { try? fileManager.removeItem(at: scratch) }

        func build(
            _ sample: Sample, fileName: String, title: String, delivery: Catalog.DeliveryClass? = nil,
            preservation: Catalog.Preservation? = nil
        ) throws -> Catalog.Content {
            let payload = scratch.appendingPathComponent(fileName, isDirectory: true)
            try writePayload(into: payload, title: title, bytes: sample.payloadBytes, seed: fileName)
            let output = packages.appendingPathComponent("\(fileName).zip")
            let info = try PackageBuilder.create(
                from: payload, productId: sample.productId, version: sample.version, output: output)
            return Catalog.Content(
                url: "packages/\(fileName).zip", sha256: info.sha256, length: info.packedSize,
                version: sample.version, placement: sample.placement, unpackedLength: info.unpackedSize, delivery: delivery,
                preservation: preservation)
        }

        let levels = Sample(productId: "com.example.levels.pack1", version: "1.0", placement: .documents, payloadBytes: 3 << 20)
        let soundtrack = Sample(productId: "com.example.soundtrack", version: "2.1", placement: .cache, payloadBytes: 8 << 20)
        var products = [
            Catalog.Product(
                productId: levels.productId, type: .nonConsumable,
                content: try build(levels, fileName: "levels-pack1", title: "Level pack 1")),
            Catalog.Product(
                productId: soundtrack.productId, type: .nonConsumable,
                content: try build(soundtrack, fileName: "soundtrack", title: "Soundtrack")),
        ]
        let artbook = Sample(productId: "com.example.artbook", version: "1.0", placement: .cache, payloadBytes: 2 << 20)
        products.append(
            Catalog.Product(
                productId: artbook.productId, type: .nonConsumable,
                content: try build(artbook, fileName: "artbook", title: "Art book", delivery: .onDemand, preservation: .low)))
        var items: [Catalog.Item] = []
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC") ?? calendar.timeZone
        for month in 1...12 {
            guard let published = calendar.date(from: DateComponents(year: year, month: month, day: 1)) else { continue }
            let itemId = String(format: "%04d-%02d", year, month)
            let issue = Sample(productId: "com.example.magazine", version: "1.0", placement: .documents, payloadBytes: 1 << 20)
            let content = try build(issue, fileName: "magazine-\(itemId)", title: "Magazine, issue \(itemId)")
            items.append(Catalog.Item(itemId: itemId, publishedAt: published, content: content))
        }
        products.append(Catalog.Product(productId: "com.example.magazine", type: .autoRenewable, items: items))

        let catalog = Catalog(bundleId: bundleId, products: products)
        let file = directory.appendingPathComponent("catalog.json")
        try CourierError.wrapping(.io, "cannot write \(file.path)") { try catalog.encoded().write(to: file, options: .atomic) }
        return catalog
    }

    /// A README and `bytes` of deterministic pseudo-random data (xorshift64*, seeded by name):
    /// incompressible like real media, and the same bytes on every run.
    private static func writePayload(into folder: URL, title: String, bytes: Int, seed: String) throws {
        try CourierError.wrapping(.io, "cannot write the sample payload in \(folder.path)") {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try Data("\(title)\nSample content of the Courier sandbox store.\n".utf8)
                .write(to: folder.appendingPathComponent("README.txt"))
            var state = seed.utf8.reduce(UInt64(0x9E37_79B9_7F4A_7C15)) { ($0 ^ UInt64($1)) &* 0x100_0000_01B3 }
            var words = [UInt64](repeating: 0, count: (bytes + 7) / 8)
            for index in words.indices {
                state ^= state >> 12
                state ^= state << 25
                state ^= state >> 27
                words[index] = state &* 0x2545_F491_4F6C_DD1D
            }
            let data = words.withUnsafeBytes { Data($0.prefix(bytes)) }
            try data.write(to: folder.appendingPathComponent("data.bin"))
        }
    }
}
