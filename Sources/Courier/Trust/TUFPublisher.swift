import Foundation

/// The online keys a publisher signs a catalog with: targets, snapshot and timestamp (the root
/// key stays offline; docs/trust.md, "Keys"). Read from a folder holding `targets.json`,
/// `snapshot.json` and `timestamp.json` key files (what `courier sandbox init` writes).
public struct TUFPublisherKeys: Sendable {
    public var targets: TUFSigner
    public var snapshot: TUFSigner
    public var timestamp: TUFSigner

    public init(targets: TUFSigner, snapshot: TUFSigner, timestamp: TUFSigner) {
        self.targets = targets
        self.snapshot = snapshot
        self.timestamp = timestamp
    }

    public static func load(from folder: URL) throws -> TUFPublisherKeys {
        TUFPublisherKeys(
            targets: try TUFKeyFile.load(folder.appendingPathComponent("targets.json")),
            snapshot: try TUFKeyFile.load(folder.appendingPathComponent("snapshot.json")),
            timestamp: try TUFKeyFile.load(folder.appendingPathComponent("timestamp.json")))
    }
}

/// How long each role's metadata stays valid once signed.
public struct TUFExpiry: Sendable {
    public var root: TimeInterval = 365 * 86_400
    public var targets: TimeInterval = 365 * 86_400
    public var snapshot: TimeInterval = 30 * 86_400
    /// The freeze window: a client that cannot get newer metadata stops trusting the catalog
    /// this long after it was signed. Re-running `prestage` signs a new timestamp.
    public var timestamp: TimeInterval = 7 * 86_400

    public init() {}
}

/// Publishes a TUF repository in python-tuf's layout (`metadata/`, `targets/`, consistent
/// snapshots): the root chain the offline root key signed, and targets, snapshot and timestamp
/// metadata signed with the online keys for one target (the catalog).
///
/// Files are written owner-only and durably, targets first and `timestamp.json` last, so a client
/// reading during a publish sees either the old repository or the new one.
public enum TUFPublisher {
    /// Makes a new repository's keys (in `keys`, owner-only; existing keys are kept) and its
    /// first root (in `metadata`, unless one is there). Returns the keys.
    @discardableResult
    public static func createRepository(keys: URL, metadata: URL, expiry: TUFExpiry = .init(), now: Date = Date()) throws
        -> (root: TUFSigner, online: TUFPublisherKeys)
    {
        try DurableFile.makeDirectory(keys)
        try DurableFile.makeDirectory(metadata)
        var signers: [String: TUFSigner] = [:]
        for role in TUFSpecification.topLevelRoles {
            let file = keys.appendingPathComponent("\(role).json")
            if FileManager.default.fileExists(atPath: file.path) {
                signers[role] = try TUFKeyFile.load(file)
            } else {
                signers[role] = try TUFKeyFile.generate(at: file)
            }
        }
        guard let rootSigner = signers["root"], let targetsSigner = signers["targets"], let snapshotSigner = signers["snapshot"],
            let timestampSigner = signers["timestamp"]
        else { throw CourierError(.internal, "a top-level role has no key in \(keys.path)") }
        let online = TUFPublisherKeys(targets: targetsSigner, snapshot: snapshotSigner, timestamp: timestampSigner)
        if !FileManager.default.fileExists(atPath: metadata.appendingPathComponent("1.root.json").path) {
            let root = TUFMetadataWriter.root(
                version: 1, expires: now.addingTimeInterval(expiry.root), keys: signers.mapValues { [$0.publicKey] })
            let data = try TUFMetadataWriter.sign(root, by: [rootSigner])
            try DurableFile.replace(metadata.appendingPathComponent("1.root.json"), with: data)
            try DurableFile.replace(metadata.appendingPathComponent("root.json"), with: data)
        }
        return (rootSigner, online)
    }

    /// The versions `publish` wrote.
    public struct Published: Sendable, Equatable {
        public var root: Int64
        public var targets: Int64
        public var snapshot: Int64
        public var timestamp: Int64
        public var targetPath: String
    }

