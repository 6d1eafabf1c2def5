import Foundation

/// The catalog: which hosted content each product unlocks (DESIGN.md, "Catalog").
///
/// ```json
/// { "bundleId": "com.example.app",
///   "products": [
///     { "productId": "com.example.levels.pack1", "type": "nonConsumable",
///       "content": { "url": "pack1.zip", "sha256": "<hex>", "length": 1001100,
///                    "version": "1.0", "placement": "documents" } },
///     { "productId": "com.example.magazine", "type": "autoRenewable",
///       "items": [ { "itemId": "2026-02", "publishedAt": "2026-02-01T00:00:00Z",
///                    "content": { ... } } ] } ] }
/// ```
/// `url` may be relative to the catalog's own URL. `type` defaults to `nonConsumable`.
/// Subscription products list their issues under `items`, each with a publication date; the
/// entitlement rules decide which items a purchase unlocks. Unknown keys are ignored.
public struct Catalog: Sendable, Codable, Equatable {
    public var bundleId: String
    public var products: [Product]

    public init(bundleId: String, products: [Product]) {
        self.bundleId = bundleId
        self.products = products
    }

    /// The product with `productId`, if the catalog lists it.
    public func product(_ productId: String) -> Product? {
        products.first { $0.productId.isIdentical(to: productId) }
    }

    /// A product and the content it unlocks.
    public struct Product: Sendable, Codable, Equatable {
        public var productId: String
        public var type: ProductType
        /// The content of a non-subscription product.
        public var content: Content?
        /// The issues of a subscription product, each with its publication date.
        public var items: [Item]?

