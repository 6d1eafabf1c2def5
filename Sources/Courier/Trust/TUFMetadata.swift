import Crypto
import Foundation

/// A failed TUF check. `check` names it for users ("signature", "rollback", "expired",
/// "length", "hash", "format", "version", "not found", "download"), `message` says what failed.
public struct TUFError: Error, Sendable, CustomStringConvertible, Equatable {
    public enum Check: String, Sendable {
        case format, signature, rollback, version, expired, length, hash, notFound = "not found", download
    }
    public let check: Check
    public let message: String
    /// The HTTP status when a download got an answer other than 200.
    public let status: Int?

    public init(_ check: Check, _ message: String, status: Int? = nil) {
        self.check = check
        self.message = message
        self.status = status
    }

    public var description: String { "\(check.rawValue) check failed: \(message)" }
}

/// The TUF specification version this client implements (1.0.x): metadata of another major
/// version is refused.
public enum TUFSpecification {
    public static let version = "1.0.31"
    public static let topLevelRoles = ["root", "timestamp", "snapshot", "targets"]
}

/// Field access with TUF's type rules: wrong or missing types are `format` failures.
struct TUFFields {
    let value: JSONValue
    let context: String

    init(_ value: JSONValue, _ context: String) throws {
        guard case .object = value else { throw TUFError(.format, "\(context) is not an object") }
        self.value = value
        self.context = context
    }

    func required(_ key: String) throws -> JSONValue {
        guard let member = value[key] else { throw TUFError(.format, "\(context) has no \"\(key)\"") }
        return member
    }

    func string(_ key: String) throws -> String {
        guard case .string(let text) = try required(key) else { throw TUFError(.format, "\(context).\(key) is not a string") }
        return text
    }

    func integer(_ key: String) throws -> Int64 {
        guard case .integer(let number) = try required(key) else { throw TUFError(.format, "\(context).\(key) is not an integer") }
        return number
    }

    func optionalInteger(_ key: String) throws -> Int64? {
        guard let member = value[key] else { return nil }
        guard case .integer(let number) = member else { throw TUFError(.format, "\(context).\(key) is not an integer") }
        return number
    }

    func bool(_ key: String) throws -> Bool {
        guard case .bool(let flag) = try required(key) else { throw TUFError(.format, "\(context).\(key) is not a boolean") }
        return flag
    }

    func object(_ key: String) throws -> [(key: String, value: JSONValue)] {
        guard case .object(let members) = try required(key) else { throw TUFError(.format, "\(context).\(key) is not an object") }
        return members
    }

    func stringList(_ key: String, unique: Bool) throws -> [String] {
        guard case .array(let elements) = try required(key) else { throw TUFError(.format, "\(context).\(key) is not a list") }
        var result: [String] = []
        for element in elements {
            guard case .string(let text) = element else { throw TUFError(.format, "\(context).\(key) holds a non-string") }
            result.append(text)
        }
        if unique, Set(result.map { Array($0.utf8) }).count != result.count {
            throw TUFError(.format, "\(context).\(key) repeats a value")
        }
        return result
    }
}

/// Hashes of a file as metadata lists them (`{"sha256": "<hex>"}`): every listed hash must match.
public struct TUFHashes: Sendable, Equatable {
    public let digests: [(algorithm: String, hex: String)]

    public static func == (lhs: TUFHashes, rhs: TUFHashes) -> Bool {
        lhs.digests.map { "\($0.algorithm)=\($0.hex)" } == rhs.digests.map { "\($0.algorithm)=\($0.hex)" }
    }

    init(_ members: [(key: String, value: JSONValue)], context: String) throws {
        guard !members.isEmpty else { throw TUFError(.format, "\(context).hashes is empty") }
        digests = try members.map { member in
            guard case .string(let hex) = member.value else { throw TUFError(.format, "\(context).hashes.\(member.key) is not a string") }
            return (algorithm: member.key, hex: hex)
        }
    }

    public init(sha256 hex: String) { digests = [("sha256", hex)] }

    /// Checks `data` against every hash; an algorithm Courier does not know fails the check.
    public func verify(_ data: Data, what: String) throws {
        for (algorithm, hex) in digests {
            let actual: String
            switch algorithm {
            case "sha256": actual = TUFHex.encode(SHA256.hash(data: data))
            case "sha384": actual = TUFHex.encode(SHA384.hash(data: data))
            case "sha512": actual = TUFHex.encode(SHA512.hash(data: data))
            default: throw TUFError(.hash, "\(what): unsupported hash algorithm \"\(algorithm)\"")
            }
            guard actual == hex.lowercased() else { throw TUFError(.hash, "\(what): \(algorithm) does not match the signed metadata") }
        }
    }

