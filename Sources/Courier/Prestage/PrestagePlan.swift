import Foundation

/// One package to fetch, verify, inspect and stage.
public struct PrestageTask: Sendable, Codable, Equatable {
    /// The folder name a client places it under: the product id, or `<productId>.<itemId>`.
    public var contentIdentifier: String
    public var productId: String
    public var itemId: String?
    /// The absolute upstream URL (the catalog's `url` resolved against the catalog's location).
    public var source: URL
    /// The upstream catalog's entry: length, sha256 and version are verified against it.
    public var content: Catalog.Content
    /// Where it is published in the staging tree, relative to the catalog.
    public var stagedPath: String

    public init(contentIdentifier: String, productId: String, itemId: String?, source: URL, content: Catalog.Content, stagedPath: String) {
        self.contentIdentifier = contentIdentifier
        self.productId = productId
        self.itemId = itemId
        self.source = source
        self.content = content
        self.stagedPath = stagedPath
    }

    /// A stable id for the transfer journal: the same package resumes under the same id.
    public var downloadId: String { "prestage-\(contentIdentifier)-\(content.sha256.prefix(16))" }
}

/// What a pre-staging run must do: the packages that are new or changed against what the staging
/// tree already holds, and the catalog to publish once they are staged.
///
/// A package is staged under a path derived from its identifier and SHA-256, so "already staged"
/// is "a file of the right length is published at that path, and the published catalog names
/// it" (publishing is atomic and the catalog is published only once its packages are durable).
/// A file at its path that the published catalog does not name was left by a run that ended
/// before its catalog (killed, or a power cut that may have torn it): its bytes are checked
/// against the catalog's length and SHA-256 first, and it is fetched again unless they match.
/// A second run with nothing new reads no package and fetches nothing.
public struct PrestagePlan: Sendable {
    /// The packages to fetch, in catalog order.
    public var tasks: [PrestageTask]
    /// Content identifiers already staged at the upstream version (nothing to fetch).
    public var unchanged: [String]
    /// Entries the upstream catalog lists that cannot be staged (bad identifier, unresolvable URL).
    public var refused: [(contentIdentifier: String, reason: String)]

    let upstream: Catalog
    let published: Catalog?
    let selection: Set<String>?

    /// Where the package of `contentIdentifier` with digest `sha256` is staged.
    public static func stagedPath(contentIdentifier: String, sha256: String) -> String {
        "packages/\(contentIdentifier)/\(sha256.lowercased()).zip"
    }

    /// Plans a run.
    /// - Parameters:
    ///   - upstream: the catalog to stage, its URLs relative to `upstreamLocation`.
    ///   - products: only these product ids (`--product`), or nil for all; products not selected
    ///     keep what is published for them.
    public init(upstream: Catalog, upstreamLocation: URL?, tree: any StagingTree, products: Set<String>? = nil) throws {
        self.upstream = upstream
        self.published = try tree.publishedCatalog()
        self.selection = products
        var tasks: [PrestageTask] = []
        var unchanged: [String] = []
        var refused: [(String, String)] = []
        var seen = Set<String>()
        // Paths the published catalog names with their digest: durable, never rewritten.
        let durable = Set((published?.allContent ?? []).map { "\($0.content.url)\n\($0.content.sha256.lowercased())" })
        for entry in upstream.allContent {
            if let products, !products.contains(entry.productId) { continue }
            let identifier = entry.contentIdentifier
            guard seen.insert(identifier).inserted else {
                refused.append((identifier, "listed twice in the catalog"))
                continue
            }
            guard Self.isSafeIdentifier(identifier) else {
                refused.append((identifier, "the identifier cannot name a folder"))
                continue
            }
            guard Self.isHexDigest(entry.content.sha256) else {
                refused.append((identifier, "sha256 is not 64 hex digits"))
                continue
            }
            guard let source = Catalog.resolve(entry.content.url, relativeTo: upstreamLocation), source.scheme != nil else {
                refused.append((identifier, "the url \(entry.content.url) cannot be resolved"))
                continue
            }
            let path = Self.stagedPath(contentIdentifier: identifier, sha256: entry.content.sha256)
            if try tree.hasPackage(at: path, length: entry.content.length) {
                let sha256 = entry.content.sha256.lowercased()
                let named = durable.contains("\(path)\n\(sha256)")
                if try named || tree.hasVerifiedPackage(at: path, length: entry.content.length, sha256: sha256) {
                    unchanged.append(identifier)
                    continue
                }
            }
            tasks.append(
                PrestageTask(
                    contentIdentifier: identifier,
                    productId: entry.productId,
                    itemId: entry.itemId,
                    source: source,
                    content: entry.content,
                    stagedPath: path
                )
            )
        }
        self.tasks = tasks
        self.unchanged = unchanged
        self.refused = refused
    }

    /// Whether `tree` still has the catalog published that this plan was made against. Only a
    /// run's catalog vouches for its packages (a package without one may be torn), so the same
    /// catalog means the same packages already staged, and the same plan.
    public func isCurrent(in tree: any StagingTree) throws -> Bool {
        try tree.publishedCatalog() == published
    }

