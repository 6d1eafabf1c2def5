import Courier
import Crypto
import Foundation
import Synchronization

/// One package the catalog lists and the origin serves (or the manifest the catalog names beside
/// it): the request path it answers to, the file under the content folder, and whose content it
/// is. A manifest is gated exactly like its package: the same content identifier decides.
public struct ServedContent: Sendable, Equatable {
    /// What the path serves.
    public enum Kind: Sendable, Equatable {
        /// The content's package (a zip).
        case package
        /// The package's per-entry manifest (`Catalog.Content.manifest`, JSON), for delta updates.
        case manifest
    }

    /// The decoded request path, e.g. `/packages/com.example.pack1/<sha256>.zip`.
    public var path: String
    public var kind: Kind
    /// The folder name a client places it under: the product id, or `<productId>.<itemId>`.
    public var contentIdentifier: String
    public var productId: String
    /// The subscription item, for a subscription product's issue.
    public var itemId: String?
    public var content: Catalog.Content

    public init(
        path: String, kind: Kind = .package, contentIdentifier: String, productId: String, itemId: String? = nil, content: Catalog.Content
    ) {
        self.path = path
        self.kind = kind
        self.contentIdentifier = contentIdentifier
        self.productId = productId
        self.itemId = itemId
        self.content = content
    }
}

/// The catalog the origin serves, as read from disk at one moment: its exact bytes (served at
/// `/catalog.json`), their strong ETag, the decoded catalog, and the index from request paths to
/// the packages it lists. Only listed packages are served; every other path is 404.
public struct PublishedCatalog: Sendable {
    public let data: Data
    /// `"<sha256 of the bytes>"`: strong, and equal on every origin serving the same catalog.
    public let etag: String
    public let catalog: Catalog
    /// Decoded request path to the package, or package manifest, it names. Absolute URLs
    /// elsewhere are not indexed.
    public let index: [String: ServedContent]

    /// Decodes `data` and indexes its relative package URLs, and the manifests it names beside
    /// them, against `/catalog.json`. A path that is both a package and a manifest stays the
    /// package's.
    public init(data: Data) throws {
        self.data = data
        self.etag = "\"" + SHA256.hash(data: data).hex + "\""
        self.catalog = try Catalog.decode(data)
        var index: [String: ServedContent] = [:]
        let base = URL(string: "http://origin.invalid/catalog.json")
        func path(_ reference: String) -> String? {
            guard let url = Catalog.resolve(reference, relativeTo: base), url.host == "origin.invalid" else { return nil }
            return url.path
        }
        for entry in catalog.allContent {
            guard let packagePath = path(entry.content.url) else { continue }
            index[packagePath] = ServedContent(
                path: packagePath, contentIdentifier: entry.contentIdentifier, productId: entry.productId, itemId: entry.itemId,
                content: entry.content)
        }
        for entry in catalog.allContent {
            guard let manifest = entry.content.manifest, let manifestPath = path(manifest.url), index[manifestPath] == nil else { continue }
            index[manifestPath] = ServedContent(
                path: manifestPath, kind: .manifest, contentIdentifier: entry.contentIdentifier, productId: entry.productId,
                itemId: entry.itemId, content: entry.content)
        }
        self.index = index
    }

    /// The decoded path of a request target (percent-decoding, dot segments removed); nil if it
    /// cannot be a path.
    public static func requestPath(_ target: String) -> String? {
        let pathOnly = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        guard pathOnly.hasPrefix("/"), let url = URL(string: "http://origin.invalid" + pathOnly) else { return nil }
        return url.standardized.path
    }
}

/// Reads the catalog file on demand and keeps the last decoded copy until the file changes
/// (another inode, size or modification time), so a catalog that `courier prestage` publishes
/// by rename is picked up by the next request, and a reader never sees half of one.
final class CatalogSource: Sendable {
    let file: URL
    /// The publisher's TUF root (`serve --catalog-root`): the catalog is served only when the
    /// signed metadata in `metadata/` beside it names its exact bytes (docs/trust.md).
    let trustedRoot: Data?
    private let cached = Mutex<(identity: StaticFile, catalog: PublishedCatalog)?>(nil)

    init(file: URL, trustedRoot: Data? = nil) {
        self.file = file
        self.trustedRoot = trustedRoot
    }

    /// The current catalog; throws `notFound` when there is none and `usage` when it is invalid.
    func current() throws -> PublishedCatalog {
        guard let identity = StaticFile.lookup(path: file.path) else {
            throw CourierError(.notFound, "no catalog at \(file.path)", hint: "run `courier prestage` into the content folder")
        }
        if let cached = cached.withLock({ $0 }), cached.identity.sameFile(as: identity) { return cached.catalog }
        let data = try CourierError.wrapping(.io, "cannot read the catalog \(file.path)") { try Data(contentsOf: file) }
        if let trustedRoot {
            do {
                try TUFLocalRepository.verify(
                    data, as: file.lastPathComponent, metadata: file.deletingLastPathComponent().appendingPathComponent("metadata"),
                    trustedRoot: trustedRoot)
            } catch let error as TUFError {
                throw CourierError(
                    .integrity, "the catalog \(file.path) is not served: \(error)",
                    hint: "publish it signed: courier prestage --tuf-keys DIR --tuf-roots DIR (docs/trust.md)")
            }
        }
        let catalog = try PublishedCatalog(data: data)
        // Cache only if the file did not change while it was read.
        if let after = StaticFile.lookup(path: file.path), after.sameFile(as: identity) {
            cached.withLock { $0 = (identity, catalog) }
        }
        return catalog
    }
}
