import Courier
import CourierTestSupport
import Crypto
import Foundation
import Testing

/// Canonical JSON and the TUF client's checks on metadata, without a network: each test builds a
/// repository with `TUFTestRepository` and feeds its files to `TUFTrustedSet`.
@Suite("TUF: canonical JSON and the trusted metadata set")
struct TUFTrustedSetTests {
    @Test("canonical JSON sorts keys by code point, escapes only quote and backslash, writes integers")
    func canonicalJSON() throws {
        let document = Data(#"{"b": [1, -2, true, null], "a": "x\"y\\z\u00e9\n", "B": {}, "\u00e9": 0}"#.utf8)
        let encoded = try CanonicalJSON.encode(try JSONParser.parse(document))
        #expect(String(decoding: encoded, as: UTF8.self) == "{\"B\":{},\"a\":\"x\\\"y\\\\z\u{e9}\n\",\"b\":[1,-2,true,null],\"\u{e9}\":0}")
    }

    @Test("the parser refuses duplicate keys, lone surrogates, 65-bit integers, trailing bytes and deep nesting")
    func strictParser() throws {
        let bad = [
            #"{"a": 1, "a": 2}"#, #""\ud800""#, "18446744073709551616", "{} x", String(repeating: "[", count: 100),
            "01", #""a\u0001"#, "[1,]",
        ]
        for text in bad {
            #expect(throws: JSONParser.Failure.self, "\(text)") { try JSONParser.parse(Data(text.utf8)) }
        }
        // A number with a fraction parses but cannot be signed.
        #expect(throws: CanonicalJSON.NotCanonicalizable.self) { try CanonicalJSON.encode(try JSONParser.parse(Data("[1.5]".utf8))) }
    }

    static func check(_ error: any Error) -> TUFError.Check? { (error as? TUFError)?.check }

    @Test("a root rotation needs the old root's threshold and the new root's own; versions go one at a time")
    func rootRotation() throws {
        let directory = try TemporaryDirectory(prefix: "courier-tuf")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.url)
        let oldRoot = repo.signers["root"]!
        var set = try TUFTrustedSet(trustedRoot: repo.roots[1]!, referenceTime: Date())

        // Version 2 with a new root key, signed only by the new key: the old root did not agree.
        let newRoot = try TUFSigner(Curve25519.Signing.PrivateKey())
        repo.signers["root"] = [newRoot]
        repo.rootVersion = 2
        try repo.publishRoot(signedBy: [newRoot])
        #expect(throws: TUFError.self) { try set.updateRoot(repo.roots[2]!) }
        // Signed only by the old key: the new root does not sign itself.
        try repo.publishRoot(signedBy: oldRoot)
        #expect(throws: TUFError.self) { try set.updateRoot(repo.roots[2]!) }
        // Both: accepted.
        try repo.publishRoot(signedBy: oldRoot + [newRoot])
        try set.updateRoot(repo.roots[2]!)
        #expect(set.root.version == 2)
        // Version 4 after 2: refused, whoever signs it.
        repo.rootVersion = 4
        try repo.publishRoot(signedBy: [newRoot])
        do {
            try set.updateRoot(repo.roots[4]!)
            Issue.record("a skipped root version was accepted")
        } catch { #expect(Self.check(error) == .version) }
    }

    @Test("timestamp: rollback and an older snapshot version are refused, an expired one is refused")
    func timestampChecks() throws {
        let directory = try TemporaryDirectory(prefix: "courier-tuf")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.url)
        try repo.publish()
        let first = try repo.file("timestamp.json")
        try repo.publish()
        let second = try repo.file("timestamp.json")

        var set = try TUFTrustedSet(trustedRoot: repo.roots[1]!, referenceTime: Date())
        try set.updateTimestamp(second)
        do {
            try set.updateTimestamp(first)
            Issue.record("a rolled-back timestamp was accepted")
        } catch { #expect(Self.check(error) == .rollback) }
        #expect(set.timestamp?.version == 2)

        // Freeze: a timestamp that expired is refused even when it is new.
        repo.expires = Date().addingTimeInterval(-60)
        try repo.publish()
        var fresh = try TUFTrustedSet(trustedRoot: repo.roots[1]!, referenceTime: Date())
        do {
            try fresh.updateTimestamp(try repo.file("timestamp.json"))
            Issue.record("an expired timestamp was accepted")
        } catch { #expect(Self.check(error) == .expired) }
    }

    @Test("snapshot must match the length and hash timestamp signed; targets the version and hash snapshot signed")
    func mixAndMatch() throws {
        let directory = try TemporaryDirectory(prefix: "courier-tuf")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.url)
        try repo.addTarget("catalog.json", Data("{}".utf8))
        try repo.publish()
        let oldSnapshot = try repo.file("1.snapshot.json")
        let oldTargets = try repo.file("1.targets.json")
        try repo.publish()

        var set = try TUFTrustedSet(trustedRoot: repo.roots[1]!, referenceTime: Date())
        try set.updateTimestamp(try repo.file("timestamp.json"))
        // Snapshot 1 under timestamp 2 (mix and match): refused by length/hash.
        do {
            try set.updateSnapshot(oldSnapshot, trusted: false)
            Issue.record("an old snapshot was accepted under a new timestamp")
        } catch {
            let check = Self.check(error)
            #expect(check == .length || check == .hash, "\(error)")
        }
        try set.updateSnapshot(try repo.file("2.snapshot.json"), trusted: false)
        do {
            try set.updateTargets(oldTargets, role: "targets", delegator: "root")
            Issue.record("old targets were accepted under a new snapshot")
        } catch {
            let check = Self.check(error)
            #expect(check == .length || check == .hash || check == .version, "\(error)")
        }
        let targets = try set.updateTargets(try repo.file("2.targets.json"), role: "targets", delegator: "root")
        #expect(targets.targets["catalog.json"]?.length == 2)
    }

    @Test("metadata signed by a key the role does not name is refused (arbitrary software)")
    func wrongKey() throws {
        let directory = try TemporaryDirectory(prefix: "courier-tuf")
        defer { directory.remove() }
        var repo = try TUFTestRepository(folder: directory.url)
        let trustedRoot = repo.roots[1]!
        repo.signers["timestamp"] = [try TUFSigner(Curve25519.Signing.PrivateKey())]
        try repo.publish()
        var set = try TUFTrustedSet(trustedRoot: trustedRoot, referenceTime: Date())
        do {
            try set.updateTimestamp(try repo.file("timestamp.json"))
            Issue.record("a timestamp signed by an unknown key was accepted")
        } catch { #expect(Self.check(error) == .signature) }
    }

    @Test("path patterns match one segment at a time, as fnmatch; hash prefixes match the path's SHA-256")
    func delegationPaths() throws {
        func role(_ paths: [String]) throws -> TUFDelegatedRole {
            let json = try JSONParser.parse(
                Data(
                    #"{"delegations": {"keys": {}, "roles": [{"name": "r", "keyids": [], "threshold": 1, "terminating": false, "paths": \#(String(decoding: try JSONSerialization.data(withJSONObject: paths), as: UTF8.self))}]}}"#
                        .utf8))
            let delegations = json["delegations"]!
            let signed = JSONValue.object([
                ("_type", .string("targets")), ("spec_version", .string("1.0.31")), ("version", .integer(1)),
                ("expires", .string("2099-01-01T00:00:00Z")), ("targets", .object([])), ("delegations", delegations),
            ])
            let data = try TUFMetadataWriter.sign(signed, by: [])
            return try TUFTargets(data).delegatedRoles[0]
        }
        #expect(try role(["team-a/*"]).covers("team-a/file.txt"))
        #expect(try !role(["team-a/*"]).covers("team-a/sub/file.txt"))
        #expect(try role(["*/*.json"]).covers("app/catalog.json"))
        #expect(try !role(["*.json"]).covers("app/catalog.json"))
        #expect(try role(["file?.[a-c]x"]).covers("file1.bx"))
        #expect(try !role(["file?.[!a-c]x"]).covers("file1.bx"))
    }
}