    public var sha256: String? { digests.first { $0.algorithm == "sha256" }?.hex }

    var json: JSONValue { .object(digests.map { ($0.algorithm, JSONValue.string($0.hex)) }) }
}

/// `meta` entries of timestamp and snapshot: a metadata file's version, and optionally its length
/// and hashes.
public struct TUFMetaFile: Sendable, Equatable {
    public let version: Int64
    public let length: Int64?
    public let hashes: TUFHashes?

    init(_ value: JSONValue, context: String) throws {
        let fields = try TUFFields(value, context)
        version = try fields.integer("version")
        guard version > 0 else { throw TUFError(.format, "\(context).version is not positive") }
        length = try fields.optionalInteger("length")
        if let length, length <= 0 { throw TUFError(.format, "\(context).length is not positive") }
        hashes = try value["hashes"] == nil ? nil : TUFHashes(fields.object("hashes"), context: context)
    }

    public init(version: Int64, length: Int64? = nil, hashes: TUFHashes? = nil) {
        self.version = version
        self.length = length
        self.hashes = hashes
    }

    func verify(_ data: Data, what: String) throws {
        if let length, Int64(data.count) != length {
            throw TUFError(.length, "\(what) is \(data.count) bytes, the signed metadata says \(length)")
        }
        try hashes?.verify(data, what: what)
    }

    var json: JSONValue {
        var members: [(key: String, value: JSONValue)] = [("version", .integer(version))]
        if let length { members.append(("length", .integer(length))) }
        if let hashes { members.append(("hashes", hashes.json)) }
        return .object(members)
    }
}

/// A target file as targets metadata describes it.
public struct TUFTargetFile: Sendable, Equatable {
    public let path: String
    public let length: Int64
    public let hashes: TUFHashes

    init(path: String, _ value: JSONValue) throws {
        let context = "target \"\(path)\""
        let fields = try TUFFields(value, context)
        self.path = path
        length = try fields.integer("length")
        guard length >= 0 else { throw TUFError(.format, "\(context) has a negative length") }
        hashes = try TUFHashes(try fields.object("hashes"), context: context)
    }

    public init(path: String, length: Int64, hashes: TUFHashes) {
        self.path = path
        self.length = length
        self.hashes = hashes
    }

    /// Checks length and every hash.
    public func verify(_ data: Data) throws {
        guard Int64(data.count) == length else {
            throw TUFError(.length, "target \"\(path)\" is \(data.count) bytes, the signed metadata says \(length)")
        }
        try hashes.verify(data, what: "target \"\(path)\"")
    }
}

/// The keys and threshold that sign a role.
public struct TUFRoleKeys: Sendable {
    public let keyIDs: [String]
    public let threshold: Int

    init(_ value: JSONValue, context: String) throws {
        let fields = try TUFFields(value, context)
        keyIDs = try fields.stringList("keyids", unique: true)
        let threshold = try fields.integer("threshold")
        guard threshold >= 1, threshold <= Int64(Int32.max) else { throw TUFError(.format, "\(context).threshold is not positive") }
        self.threshold = Int(threshold)
    }
}

/// A delegation from a targets role to another.
public struct TUFDelegatedRole: Sendable {
    public let name: String
    public let keys: TUFRoleKeys
    public let terminating: Bool
    public let paths: [String]?
    public let pathHashPrefixes: [String]?

    init(_ value: JSONValue) throws {
        let fields = try TUFFields(value, "delegated role")
        name = try fields.string("name")
        keys = try TUFRoleKeys(value, context: "delegated role \"\(name)\"")
        terminating = try fields.bool("terminating")
        paths = try value["paths"] == nil ? nil : fields.stringList("paths", unique: false)
        pathHashPrefixes = try value["path_hash_prefixes"] == nil ? nil : fields.stringList("path_hash_prefixes", unique: false)
        if paths != nil, pathHashPrefixes != nil {
            throw TUFError(.format, "delegated role \"\(name)\" has both paths and path_hash_prefixes")
        }
    }

