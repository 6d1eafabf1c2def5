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
    public func encoded() throws -> Data {
        let snapshot = Snapshot(
            tasks: tasks, unchanged: unchanged,
            refused: refused.map { Snapshot.Refusal(contentIdentifier: $0.contentIdentifier, reason: $0.reason) },
            upstream: upstream, published: published, selection: selection.map { $0.sorted() }
        )
        do {
            return try JSONEncoder().encode(snapshot)
        } catch {
            throw CourierError(.internal, "cannot encode the pre-staging plan", cause: "\(error)")
        }
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

    static func isSafeIdentifier(_ identifier: String) -> Bool {
        guard !identifier.isEmpty, identifier.utf8.count <= 200, !identifier.hasPrefix(".") else { return false }
        return identifier.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "." || $0 == "-" || $0 == "_"
        }
    }

    static func isHexDigest(_ text: String) -> Bool {
        text.utf8.count == 64 && text.unicodeScalars.allSatisfy { $0.properties.isASCIIHexDigit }
    }
}
