import Courier
import CourierTestSupport
import Foundation
import Testing

@Suite("courier serve (the built binary)")
struct ServeCommandTests {
    /// Starts `courier serve ARGS --json --port 0` and returns the process and its listening port.
    static func startServe(_ arguments: [String], scratch: TemporaryDirectory) throws -> (Process, Int, URL) {
        let stdout = scratch.appending("serve.out")
        let process = try CourierBinary.start(
            ["serve", "--json", "--port", "0"] + arguments,
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
        #expect(process.terminationStatus == 0)
        let events = ((try? String(contentsOf: stdout, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let access = events.first { $0["message"] as? String == "access" }
        #expect(access?["http.status"] as? Int == 206)
        #expect(access?["http.bytes"] as? Int == 100)
        #expect(access?["content-id"] as? String == "com.example.pack1")
        #expect(events.last?["event"] as? String == "stopped")
    }

    @Test("a folder that does not exist is a usage error (exit 2)")
    func missingFolder() throws {
        let result = try CourierBinary.run(["serve", "--content", "/nonexistent/courier", "--port", "0", "--public"])
        #expect(result.status == 2)
    }
}
