import Courier
import Crypto
import Foundation

/// A TUF repository the tests publish, in python-tuf's layout (`metadata/`, `targets/`), signed
/// with fresh ed25519 keys: each role's metadata is made by `TUFMetadataWriter` and written as
/// `N.role.json` (and `timestamp.json`, `root.json`).
struct TUFTestRepository {
    let folder: URL
    var signers: [String: [TUFSigner]] = [:]
    var thresholds: [String: Int] = [:]
    var rootVersion: Int64 = 1
    var targetsVersion: Int64 = 0
    var snapshotVersion: Int64 = 0
    var timestampVersion: Int64 = 0
    var expires = Date().addingTimeInterval(86_400)
    var targets: [TUFTargetFile] = []
    var consistentSnapshot = true
    /// Roots as published, by version.
    var roots: [Int64: Data] = [:]

    init(folder: URL) throws {
        self.folder = folder
        for role in TUFSpecification.topLevelRoles {
            signers[role] = [try TUFSigner(Curve25519.Signing.PrivateKey())]
        }
        try FileManager.default.createDirectory(at: metadata, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: targetsFolder, withIntermediateDirectories: true)
        try publishRoot(signedBy: signers["root"]!)
    }

    var metadata: URL { folder.appendingPathComponent("metadata") }
    var targetsFolder: URL { folder.appendingPathComponent("targets") }

    func rootJSON() -> JSONValue {
        TUFMetadataWriter.root(
            version: rootVersion, expires: expires, keys: signers.mapValues { $0.map(\.publicKey) }, thresholds: thresholds,
            consistentSnapshot: consistentSnapshot)
    }

    /// Writes root version `rootVersion` signed by `signers` (the old and new root keys on a rotation).
    mutating func publishRoot(signedBy signers: [TUFSigner]) throws {
        let data = try TUFMetadataWriter.sign(rootJSON(), by: signers)
        roots[rootVersion] = data
        try data.write(to: metadata.appendingPathComponent("\(rootVersion).root.json"))
        try data.write(to: metadata.appendingPathComponent("root.json"))
    }

    /// Adds a target file (written hash-prefixed under consistent snapshots, and plain).
    mutating func addTarget(_ path: String, _ data: Data) throws {
        let target = TUFMetadataWriter.targetFile(path: path, data: data)
        targets.removeAll { $0.path == path }
        targets.append(target)
        // Hash-prefixed as the specification names it: `dir/<sha256>.file.txt`.
        var parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        if consistentSnapshot, let last = parts.popLast() { parts.append("\(target.hashes.sha256!).\(last)") }
        let file = targetsFolder.appendingPathComponent(parts.joined(separator: "/"))
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try data.write(to: file)
    }

    /// Publishes targets, snapshot and timestamp (new versions of each).
    mutating func publish(delegations: JSONValue? = nil, extraMeta: [String: TUFMetaFile] = [:]) throws {
        targetsVersion += 1
        let targetsData = try TUFMetadataWriter.sign(
            TUFMetadataWriter.targets(version: targetsVersion, expires: expires, targets: targets, delegations: delegations),
            by: signers["targets"]!)
        try targetsData.write(to: metadata.appendingPathComponent("\(targetsVersion).targets.json"))
        try targetsData.write(to: metadata.appendingPathComponent("targets.json"))
        var meta = extraMeta
        meta["targets.json"] = TUFMetadataWriter.metaFile(version: targetsVersion, data: targetsData)
        try publishSnapshot(meta: meta)
    }

    mutating func publishSnapshot(meta: [String: TUFMetaFile]) throws {
        snapshotVersion += 1
        let snapshotData = try TUFMetadataWriter.sign(
            TUFMetadataWriter.snapshot(version: snapshotVersion, expires: expires, meta: meta), by: signers["snapshot"]!)
        try snapshotData.write(to: metadata.appendingPathComponent("\(snapshotVersion).snapshot.json"))
        try snapshotData.write(to: metadata.appendingPathComponent("snapshot.json"))
        try publishTimestamp(snapshot: TUFMetadataWriter.metaFile(version: snapshotVersion, data: snapshotData))
    }

    mutating func publishTimestamp(snapshot: TUFMetaFile) throws {
        timestampVersion += 1
        let data = try TUFMetadataWriter.sign(
            TUFMetadataWriter.timestamp(version: timestampVersion, expires: expires, snapshot: snapshot), by: signers["timestamp"]!)
        try data.write(to: metadata.appendingPathComponent("timestamp.json"))
    }

    func file(_ name: String) throws -> Data { try Data(contentsOf: metadata.appendingPathComponent(name)) }
}
