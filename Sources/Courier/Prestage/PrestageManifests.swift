import Crypto
import Foundation

/// The manifests `courier prestage` publishes beside the packages it stages, and the catalog's
/// `manifest` field that names them (docs/packages.md, "Manifest").
///
/// A staged package `packages/<id>/<sha256>.zip` gets `packages/<id>/<sha256>.manifest.json`,
/// built from the verified package itself (the upstream need not publish one), so clients can
/// update by changed entries. A package whose manifest cannot be built is still staged, without one.
enum PrestageManifests {
    /// Where the manifest of the package staged at `packagePath` is published.
    static func path(besidePackage packagePath: String) -> String {
        let base = packagePath.hasSuffix(".zip") ? String(packagePath.dropLast(4)) : packagePath
        return base + ".manifest.json"
    }

    /// Publishes the verified package `file` at `packagePath` (consuming it) and, first, its
    /// `manifest` beside it, in one `publishPackages` call. Nothing is synced here: the tree
    /// makes both durable with the rest of the run (`StagingTree.syncPublished`). A nil manifest
    /// publishes the package alone. Returns the catalog's `manifest` field for what was
    /// published (nil without a manifest), so `attach` need not read it back.
    @discardableResult
    static func publish(_ manifest: PackageManifest?, package file: URL, at packagePath: String, in tree: any StagingTree) throws
        -> Catalog.Manifest?
    {
        guard let manifest, let data = try? manifest.encoded() else {
            try tree.publishPackages([(file, packagePath)])
            return nil
        }
        // Beside the package, its name and a suffix (one path, not a URL cut and extended).
        let local = URL(fileURLWithPath: file.path + ".manifest.json", isDirectory: false)
        try Durable.write(data, to: local, sync: false)
        let published = path(besidePackage: packagePath)
        try tree.publishPackages([(local, published), (file, packagePath)])
        return Catalog.Manifest(url: published, sha256: SHA256.hash(data: data).hex, length: Int64(data.count))
    }

    /// Builds the manifest of the verified package `file` and publishes it alone beside
    /// `packagePath` (the package is left where it is). Returns false (nothing published) when
    /// the package has no manifest form (a symbolic link).
    @discardableResult
    static func publish(for file: URL, packagePath: String, in tree: any StagingTree, limits: PackageConfiguration) throws -> Bool {
        guard let manifest = try? PackageManifest.build(package: file, limits: limits) else { return false }
        let local = file.deletingLastPathComponent().appendingPathComponent(file.lastPathComponent + ".manifest.json")
        try manifest.write(to: local)
        try tree.publishPackage(local, at: path(besidePackage: packagePath))
        return true
    }

    /// `catalog` with each content's `manifest` naming the manifest published beside its package
    /// (its digest and length read from the tree); content without one is left as it is. A
    /// manifest whose package `catalog` already named with the same manifest is kept as it was
    /// published; any other is named only if it decodes and describes that package (one a
    /// crashed run left torn is not). `written` holds the manifests this process published in
    /// this run, by path, as it wrote them (`publish`): they are named as they are, without
    /// reading them back (the catalog's publish syncs them before it names them; a package's
    /// manifest is built reproducibly, so another worker that staged the same package after a
    /// lease expiry wrote the same bytes).
    static func attach(
        to catalog: Catalog, tree: any StagingTree, published: Catalog? = nil, written: [String: Catalog.Manifest] = [:]
    ) -> Catalog {
        // Manifests the published catalog names, by package path and digest: durable as named.
        var known: [String: Catalog.Manifest] = [:]
        for entry in published?.allContent ?? [] {
            if let manifest = entry.content.manifest { known["\(entry.content.url)\n\(entry.content.sha256.lowercased())"] = manifest }
        }
        func link(_ content: Catalog.Content) -> Catalog.Content {
            guard content.url.hasSuffix(".zip"), !content.url.contains("://") else { return content }
            let path = path(besidePackage: content.url)
            if let own = written[path], own.length <= PackageManifest.maxDocumentSize {
                var result = content
                result.manifest = own
                return result
            }
            guard let data = try? tree.publishedFile(at: path), data.count <= PackageManifest.maxDocumentSize else { return content }
            let digest = SHA256.hash(data: data).hex
            let named = known["\(content.url)\n\(content.sha256.lowercased())"]
            if named?.url != path || named?.sha256 != digest {
                guard let manifest = try? PackageManifest.decode(data), manifest.package.sha256 == content.sha256.lowercased(),
                    manifest.package.length == content.length
                else { return content }
            }
            var result = content
            result.manifest = Catalog.Manifest(url: path, sha256: digest, length: Int64(data.count))
            return result
        }
        var result = catalog
        for index in result.products.indices {
            result.products[index].content = result.products[index].content.map(link)
            if let items = result.products[index].items {
                result.products[index].items = items.map { Catalog.Item(itemId: $0.itemId, publishedAt: $0.publishedAt, content: link($0.content)) }
            }
        }
        return result
    }
}