        public init(productId: String, type: ProductType = .nonConsumable, content: Content? = nil, items: [Item]? = nil) {
            self.productId = productId
            self.type = type
            self.content = content
            self.items = items
        }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            productId = try c.decode(String.self, forKey: .productId)
            type = try c.decode(.type, or: .nonConsumable)
            content = try c.decodeIfPresent(Content.self, forKey: .content)
            items = try c.decodeIfPresent([Item].self, forKey: .items)
        }
    }

    /// StoreKit's product types.
    public enum ProductType: String, Sendable, Codable, Equatable {
        case consumable, nonConsumable, nonRenewable, autoRenewable
    }

    /// One issue of a subscription product.
    public struct Item: Sendable, Codable, Equatable {
        /// Unique within its product; the content is placed as `<productId>.<itemId>`.
        public var itemId: String
        public var publishedAt: Date
        public var content: Content

        public init(itemId: String, publishedAt: Date, content: Content) {
            self.itemId = itemId
            self.publishedAt = publishedAt
            self.content = content
        }
    }

    /// One hosted content package.
    public struct Content: Sendable, Codable, Hashable {
        /// Absolute, or relative to the catalog's URL.
        public var url: String
        /// Lowercase hex SHA-256 of the package file.
        public var sha256: String
        /// The package file's length in bytes.
        public var length: Int64
        /// The `ContentVersion` the package's ContentInfo.plist must carry.
        public var version: String
        public var placement: Placement
        /// Total unpacked size in bytes, when the publisher knows it (used by the space check).
        public var unpackedLength: Int64?
        /// More absolute http(s) URLs serving the same bytes, tried in order after `url` (a failing
        /// origin hands over to the next, resuming where it stopped). Optional: old catalogs lack it.
        public var mirrors: [String]?
        /// The package's per-entry manifest (`PackageManifest`), when the publisher gives one: an
        /// update then fetches only the entries that changed. Optional: old catalogs lack it.
        public var manifest: Manifest?
        /// When the content is fetched (`essential`, `prefetch`, `onDemand`); nil (absent) is
        /// `essential`, so old catalogs keep working (docs/delivery-classes.md).
        public var delivery: DeliveryClass?
        /// Its purge order under space pressure (`low`, `normal`, `high`); nil (absent) is `normal`.
        public var preservation: Preservation?

        /// `delivery`, `essential` when the catalog does not say.
        public var deliveryClass: DeliveryClass { delivery ?? .essential }
        /// `preservation`, `normal` when the catalog does not say.
        public var preservationPriority: Preservation { preservation ?? .normal }

        public init(
            url: String, sha256: String, length: Int64, version: String, placement: Placement, unpackedLength: Int64? = nil,
            mirrors: [String]? = nil, manifest: Manifest? = nil, delivery: DeliveryClass? = nil, preservation: Preservation? = nil
        ) {
            self.delivery = delivery
            self.preservation = preservation
            self.url = url
            self.sha256 = sha256
            self.length = length
            self.version = version
            self.placement = placement
            self.unpackedLength = unpackedLength
            self.mirrors = mirrors
            self.manifest = manifest
        }

        /// An optional keyword of `type` under `key`: a value outside its cases is an error naming
        /// the key and the values it takes (a typo must not silently become the default).
        static func decodeKeyword<Keyword: RawRepresentable & CaseIterable, Key: CodingKey>(
            _ type: Keyword.Type, _ key: Key, in c: KeyedDecodingContainer<Key>
        ) throws -> Keyword? where Keyword.RawValue == String {
            guard let text = try c.decodeIfPresent(String.self, forKey: key) else { return nil }
            guard let value = Keyword(rawValue: text) else {
                let allowed = Keyword.allCases.map(\.rawValue).joined(separator: ", ")
                throw DecodingError.dataCorruptedError(
                    forKey: key, in: c, debugDescription: "\(key.stringValue) \(text.debugDescription) is not one of \(allowed)")
            }
            return value
        }

        /// Whether `text` may be a mirror: an absolute http or https URL with a host, at most 4096 bytes.
        public static func isMirrorURL(_ text: String) -> Bool {
            guard text.utf8.count <= 4096, let url = URL(string: text), let scheme = url.scheme?.lowercased(),
                scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty
            else { return false }
            return true
        }

        /// The largest `length` and `unpackedLength` a catalog may give (1 PiB): sizes are added
        /// to one another and to reserves, so a catalog cannot make that arithmetic overflow.
        public static let maxLength: Int64 = 1 << 50

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            url = try c.decode(String.self, forKey: .url)
            sha256 = try c.decode(String.self, forKey: .sha256)
            length = try c.decode(Int64.self, forKey: .length)
            version = try c.decode(String.self, forKey: .version)
            placement = try c.decode(Placement.self, forKey: .placement)
            unpackedLength = try c.decodeIfPresent(Int64.self, forKey: .unpackedLength)
            mirrors = try c.decodeIfPresent([String].self, forKey: .mirrors)
            manifest = try c.decodeIfPresent(Manifest.self, forKey: .manifest)
            delivery = try Self.decodeKeyword(DeliveryClass.self, CodingKeys.delivery, in: c)
            preservation = try Self.decodeKeyword(Preservation.self, CodingKeys.preservation, in: c)
            for mirror in mirrors ?? [] where !Self.isMirrorURL(mirror) {
                throw DecodingError.dataCorruptedError(
                    forKey: .mirrors, in: c, debugDescription: "mirror \(mirror.debugDescription) is not an absolute http(s) URL")
            }
            for (key, value) in [(CodingKeys.length, length), (.unpackedLength, unpackedLength)] {
                guard let value, !(0...Self.maxLength).contains(value) else { continue }
                throw DecodingError.dataCorruptedError(
                    forKey: key, in: c,
                    debugDescription: "\(key.stringValue) \(value) is not between 0 and \(Self.maxLength)")
            }
        }
    }

    /// When a content is fetched (docs/delivery-classes.md): `essential` holds its transaction's
    /// finish (what every content was before), `prefetch` follows in the background once the
    /// essential content is placed, `onDemand` only when asked (`courier content open`).
    public enum DeliveryClass: String, Sendable, Codable, Hashable, CaseIterable {
        case essential, prefetch, onDemand
    }

    /// The order cache content is purged in under space pressure: `low` first, then `normal`,
    /// then `high`, least recently used first within each (pinned content never).
    public enum Preservation: String, Sendable, Codable, Hashable, CaseIterable, Comparable {
        case low, normal, high

        /// Its place in the purge order (low first).
        public var rank: Int {
            switch self {
            case .low: return 0
            case .normal: return 1
            case .high: return 2
            }
        }

        public static func < (lhs: Preservation, rhs: Preservation) -> Bool { lhs.rank < rhs.rank }
    }

    /// Where a package's manifest is and what it must be: `{ "url", "sha256", "length" }`, the
    /// URL absolute or relative to the catalog's, like a package's.
    public struct Manifest: Sendable, Codable, Hashable {
        public var url: String
        /// Lowercase hex SHA-256 of the manifest file.
        public var sha256: String
        /// The manifest file's length in bytes (at most `PackageManifest.maxDocumentSize`).
        public var length: Int64

        public init(url: String, sha256: String, length: Int64) {
            self.url = url
            self.sha256 = sha256
            self.length = length
        }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            url = try c.decode(String.self, forKey: .url)
            sha256 = try c.decode(String.self, forKey: .sha256)
            length = try c.decode(Int64.self, forKey: .length)
            guard (0...Int64(PackageManifest.maxDocumentSize)).contains(length) else {
                throw DecodingError.dataCorruptedError(
                    forKey: .length, in: c, debugDescription: "manifest length \(length) is not between 0 and \(PackageManifest.maxDocumentSize)")
            }
        }
    }

    /// Where delivered content lives: `cache` (purgeable) or `documents` (kept, not backed up).
    public enum Placement: String, Sendable, Codable, Hashable, CaseIterable {
        case cache, documents
    }
}