    /// The catalog to publish once the run ends: every selected entry that is staged (unchanged
    /// or `staged` now) points at its staged path; a selected entry that failed keeps the version
    /// published before, if any, else is left out; products not selected stay as published.
    /// `unpackedLengths` fills `unpackedLength` where the upstream catalog did not give one.
    public func catalog(staged: Set<String>, unpackedLengths: [String: Int64] = [:]) -> Catalog {
        let unchanged = Set(self.unchanged)
        let publishedEntries = Dictionary(
            (published?.allContent ?? []).map { ($0.contentIdentifier, $0.content) },
            uniquingKeysWith: { first, _ in first }
        )
        func entry(_ identifier: String, _ content: Catalog.Content) -> Catalog.Content? {
            if staged.contains(identifier) || unchanged.contains(identifier) {
                var result = content
                result.url = Self.stagedPath(contentIdentifier: identifier, sha256: content.sha256)
                result.sha256 = content.sha256.lowercased()
                if result.unpackedLength == nil {
                    result.unpackedLength = unpackedLengths[identifier]
                        ?? publishedEntries[identifier].flatMap { $0.sha256 == result.sha256 ? $0.unpackedLength : nil }
                }
                return result
            }
            return publishedEntries[identifier]
        }
        var products: [Catalog.Product] = []
        var listed = Set<String>()
        for product in upstream.products {
            if let selection, !selection.contains(product.productId) { continue }
            listed.insert(product.productId)
            var result = product
            result.content = product.content.flatMap { entry(product.productId, $0) }
            if let items = product.items {
                var kept: [Catalog.Item] = []
                for item in items {
                    guard let content = entry("\(product.productId).\(item.itemId)", item.content) else { continue }
                    kept.append(Catalog.Item(itemId: item.itemId, publishedAt: item.publishedAt, content: content))
                }
                result.items = kept
            }
            if result.content == nil && (result.items ?? []).isEmpty { continue }
            products.append(result)
        }
        if selection != nil, let published {
            // Products outside the selection keep what was published for them, in their order.
            for product in published.products where !listed.contains(product.productId) {
                products.append(product)
            }
        }
        return Catalog(bundleId: upstream.bundleId, products: products)
    }

    /// The plan as it was made, for a coordinator that takes over a run another one planned
    /// (docs/scaling.md): the same tasks, and the same catalog once they are done.
    ///
    /// Written by hand (`JSONText`): what `JSONEncoder` writes for the plan's `Snapshot` but for
    /// the order of keys, read back by `decode` through `JSONDecoder` (dates as seconds since
    /// 2001, URLs as their absolute strings). The coordinator encodes it before the run's first
    /// download, on one core: `JSONEncoder` took 7-11 ms for 500 packages.
    public func encoded() throws -> Data {
        func date(_ date: Date, _ json: inout JSONText) { json.number(date.timeIntervalSinceReferenceDate) }
        var json = JSONText(pretty: false, capacity: 1024 + tasks.count * 512 + upstream.products.count * 256)
        json.openObject()
        json.key("tasks")
        json.openArray()
        for task in tasks {
            json.element()
            json.openObject()
            json.key("content")
            task.content.write(to: &json)
            json.key("contentIdentifier")
            json.string(task.contentIdentifier)
            if let itemId = task.itemId {
                json.key("itemId")
                json.string(itemId)
            }
            json.key("productId")
            json.string(task.productId)
            json.key("source")
            json.string(task.source.absoluteString)
            json.key("stagedPath")
            json.string(task.stagedPath)
            json.closeObject()
        }
        json.closeArray()
        json.key("unchanged")
        json.strings(unchanged)
        json.key("refused")
        json.openArray()
        for refusal in refused {
            json.element()
            json.openObject()
            json.key("contentIdentifier")
            json.string(refusal.contentIdentifier)
            json.key("reason")
            json.string(refusal.reason)
            json.closeObject()
        }
        json.closeArray()
        json.key("upstream")
        upstream.write(to: &json, date: date)
        if let published {
            json.key("published")
            published.write(to: &json, date: date)
        }
        if let selection {
            json.key("selection")
            json.strings(selection.sorted())
        }
        json.closeObject()
        return Data(json.bytes)
    }

    /// A plan `encoded()` before.
    public static func decode(_ data: Data) throws -> PrestagePlan {
        let snapshot: Snapshot
        do {
            snapshot = try JSONDecoder().decode(Snapshot.self, from: data)
        } catch {
            throw CourierError(.integrity, "the recorded pre-staging plan cannot be read", cause: "\(error)")
        }
        return PrestagePlan(snapshot: snapshot)
    }

    private init(snapshot: Snapshot) {
        tasks = snapshot.tasks
        unchanged = snapshot.unchanged
        refused = snapshot.refused.map { ($0.contentIdentifier, $0.reason) }
        upstream = snapshot.upstream
        published = snapshot.published
        selection = snapshot.selection.map(Set.init)
    }

    private struct Snapshot: Codable {
        struct Refusal: Codable {
            var contentIdentifier: String
            var reason: String
        }
        var tasks: [PrestageTask]
        var unchanged: [String]
        var refused: [Refusal]
        var upstream: Catalog
        var published: Catalog?
        var selection: [String]?
    }

    /// ASCII letters, digits, `.`, `-` and `_`, at most 200 bytes, not starting with `.`. (Byte
    /// by byte: a scalar-by-scalar check cost 2 ms of a 500-package plan.)
    static func isSafeIdentifier(_ identifier: String) -> Bool {
        let bytes = identifier.utf8
        guard !bytes.isEmpty, bytes.count <= 200, bytes.first != UInt8(ascii: ".") else { return false }
        return bytes.allSatisfy {
            switch $0 {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"):
                true
            default:
                false
            }
        }
    }

    /// 64 ASCII hex digits, either case.
    static func isHexDigest(_ text: String) -> Bool {
        let bytes = text.utf8
        return bytes.count == 64
            && bytes.allSatisfy {
                switch $0 {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"): true
                default: false
                }
            }
    }
}