    /// Publishes `target` as `name` into `repository` (`metadata/`, `targets/` under it). The
    /// root chain (`N.root.json`) is copied from `roots`; the online keys must be the ones the
    /// newest root names. Targets and snapshot get new versions only when the target changed;
    /// timestamp always does (a re-run renews the freeze window).
    @discardableResult
    public static func publish(
        target: Data, named name: String, into repository: URL, roots: URL, keys: TUFPublisherKeys, expiry: TUFExpiry = .init(),
        now: Date = Date()
    ) throws -> Published {
        guard !name.isEmpty, !name.contains("/"), !name.hasPrefix(".") else {
            throw CourierError(.usage, "the target name \"\(name)\" is not one plain file name")
        }
        let metadata = repository.appendingPathComponent("metadata", isDirectory: true)
        let targetsFolder = repository.appendingPathComponent("targets", isDirectory: true)
        try DurableFile.makeDirectory(metadata)
        try DurableFile.makeDirectory(targetsFolder)

        // The root chain, checked link by link as a client will.
        let root = try copyRoots(from: roots, to: metadata)
        try check(keys, against: root)

        let file = TUFMetadataWriter.targetFile(path: name, data: target)
        guard let hash = file.hashes.sha256 else { throw CourierError(.internal, "no SHA-256") }
        let targetPath = "targets/\(hash).\(name)"
        try DurableFile.replace(repository.appendingPathComponent(targetPath), with: target)

        func read(_ file: String) -> Data? { try? Data(contentsOf: metadata.appendingPathComponent(file)) }
        let horizon = now.addingTimeInterval(expiry.timestamp)
        let previousTargets = read("targets.json").flatMap { try? TUFTargets($0) }
        let previousSnapshot = read("snapshot.json").flatMap { try? TUFSnapshot($0) }
        let previousTimestamp = read("timestamp.json").flatMap { try? TUFTimestamp($0) }

        // New targets metadata when the target changed (or the old one would expire before the
        // next timestamp, or another key signed it); new snapshot when targets changed.
        var targetsVersion = previousTargets?.version ?? 0
        let targetsCurrent =
            previousTargets.map {
                $0.targets.count == 1 && $0.targets[name] == file && (try? root.verify(role: "targets", $0.envelope)) != nil
                    && !$0.envelope.isExpired(at: horizon)
            } ?? false
        if !targetsCurrent {
            targetsVersion += 1
            let targets = try TUFMetadataWriter.sign(
                TUFMetadataWriter.targets(version: targetsVersion, expires: now.addingTimeInterval(expiry.targets), targets: [file]),
                by: [keys.targets])
            try DurableFile.replace(metadata.appendingPathComponent("\(targetsVersion).targets.json"), with: targets)
            try DurableFile.replace(metadata.appendingPathComponent("targets.json"), with: targets)
        }
        guard let targetsData = read("targets.json") else { throw CourierError(.io, "cannot read back targets.json") }
        let snapshotMeta: TUFMetaFile
        if let previousSnapshot, let data = read("snapshot.json"), previousSnapshot.meta["targets.json"]?.version == targetsVersion,
            (try? root.verify(role: "snapshot", previousSnapshot.envelope)) != nil, !previousSnapshot.envelope.isExpired(at: horizon)
        {
            snapshotMeta = TUFMetadataWriter.metaFile(version: previousSnapshot.version, data: data)
        } else {
            let snapshotVersion = (previousSnapshot?.version ?? 0) + 1
            let snapshot = try TUFMetadataWriter.sign(
                TUFMetadataWriter.snapshot(
                    version: snapshotVersion, expires: now.addingTimeInterval(expiry.snapshot),
                    meta: ["targets.json": TUFMetadataWriter.metaFile(version: targetsVersion, data: targetsData)]),
                by: [keys.snapshot])
            try DurableFile.replace(metadata.appendingPathComponent("\(snapshotVersion).snapshot.json"), with: snapshot)
            try DurableFile.replace(metadata.appendingPathComponent("snapshot.json"), with: snapshot)
            snapshotMeta = TUFMetadataWriter.metaFile(version: snapshotVersion, data: snapshot)
        }
        let timestampVersion = (previousTimestamp?.version ?? 0) + 1
        let timestamp = try TUFMetadataWriter.sign(
            TUFMetadataWriter.timestamp(version: timestampVersion, expires: now.addingTimeInterval(expiry.timestamp), snapshot: snapshotMeta),
            by: [keys.timestamp])
        try DurableFile.replace(metadata.appendingPathComponent("timestamp.json"), with: timestamp)
        return Published(
            root: root.version, targets: targetsVersion, snapshot: snapshotMeta.version, timestamp: timestampVersion, targetPath: targetPath)
    }