    /// Whether this delegation covers `targetPath`: a path pattern matching segment by segment
    /// (`*`, `?`, `[...]` within one segment, as python-tuf's fnmatch), or a prefix of the path's
    /// SHA-256.
    public func covers(_ targetPath: String) -> Bool {
        if let paths {
            let target = targetPath.split(separator: "/", omittingEmptySubsequences: false)
            return paths.contains { pattern in
                let parts = pattern.split(separator: "/", omittingEmptySubsequences: false)
                return parts.count == target.count
                    && zip(parts, target).allSatisfy { PathPattern.matches(Array($1.unicodeScalars), Array($0.unicodeScalars)) }
            }
        }
        if let pathHashPrefixes {
            let digest = SHA256.hash(data: Data(targetPath.utf8)).hex
            return pathHashPrefixes.contains { digest.hasPrefix($0) }
        }
        return false
    }
}

/// fnmatch-style matching of one path segment.
enum PathPattern {
    static func matches(_ text: [Unicode.Scalar], _ pattern: [Unicode.Scalar]) -> Bool {
        var t = 0
        var p = 0
        var starPattern = -1
        var starText = 0
        while t < text.count {
            if p < pattern.count {
                switch pattern[p] {
                case "*":
                    starPattern = p
                    starText = t
                    p += 1
                    continue
                case "?":
                    p += 1
                    t += 1
                    continue
                case "[":
                    if case let (matched, next)? = matchClass(text[t], pattern, from: p) {
                        if matched {
                            p = next
                            t += 1
                            continue
                        }
                    } else if text[t] == "[" {
                        p += 1
                        t += 1
                        continue
                    }
                default:
                    if pattern[p] == text[t] {
                        p += 1
                        t += 1
                        continue
                    }
                }
            }
            guard starPattern >= 0 else { return false }
            p = starPattern + 1
            starText += 1
            t = starText
        }
        while p < pattern.count, pattern[p] == "*" { p += 1 }
        return p == pattern.count
    }

    /// Matches `character` against the class at `pattern[start]` (`[abc]`, `[a-z]`, `[!x]`);
    /// nil when the bracket is not closed (then it is a literal `[`).
    private static func matchClass(_ character: Unicode.Scalar, _ pattern: [Unicode.Scalar], from start: Int) -> (Bool, Int)? {
        var i = start + 1
        var negate = false
        if i < pattern.count, pattern[i] == "!" {
            negate = true
            i += 1
        }
        var matched = false
        var first = true
        while i < pattern.count {
            if pattern[i] == "]", !first { return (matched != negate, i + 1) }
            first = false
            if i + 2 < pattern.count, pattern[i + 1] == "-", pattern[i + 2] != "]" {
                if pattern[i].value <= character.value, character.value <= pattern[i + 2].value { matched = true }
                i += 3
            } else {
                if pattern[i] == character { matched = true }
                i += 1
            }
        }
        return nil
    }
}

/// Metadata as fetched: the `signed` part (parsed and canonicalized), its signatures, and the
/// fields every role has.
public struct TUFEnvelope: Sendable {
    public let signed: JSONValue
    /// The canonical JSON bytes the signatures cover.
    public let signedBytes: Data
    public let signatures: [(keyID: String, signature: String)]
    public let type: String
    public let version: Int64
    public let expires: Date
    public let specVersion: String

    /// Parses metadata and checks its common fields; `expectedType` is the `_type` wanted.
    public init(_ data: Data, expectedType: String) throws {
        let document: JSONValue
        do {
            document = try JSONParser.parse(data)
        } catch {
            throw TUFError(.format, "\(expectedType) metadata: \(error)")
        }
        let outer = try TUFFields(document, "\(expectedType) metadata")
        let signed = try outer.required("signed")
        let fields = try TUFFields(signed, "\(expectedType).signed")
        guard case .array(let list) = try outer.required("signatures") else {
            throw TUFError(.format, "\(expectedType) metadata: signatures is not a list")
        }
        var signatures: [(keyID: String, signature: String)] = []
        var seen = Set<[UInt8]>()
        for entry in list {
            let signature = try TUFFields(entry, "\(expectedType) signature")
            let keyID = try signature.string("keyid")
            guard seen.insert(Array(keyID.utf8)).inserted else {
                throw TUFError(.format, "\(expectedType) metadata has two signatures by key \(keyID)")
            }
            signatures.append((keyID, try signature.string("sig")))
        }
        type = try fields.string("_type")
        guard type == expectedType else { throw TUFError(.format, "expected \(expectedType) metadata, got \"\(type)\"") }
        specVersion = try fields.string("spec_version")
        let specParts = specVersion.split(separator: ".", omittingEmptySubsequences: false)
        guard (2...3).contains(specParts.count), specParts[0] == TUFSpecification.version.split(separator: ".")[0] else {
            throw TUFError(.format, "\(expectedType) metadata has spec_version \(specVersion), this client supports 1.x")
        }
        version = try fields.integer("version")
        guard version > 0 else { throw TUFError(.format, "\(expectedType).version is not positive") }
        expires = try TUFDate.parse(try fields.string("expires"), context: "\(expectedType).expires")
        do {
            signedBytes = try CanonicalJSON.encode(signed)
        } catch {
            throw TUFError(.format, "\(expectedType) metadata: \(error)")
        }
        self.signed = signed
        self.signatures = signatures
    }

