import CourierTestSupport
import Foundation
import Testing

/// The events table of docs/json.md, parsed: one row per (event, from), with its field paths.
enum JSONSchemaDoc {
    struct Row: Hashable {
        var event: String
        var from: String
        var fields: Set<String>
    }

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The rows of the "## Events" table of docs/json.md.
    static func rows() throws -> [Row] {
        let text = try String(contentsOf: repository.appendingPathComponent("docs/json.md"), encoding: .utf8)
        guard let start = text.range(of: "\n## Events\n") else { throw CourierTestFailure("docs/json.md has no Events section") }
        let section = text[start.upperBound...]
        var rows: [Row] = []
        for line in section.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("## ") { break }
            guard line.hasPrefix("| `") else { continue }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 5 else { throw CourierTestFailure("a row of docs/json.md has too few cells: \(line)") }
            rows.append(Row(event: names(in: cells[1]).first ?? "", from: cells[2], fields: Set(names(in: cells[3]))))
        }
        return rows
    }

    /// The `backticked` words of a cell.
    static func names(in cell: String) -> [String] {
        cell.split(separator: "`", omittingEmptySubsequences: false).enumerated().compactMap { $0.offset % 2 == 1 ? String($0.element) : nil }
    }

    /// Every field path of a JSON object: `key`, `key.child`, an array's elements' `key.child`
    /// (`event` and `time`, common to all, left out).
    static func paths(_ value: Any, prefix: String = "") -> Set<String> {
        var out: Set<String> = []
        if let object = value as? [String: Any] {
            for (key, child) in object {
                let path = prefix.isEmpty ? key : prefix + "." + key
                if prefix.isEmpty && (key == "event" || key == "time") { continue }
                out.insert(path)
                out.formUnion(paths(child, prefix: path))
            }
        } else if let array = value as? [Any] {
            for element in array { out.formUnion(paths(element, prefix: prefix)) }
        }
        return out
    }
}

struct CourierTestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// docs/json.md against the typed schema (issue 31, item 1): the binary prints one sample of
/// every `JSONEvent` type (`COURIER_JSON_SCHEMA_SAMPLES=1`), and the table must list each type's
/// event, its commands and every field it can print, no more and no less.
@Suite("docs/json.md against the JSONEvent types")
struct JSONSchemaDocTests {
    struct Sample {
        var type: String
        var from: String
        var event: String
        var fields: Set<String>
        var unset: [String]
    }

    static func samples() throws -> [Sample] {
        let result = try CourierBinary.run([], environment: ["COURIER_JSON_SCHEMA_SAMPLES": "1"])
        guard result.status == 0 else { throw CourierTestFailure("samples: exit \(result.status): \(result.stderr)") }
        return try result.stdout.split(separator: "\n").map { line in
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let type = object["type"] as? String, let from = object["from"] as? String,
                let event = (object["line"] as? [String: Any])?["event"] as? String, let unset = object["unset"] as? [String]
            else { throw CourierTestFailure("not a sample: \(line)") }
            return Sample(type: type, from: from, event: event, fields: JSONSchemaDoc.paths(object["line"] ?? [:]), unset: unset)
        }
    }

    @Test("every type's sample shows all its fields, and every row of the table matches one type, both ways")
    func tableMatchesTypes() throws {
        let samples = try Self.samples()
        #expect(samples.count >= 30)
        for sample in samples {
            #expect(sample.unset.isEmpty, "\(sample.type): the sample leaves \(sample.unset) unset, so the check cannot see them")
        }
        let rows = try JSONSchemaDoc.rows()
        var documented: [String: Set<String>] = [:]
        for row in rows {
            let key = "\(row.event) from \(row.from)"
            #expect(documented.updateValue(row.fields, forKey: key) == nil, "docs/json.md lists \(key) twice")
        }
        var typed: [String: Set<String>] = [:]
        for sample in samples {
            let key = "\(sample.event) from \(sample.from)"
            #expect(typed.updateValue(sample.fields, forKey: key) == nil, "two types print \(key)")
        }
        for (key, fields) in typed {
            guard let doc = documented[key] else {
                Issue.record("docs/json.md has no row for \(key)")
                continue
            }
            #expect(fields.subtracting(doc).isEmpty, "\(key): printed but not documented: \(fields.subtracting(doc).sorted())")
            #expect(doc.subtracting(fields).isEmpty, "\(key): documented but never printed: \(doc.subtracting(fields).sorted())")
        }
        for key in Set(documented.keys).subtracting(typed.keys) {
            Issue.record("docs/json.md documents \(key), which no JSONEvent type prints")
        }
    }

    @Test("every JSONEvent type of the CLI has a sample; no untyped JSON is built")
    func everyTypeHasASample() throws {
        let folder = JSONSchemaDoc.repository.appendingPathComponent("Sources/CourierCLI")
        let files = try FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "swift" }
        #expect(!files.isEmpty)
        let declaration = try Regex(#"(?:struct|enum|final class|class)\s+(\w+)\s*:[^{]*\bJSONEvent\b"#)
        var declared: Set<String> = []
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in text.matches(of: declaration) {
                if let name = match.output[1].substring { declared.insert(String(name)) }
            }
            // The one encoder of Output: no dictionary of Any, no JSONSerialization.
            #expect(!text.contains("[String: Any]"), "\(file.lastPathComponent) builds an untyped dictionary")
            #expect(!text.contains("JSONSerialization"), "\(file.lastPathComponent) uses JSONSerialization")
        }
        #expect(declared.count >= 30)
        let sampled = Set(try Self.samples().map(\.type))
        #expect(declared.subtracting(sampled).isEmpty, "JSONEvent types without a sample in JSONSchema.allExamples: \(declared.subtracting(sampled).sorted())")
    }

    @Test("a line that cannot be encoded is an error line, nothing follows it, and the exit code is 1")
    func unencodableLine() throws {
        let result = try CourierBinary.run([], environment: ["COURIER_JSON_SCHEMA_SAMPLES": "unencodable"])
        #expect(result.status == 1)
        let events = result.events
        #expect(events.count == 1, "\(result.stdout)")
        #expect(events.last?["event"] as? String == "error")
        #expect(events.last?["code"] as? String == "internal")
        #expect(events.last?["exitCode"] as? Int == 1)
        #expect((events.last?["message"] as? String)?.contains("`download`") == true, "\(events)")
    }
}
