import Courier
import CourierTestSupport
import Foundation
import Testing

/// `get --retry`, `--max-time`, `--connect-timeout`, and errors that cannot heal, run as a user would.
@Suite("courier get retry options")
struct GetRetryOptionsTests {
    @Test("an https URL to a plain-http server fails at once (TLS handshake): no retry, exit 5",
          .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func tlsHandshakeFailsAtOnce() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        try Data("hello".utf8).write(to: site.appending("f.bin"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let url = "https://127.0.0.1:\(nginx.port)/f.bin"
        let run = try CourierBinary.run(["get", url, "-o", folder.appending("f.bin").path, "--config", config.path])
        #expect(run.status == 5, "\(run.stderr)")
        #expect(!run.stderr.contains("retry"), "\(run.stderr)")
        #expect(run.stderr.contains("curl 35"), "\(run.stderr)")
    }

    @Test("--retry N: N retries, each line naming its cause and number; --retry 0: none")
    func retryCount() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        // A port nothing listens on: every attempt is refused.
        let url = "http://127.0.0.1:\(try Loopback.freePort())/f.bin"
        let two = try CourierBinary.run(["get", url, "-o", folder.appending("f.bin").path, "--retry", "2", "--config", config.path])
        #expect(two.status == 5, "\(two.stderr)")
        let lines = two.stderr.split(separator: "\n").filter { $0.contains("retry") && $0.contains(" in ") }
        #expect(lines.count == 2, "\(two.stderr)")
        #expect(lines.first?.contains("retry 1 of 2") == true, "\(two.stderr)")
        #expect(lines.last?.contains("retry 2 of 2") == true, "\(two.stderr)")
        // The cause: libcurl's error behind the failure.
        #expect(lines.allSatisfy { $0.contains("curl 7") }, "\(two.stderr)")
        #expect(two.stderr.contains("gave up after 3 attempts"), "\(two.stderr)")

        let none = try CourierBinary.run(["get", url, "-o", folder.appending("f.bin").path, "--retry", "0", "--config", config.path])
        #expect(none.status == 5, "\(none.stderr)")
        #expect(!none.stderr.contains("retry 1"), "\(none.stderr)")

        let json = try CourierBinary.run(
            ["get", url, "-o", folder.appending("f.bin").path, "--retry", "1", "--json", "--config", config.path])
        let retry = try #require(json.events.first { $0["event"] as? String == "retry" }, "\(json.stdout)")
        #expect((retry["retry"] as? NSNumber)?.intValue == 1)
        #expect((retry["cause"] as? String)?.contains("curl 7") == true)

        for bad in [["--retry", "-1"], ["--connect-timeout", "0"], ["--max-time", "-3"], ["--max-time", "nan"]] {
            let usage = try CourierBinary.run(["get", url, "-o", folder.appending("f.bin").path] + bad)
            #expect(usage.status == 2 || usage.status == 64, "\(bad): \(usage.stderr)")
        }
    }

    @Test("--max-time: a slow download stops at the limit with exit 5, its partial data kept for a resume")
    func maxTime() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(4 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.bytesPerSecond = 256 << 10
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder, stallTimeout: 30)
        let file = folder.appending("f.bin")
        let run = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--max-time", "1.5", "--config", config.path])
        #expect(run.status == 5, "\(run.stderr)")
        #expect(run.stderr.contains("time limit of 1.5 s"), "\(run.stderr)")
        #expect(TransferFixture.fileSize(URL(fileURLWithPath: file.path + ".courier-part")) > 0)
        #expect(!FileManager.default.fileExists(atPath: file.path))
        // Without the limit the same command resumes and finishes.
        behavior.bytesPerSecond = 0
        origin.setBehavior(behavior)
        let again = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try Data(contentsOf: file) == content)
    }
}
