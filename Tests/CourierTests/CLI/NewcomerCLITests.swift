@testable import Courier
import CourierTestSupport
import Foundation
import GRDB
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a newcomer meets on the command line (issue 14): where the store and the configuration
/// are found, read commands that never create a store, one plain line per unreadable file,
/// unknown configuration keys, `--version`, `-q`/`-v`, "did you mean", the list's ERROR column,
/// and the agent's systemd readiness.
@Suite("CLI conventions (the built courier binary)")
struct NewcomerCLITests {
    /// An environment with every default of Courier's pointing into `directory`: HOME, the XDG
    /// folders, and COURIER_STORAGE/COURIER_CONFIG/COURIER_LOG emptied (empty means unset).
    private func environment(_ directory: TemporaryDirectory, _ extra: [String: String] = [:]) -> [String: String] {
        CourierBinary.isolatedEnvironment(directory, extra)
    }

    /// A folder to run in, holding neither ./Storage nor ./Config.
    private func workingDirectory(_ directory: TemporaryDirectory) throws -> URL {
        let url = directory.appending("cwd")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// A store at `root` with one waiting download.
    @discardableResult
    private func seedStore(at root: URL) throws -> PaymentQueue {
        let queue = try PaymentQueue(
            layout: StorageLayout(root: root), configuration: QueueConfiguration(), logger: .init(label: "test"))
        let transaction = QueueFixtures.transaction("newcomer1", product: "com.example.newcomer")
        try queue.add([transaction], content: [QueueFixtures.content(for: transaction)])
        return queue
    }

    @Test("read commands never create a store: one line naming the path and how to name one, exit 1")
    func readCommandsNeverCreateAStore() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let cwd = try workingDirectory(directory)
        let typo = directory.appending("Storge")
        let defaultRoot = directory.appending("data/courier")
        let commands: [[String]] = [
            ["list"], ["status", "abc"], ["content", "list"], ["content", "path", "com.example.x"],
            ["pause", "abc"], ["resume", "abc"], ["cancel", "abc"], ["discard", "abc"], ["priority", "abc", "high"],
        ]
        for command in commands {
            for (extra, root) in [(["--storage", typo.path], typo), ([], defaultRoot)] {
                let result = try CourierBinary.run(command + extra, environment: environment(directory), directory: cwd)
                #expect(result.status == 1, "\(command + extra): \(result.stderr)")
                #expect(result.stderr.contains("no Courier store at \(root.path)"), "\(command): \(result.stderr)")
                #expect(result.stderr.contains("--storage DIR or COURIER_STORAGE"))
                #expect(!result.stdout.contains("No unfinished transactions"))
                #expect(!FileManager.default.fileExists(atPath: root.path), "\(command + extra) created \(root.path)")
            }
        }
        // --json keeps its error document.
        let json = try CourierBinary.run(["list", "--json", "--storage", typo.path], environment: environment(directory), directory: cwd)
        #expect(json.status == 1)
        #expect(json.events.first?["code"] as? String == "notFound")
    }