extension Catalog {
    /// Decodes a catalog document. Dates are ISO 8601: a date-time (`2026-02-01T00:00:00Z`, with
    /// or without fractional seconds) or a calendar date (`2026-02-01`, midnight UTC).
    /// `name` (a path or URL) names the catalog in the error when it is not valid.
    public static func decode(_ data: Data, name: String? = nil) throws -> Catalog {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = parseDate(text) else {
                throw DecodingError.dataCorruptedError(
                    in: container,
                    debugDescription: "\(text) is not an ISO 8601 date-time or date"
                )
            }
            return date
        }
        let catalog: Catalog
        do {
            catalog = try decoder.decode(Catalog.self, from: data)
        } catch {
            var cause = CourierError.plainDescription(of: error)
            if case DecodingError.dataCorrupted(let context) = error, context.codingPath.isEmpty,
                let syntax = CourierError.jsonSyntaxProblem(in: data)
            {
                cause = syntax
            }
            throw CourierError(.usage, "the catalog\(name.map { " " + $0 } ?? "") is not valid", cause: cause)
        }
        try catalog.checkContentIdentifiers()
        return catalog
    }

    /// Refuses (`usage`, exit 2) a catalog in which two contents share a content identifier:
    /// a product's content is `<productId>`, a subscription item's `<productId>.<itemId>`, so a
    /// product `com.example.levels.pack1` and the item `pack1` of `com.example.levels` would be
    /// one folder on disk and one gate path, each purchase unlocking the other's package (as
    /// would a product listed twice, or an item id used twice). Identifiers are compared by
    /// their bytes, as the filesystem compares folder names. Every loader calls it (`decode`).
    public func checkContentIdentifiers() throws {
        var owners: [[UInt8]: String] = [:]
        for product in products {
            var contents: [(identifier: String, owner: String)] = []
            if product.content != nil { contents.append((product.productId, "product \(product.productId)")) }
            for item in product.items ?? [] {
                contents.append(("\(product.productId).\(item.itemId)", "item \(item.itemId) of \(product.productId)"))
            }
            for (identifier, owner) in contents {
                let key = Array(identifier.utf8)
                if let first = owners[key] {
                    throw CourierError(
                        .usage,
                        "the catalog gives two contents the identifier \(identifier): \(first) and \(owner)",
                        hint: "each content needs its own identifier (its folder and its gate path); rename one of them")
                }
                owners[key] = owner
            }
        }
    }

    /// An ISO 8601 date-time (fractional seconds optional) or calendar date (midnight UTC).
    public static func parseDate(_ text: String) -> Date? {
        let full = ISO8601DateFormatter()
        if let date = full.date(from: text) { return date }
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = fractional.date(from: text) { return date }
        let day = ISO8601DateFormatter()
        day.formatOptions = [.withFullDate]
        return day.date(from: text)
    }

    /// Encodes the catalog as pretty, key-sorted JSON with ISO 8601 dates: what `JSONEncoder`
    /// writes with `.prettyPrinted`, `.sortedKeys`, `.withoutEscapingSlashes` and `.iso8601`,
    /// written by hand (`JSONText`: a run publishes it on its critical path).
    public func encoded() throws -> Data {
        var formatter: ISO8601DateFormatter?
        var json = JSONText(pretty: true, capacity: 256 + products.count * 384)
        write(to: &json) { date, json in
            let iso8601 = formatter ?? ISO8601DateFormatter()
            formatter = iso8601
            json.string(iso8601.string(from: date))
        }
        return Data(json.bytes)
    }

    /// Resolves a content URL against the catalog's own location (a file or http(s) URL).
    public static func resolve(_ contentURL: String, relativeTo catalogLocation: URL?) -> URL? {
        if let absolute = URL(string: contentURL), absolute.scheme != nil { return absolute }
        guard let base = catalogLocation else { return URL(string: contentURL) }
        return URL(string: contentURL, relativeTo: base)?.absoluteURL
    }
}
