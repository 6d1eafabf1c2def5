import Courier
import Foundation
import Testing

/// The CLI's hand-written NDJSON lines: the same bytes as JSONSerialization (sorted keys, `/` not
/// escaped), and nil wherever it does not cover the object.
@Suite("JSONLine: byte-identical to JSONSerialization")
struct JSONLineTests {
    static func serialized(_ object: [String: Any]) throws -> [UInt8] {
        Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
    }

    @Test("every ASCII and some non-ASCII characters in a value, escaped as JSONSerialization does")
    func characters() throws {
        var texts = (0..<0x80).map { String(UnicodeScalar(UInt8($0))) }
        texts += ["é", "\u{2028}", "\u{FEFF}", "😀", "\u{85}", "a/b\\c\"d", "", "line\nnext\r\ttab\u{8}\u{C}"]
        for text in texts {
            let object: [String: Any] = ["message": text]
            #expect(JSONLine.encode(object) == (try Self.serialized(object)), "\(text.debugDescription)")
        }
    }

    @Test("the CLI's events: integers, booleans, strings, keys sorted")
    func events() throws {
        let objects: [[String: Any]] = [
            ["event": "staged", "contentIdentifier": "com.example.pack0001", "bytesFetched": Int64(204_800), "path": "packages/a/b.zip",
             "time": "2026-11-26T01:02:03.456Z"],
            ["event": "published", "packages": 500, "changed": true],
            ["event": "planned", "packages": 0, "bytes": Int64(-1), "unchanged": Int32(3), "refused": UInt64.max],
            ["event": "error", "code": "network", "message": "no route", "exitCode": 5, "cause": "curl: (7)"],
            ["a": 1, "B": 2, "ab": 3, "Abc": 4, "abd": false, "zeta": Int.min, "Z": Int64.max],
            [:],
        ]
        for object in objects {
            let line = try #require(JSONLine.encode(object))
            #expect(line == (try Self.serialized(object)))
        }
    }

    @Test("random objects of the covered kinds match byte for byte")
    func randomObjects() throws {
        var generator = SystemRandomNumberGenerator()
        let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        let scalars: [ClosedRange<UInt32>] = [0...0x7F, 0x80...0x7FF, 0x800...0xD7FF, 0xE000...0xFFFF, 0x1_0000...0x10_FFFF]
        for _ in 0..<2_000 {
            var object: [String: Any] = [:]
            var lowercased = Set<String>()
            for _ in 0..<Int.random(in: 0...8, using: &generator) {
                let key = String((0..<Int.random(in: 1...10, using: &generator)).map { _ in letters.randomElement(using: &generator)! })
                guard lowercased.insert(key.lowercased()).inserted else { continue }
                switch Int.random(in: 0..<5, using: &generator) {
                case 0:
                    object[key] = Int.random(in: .min ... .max, using: &generator)
                case 1:
                    object[key] = Int64.random(in: -1000...1000, using: &generator)
                case 2:
                    object[key] = Bool.random(using: &generator)
                default:
                    var text = String.UnicodeScalarView()
                    for _ in 0..<Int.random(in: 0...20, using: &generator) {
                        let range = scalars.randomElement(using: &generator)!
                        if let scalar = UnicodeScalar(UInt32.random(in: range, using: &generator)) { text.append(scalar) }
                    }
                    object[key] = String(text)
                }
            }
            let line = try #require(JSONLine.encode(object))
            #expect(line == (try Self.serialized(object)))
            let parsed = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
            #expect(Set(parsed.keys) == Set(object.keys))
        }
    }

    @Test("nil for what it does not cover: other values, keys with other characters, keys equal but for case")
    func uncovered() {
        let objects: [[String: Any]] = [
            ["rate": 1.5], ["items": [1, 2]], ["nested": ["a": 1]], ["null": NSNull()], ["number": NSNumber(value: 1)],
            ["exit_code": 1], ["a1": 1], ["": 1], ["é": 1], ["key": 1, "KEY": 2], ["Key": "a", "kEy": "b"],
        ]
        for object in objects {
            #expect(JSONLine.encode(object) == nil, "\(object)")
        }
    }
}
