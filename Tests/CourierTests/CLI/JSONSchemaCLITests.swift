import CourierTestSupport
import Foundation
import Testing

/// The --json vocabulary of docs/json.md (issue 14, item 10): every line of standard output is
/// one JSON object; every event names itself in `event` and says when in `time` (RFC 3339, UTC);
/// the result or error comes last; each event kind has its documented fields.
@Suite("--json output against docs/json.md (the built courier binary)")
struct JSONSchemaCLITests {
    /// The fields each event must have (docs/json.md, "Events").
    static let required: [String: Set<String>] = [
        "result": [], "error": ["code", "message", "exitCode"], "retry": ["id", "retry", "maxRetries", "delay", "code", "message"],
        "failed": ["id", "code", "message"], "saved": ["id", "file", "length", "sha256"], "refused": ["line", "url", "code", "message"], "enqueued": ["transactions"],
        "progress": [], "waitingForOwner": ["owners", "downloads"],
    ]

    private func check(_ result: CourierBinary.Result, _ what: String) {
        let lines = result.stdout.split(separator: "\n")
        #expect(!lines.isEmpty, "\(what): no output")
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for (index, line) in lines.enumerated() {
            guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else {
                Issue.record("\(what): not a JSON object: \(line)")
                continue
            }
            guard let event = object["event"] as? String else {
                Issue.record("\(what): no event: \(line)")
                continue
            }
            let time = object["time"] as? String
            #expect(time.flatMap(formatter.date(from:)) != nil, "\(what): no RFC 3339 time: \(line)")
            if let fields = Self.required[event] {
                #expect(fields.isSubset(of: Set(object.keys)), "\(what): \(event) lacks \(fields.subtracting(object.keys))")
            }
            if event == "result" || event == "error" {
                #expect(index == lines.count - 1, "\(what): \(event) is not last")
            }
        }
    }

    @Test("get: result, retries and errors; get -i: per-file events")
    func getEvents() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let text = Data("json schema\n".utf8)
        let good = try FaultOrigin(content: text, behavior: .init())
        defer { good.stop() }
        var failing = FaultOrigin.Behavior()
        failing.status = 503
        failing.faultyResponses = 1000
        let bad = try FaultOrigin(content: text, behavior: failing)
        defer { bad.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        check(try CourierBinary.run(["get", good.url().absoluteString, "-o", folder.appending("a").path, "--json", "--config", config.path]), "get")
        check(try CourierBinary.run(["get", bad.url().absoluteString, "-o", folder.appending("b").path, "--json", "--config", config.path]), "get 503")
        try Data((good.url("/c.bin").absoluteString + "\nnot a url\n").utf8).write(to: folder.appending("list"))
        check(
            try CourierBinary.run([
                "get", "-i", folder.appending("list").path, "-d", folder.appending("out").path, "--json", "--config", config.path,
            ]), "get -i")
        try Data((good.url("/d.bin").absoluteString + "\n").utf8).write(to: folder.appending("list2"))
        check(
            try CourierBinary.run([
                "get", "-i", folder.appending("list2").path, "-d", folder.appending("out").path, "--json", "--config", config.path,
            ]), "get -i, all saved")
        check(try CourierBinary.run(["list", "--json", "--storage", folder.appending("nowhere").path]), "list error")
    }
}
