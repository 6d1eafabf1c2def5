import Courier
import CourierTestSupport
import Foundation
import Testing

/// `courier get` follows curl's and aria2c's conventions (issue 14, item 7): the destination is
/// checked before any byte, a refusal leaves nothing, `-o -` is standard output, no `-o` saves
/// under the URL's name, and `--input-file` ends with every file's outcome.
@Suite("courier get conventions (the built courier binary)")
struct GetConventionsCLITests {
    private let text = Data(String(repeating: "courier get conventions\n", count: 400).utf8)

    private func leftovers(_ folder: URL) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0 != "courier.json" }.sorted()
    }

    @Test("an HTTP 404 leaves no part file and no journal")
    func refusalLeavesNothing() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        var behavior = FaultOrigin.Behavior()
        behavior.status = 404
        let origin = try FaultOrigin(content: text, behavior: behavior)
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let file = folder.appending("file.bin")
        let result = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path])
        #expect(result.status == 8, "\(result.stderr)")
        #expect(result.stderr.contains("404"))
        let left = try leftovers(folder.url)
        #expect(left.isEmpty, "left behind: \(left)")
    }

    @Test("-o into a missing folder is refused before any request unless --create-dirs; -o DIR likewise")
    func destinationCheckedFirst() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let origin = try FaultOrigin(content: text, behavior: .init())
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let nested = folder.appending("missing/deeper/file.bin")
        var result = try CourierBinary.run(["get", origin.url().absoluteString, "-o", nested.path, "--config", config.path])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("the folder \(folder.appending("missing/deeper").path) does not exist"), "\(result.stderr)")
        #expect(result.stderr.contains("--create-dirs"))
        #expect(!FileManager.default.fileExists(atPath: folder.appending("missing").path))

        let existing = folder.appending("existing")
        try FileManager.default.createDirectory(at: existing, withIntermediateDirectories: true)
        result = try CourierBinary.run(["get", origin.url().absoluteString, "-o", existing.path, "--config", config.path])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("\(existing.path) is a folder"), "\(result.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: existing.path).isEmpty)
        #expect(origin.requests.isEmpty, "a byte was requested before the destination was checked")

        result = try CourierBinary.run(["get", origin.url().absoluteString, "-o", nested.path, "--create-dirs", "--config", config.path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try Data(contentsOf: nested) == text)
    }

    @Test("-o - writes the verified file to standard output and leaves nothing; not with --json")
    func standardOutput() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let origin = try FaultOrigin(content: text, behavior: .init())
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let result = try CourierBinary.run(
            ["get", origin.url().absoluteString, "-o", "-", "--sha256", TransferFixture.sha256(text), "--config", config.path],
            directory: folder.url)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(Data(result.stdout.utf8) == text)
        #expect(try leftovers(folder.url).isEmpty)
        let json = try CourierBinary.run(
            ["get", origin.url().absoluteString, "-o", "-", "--json", "--config", config.path], directory: folder.url)
        #expect(json.status == 2)
    }

    @Test("without -o the file is saved here under the URL's name; a URL without one is refused")
    func defaultName() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let origin = try FaultOrigin(content: text, behavior: .init())
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let result = try CourierBinary.run(
            ["get", origin.url("/packs/level%201.bin").absoluteString, "--config", config.path], directory: folder.url)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try Data(contentsOf: folder.appending("level 1.bin")) == text)
        #expect(result.stdout.contains("saved \(folder.appending("level 1.bin").path)"), "\(result.stdout)")
        let nameless = try CourierBinary.run(["get", origin.url("/").absoluteString, "--config", config.path], directory: folder.url)
        #expect(nameless.status == 2, "\(nameless.stderr)")
        #expect(nameless.stderr.contains("-o FILE"), "\(nameless.stderr)")
    }

    @Test("--input-file ends with every file's outcome, as aria2c's Download Results",
          .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func inputFileSummary() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        try text.write(to: site.appending("a.txt"))
        try text.write(to: site.appending("b.txt"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        let list = ["a.txt", "missing.txt", "b.txt"].map { nginx.url($0).absoluteString }.joined(separator: "\n") + "\n"
        try Data(list.utf8).write(to: folder.appending("list.txt"))
        let config = try TransferFixture.writeConfigFile(in: folder)
        let out = folder.appending("out")
        let result = try CourierBinary.run([
            "get", "-i", folder.appending("list.txt").path, "-d", out.path, "--config", config.path,
        ])
        #expect(result.status == 8, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "Download results:", "\(result.stdout)")
        #expect(lines.contains { $0.hasPrefix("OK") && $0.hasSuffix(out.appendingPathComponent("a.txt").path) }, "\(result.stdout)")
        #expect(lines.contains { $0.hasPrefix("OK") && $0.hasSuffix(out.appendingPathComponent("b.txt").path) }, "\(result.stdout)")
        #expect(lines.contains { $0.hasPrefix("ERR") && $0.contains("missing.txt") && $0.contains("404") }, "\(result.stdout)")
        #expect(!FileManager.default.fileExists(atPath: out.appendingPathComponent("missing.txt.courier-part").path))
    }

    @Test("each retry is said as it is scheduled, on standard error and as NDJSON; the failure counts attempts and time")
    func visibleRetries() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        var behavior = FaultOrigin.Behavior()
        behavior.status = 503
        behavior.faultyResponses = 1000
        let origin = try FaultOrigin(content: text, behavior: behavior)
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)  // maxRetries 4
        let file = folder.appending("file.bin")
        let result = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path])
        #expect(result.status == 5, "\(result.stderr)")
        for retry in 1...4 {
            #expect(result.stderr.contains("file.bin: \(origin.url().absoluteString) answered HTTP 503; retry \(retry) of 4 in "), "\(result.stderr)")
        }
        #expect(result.stderr.contains("(gave up after 5 attempts in "), "\(result.stderr)")

        let json = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path, "--json"])
        #expect(json.status == 5)
        let retries = json.events.filter { $0["event"] as? String == "retry" }
        #expect(retries.compactMap { $0["retry"] as? Int } == [1, 2, 3, 4], "\(json.stdout)")
        #expect(retries.allSatisfy { $0["maxRetries"] as? Int == 4 && $0["code"] as? String == "network" && $0["delay"] is Double })
        #expect(json.events.last?["event"] as? String == "error")
        // -q keeps the retries quiet; the final error stays.
        let quiet = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path, "-q"])
        #expect(!quiet.stderr.contains("retry 1 of 4"))
        #expect(quiet.stderr.contains("gave up after 5 attempts"))
    }
}
