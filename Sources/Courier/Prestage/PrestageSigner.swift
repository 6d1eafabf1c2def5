import Foundation

/// Signs the catalog a pre-staging run published, as a TUF target (`prestage --tuf-keys`): run
/// by the process that published it, whichever that is in a run shared through PostgreSQL, with
/// the online keys it was given (docs/trust.md, "Distributed pre-staging").
///
/// It signs only the catalog that process computed itself: the bytes of `DEST/catalog.json` must
/// decode to the catalog `PrestageJob.publish` returned, which it made from a plan this process
/// made, or read from the database and checked against the upstream catalog it loaded itself
/// (`PrestagePlan.checkUpstream`). So a database row never chooses what the keys sign.
public struct PrestageSigner: Sendable {
    public let keys: TUFPublisherKeys
    /// The folder of the root chain (`1.root.json`, ...) to publish beside the catalog.
    public let roots: URL
    /// The staging tree whose catalog is signed; the metadata goes beside it.
    public let tree: LocalStagingTree

    public init(keys: TUFPublisherKeys, roots: URL, tree: LocalStagingTree) {
        self.keys = keys
        self.roots = roots
        self.tree = tree
    }

    /// Reads the keys (`targets.json`, `snapshot.json`, `timestamp.json` of `keys`) and checks
    /// that the newest root of `roots` names them, before any package is fetched.
    public static func load(keys: URL, roots: URL, tree: LocalStagingTree) throws -> PrestageSigner {
        let signer = PrestageSigner(keys: try TUFPublisherKeys.load(from: keys), roots: roots, tree: tree)
        try TUFPublisher.checkKeys(signer.keys, roots: roots)
        return signer
    }

    /// Signs `catalog`, which `tree` has just published as `catalog.json`: targets, snapshot and
    /// timestamp metadata in `tree`'s `metadata/`, the catalog as `targets/<sha256>.catalog.json`.
    public func sign(_ catalog: Catalog) throws -> TUFPublisher.Published {
        let file = tree.catalogFile
        let data = try CourierError.wrapping(.io, "cannot read the published catalog \(file.path)") { try Data(contentsOf: file) }
        guard (try? Catalog.decode(data)) == catalog else {
            throw CourierError(
                .integrity, "\(file.path) is not the catalog this run published; it is not signed",
                hint: "another process wrote it while this one published; run the same command again")
        }
        return try TUFPublisher.publish(target: data, named: "catalog.json", into: tree.root, roots: roots, keys: keys)
    }
}