    public func isExpired(at now: Date) -> Bool { now >= expires }
}

/// `YYYY-MM-DDTHH:MM:SSZ`, the only form TUF metadata uses.
public enum TUFDate {
    public static func parse(_ text: String, context: String) throws -> Date {
        let bytes = Array(text.utf8)
        let digitPositions = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
        guard bytes.count == 20, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
            bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"), bytes[19] == UInt8(ascii: "Z"),
            digitPositions.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[$0]) })
        else { throw TUFError(.format, "\(context) is not YYYY-MM-DDTHH:MM:SSZ") }
        func number(_ range: Range<Int>) -> Int { range.reduce(0) { $0 * 10 + Int(bytes[$1] - UInt8(ascii: "0")) } }
        var parts = tm()
        parts.tm_year = Int32(number(0..<4) - 1900)
        parts.tm_mon = Int32(number(5..<7) - 1)
        parts.tm_mday = Int32(number(8..<10))
        parts.tm_hour = Int32(number(11..<13))
        parts.tm_min = Int32(number(14..<16))
        parts.tm_sec = Int32(number(17..<19))
        guard (0...11).contains(parts.tm_mon), (1...31).contains(parts.tm_mday), (0...23).contains(parts.tm_hour),
            (0...59).contains(parts.tm_min), (0...60).contains(parts.tm_sec)
        else { throw TUFError(.format, "\(context) is not a valid time") }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
    }

    public static func format(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let year = String(Int(parts.tm_year) + 1900)
        return String(repeating: "0", count: max(0, 4 - year.count)) + year + "-" + two(parts.tm_mon + 1) + "-" + two(parts.tm_mday)
            + "T" + two(parts.tm_hour) + ":" + two(parts.tm_min) + ":" + two(parts.tm_sec) + "Z"
    }
}

/// Keys by id, as root and delegations list them.
func parseKeys(_ members: [(key: String, value: JSONValue)], context: String) throws -> [String: TUFPublicKey] {
    var keys: [String: TUFPublicKey] = [:]
    for (keyID, value) in members {
        keys[keyID] = try TUFPublicKey(keyID: keyID, value)
    }
    return keys
}

/// Root metadata: the keys and thresholds of the top-level roles.
public struct TUFRoot: Sendable {
    public let envelope: TUFEnvelope
    public let consistentSnapshot: Bool
    public let keys: [String: TUFPublicKey]
    public let roles: [String: TUFRoleKeys]

    public init(_ data: Data) throws {
        envelope = try TUFEnvelope(data, expectedType: "root")
        let fields = try TUFFields(envelope.signed, "root.signed")
        consistentSnapshot = try envelope.signed["consistent_snapshot"] == nil ? false : fields.bool("consistent_snapshot")
        keys = try parseKeys(try fields.object("keys"), context: "root")
        var roles: [String: TUFRoleKeys] = [:]
        for (name, value) in try fields.object("roles") {
            roles[name] = try TUFRoleKeys(value, context: "root role \"\(name)\"")
        }
        guard Set(roles.keys) == Set(TUFSpecification.topLevelRoles) else {
            throw TUFError(.format, "root must name exactly the roles root, timestamp, snapshot and targets")
        }
        self.roles = roles
    }

    public var version: Int64 { envelope.version }

    /// Checks that `metadata` carries a threshold of valid signatures by `role`'s keys.
    public func verify(role: String, _ metadata: TUFEnvelope) throws {
        guard let roleKeys = roles[role] else { throw TUFError(.signature, "root names no role \(role)") }
        try TUFSignatures.verify(metadata, role: role, keys: keys, roleKeys: roleKeys)
    }
}

/// Timestamp metadata: the current snapshot's version.
public struct TUFTimestamp: Sendable {
    public let envelope: TUFEnvelope
    public let snapshotMeta: TUFMetaFile

    public init(_ data: Data) throws {
        envelope = try TUFEnvelope(data, expectedType: "timestamp")
        let fields = try TUFFields(envelope.signed, "timestamp.signed")
        let meta = try fields.object("meta")
        guard let entry = meta.first(where: { $0.key == "snapshot.json" }) else {
            throw TUFError(.format, "timestamp.meta has no snapshot.json")
        }
        snapshotMeta = try TUFMetaFile(entry.value, context: "timestamp.meta[snapshot.json]")
    }

