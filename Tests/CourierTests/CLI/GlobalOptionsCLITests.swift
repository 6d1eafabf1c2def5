@testable import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 31, items 3 and 4: global options before the subcommand (as git and systemctl take
/// them), one voice for usage errors, `help` of a command that does not exist, and `-q` that
/// prints nothing on success, for cron.
@Suite("Global options anywhere, usage errors, -q for cron (the built courier binary)")
struct GlobalOptionsCLITests {
    private func environment(_ directory: TemporaryDirectory) -> [String: String] {
        CourierBinary.isolatedEnvironment(directory)
    }

    /// A store at `root` with one waiting download.
    private func seedStore(at root: URL) throws {
        let queue = try PaymentQueue(
            layout: StorageLayout(root: root), configuration: QueueConfiguration(), logger: .init(label: "test"))
        let transaction = QueueFixtures.transaction("globals1", product: "com.example.globals")
        try queue.add([transaction], content: [QueueFixtures.content(for: transaction)])
    }

    @Test("--storage, --config, --json, -q and -v work before the subcommand as after it")
    func globalOptionsBeforeTheSubcommand() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let root = directory.appending("Storage")
        try seedStore(at: root)
        let config = directory.appending("courier.json")
        try Data("{}".utf8).write(to: config)
        let after = try CourierBinary.run(["list", "--storage", root.path, "-q"], environment: environment(directory))
        #expect(after.status == 0, "\(after.stderr)")
        #expect(after.stdout.contains("com.example.globals"))
        let forms: [[String]] = [
            ["-q", "list", "--storage", root.path],
            ["--storage", root.path, "-q", "list"],
            ["--storage=\(root.path)", "list", "-q"],
            ["-q", "--config", config.path, "--storage", root.path, "list"],
        ]
        for form in forms {
            let before = try CourierBinary.run(form, environment: environment(directory))
            #expect(before.status == 0, "\(form): \(before.stderr)")
            #expect(before.stdout == after.stdout, "\(form): \(before.stdout)")
        }
        // Between a command and its subcommand too, and --json anywhere.
        let nested = try CourierBinary.run(["--storage", root.path, "content", "-q", "list"], environment: environment(directory))
        #expect(nested.status == 0, "\(nested.stderr)")
        #expect(nested.stdout.contains("No delivered content."), "\(nested.stdout)")
        let json = try CourierBinary.run(["--json", "--storage", root.path, "list"], environment: environment(directory))
        #expect(json.status == 0, "\(json.stderr)")
        let document = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect((document?["entries"] as? [Any])?.count == 1, "\(json.stdout)")
        // A read command still never creates a store, whichever side --storage is on.
        let typo = directory.appending("Storge")
        let missing = try CourierBinary.run(["--storage", typo.path, "list"], environment: environment(directory))
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("no Courier store at \(typo.path)"), "\(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: typo.path))
        // An option the root does not take, before any subcommand, is still a usage error.
        let unknown = try CourierBinary.run(["--bogus", "list"], environment: environment(directory))
        #expect(unknown.status == 2)
    }

    @Test("status --watch without an id follows every unfinished transaction until it settles; status alone needs one")
    func watchEverything() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let root = directory.appending("Storage")
        let queue = try PaymentQueue(
            layout: StorageLayout(root: root), configuration: QueueConfiguration(), logger: .init(label: "test"))
        for name in ["watch1", "watch2"] {
            let transaction = QueueFixtures.transaction(name, product: "com.example.\(name)")
            try queue.add([transaction], content: [QueueFixtures.content(for: transaction)])
        }
        // Paused: settled, so the watch ends at once.
        #expect(try CourierBinary.run(["pause", "--all", "--storage", root.path], environment: environment(directory)).status == 0)
        let watched = try CourierBinary.run(["status", "--watch", "--storage", root.path], environment: environment(directory))
        #expect(watched.status == 0, "\(watched.stderr)")
        #expect(watched.stdout.contains("transaction watch1") && watched.stdout.contains("transaction watch2"), "\(watched.stdout)")
        let json = try CourierBinary.run(["status", "--watch", "--json", "--storage", root.path], environment: environment(directory))
        #expect(json.status == 0, "\(json.stderr)")
        #expect(json.events.last?["event"] as? String == "result")
        #expect((json.events.last?["entries"] as? [Any])?.count == 2, "\(json.stdout)")
        let bare = try CourierBinary.run(["status", "--storage", root.path], environment: environment(directory))
        #expect(bare.status == 2)
        #expect(bare.stderr.contains("--watch"), "\(bare.stderr)")
    }

    @Test("usage errors speak as courier:, under --json end with an error document; help of no command is one")
    func usageErrors() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let unknown = try CourierBinary.run(["list", "--bogus"], environment: environment(directory))
        #expect(unknown.status == 2)
        #expect(unknown.stderr.hasPrefix("courier: "), "\(unknown.stderr)")
        #expect(!unknown.stderr.contains("Error:"), "\(unknown.stderr)")
        #expect(unknown.stdout.isEmpty)

        let json = try CourierBinary.run(["--json", "list", "--bogus"], environment: environment(directory))
        #expect(json.status == 2)
        let last = try #require(json.events.last, "no JSON on standard output: \(json.stdout)")
        #expect(last["event"] as? String == "error")
        #expect(last["code"] as? String == "usage")
        #expect(last["exitCode"] as? Int == 2)
        #expect((last["message"] as? String)?.contains("--bogus") == true, "\(last)")
        #expect(last["time"] is String)

        let noSuch = try CourierBinary.run(["help", "nosuch"], environment: environment(directory))
        #expect(noSuch.status == 2)
        #expect(noSuch.stderr.hasPrefix("courier: no command 'nosuch'"), "\(noSuch.stderr)")
        #expect(noSuch.stdout.isEmpty, "no help printed for a command that does not exist")
        let typo = try CourierBinary.run(["help", "content", "lsit"], environment: environment(directory))
        #expect(typo.status == 2)
        #expect(typo.stderr.contains("Did you mean 'list'?"), "\(typo.stderr)")
        let real = try CourierBinary.run(["help", "content", "list"], environment: environment(directory))
        #expect(real.status == 0, "\(real.stderr)")
        #expect(real.stdout.contains("USAGE: courier content list"), "\(real.stdout)")

        for arguments in [["--version"], ["list", "--version"], ["-q", "--version"]] {
            let version = try CourierBinary.run(arguments, environment: environment(directory))
            #expect(version.status == 0, "\(arguments): \(version.stderr)")
            #expect(version.stdout == "courier \(CourierVersion.current)\n", "\(arguments): \(version.stdout)")
        }
    }

    @Test("-q prints nothing on success: get, pause, resume, content list's note; errors still print")
    func quietIsSilentOnSuccess() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let served = directory.appending("www")
        try FileManager.default.createDirectory(at: served, withIntermediateDirectories: true)
        try Data(String(repeating: "quiet\n", count: 1000).utf8).write(to: served.appendingPathComponent("file.bin"))
        #expect(chmod(directory.url.path, 0o755) == 0 && chmod(served.path, 0o755) == 0)
        #expect(chmod(served.appendingPathComponent("file.bin").path, 0o644) == 0)
        let nginx = try NginxServer(root: served)
        defer { nginx.stop() }
        let config = try TransferFixture.writeConfigFile(in: directory)

        let target = directory.appending("out/file.bin")
        let get = try CourierBinary.run(
            ["-q", "get", nginx.url("/file.bin").absoluteString, "-o", target.path, "--create-dirs", "--config", config.path],
            environment: environment(directory))
        #expect(get.status == 0, "\(get.stderr)")
        #expect(get.stdout.isEmpty, "\(get.stdout)")
        #expect(get.stderr.isEmpty, "\(get.stderr)")
        #expect(FileManager.default.fileExists(atPath: target.path))
        let loud = try CourierBinary.run(
            ["get", nginx.url("/file.bin").absoluteString, "-o", directory.appending("out/again.bin").path, "--config", config.path],
            environment: environment(directory))
        #expect(loud.stdout.hasPrefix("saved "), "\(loud.stdout)")

        // A failure still says so, on standard error, with its exit code.
        let missing = try CourierBinary.run(
            ["get", "-q", nginx.url("/missing.bin").absoluteString, "-o", directory.appending("out/missing.bin").path, "--config", config.path],
            environment: environment(directory))
        #expect(missing.status == 8)
        #expect(missing.stdout.isEmpty)
        #expect(missing.stderr.contains("404"), "\(missing.stderr)")

        let root = directory.appending("Storage")
        try seedStore(at: root)
        for command in [["pause", "--all"], ["resume", "--all", "--queue-only"], ["pause", "--all"]] {
            let quiet = try CourierBinary.run(["-q", "--storage", root.path] + command, environment: environment(directory))
            #expect(quiet.status == 0 || quiet.status == 7, "\(command): \(quiet.stderr)")
            #expect(quiet.stdout.isEmpty, "\(command): \(quiet.stdout)")
        }
        let content = try CourierBinary.run(["content", "list", "--storage", root.path, "-q"], environment: environment(directory))
        #expect(content.status == 0, "\(content.stderr)")
        #expect(content.stderr.isEmpty, "the backup-exclusion note is a note: \(content.stderr)")
        #expect(!content.stdout.contains("backup exclusion"), "\(content.stdout)")
    }
}
