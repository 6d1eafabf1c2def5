import Foundation

/// A TUF repository in a local folder, checked without the network: what `courier serve
/// --catalog-root` does before it serves the catalog a `prestage` published (or a database row
/// put there). The root chain (`N.root.json`), timestamp, snapshot and the top-level targets are
/// checked as the client workflow checks them, with the same limits; the file must be the target
/// `name` the top-level targets metadata signs (its length and every hash).
///
/// Delegations are not followed: `prestage` signs the catalog in the top-level targets role.
public enum TUFLocalRepository {
    /// Throws a `TUFError` naming the failed check unless `data` is the signed target `name` of
    /// the repository whose metadata is in `metadata`, trusted from `trustedRoot`.
    public static func verify(
        _ data: Data, as name: String, metadata: URL, trustedRoot: Data, limits: TUFLimits = .init(), now: Date = Date()
    ) throws {
        var set = try TUFTrustedSet(trustedRoot: trustedRoot, referenceTime: now)
        var rotations = 0
        while let next = try read(metadata, "\(set.root.version + 1).root.json", limit: limits.rootMaxLength) {
            rotations += 1
            guard rotations <= limits.maxRootRotations else {
                throw TUFError(.version, "more than \(limits.maxRootRotations) root versions in \(metadata.path)")
            }
            try set.updateRoot(next)
        }
        guard let timestamp = try read(metadata, "timestamp.json", limit: limits.timestampMaxLength) else {
            throw TUFError(.notFound, "no timestamp.json in \(metadata.path)")
        }
        try set.updateTimestamp(timestamp)
        guard let snapshotMeta = set.timestamp?.snapshotMeta else { throw TUFError(.notFound, "no trusted timestamp") }
        let snapshotName = set.root.consistentSnapshot ? "\(snapshotMeta.version).snapshot.json" : "snapshot.json"
        guard let snapshot = try read(metadata, snapshotName, limit: limit(snapshotMeta.length, limits.snapshotMaxLength)) else {
            throw TUFError(.notFound, "no \(snapshotName) in \(metadata.path)")
        }
        try set.updateSnapshot(snapshot, trusted: false)
        guard let targetsMeta = set.snapshot?.meta["targets.json"] else { throw TUFError(.notFound, "snapshot does not list targets.json") }
        let targetsName = set.root.consistentSnapshot ? "\(targetsMeta.version).targets.json" : "targets.json"
        guard let targetsData = try read(metadata, targetsName, limit: limit(targetsMeta.length, limits.targetsMaxLength)) else {
            throw TUFError(.notFound, "no \(targetsName) in \(metadata.path)")
        }
        let targets = try set.updateTargets(targetsData, role: "targets", delegator: "root")
        guard let target = targets.targets[name] else {
            throw TUFError(.notFound, "the signed targets metadata (version \(targets.version)) names no \(name)")
        }
        try target.verify(data)
    }

    private static func limit(_ signed: Int64?, _ fallback: Int) -> Int {
        guard let signed else { return fallback }
        return signed > Int64(Int32.max) ? Int(Int32.max) : Int(signed)
    }

    /// The file `name` of `folder`, nil when there is none; longer than `limit` is a length failure.
    private static func read(_ folder: URL, _ name: String, limit: Int) throws -> Data? {
        let path = folder.appendingPathComponent(name).path
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        let data: Data
        do {
            data = try handle.read(upToCount: limit + 1) ?? Data()
        } catch {
            throw TUFError(.download, "cannot read \(path): \(error.localizedDescription)")
        }
        guard data.count <= limit else { throw TUFError(.length, "\(path) is longer than the \(limit)-byte limit") }
        return data
    }
}
