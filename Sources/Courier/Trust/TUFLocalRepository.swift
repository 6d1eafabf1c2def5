import Foundation

/// A TUF repository in a local folder, checked without the network: what `courier serve
/// --catalog-root` does before it serves the catalog a `prestage` published (or a database row
/// put there). The root chain (`N.root.json`), timestamp, snapshot and the top-level targets are
/// checked as the client workflow checks them, with the same limits; the file must be the target
/// `name` as the targets metadata signs it (its length and every hash), found as the client finds
/// it: in the top-level targets role or by following delegations (pre-order, depth first,
/// terminating delegations ending the search, at most `maxDelegations` roles), so a repository
/// whose catalog is signed by a delegated role is served exactly when clients accept it.
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
        guard let target = try find(name, from: targets, in: &set, metadata: metadata, limits: limits) else {
            throw TUFError(.notFound, "the signed targets metadata (version \(targets.version), and its delegations) names no \(name)")
        }
        try target.verify(data)
    }

    /// The target `path` as the first role that lists it says, walking delegations from the
    /// top-level `targets` as `TUFUpdater.targetInfo` does; each delegated role's metadata is
    /// read from `metadata` (`N.role.json` under consistent snapshots) and verified through its
    /// delegator before it is searched.
    private static func find(
        _ path: String, from top: TUFTargets, in set: inout TUFTrustedSet, metadata: URL, limits: TUFLimits
    ) throws -> TUFTargetFile? {
        var toVisit: [(role: String, delegator: String)] = [("targets", "root")]
        var visited = Set<String>()
        var remaining = limits.maxDelegations
        while remaining > 0, let (role, delegator) = toVisit.popLast() {
            if visited.contains(role) { continue }
            let targets: TUFTargets
            if role == "targets" {
                targets = top
            } else if let known = set.targets(role, delegator: delegator) {
                targets = known
            } else if let bytes = set.trustedBytes(of: role) {
                targets = try set.updateTargets(bytes, role: role, delegator: delegator)
            } else {
                guard let meta = set.snapshot?.meta["\(role).json"] else {
                    throw TUFError(.notFound, "role \(role) is delegated but snapshot does not list it")
                }
                let file = set.root.consistentSnapshot ? "\(meta.version).\(TUFMetadataStore.fileName(role))" : TUFMetadataStore.fileName(role)
                guard let data = try read(metadata, file, limit: limit(meta.length, limits.targetsMaxLength)) else {
                    throw TUFError(.notFound, "no \(file) in \(metadata.path)")
                }
                targets = try set.updateTargets(data, role: role, delegator: delegator)
            }
            if let target = targets.targets[path] { return target }
            visited.insert(role)
            remaining -= 1
            let children = targets.delegations(covering: path)
            if children.terminating { toVisit.removeAll() }
            toVisit.append(contentsOf: children.roles.reversed().map { ($0.name, role) })
        }
        return nil
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
