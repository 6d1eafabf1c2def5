import Crypto
import Foundation

/// A publisher's ed25519 key file: securesystemslib's key dictionary with the private half
/// (`{"keytype": "ed25519", "scheme": "ed25519", "keyval": {"public": hex, "private": hex}}`),
/// written owner-only. Which key lives where: docs/trust.md, "Keys".
public enum TUFKeyFile {
    /// Makes a new key and writes it to `file` (mode 0600 from its first byte); refuses to
    /// replace an existing file.
    @discardableResult
    public static func generate(at file: URL) throws -> TUFSigner {
        guard !FileManager.default.fileExists(atPath: file.path) else {
            throw CourierError(.usage, "\(file.path) already exists: a key is never replaced by accident")
        }
        let signer = try TUFSigner(Curve25519.Signing.PrivateKey())
        let json = JSONValue.object([
            ("keytype", .string("ed25519")), ("scheme", .string("ed25519")),
            (
                "keyval",
                .object([
                    ("public", .string(signer.publicKey.publicValue)),
                    ("private", .string(TUFHex.encode(signer.privateKeyBytes))),
                ])
            ),
        ])
        try DurableFile.replace(file, with: try CanonicalJSON.pretty(json))
        return signer
    }

    /// Reads a key file.
    public static func load(_ file: URL) throws -> TUFSigner {
        let data = try CourierError.wrapping(.usage, "cannot read the key file \(file.path)") { try Data(contentsOf: file) }
        guard let value = try? JSONParser.parse(data), case .string(let type)? = value["keytype"], type == "ed25519",
            case .string(let hex)? = value["keyval"]?["private"], let raw = TUFHex.decode(hex),
            let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: raw)
        else {
            throw CourierError(.usage, "\(file.path) is not an ed25519 key file (courier sandbox init makes them)")
        }
        return try TUFSigner(key)
    }
}

/// Makes signed TUF metadata: what a publisher writes (`courier sandbox init`, `prestage`) and
/// what the tests build repositories with.
public enum TUFMetadataWriter {
    /// `{"signatures": [...], "signed": signed}` signed by every signer, pretty-printed.
    public static func sign(_ signed: JSONValue, by signers: [TUFSigner]) throws -> Data {
        let bytes = try CanonicalJSON.encode(signed)
        let signatures = try signers.map { signer in
            JSONValue.object([("keyid", .string(signer.publicKey.keyID)), ("sig", .string(try signer.sign(bytes)))])
        }
        return try CanonicalJSON.pretty(.object([("signatures", .array(signatures)), ("signed", signed)]))
    }

    private static func common(_ type: String, version: Int64, expires: Date) -> [(key: String, value: JSONValue)] {
        [
            ("_type", .string(type)), ("spec_version", .string(TUFSpecification.version)), ("version", .integer(version)),
            ("expires", .string(TUFDate.format(expires))),
        ]
    }

    /// Root metadata naming one set of keys per top-level role.
    public static func root(
        version: Int64, expires: Date, keys: [String: [TUFPublicKey]], thresholds: [String: Int] = [:],
        consistentSnapshot: Bool = true
    ) -> JSONValue {
        var allKeys: [(key: String, value: JSONValue)] = []
        var roles: [(key: String, value: JSONValue)] = []
        for role in TUFSpecification.topLevelRoles {
            let roleKeys = keys[role] ?? []
            for key in roleKeys where !allKeys.contains(where: { $0.key == key.keyID }) { allKeys.append((key.keyID, key.json)) }
            roles.append(
                (
                    role,
                    .object([
                        ("keyids", .array(roleKeys.map { .string($0.keyID) })),
                        ("threshold", .integer(Int64(thresholds[role] ?? 1))),
                    ])
                ))
        }
        return .object(
            common("root", version: version, expires: expires) + [
                ("consistent_snapshot", .bool(consistentSnapshot)), ("keys", .object(allKeys)), ("roles", .object(roles)),
            ])
    }

    /// Targets metadata listing `targets`, optionally with delegations (already as JSON).
    public static func targets(version: Int64, expires: Date, targets: [TUFTargetFile], delegations: JSONValue? = nil) -> JSONValue {
        let list = targets.map { target in
            (
                key: target.path,
                value: JSONValue.object([("length", .integer(target.length)), ("hashes", target.hashes.json)])
            )
        }
        var members = common("targets", version: version, expires: expires) + [("targets", .object(list))]
        if let delegations { members.append(("delegations", delegations)) }
        return .object(members)
    }

    /// Snapshot metadata naming each targets role's file (`targets.json`, ...).
    public static func snapshot(version: Int64, expires: Date, meta: [String: TUFMetaFile]) -> JSONValue {
        let entries = meta.sorted { $0.key < $1.key }.map { (key: $0.key, value: $0.value.json) }
        return .object(common("snapshot", version: version, expires: expires) + [("meta", .object(entries))])
    }

    /// Timestamp metadata naming the snapshot.
    public static func timestamp(version: Int64, expires: Date, snapshot: TUFMetaFile) -> JSONValue {
        .object(common("timestamp", version: version, expires: expires) + [("meta", .object([("snapshot.json", snapshot.json)]))])
    }

    /// The `meta` entry for a metadata file: its version, length and SHA-256.
    public static func metaFile(version: Int64, data: Data) -> TUFMetaFile {
        TUFMetaFile(version: version, length: Int64(data.count), hashes: TUFHashes(sha256: TUFHex.encode(SHA256.hash(data: data))))
    }

    /// A target entry for `data`.
    public static func targetFile(path: String, data: Data) -> TUFTargetFile {
        TUFTargetFile(path: path, length: Int64(data.count), hashes: TUFHashes(sha256: TUFHex.encode(SHA256.hash(data: data))))
    }
}