    /// Checks, writing nothing, that the root chain in `roots` verifies link by link and that its
    /// newest version names `keys` for their roles (what `publish` checks before it signs): a
    /// publisher given the wrong keys stops before its run fetches anything.
    public static func checkKeys(_ keys: TUFPublisherKeys, roots: URL) throws {
        try check(keys, against: try copyRoots(from: roots, to: nil))
    }

    private static func check(_ keys: TUFPublisherKeys, against root: TUFRoot) throws {
        for (role, signer) in [("targets", keys.targets), ("snapshot", keys.snapshot), ("timestamp", keys.timestamp)] {
            guard root.roles[role]?.keyIDs.contains(signer.publicKey.keyID) == true else {
                throw CourierError(
                    .usage, "the \(role) key \(signer.publicKey.keyID.prefix(16))… is not one root version \(root.version) names for \(role)")
            }
        }
        guard root.consistentSnapshot else {
            throw CourierError(.usage, "root version \(root.version) does not use consistent snapshots; Courier publishes with them")
        }
    }

    /// Copies every `N.root.json` of `source` into `metadata` (and the newest as `root.json`),
    /// checking that each version is signed by its predecessor's root keys and its own. A
    /// version already published is never replaced by different bytes. With no `metadata`, only
    /// checks the chain.
    static func copyRoots(from source: URL, to metadata: URL?) throws -> TUFRoot {
        let names = try CourierError.wrapping(.usage, "cannot read the root folder \(source.path)") {
            try FileManager.default.contentsOfDirectory(atPath: source.path)
        }
        var versions: [(Int64, String)] = []
        for name in names where name.hasSuffix(".root.json") {
            if let version = Int64(name.dropLast(".root.json".count)), version > 0 { versions.append((version, name)) }
        }
        versions.sort { $0.0 < $1.0 }
        guard let first = versions.first, first.0 == 1 else {
            throw CourierError(.usage, "\(source.path) holds no 1.root.json (courier sandbox init makes one)")
        }
        var trusted: TUFTrustedSet?
        for (index, (version, name)) in versions.enumerated() {
            guard version == Int64(index + 1) else { throw CourierError(.usage, "\(source.path) lacks root version \(index + 1)") }
            let data = try Data(contentsOf: source.appendingPathComponent(name))
            do {
                if trusted == nil {
                    trusted = try TUFTrustedSet(trustedRoot: data, referenceTime: Date())
                } else {
                    try trusted?.updateRoot(data)
                }
            } catch let error as TUFError {
                throw CourierError(.integrity, "root version \(version) in \(source.path) does not verify: \(error)")
            }
            guard let metadata else { continue }
            let destination = metadata.appendingPathComponent(name)
            if let existing = try? Data(contentsOf: destination) {
                guard existing == data else {
                    throw CourierError(.integrity, "\(destination.path) is already published with other bytes; a root version is never replaced")
                }
            } else {
                try DurableFile.replace(destination, with: data)
            }
            if index == versions.count - 1 {
                try DurableFile.replace(metadata.appendingPathComponent("root.json"), with: data)
            }
        }
        guard let root = trusted?.root else { throw CourierError(.internal, "no root") }
        return root
    }
}
