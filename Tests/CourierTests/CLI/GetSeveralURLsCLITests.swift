import Courier
import CourierTestSupport
import Foundation
import Testing

/// `courier get URL URL...` and `-i LIST` / `-i -` (issue 31, item 7): like wget and aria2c,
/// each URL is saved under its own name into one folder, several at a time through one engine;
/// the exit code is 0 only when every file was saved (docs/cli.md).
@Suite("courier get with several URLs (the built courier binary)", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct GetSeveralURLsCLITests {
    /// A site of `count` files `fileN.bin` of different sizes, and their contents by name.
    private func site(_ folder: TemporaryDirectory, count: Int) throws -> [String: Data] {
        var contents: [String: Data] = [:]
        for index in 0..<count {
            let data = TransferFixture.bytes(30_000 + index * 7_777, seed: UInt64(index) + 11)
            try data.write(to: folder.appending("file\(index).bin"))
            contents["file\(index).bin"] = data
        }
        return contents
    }

    @Test("several URL arguments: each saved under its own name into -d DIR, a saved event each, then the result")
    func argumentsIntoFolder() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let root = try TemporaryDirectory()
        defer { root.remove() }
        let contents = try site(root, count: 4)
        let nginx = try NginxServer(root: root.url)
        defer { nginx.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let out = folder.appending("out")
        let urls = contents.keys.sorted().map { nginx.url($0).absoluteString }
        let run = try CourierBinary.run(["get"] + urls + ["-d", out.path, "-j", "2", "--json", "--config", config.path])
        #expect(run.status == 0, "\(run.stderr)")
        for (name, data) in contents {
            #expect(try Data(contentsOf: out.appendingPathComponent(name)) == data)
        }
        let saved = run.events.filter { $0["event"] as? String == "saved" }
        #expect(saved.count == 4)
        #expect(Set(saved.compactMap { $0["url"] as? String }) == Set(urls))
        #expect(run.events.last?["event"] as? String == "result")
        #expect((run.events.last?["saved"] as? NSNumber)?.intValue == 4)
    }

    @Test("without -d the files land in the current folder; -o DIR works when DIR is a folder, -o FILE is a usage error")
    func destinations() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let root = try TemporaryDirectory()
        defer { root.remove() }
        let contents = try site(root, count: 2)
        let nginx = try NginxServer(root: root.url)
        defer { nginx.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let urls = contents.keys.sorted().map { nginx.url($0).absoluteString }
        let here = folder.appending("here")
        try FileManager.default.createDirectory(at: here, withIntermediateDirectories: true)
        let plain = try CourierBinary.run(["get"] + urls + ["--config", config.path], directory: here)
        #expect(plain.status == 0, "\(plain.stderr)")
        #expect(plain.stdout.contains("Download results:"), "\(plain.stdout)")
        for (name, data) in contents {
            #expect(try Data(contentsOf: here.appendingPathComponent(name)) == data)
        }

        let existing = folder.appending("existing")
        try FileManager.default.createDirectory(at: existing, withIntermediateDirectories: true)
        let intoFolder = try CourierBinary.run(["get"] + urls + ["-o", existing.path, "--config", config.path])
        #expect(intoFolder.status == 0, "\(intoFolder.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: existing.path).sorted() == contents.keys.sorted())

        let file = folder.appending("one.bin")
        let toFile = try CourierBinary.run(["get"] + urls + ["-o", file.path, "--config", config.path])
        #expect(toFile.status == 2, "\(toFile.stderr)")
        #expect(toFile.stderr.contains("courier: -o \(file.path) names one file, but there are several URLs"), "\(toFile.stderr)")
        #expect(!FileManager.default.fileExists(atPath: file.path))

        for extra in [["--sha256", String(repeating: "a", count: 64)], ["--mirror", urls[0]], ["-d", existing.path, "-o", existing.path]] {
            let refused = try CourierBinary.run(["get"] + urls + extra + ["--config", config.path])
            #expect(refused.status == 2, "\(extra): \(refused.stderr)")
        }
    }

    @Test("-i - reads the list from standard input (comments and blank lines skipped), with URL arguments too")
    func listOnStandardInput() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let root = try TemporaryDirectory()
        defer { root.remove() }
        let contents = try site(root, count: 3)
        let nginx = try NginxServer(root: root.url)
        defer { nginx.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let out = folder.appending("out")
        let list = "# the first two\n\(nginx.url("file0.bin"))\n\n   \n\(nginx.url("file1.bin"))\n# done\n"
        try Data(list.utf8).write(to: folder.appending("list.txt"))
        let run = try CourierBinary.runShell(
            "'\(CourierBinary.url.path)' get '\(nginx.url("file2.bin"))' -i - -d '\(out.path)' --config '\(config.path)'"
                + " < '\(folder.appending("list.txt").path)'")
        #expect(run.status == 0, "\(run.stderr)")
        for (name, data) in contents {
            #expect(try Data(contentsOf: out.appendingPathComponent(name)) == data)
        }
        #expect(run.stdout.contains("saved 3 files in \(out.path)"), "\(run.stdout)")
    }

    @Test("one URL fails: the others are saved, the results list it, and the exit code is its own (8 for a 404)")
    func oneFailureSetsTheExitCode() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let root = try TemporaryDirectory()
        defer { root.remove() }
        let contents = try site(root, count: 2)
        let nginx = try NginxServer(root: root.url)
        defer { nginx.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let out = folder.appending("out")
        let run = try CourierBinary.run([
            "get", nginx.url("file0.bin").absoluteString, nginx.url("missing.bin").absoluteString,
            nginx.url("file1.bin").absoluteString, "-d", out.path, "--config", config.path,
        ])
        #expect(run.status == 8, "\(run.stderr)")
        for (name, data) in contents {
            #expect(try Data(contentsOf: out.appendingPathComponent(name)) == data)
        }
        let rows = run.stdout.split(separator: "\n").map(String.init)
        #expect(rows.first == "Download results:", "\(run.stdout)")
        // In the order given, whatever order they finished in.
        #expect(rows.count == 5, "\(run.stdout)")
        if rows.count == 5 {
            #expect(rows[2].hasPrefix("OK") && rows[2].contains("file0.bin"), "\(rows)")
            #expect(rows[3].hasPrefix("ERR") && rows[3].contains("missing.bin") && rows[3].contains("404"), "\(rows)")
            #expect(rows[4].hasPrefix("OK") && rows[4].contains("file1.bin"), "\(rows)")
        }
        #expect(run.stderr.contains("1 of 3 downloads failed"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out.appendingPathComponent("missing.bin").path))

        let refusedOnly = try CourierBinary.run([
            "get", nginx.url("file0.bin").absoluteString, "ftp://elsewhere/x.bin", "-d", out.path, "--json", "--config", config.path,
        ])
        #expect(refusedOnly.status == 2, "\(refusedOnly.stderr)")
        let refused = try #require(refusedOnly.events.first { $0["event"] as? String == "refused" })
        #expect((refused["argument"] as? NSNumber)?.intValue == 2)
        #expect(refused["url"] as? String == "ftp://elsewhere/x.bin")
    }
}
