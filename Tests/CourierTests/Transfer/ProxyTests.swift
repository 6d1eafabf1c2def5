import Courier
import CourierTestSupport
import Foundation
import Testing

/// Proxies: `--proxy`, `transfer.proxy` and the environment, against a real forward proxy.
@Suite("Proxies")
struct ProxyTests {
    @Test("get --proxy and transfer.proxy send the download through the proxy; the file verifies",
          .enabled(if: NginxServer.isAvailable && ForwardProxy.isAvailable, "nginx or python3 is not installed"))
    func throughTheProxy() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(300_000)
        try content.write(to: site.appending("pack.zip"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        let proxy = try ForwardProxy()
        defer { proxy.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let url = nginx.url("pack.zip").absoluteString
        let sha = TransferFixture.sha256(content)

        let run = try CourierBinary.run([
            "get", url, "-o", folder.appending("a.zip").path, "--sha256", sha, "--proxy", proxy.url, "--config", config.path,
        ])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Data(contentsOf: folder.appending("a.zip")) == content)
        #expect(proxy.requests == ["GET \(url)"])

        let proxied = folder.appending("proxied.json")
        try Data(#"{"transfer": {"proxy": "\#(proxy.url)", "diskReserve": 0}}"#.utf8).write(to: proxied)
        let configured = try CourierBinary.run(["get", url, "-o", folder.appending("b.zip").path, "--sha256", sha, "--config", proxied.path])
        #expect(configured.status == 0, "\(configured.stderr)")
        #expect(proxy.requests.count == 2)

        // no_proxy still names hosts that go direct, as with curl --proxy.
        let direct = try CourierBinary.run(
            ["get", url, "-o", folder.appending("c.zip").path, "--proxy", proxy.url, "--config", config.path],
            environment: ["no_proxy": "127.0.0.1"])
        #expect(direct.status == 0, "\(direct.stderr)")
        #expect(proxy.requests.count == 2)
    }

    @Test("http_proxy from the environment is honoured, but loopback goes direct",
          .enabled(if: NginxServer.isAvailable && ForwardProxy.isAvailable, "nginx or python3 is not installed"))
    func environment() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        try TransferFixture.bytes(10_000).write(to: site.appending("f.bin"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        let proxy = try ForwardProxy()
        defer { proxy.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let environment = ["http_proxy": proxy.url, "HTTPS_PROXY": proxy.url, "no_proxy": "", "NO_PROXY": ""]
        let run = try CourierBinary.run(
            ["get", nginx.url("f.bin").absoluteString, "-o", folder.appending("f.bin").path, "--config", config.path],
            environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(proxy.requests.isEmpty, "\(proxy.requests)")
        // An environment proxy that does not answer proves libcurl reads it: a request to a
        // host outside loopback goes to it (and fails there, before any DNS lookup of the host).
        let dead = "http://127.0.0.1:\(try Loopback.freePort())"
        let outside = try CourierBinary.run(
            ["get", "https://courier-proxy-test.invalid/f.bin", "-o", folder.appending("g.bin").path, "--retry", "0",
             "--config", config.path],
            environment: ["https_proxy": dead, "HTTPS_PROXY": dead])
        #expect(outside.status == 5, "\(outside.stderr)")
        #expect(outside.stderr.contains("curl 7"), "\(outside.stderr)")
    }

    @Test("the no_proxy list: the environment's, plus loopback unless a proxy is configured")
    func noProxyList() {
        #expect(ProxySettings.noProxy(environment: [:], explicitProxy: false) == "localhost,127.0.0.1,::1")
        #expect(ProxySettings.noProxy(environment: ["no_proxy": "example.com"], explicitProxy: false) == "example.com,localhost,127.0.0.1,::1")
        #expect(ProxySettings.noProxy(environment: ["NO_PROXY": "a.test"], explicitProxy: false) == "a.test,localhost,127.0.0.1,::1")
        #expect(ProxySettings.noProxy(environment: ["no_proxy": "*"], explicitProxy: false) == "*")
        #expect(ProxySettings.noProxy(environment: [:], explicitProxy: true) == nil)
        #expect(ProxySettings.noProxy(environment: ["no_proxy": "b.test"], explicitProxy: true) == "b.test")
    }

    @Test("--proxy refuses an unknown scheme before anything runs")
    func badProxy() throws {
        let run = try CourierBinary.run(["get", "http://127.0.0.1:1/f", "-o", "/tmp/never", "--proxy", "ftp://host:21"])
        #expect(run.status == 2 || run.status == 64, "\(run.stderr)")
        #expect(run.stderr.contains("unsupported proxy scheme"))
    }
}