    public var version: Int64 { envelope.version }
}

/// Snapshot metadata: the versions of every targets metadata file.
public struct TUFSnapshot: Sendable {
    public let envelope: TUFEnvelope
    public let meta: [String: TUFMetaFile]

    public init(_ data: Data) throws {
        envelope = try TUFEnvelope(data, expectedType: "snapshot")
        let fields = try TUFFields(envelope.signed, "snapshot.signed")
        var meta: [String: TUFMetaFile] = [:]
        for (name, value) in try fields.object("meta") {
            meta[name] = try TUFMetaFile(value, context: "snapshot.meta[\(name)]")
        }
        self.meta = meta
    }

    public var version: Int64 { envelope.version }
}

/// Targets metadata (top-level or delegated): target files and delegations.
public struct TUFTargets: Sendable {
    public let envelope: TUFEnvelope
    public let targets: [String: TUFTargetFile]
    public let delegationKeys: [String: TUFPublicKey]
    public let delegatedRoles: [TUFDelegatedRole]

    public init(_ data: Data) throws {
        envelope = try TUFEnvelope(data, expectedType: "targets")
        let fields = try TUFFields(envelope.signed, "targets.signed")
        var targets: [String: TUFTargetFile] = [:]
        for (path, value) in try fields.object("targets") {
            targets[path] = try TUFTargetFile(path: path, value)
        }
        self.targets = targets
        if let delegations = envelope.signed["delegations"] {
            let delegationFields = try TUFFields(delegations, "targets.delegations")
            if delegations["succinct_roles"] != nil {
                throw TUFError(.format, "succinct_roles delegations (TAP 15) are not supported")
            }
            delegationKeys = try parseKeys(try delegationFields.object("keys"), context: "delegations")
            guard case .array(let list) = try delegationFields.required("roles") else {
                throw TUFError(.format, "targets.delegations.roles is not a list")
            }
            let roles = try list.map(TUFDelegatedRole.init)
            guard Set(roles.map { Array($0.name.utf8) }).count == roles.count else {
                throw TUFError(.format, "targets.delegations names a role twice")
            }
            if let clash = roles.first(where: { TUFSpecification.topLevelRoles.contains($0.name) }) {
                throw TUFError(.format, "a delegated role is named \"\(clash.name)\", a top-level role's name")
            }
            delegatedRoles = roles
        } else {
            delegationKeys = [:]
            delegatedRoles = []
        }
    }

    public var version: Int64 { envelope.version }

    /// The roles this one delegates `path` to, in the order the client workflow visits them
    /// (specification 5.6.7.2): those whose paths cover it, up to and including the first
    /// terminating one (after which the search visits nothing else). `TUFUpdater.targetInfo` and
    /// `TUFLocalRepository.verify` both walk delegations with this.
    public func delegations(covering path: String) -> (roles: [TUFDelegatedRole], terminating: Bool) {
        var roles: [TUFDelegatedRole] = []
        for delegation in delegatedRoles where delegation.covers(path) {
            roles.append(delegation)
            if delegation.terminating { return (roles, true) }
        }
        return (roles, false)
    }

    /// Checks that `metadata` carries a threshold of valid signatures by the keys this role
    /// delegates `role` to.
    public func verify(role: String, _ metadata: TUFEnvelope) throws {
        guard let delegation = delegatedRoles.first(where: { $0.name == role }) else {
            throw TUFError(.signature, "no delegation to \(role)")
        }
        try TUFSignatures.verify(metadata, role: role, keys: delegationKeys, roleKeys: delegation.keys)
    }
}

enum TUFSignatures {
    /// Counts distinct keys of the role whose signature over the canonical `signed` bytes is
    /// valid; fewer than the threshold fails.
    static func verify(_ metadata: TUFEnvelope, role: String, keys: [String: TUFPublicKey], roleKeys: TUFRoleKeys) throws {
        var valid = Set<String>()
        for (keyID, signature) in metadata.signatures where roleKeys.keyIDs.contains(keyID) {
            guard let key = keys[keyID] else { continue }
            if key.isValidSignature(hex: signature, for: metadata.signedBytes) { valid.insert(keyID) }
        }
        guard valid.count >= roleKeys.threshold else {
            throw TUFError(
                .signature, "\(role) metadata has \(valid.count) valid signature(s) of the \(roleKeys.threshold) its keys require")
        }
    }
}
