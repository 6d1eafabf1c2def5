import Foundation

/// A new timestamp of the same version as the trusted one: not an error, the trusted one stays.
struct TUFEqualTimestampVersion: Error {}

/// The metadata a client trusts, and the only way to change it: each `update…` call checks new
/// metadata against what is trusted (TUF 1.0.x section 5, in python-tuf's order) and either
/// accepts it or throws, leaving the set as it was except where noted. No I/O: `TUFUpdater`
/// fetches and persists.
///
/// Delegated targets roles are trusted per delegator: a role verified through one delegation is
/// verified again (its stored bytes, no download) before it is used through another, so a role
/// cannot borrow authority from an earlier search path.
public struct TUFTrustedSet: Sendable {
    /// One time for the whole update, as the specification asks (faketime-able: `Date()`).
    public let referenceTime: Date
    public private(set) var root: TUFRoot
    public private(set) var timestamp: TUFTimestamp?
    public private(set) var snapshot: TUFSnapshot?
    private var trustedTargets: [String: TrustedTargets] = [:]

    private struct TrustedTargets: Sendable {
        var metadata: TUFTargets
        var data: Data
        var delegators: Set<String>
    }

    /// Starts from a root the client already trusts; it must still carry a threshold of its own
    /// signatures.
    public init(trustedRoot data: Data, referenceTime: Date) throws {
        let root = try TUFRoot(data)
        try root.verify(role: "root", root.envelope)
        self.root = root
        self.referenceTime = referenceTime
    }

    /// The next root (version N+1): signed by a threshold of the trusted root's root keys and of
    /// its own.
    public mutating func updateRoot(_ data: Data) throws {
        precondition(timestamp == nil, "root is updated before timestamp")
        let new = try TUFRoot(data)
        try root.verify(role: "root", new.envelope)
        guard new.version == root.version + 1 else {
            throw TUFError(.version, "root version \(new.version) offered where \(root.version + 1) is next")
        }
        try new.verify(role: "root", new.envelope)
        root = new
    }

    /// New timestamp metadata. A version equal to the trusted one throws
    /// `TUFEqualTimestampVersion` (keep the trusted one); an expired one is trusted for rollback
    /// checks and then refused.
    public mutating func updateTimestamp(_ data: Data) throws {
        precondition(snapshot == nil, "timestamp is updated before snapshot")
        if root.envelope.isExpired(at: referenceTime) {
            throw TUFError(.expired, "root metadata (version \(root.version)) expired \(TUFDate.format(root.envelope.expires))")
        }
        let new = try TUFTimestamp(data)
        try root.verify(role: "timestamp", new.envelope)
        if let timestamp {
            if new.version < timestamp.version {
                throw TUFError(.rollback, "timestamp version \(new.version) is older than the trusted \(timestamp.version)")
            }
            if new.version == timestamp.version { throw TUFEqualTimestampVersion() }
            if new.snapshotMeta.version < timestamp.snapshotMeta.version {
                throw TUFError(
                    .rollback,
                    "timestamp names snapshot version \(new.snapshotMeta.version), older than the trusted \(timestamp.snapshotMeta.version)")
            }
        }
        timestamp = new
        try checkTimestampCurrent()
    }

    private func checkTimestampCurrent() throws {
        guard let timestamp else { throw TUFError(.notFound, "no trusted timestamp") }
        if timestamp.envelope.isExpired(at: referenceTime) {
            throw TUFError(.expired, "timestamp metadata (version \(timestamp.version)) expired \(TUFDate.format(timestamp.envelope.expires))")
        }
    }

    private func checkSnapshotCurrent() throws {
        guard let snapshot, let timestamp else { throw TUFError(.notFound, "no trusted snapshot") }
        if snapshot.envelope.isExpired(at: referenceTime) {
            throw TUFError(.expired, "snapshot metadata (version \(snapshot.version)) expired \(TUFDate.format(snapshot.envelope.expires))")
        }
        guard snapshot.version == timestamp.snapshotMeta.version else {
            throw TUFError(.version, "snapshot version \(snapshot.version) is not the \(timestamp.snapshotMeta.version) timestamp names")
        }
    }

    /// New snapshot metadata; `trusted` (read back from the client's own store) skips the length
    /// and hash check against timestamp, never the signature, rollback and expiry checks.
    public mutating func updateSnapshot(_ data: Data, trusted: Bool) throws {
        guard let timestamp else { throw TUFError(.notFound, "snapshot before timestamp") }
        precondition(trustedTargets["targets"] == nil, "snapshot is updated before targets")
        try checkTimestampCurrent()
        if !trusted { try timestamp.snapshotMeta.verify(data, what: "snapshot metadata") }
        let new = try TUFSnapshot(data)
        try root.verify(role: "snapshot", new.envelope)
        if let snapshot {
            for (name, old) in snapshot.meta {
                guard let current = new.meta[name] else {
                    throw TUFError(.rollback, "snapshot version \(new.version) no longer lists \(name)")
                }
                if current.version < old.version {
                    throw TUFError(.rollback, "snapshot lists \(name) version \(current.version), older than the trusted \(old.version)")
                }
            }
        }
        snapshot = new
        try checkSnapshotCurrent()
    }

    /// The targets metadata of `role` if it was verified through `delegator` in this update.
    public func targets(_ role: String, delegator: String) -> TUFTargets? {
        guard let entry = trustedTargets[role], entry.delegators.contains(delegator) else { return nil }
        return entry.metadata
    }

    /// Bytes of a role already trusted through another delegator, to verify through a new one.
    public func trustedBytes(of role: String) -> Data? { trustedTargets[role]?.data }

    /// Targets metadata of `role`, delegated by `delegator` ("root" for the top-level targets):
    /// listed in snapshot with this version (and length and hashes, if given), signed by a
    /// threshold of the delegation's keys, not expired.
    @discardableResult
    public mutating func updateTargets(_ data: Data, role: String, delegator: String) throws -> TUFTargets {
        guard let snapshot else { throw TUFError(.notFound, "targets before snapshot") }
        try checkSnapshotCurrent()
        guard let meta = snapshot.meta["\(role).json"] else {
            throw TUFError(.notFound, "role \(role) is delegated but snapshot does not list it")
        }
        try meta.verify(data, what: "\(role) metadata")
        let new = try TUFTargets(data)
        if delegator == "root" {
            try root.verify(role: role, new.envelope)
        } else {
            guard let parent = trustedTargets[delegator]?.metadata else { throw TUFError(.notFound, "delegator \(delegator) is not trusted") }
            try parent.verify(role: role, new.envelope)
        }
        guard new.version == meta.version else {
            throw TUFError(.version, "\(role) version \(new.version) is not the \(meta.version) snapshot names")
        }
        if new.envelope.isExpired(at: referenceTime) {
            throw TUFError(.expired, "\(role) metadata (version \(new.version)) expired \(TUFDate.format(new.envelope.expires))")
        }
        if var entry = trustedTargets[role], entry.data == data {
            entry.delegators.insert(delegator)
            trustedTargets[role] = entry
        } else {
            trustedTargets[role] = TrustedTargets(metadata: new, data: data, delegators: [delegator])
        }
        return new
    }
}