    @Test("the store is --storage, else COURIER_STORAGE, else ./Storage where it exists, else $XDG_DATA_HOME/courier")
    func storageOrder() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let cwd = try workingDirectory(directory)
        func list(_ extra: [String] = [], _ env: [String: String] = [:]) throws -> CourierBinary.Result {
            try CourierBinary.run(["list", "--json"] + extra, environment: environment(directory, env), directory: cwd)
        }
        func products(_ result: CourierBinary.Result) -> [String] {
            ((result.events.first?["entries"] as? [[String: Any]]) ?? []).compactMap { $0["productId"] as? String }
        }
        // $XDG_DATA_HOME/courier, with no ./Storage here.
        try seedStore(at: directory.appending("data/courier"))
        var result = try list()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(products(result) == ["com.example.newcomer"])
        // HOME/.local/share/courier without XDG_DATA_HOME (and a relative XDG_DATA_HOME is ignored).
        result = try list([], ["XDG_DATA_HOME": "relative/data", "HOME": directory.appending("home2").path])
        #expect(result.status == 1)
        #expect(result.events.first?["message"] as? String == "no Courier store at \(directory.appending("home2/.local/share/courier").path)")
        // ./Storage wins once it exists.
        let local = cwd.appendingPathComponent("Storage")
        try FileManager.default.createDirectory(at: local, withIntermediateDirectories: true)
        result = try list()
        #expect(result.status == 1, "an empty ./Storage is not a store")
        #expect(result.events.first?["message"] as? String == "no Courier store at \(local.path)", "\(result.stdout)")
        // COURIER_STORAGE beats ./Storage, --storage beats both.
        result = try list([], ["COURIER_STORAGE": directory.appending("data/courier").path])
        #expect(products(result) == ["com.example.newcomer"], "\(result.stderr)")
        result = try list(["--storage", directory.appending("data/courier").path], ["COURIER_STORAGE": directory.appending("nowhere").path])
        #expect(products(result) == ["com.example.newcomer"], "\(result.stderr)")
    }

    @Test("the configuration is --config, else COURIER_CONFIG, else ./Config/courier.json where it exists, else $XDG_CONFIG_HOME")
    func configurationOrder() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let cwd = try workingDirectory(directory)
        try seedStore(at: directory.appending("data/courier"))
        // A file with an unknown key proves which file was read: the error names it.
        func write(_ key: String, to url: URL) throws {
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data("{\"\(key)\": 1}".utf8).write(to: url)
        }
        let xdg = directory.appending("config/courier/courier.json")
        try write("fromXDG", to: xdg)
        var result = try CourierBinary.run(["list"], environment: environment(directory), directory: cwd)
        #expect(result.status == 2)
        #expect(result.stderr.contains("\(xdg.path) has an unknown key \"fromXDG\""), "\(result.stderr)")
        // Without XDG_CONFIG_HOME: ~/.config/courier/courier.json.
        let home = directory.appending("home/.config/courier/courier.json")
        try write("fromHome", to: home)
        result = try CourierBinary.run(["list"], environment: environment(directory, ["XDG_CONFIG_HOME": ""]), directory: cwd)
        #expect(result.stderr.contains("\(home.path) has an unknown key \"fromHome\""), "\(result.stderr)")
        let local = cwd.appendingPathComponent("Config/courier.json")
        try write("fromCwd", to: local)
        result = try CourierBinary.run(["list"], environment: environment(directory), directory: cwd)
        #expect(result.stderr.contains("has an unknown key \"fromCwd\""), "\(result.stderr)")
        let named = directory.appending("named.json")
        try write("fromEnvironment", to: named)
        result = try CourierBinary.run(["list"], environment: environment(directory, ["COURIER_CONFIG": named.path]), directory: cwd)
        #expect(result.stderr.contains("unknown key \"fromEnvironment\""), "\(result.stderr)")
        let flag = directory.appending("flag.json")
        try Data("{}".utf8).write(to: flag)
        result = try CourierBinary.run(
            ["list", "--config", flag.path], environment: environment(directory, ["COURIER_CONFIG": named.path]), directory: cwd)
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test("unreadable files named on the command line: one plain line naming the file, exit 2")
    func unreadableFiles() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let cwd = try workingDirectory(directory)
        let missing = directory.appending("missing.json").path
        var result = try CourierBinary.run(["list", "--config", missing], environment: environment(directory), directory: cwd)
        #expect(result.status == 2)
        #expect(result.stderr == "courier: cannot read the configuration \(missing): no such file\n", "\(result.stderr)")

        let receipt = directory.appending("missing.jws").path
        result = try CourierBinary.run(["receipt", "verify", receipt], environment: environment(directory), directory: cwd)
        #expect(result.status == 2)
        #expect(result.stderr == "courier: cannot read the receipt \(receipt): no such file\n", "\(result.stderr)")

        let garbage = directory.appending("garbage.der")
        try Data("garbage\n".utf8).write(to: garbage)
        let jws = directory.appending("receipt.jws")
        try Data("x.y.z\n".utf8).write(to: jws)
        result = try CourierBinary.run(
            ["receipt", "verify", "--trust-root", garbage.path, jws.path], environment: environment(directory), directory: cwd)
        #expect(result.status == 2)
        #expect(result.stderr == "courier: the trusted root \(garbage.path) is not a DER or PEM certificate\n", "\(result.stderr)")
        for raw in ["NSCocoaErrorDomain", "ASN1", ".swift:", "Error Domain"] {
            #expect(!result.stderr.contains(raw))
        }
    }

    @Test("an unknown configuration key is an error naming the key and section, with a suggestion")
    func unknownConfigurationKeys() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let cwd = try workingDirectory(directory)
        let config = directory.appending("courier.json")
        try Data(#"{"transfer": {"maxRetrys": 3}, "queue": {"finishWebhook": "http://127.0.0.1:9/"}}"#.utf8).write(to: config)
        let result = try CourierBinary.run(["list", "--config", config.path], environment: environment(directory), directory: cwd)
        #expect(result.status == 2)
        #expect(result.stderr.contains("\(config.path) has an unknown key \"maxRetrys\" in section \"transfer\""), "\(result.stderr)")
        #expect(result.stderr.contains("did you mean \"maxRetries\"?"))
        #expect(!result.stderr.contains("finishWebhook"), "a known optional key is not unknown")
        // Nested sections and the top level too; a far-off name gets no suggestion.
        let nested = CourierConfiguration.unknownKeys(
            in: Data(#"{"receipts": {"verifyReceipt": {"sharedSecrt": "s"}}, "zzzzzz": 1, "catalog": "c.json"}"#.utf8))
        #expect(nested.contains(.init(section: "receipts.verifyReceipt", key: "sharedSecrt", suggestion: "sharedSecret")))
        #expect(nested.contains(.init(section: "", key: "zzzzzz", suggestion: nil)))
        #expect(nested.count == 2)
        // The project's own configuration has none.
        let shipped = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../../Config/courier.json")
        #expect(CourierConfiguration.unknownKeys(in: try Data(contentsOf: shipped.standardizedFileURL)).isEmpty)
    }

    @Test("every key the defaults write out is read by a setting: unknownKeys takes them without a probe")
    func writtenKeysAreRead() throws {
        let root = CourierConfiguration.writtenDefaults()
        // The probe's premise: the written defaults are a configuration that decodes.
        let data = try JSONSerialization.data(withJSONObject: root)
        #expect(throws: Never.self) { _ = try CourierConfiguration.decode(data) }
        var paths: [[String]] = []
        func visit(_ object: [String: Any], _ path: [String]) {
            for (key, value) in object {
                paths.append(path + [key])
                if let nested = value as? [String: Any] { visit(nested, path + [key]) }
            }
        }
        visit(root, [])
        #expect(paths.count > 40, "\(paths.count)")
        let unread = paths.filter { !CourierConfiguration.isRead($0, in: root) }.map { $0.joined(separator: ".") }
        #expect(unread.isEmpty, "written but not read: \(unread)")
        // The probe is not vacuous: a key nothing reads is found.
        #expect(!CourierConfiguration.isRead(["transfer", "notASetting"], in: root))
        // And the file of all of them has no unknown key.
        #expect(CourierConfiguration.unknownKeys(in: data).isEmpty)
    }

    @Test("--version and -V print the version; a mistyped subcommand gets a suggestion")
    func versionAndSuggestions() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for flag in ["--version", "-V"] {
            let result = try CourierBinary.run([flag], environment: environment(directory))
            #expect(result.status == 0)
            #expect(result.stdout == "courier \(CourierVersion.current)\n")
        }
        for (typed, expected) in [(["lsit"], "list"), (["content", "lst"], "list"), (["recipt", "verify"], "receipt")] {
            let result = try CourierBinary.run(typed, environment: environment(directory))
            #expect(result.status == 2)
            #expect(result.stderr.contains("Did you mean '\(expected)'?"), "\(typed): \(result.stderr)")
        }
        let far = try CourierBinary.run(["xyzzy"], environment: environment(directory))
        #expect(far.status == 2)
        #expect(!far.stderr.contains("Did you mean"))
    }

    @Test("list: a pause is no error (no 'paused: paused: interrupted'); content list has a header and sizes")
    func listAndContentText() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let root = directory.appending("Storage")
        let queue = try seedStore(at: root)
        try queue.store.write { db in
            try db.execute(
                sql: """
                    UPDATE downloads SET state = 'paused', pauseReason = 'interrupted', errorCode = 'paused',
                    errorMessage = 'paused: interrupted'
                    """)
        }
        let result = try CourierBinary.run(["list", "--storage", root.path], environment: environment(directory))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("paused (interrupted)"))
        #expect(!result.stdout.contains("paused: paused"), "\(result.stdout)")
        let status = try CourierBinary.run(["status", "newcomer1", "--storage", root.path], environment: environment(directory))
        #expect(!status.stdout.contains("paused: paused"), "\(status.stdout)")

        let content = try CourierBinary.run(["content", "list", "--storage", root.path], environment: environment(directory))
        #expect(content.status == 0, "\(content.stderr)")
        #expect(content.stdout.hasPrefix("No delivered content."), "\(content.stdout)")
    }

    @Test("-q silences notes, -v turns on info logs (over COURIER_LOG)")
    func quietAndVerbose() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let root = directory.appending("Storage")
        try seedStore(at: root)
        #expect(chmod(root.path, 0o755) == 0)
        let quiet = try CourierBinary.run(["list", "-q", "--storage", root.path], environment: environment(directory))
        #expect(quiet.status == 0)
        #expect(quiet.stderr.isEmpty, "\(quiet.stderr)")
        #expect(quiet.stdout.contains("com.example.newcomer"))
        #expect(chmod(root.path, 0o755) == 0)
        let loud = try CourierBinary.run(["list", "--storage", root.path], environment: environment(directory))
        #expect(loud.stderr.contains("owner-only"))
        let both = try CourierBinary.run(["list", "-q", "-v", "--storage", root.path], environment: environment(directory))
        #expect(both.status == 2)
    }

    @Test("receipt commands log through the one setup: COURIER_LOG=debug shows their logs, -q silences them")
    func receiptLogsFollowTheOneSetup() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let sandbox = try SandboxStore.create(at: directory.appending("sandbox"))
        let receipt = directory.appending("receipt.txt")
        try Data(try sandbox.purchase(productId: "com.example.levels").utf8).write(to: receipt)
        let arguments = ["receipt", "verify", receipt.path, "--trust-root", sandbox.rootCertificateDERFile.path, "--environment", "Sandbox"]
        let debug = try CourierBinary.run(arguments, environment: environment(directory, ["COURIER_LOG": "debug"]))
        #expect(debug.status == 0, "\(debug.stderr)")
        #expect(debug.stderr.contains("receipt: verified"), "\(debug.stderr)")
        let quiet = try CourierBinary.run(arguments + ["-q"], environment: environment(directory, ["COURIER_LOG": "debug"]))
        #expect(quiet.status == 0, "\(quiet.stderr)")
        #expect(quiet.stderr.isEmpty, "-q must silence logs below error: \(quiet.stderr)")
        let plain = try CourierBinary.run(arguments, environment: environment(directory))
        #expect(plain.stderr.isEmpty, "\(plain.stderr)")
    }

    @Test("the agent tells systemd READY=1 on NOTIFY_SOCKET once its socket listens; -v logs over COURIER_LOG")
    func agentNotifiesSystemd() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let notifyPath = directory.appending("notify").path
        let receiver = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        #expect(receiver >= 0)
        defer { close(receiver) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in notifyPath.utf8.enumerated() { buffer[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(receiver, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0)
        // A receive timeout bounds the wait for the datagram (the agent sends it once it listens).
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(receiver, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))

        let root = directory.appending("Storage")
        let stderrFile = directory.appending("agent.err")
        let agent = try CourierBinary.start(
            ["agent", "-v", "--storage", root.path],
            environment: environment(directory, ["NOTIFY_SOCKET": notifyPath, "COURIER_LOG": "critical"]),
            directory: directory.url, stderr: stderrFile)
        defer {
            if agent.isRunning { kill(agent.processIdentifier, SIGKILL) }
            agent.waitUntilExit()
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(receiver, &buffer, buffer.count, 0)
        #expect(count > 0, "no datagram from the agent: \((try? String(contentsOf: stderrFile, encoding: .utf8)) ?? "")")
        let message = String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self)
        #expect(message.split(separator: "\n").contains("READY=1"), "\(message)")
        // Ready means the control socket answers.
        #expect(FileManager.default.fileExists(atPath: root.appendingPathComponent("agent.sock").path))
        kill(agent.processIdentifier, SIGTERM)
        agent.waitUntilExit()
        #expect(agent.exitStatus == 0)
        let log = try String(contentsOf: stderrFile, encoding: .utf8)
        #expect(log.contains("agent started"), "-v did not beat COURIER_LOG=critical: \(log)")
    }
}
