import Courier
import CourierTestSupport
import Foundation
import Testing

@Suite("courier serve (the built binary)")
struct ServeCommandTests {
    /// Starts `courier serve --json --port 0 ARGS` (without `--port 0` when `port` is false) and
    /// returns the process, its listening port and its standard output's file.
    static func startServe(_ arguments: [String], scratch: TemporaryDirectory, port: Bool = true) throws -> (Process, Int, URL) {
        let stdout = scratch.appending("serve.out")
        let process = try CourierBinary.start(
            ["serve", "--json"] + (port ? ["--port", "0"] : []) + arguments,
            stdout: stdout,
            stderr: scratch.appending("serve.err")
        )
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, process.isRunning {
            let text = (try? String(contentsOf: stdout, encoding: .utf8)) ?? ""
            for line in text.split(separator: "\n") {
                if let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    object["event"] as? String == "listening", let port = object["port"] as? Int
                {
                    return (process, port, stdout)
                }
            }
            usleep(20_000)
        }
        process.terminate()
        let errors = (try? String(contentsOf: scratch.appending("serve.err"), encoding: .utf8)) ?? ""
        throw CourierError(.internal, "courier serve did not report a port", cause: errors)
    }

    @Test("prints a listening event for port 0, serves, logs access as NDJSON, stops on SIGTERM with exit 0")
    func listenServeStop() throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        try fixture.addPackage("com.example.pack1", size: 10_000)
        try fixture.publishCatalog(products: ["com.example.pack1"])
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        let (process, port, stdout) = try Self.startServe(["--content", fixture.url.path, "--public"], scratch: scratch)
        let exchange = try CurlExchange.runBlocking("http://127.0.0.1:\(port)/\(ContentFixture.path("com.example.pack1"))", ["-r", "0-99"])
        #expect(exchange.status == 206)
        #expect(exchange.body == fixture.packages["com.example.pack1"]?.prefix(100))
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.exitStatus == 0)
        let events = ((try? String(contentsOf: stdout, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let access = events.first { $0["message"] as? String == "access" }
        #expect(access?["http.status"] as? Int == 206)
        #expect(access?["http.bytes"] as? Int == 100)
        #expect(access?["content-id"] as? String == "com.example.pack1")
        // "stopping" when the signal came, the result ("stopped") only once it had stopped.
        #expect(events.last?["event"] as? String == "result")
        #expect(events.last?["stopped"] as? Bool == true)
        let said = events.compactMap { $0["event"] as? String }
        #expect(said.suffix(2) == ["stopping", "result"], "\(said)")
        #expect(events.last { $0["event"] as? String == "stopping" }?["signal"] as? String == "SIGTERM")
    }

    @Test("SIGTERM with a download in flight: stopping at once, the result (stopped) only after that download ended")
    func stoppedAfterInFlight() throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        try fixture.addPackage("com.example.big", size: 24 << 20)
        try fixture.publishCatalog(products: ["com.example.big"])
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        let file = try Self.configuration(["shutdownGracePeriod": 1], in: scratch)
        let (process, port, stdout) = try Self.startServe(
            ["--content", fixture.url.path, "--public", "--config", file.path], scratch: scratch)
        // A slow client: its response is in flight when the signal comes.
        let body = scratch.appending("body")
        let client = Process()
        client.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        client.arguments = ["-s", "--limit-rate", "256k", "-o", body.path, "http://127.0.0.1:\(port)/\(ContentFixture.path("com.example.big"))"]
        try client.run()
        defer {
            if client.isRunning { kill(client.processIdentifier, SIGKILL) }
            client.waitUntilExit()
        }
        while client.isRunning, ((try? FileManager.default.attributesOfItem(atPath: body.path)[.size] as? Int) ?? 0) == 0 { usleep(20_000) }
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.exitStatus == 0)
        let lines = Self.events(stdout)
        let stopping = lines.firstIndex { $0["event"] as? String == "stopping" }
        let access = lines.firstIndex { $0["message"] as? String == "access" && ($0["http.target"] as? String)?.hasSuffix(".zip") == true }
        let stopped = lines.firstIndex { $0["event"] as? String == "result" }
        #expect(stopping != nil && access != nil && stopped != nil, "\(lines)")
        if let stopping, let access, let stopped {
            // Said in this order: the signal, the download it waited for, the end.
            #expect(stopping < access && access < stopped, "\(lines)")
            #expect(stopped == lines.count - 1)
        }
    }

    @Test("a folder that does not exist is a usage error (exit 2)")
    func missingFolder() throws {
        let result = try CourierBinary.run(["serve", "--content", "/nonexistent/courier", "--port", "0", "--public"])
        #expect(result.status == 2)
    }

    /// The NDJSON events `courier serve` wrote to `stdout` so far.
    static func events(_ stdout: URL) -> [[String: Any]] {
        ((try? String(contentsOf: stdout, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// A configuration file in `scratch` whose `serve` section is `serve`.
    static func configuration(_ serve: [String: Any], in scratch: TemporaryDirectory) throws -> URL {
        let file = scratch.appending("courier.json")
        try JSONSerialization.data(withJSONObject: ["serve": serve]).write(to: file)
        return file
    }

    @Test("started from a configuration file alone it serves with the configured folder, port, metrics and head deadline")
    func fromConfigurationAlone() async throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        try fixture.addPackage("com.example.pack1", size: 10_000)
        try fixture.publishCatalog(products: ["com.example.pack1"])
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        // The content folder relative to the configuration file's folder (both are temporary folders).
        #expect(scratch.url.deletingLastPathComponent().standardizedFileURL == fixture.url.deletingLastPathComponent().standardizedFileURL)
        let file = try Self.configuration(
            ["content": "../" + fixture.url.lastPathComponent, "port": 0, "public": true, "headerTimeout": 1, "metricsPort": 0], in: scratch)
        let (process, port, stdout) = try Self.startServe(["--config", file.path], scratch: scratch, port: false)
        defer {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }
        let listening = Self.events(stdout).first { $0["event"] as? String == "listening" }
        #expect(port != 8080)
        #expect(listening?["gated"] as? Bool == false)
        #expect(listening?["content"] as? String == fixture.url.standardizedFileURL.path)
        let exchange = try CurlExchange.runBlocking("http://127.0.0.1:\(port)/\(ContentFixture.path("com.example.pack1"))", ["-r", "0-99"])
        #expect(exchange.status == 206)
        #expect(exchange.body == fixture.packages["com.example.pack1"]?.prefix(100))
        // Metrics on a port of their own, as with --metrics-port 0.
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, !Self.events(stdout).contains(where: { $0["event"] as? String == "metrics" }) { usleep(20_000) }
        #expect(Self.events(stdout).contains { $0["event"] as? String == "metrics" })
        // Half a head is cut by the configured 1 s deadline, not the default 10 s.
        let connection = try RawConnection(port: port)
        try connection.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        let started = Date()
        let answer = connection.readUntilClosed(timeout: 30)
        let elapsed = Date().timeIntervalSince(started)
        #expect(answer.closed && answer.bytes.isEmpty)
        #expect(elapsed < 9, "closed after \(elapsed) s")
    }

    @Test("a flag wins over the configuration file: --host, --no-public, --header-timeout")
    func flagsWin() throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        try fixture.addPackage("com.example.pack1", size: 1_000)
        try fixture.publishCatalog(products: ["com.example.pack1"])
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        let file = try Self.configuration(
            ["content": fixture.url.path, "host": "127.0.0.2", "port": 0, "public": true, "headerTimeout": -1], in: scratch)
        // The file's bad value is refused before anything else (exit 2, the key named).
        let refused = try CourierBinary.run(["serve", "--config", file.path, "--header-timeout", "5"])
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.contains("serve.headerTimeout"), "\(refused.stderr)")

        let valid = try Self.configuration(["content": fixture.url.path, "host": "127.0.0.2", "port": 0, "public": true], in: scratch)
        let (process, port, stdout) = try Self.startServe(["--config", valid.path, "--host", "127.0.0.1"], scratch: scratch, port: false)
        defer {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }
        let listening = Self.events(stdout).first { $0["event"] as? String == "listening" }
        #expect(listening?["host"] as? String == "127.0.0.1")
        #expect(try CurlExchange.runBlocking("http://127.0.0.1:\(port)/health", []).status == 200)
        // --no-public overrides "public": true: the receipt gate then needs trust roots (exit 2).
        let gated = try CourierBinary.run(["serve", "--config", valid.path, "--no-public"])
        #expect(gated.status == 2, "\(gated.stderr)")
        #expect(gated.stderr.contains("trusted root certificates"), "\(gated.stderr)")
        // A bad flag is refused whatever the file says.
        let badFlag = try CourierBinary.run(["serve", "--config", valid.path, "--token-cache-size", "-1"])
        #expect(badFlag.status == 2, "\(badFlag.stderr)")
    }

    @Test("without --content or serve.content it says what is missing (exit 2)")
    func noContent() throws {
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        let file = try Self.configuration(["port": 0, "public": true], in: scratch)
        let result = try CourierBinary.run(["serve", "--config", file.path])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("serve.content"), "\(result.stderr)")
    }

    @Test("serve.notifications false: the receipt gate serves, POST /notifications is not taken")
    func notificationsOff() throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        try fixture.addPackage("com.example.pack1", size: 1_000)
        try fixture.publishCatalog(products: ["com.example.pack1"])
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        let chain = try TestSigningChain()
        let root = scratch.appending("root.pem")
        try chain.writeRoot(to: root)
        let file = try Self.configuration(["content": fixture.url.path, "port": 0, "notifications": false], in: scratch)
        let (process, port, _) = try Self.startServe(
            ["--config", file.path, "--storage", scratch.appending("storage").path, "--trust-root", root.path],
            scratch: scratch, port: false)
        defer {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }
        let package = try CurlExchange.runBlocking("http://127.0.0.1:\(port)/\(ContentFixture.path("com.example.pack1"))", [])
        #expect(package.status == 401)
        let posted = try CurlExchange.runBlocking(
            "http://127.0.0.1:\(port)/notifications", ["-X", "POST", "-H", "Content-Type: application/json", "--data", "{}"])
        #expect(posted.status == 405)
    }
}
