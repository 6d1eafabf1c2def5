import Courier
import CourierTestSupport
import Foundation
import Testing

/// nginx in front of two `courier serve` gates (the built binary), configured with what
/// `courier origin nginx-config` prints: nginx serves the bytes, the gates decide.
@Suite("nginx + auth_request in front of two courier serve gates", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct NginxGateTests {
    static let big = "com.example.levels.big"
    static let small = "com.example.levels.small"
    static let bigSize = 8 << 20

    /// Two gates sharing one storage root (one refund state), and nginx in front of them.
    final class Stack {
        var fixture: ContentFixture
        let chain: TestSigningChain
        let scratch: TemporaryDirectory
        let storage: URL
        var gates: [(process: Process, port: Int, log: URL)] = []
        var gateFolders: [TemporaryDirectory] = []
        var nginx: NginxServer?
        var printed = ""

        init() throws {
            fixture = try ContentFixture()
            try fixture.addPackage(NginxGateTests.big, size: NginxGateTests.bigSize)
            try fixture.addPackage(NginxGateTests.small, size: 10_000)
            try fixture.publishCatalog(products: [NginxGateTests.big, NginxGateTests.small])
            chain = try TestSigningChain()
            scratch = try TemporaryDirectory(prefix: "courier-gates")
            storage = scratch.appending("storage")
            let root = scratch.appending("root.pem")
            try chain.writeRoot(to: root)
            // Whatever fails on the way, no gate outlives the test.
            do {
                for index in 0..<2 {
                    let folder = try TemporaryDirectory(prefix: "courier-gate\(index)")
                    gateFolders.append(folder)
                    let (process, port, log) = try ServeCommandTests.startServe(
                        [
                            "--content", fixture.url.path, "--trust-root", root.path, "--bundle-id", "com.example.app",
                            "--environment", "Sandbox", "--storage", storage.path, "--metrics-port", "0",
                        ],
                        scratch: folder
                    )
                    gates.append((process, port, log))
                }
                let gateArguments = gates.flatMap { ["--gate", "127.0.0.1:\($0.port)"] }
                var printed = ""
                let content = fixture.url.path
                nginx = try NginxServer(root: fixture.url) { port in
                    let result = try CourierBinary.run(
                        ["origin", "nginx-config", "--content", content, "--listen", "127.0.0.1:\(port)"] + gateArguments
                    )
                    guard result.status == 0 else {
                        throw CourierError(.internal, "courier origin nginx-config failed", cause: result.stderr)
                    }
                    printed = result.stdout
                    return result.stdout
                }
                self.printed = printed
            } catch {
                stop()
                throw error
            }
        }

        func stop() {
            nginx?.stop()
            for gate in gates where gate.process.isRunning {
                kill(gate.process.processIdentifier, SIGKILL)
                gate.process.waitUntilExit()
            }
            fixture.folder.remove()
            scratch.remove()
            for folder in gateFolders { folder.remove() }
        }

        /// A signed purchase of `product` as transaction `id`.
        func token(_ product: String, transaction id: String) throws -> String {
            try chain.token(TestSigningChain.payload(productId: product, transactionId: id, environment: "Sandbox"))
        }

        /// Apple's POST body for a REFUND of transaction `id` of `product`.
        func refund(_ product: String, transaction id: String) throws -> Data {
            let signed = Date().addingTimeInterval(-30)
            let info = try chain.token(
                TestSigningChain.payload(
                    productId: product, transactionId: id, revocationDate: signed.addingTimeInterval(-5), environment: "Sandbox", signedDate: signed
                )
            )
            let payload: [String: Any] = [
                "notificationType": "REFUND", "notificationUUID": UUID().uuidString.lowercased(), "version": "2.0",
                "signedDate": Int64(signed.timeIntervalSince1970 * 1000),
                "data": [
                    "appAppleId": 1_234_567_890, "bundleId": "com.example.app", "bundleVersion": "1", "environment": "Sandbox",
                    "signedTransactionInfo": info,
                ] as [String: Any],
            ]
            return try JSONSerialization.data(withJSONObject: ["signedPayload": try chain.token(payload)])
        }

        /// The access-log entries a gate wrote so far.
        func accessLog(_ gate: Int) -> [[String: Any]] {
            ((try? String(contentsOf: gates[gate].log, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
            }.filter { $0["message"] as? String == "access" }
        }

        /// The port a gate serves metrics on (its `metrics` event).
        func metricsPort(_ gate: Int) -> Int? {
            ((try? String(contentsOf: gates[gate].log, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
            }.first { $0["event"] as? String == "metrics" }?["port"] as? Int
        }
    }

    @Test("the printed configuration is what runs: sendfile, auth_request, an upstream of both gates, next upstream on error")
    func printedConfiguration() throws {
        let stack = try Stack()
        defer { stack.stop() }
        for line in [
            "sendfile on;", "auth_request /authorize;", "proxy_pass_request_body off;", "proxy_set_header X-Original-URI $request_uri;",
            "proxy_set_header Authorization $http_authorization;", "proxy_next_upstream error timeout;", "keepalive 32;",
            "server 127.0.0.1:\(stack.gates[0].port)", "server 127.0.0.1:\(stack.gates[1].port)", "internal;",
        ] {
            #expect(stack.printed.contains(line), "\(line)")
        }
        guard let nginx = stack.nginx else { return }
        let token = try stack.token(NginxGateTests.small, transaction: "3000000000000001")
        let url = nginx.url(ContentFixture.path(NginxGateTests.small)).absoluteString
        let whole = try CurlExchange.runBlocking(url, ["-H", "Authorization: Bearer \(token)"])
        #expect(whole.status == 200)
        #expect(whole.body == stack.fixture.packages[NginxGateTests.small])
        let range = try CurlExchange.runBlocking(url, ["-H", "Authorization: Bearer \(token)", "-r", "100-199"])
        #expect(range.status == 206)
        #expect(range.headers["content-range"] == "bytes 100-199/10000")
        #expect(range.body == stack.fixture.packages[NginxGateTests.small]?.subdata(in: 100..<200))
        // HEAD asks the gate too (its subrequest is a GET: proxy_method).
        let head = try CurlExchange.runBlocking(url, ["-I", "-H", "Authorization: Bearer \(token)"])
        #expect(head.status == 200)
        #expect(head.headers["content-length"] == "10000")
        #expect(try CurlExchange.runBlocking(url, ["-I"]).status == 401)
        // 401 and 403 reach the client as the gate said them.
        let anonymous = try CurlExchange.runBlocking(url, [])
        #expect(anonymous.status == 401)
        #expect(anonymous.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
        let other = try CurlExchange.runBlocking(nginx.url(ContentFixture.path(NginxGateTests.big)).absoluteString, ["-H", "Authorization: Bearer \(token)"])
        #expect(other.status == 403)
        #expect(try CurlExchange.runBlocking(nginx.url(".prestage/x").absoluteString, ["-H", "Authorization: Bearer \(token)"]).status == 403)
        #expect(try CurlExchange.runBlocking(nginx.url("authorize").absoluteString, ["-H", "Authorization: Bearer \(token)"]).status == 404)
        #expect(try CurlExchange.runBlocking(nginx.url("catalog.json").absoluteString, []).status == 200)
        #expect(try CurlExchange.runBlocking(nginx.url("health").absoluteString, []).status == 200)

        // Each gate counted what it decided; the metrics endpoint serves Prometheus text.
        var decided = 0
        for gate in 0..<2 {
            guard let port = stack.metricsPort(gate) else {
                Issue.record("gate \(gate) reported no metrics port")
                continue
            }
            let metrics = try CurlExchange.runBlocking("http://127.0.0.1:\(port)/metrics", [])
            #expect(metrics.status == 200)
            #expect(metrics.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true)
            let text = String(decoding: metrics.body, as: UTF8.self)
            #expect(text.contains("# TYPE courier_gate_decision_seconds histogram"), "\(text)")
            for line in text.split(separator: "\n") where line.hasPrefix("courier_gate_decisions_total{") {
                decided += Int(line.split(separator: " ").last ?? "") ?? 0
            }
        }
        // Three allowed, two missing tokens, one not entitled, one not in the catalog.
        #expect(decided == 7)
    }

    @Test("nginx-config refuses what nginx or the gate could not take: exit 2, one line each")
    func nginxConfigUsage() throws {
        let folder = try TemporaryDirectory(prefix: "courier-nginx-config")
        defer { folder.remove() }
        let quoted = folder.appending("a\"b")
        try FileManager.default.createDirectory(at: quoted, withIntermediateDirectories: true)
        let cases: [([String], String)] = [
            (["--content", folder.path], "at least one gate is needed"),
            (["--content", folder.path, "--gate", "127.0.0.1"], "--gate 127.0.0.1 is not HOST:PORT"),
            (["--content", folder.path, "--gate", "127.0.0.1:70000"], "--gate 127.0.0.1:70000 is not HOST:PORT"),
            (["--content", folder.path, "--gate", "evil;host:1"], "--gate evil;host:1 is not HOST:PORT"),
            (["--content", folder.path, "--gate", "127.0.0.1:1", "--listen", "x y"], "--listen x y is not HOST:PORT or PORT"),
            (["--content", quoted.path, "--gate", "127.0.0.1:1"], "cannot carry"),
            (["--content", folder.appending("missing").path, "--gate", "127.0.0.1:1"], "is not a folder"),
        ]
        for (arguments, message) in cases {
            let result = try CourierBinary.run(["origin", "nginx-config"] + arguments)
            #expect(result.status == 2, "\(arguments)")
            #expect(result.stdout.isEmpty, "\(arguments)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
        let ipv6 = try CourierBinary.run(["origin", "nginx-config", "--content", folder.path, "--gate", "[::1]:8081", "--listen", "8080"])
        #expect(ipv6.status == 0)
        #expect(ipv6.stdout.contains("server [::1]:8081 max_fails=1 fail_timeout=5s;"))
        #expect(ipv6.stdout.contains("listen 8080;"))
        #expect(ipv6.stdout.contains("root \"\(folder.url.standardizedFileURL.path)\";"))
    }

    @Test("kill -9 of one gate while a client downloads with Range requests: every range arrives, the file is whole")
    func gateKilledMidDownload() throws {
        let stack = try Stack()
        defer { stack.stop() }
        guard let nginx = stack.nginx else { return }
        let token = try stack.token(NginxGateTests.big, transaction: "3000000000000002")
        let url = nginx.url(ContentFixture.path(NginxGateTests.big)).absoluteString
        let chunk = 256 << 10
        var received = Data()
        var killed = false
        var offset = 0
        while offset < NginxGateTests.bigSize {
            let end = min(offset + chunk, NginxGateTests.bigSize) - 1
            // A third of the way through, once the first gate has answered some of this
            // download's checks, it dies without a word (nginx holds keepalive connections to it).
            if !killed, offset >= NginxGateTests.bigSize / 3 {
                let answered = stack.accessLog(0).filter { $0["http.target"] as? String == "/authorize" }.count
                #expect(answered > 0, "nginx sent the first gate nothing before it was killed")
                kill(stack.gates[0].process.processIdentifier, SIGKILL)
                stack.gates[0].process.waitUntilExit()
                killed = true
            }
            let answer = try CurlExchange.runBlocking(url, ["-H", "Authorization: Bearer \(token)", "-r", "\(offset)-\(end)"])
            #expect(answer.status == 206, "range \(offset)-\(end): \(nginx.errorLog())")
            guard answer.status == 206, answer.body.count == end - offset + 1 else { break }
            received.append(answer.body)
            offset = end + 1
        }
        #expect(killed)
        #expect(received == stack.fixture.packages[NginxGateTests.big])
        // The surviving gate answered after the kill.
        #expect(stack.accessLog(1).filter { $0["http.target"] as? String == "/authorize" }.count > 0)
    }

    @Test("a refund POSTed through nginx to one gate is refused by both gates, with the token already cached by each")
    func refundReachesBothGates() throws {
        let stack = try Stack()
        defer { stack.stop() }
        guard let nginx = stack.nginx else { return }
        let transaction = "3000000000000003"
        let token = try stack.token(NginxGateTests.small, transaction: transaction)
        let path = "/" + ContentFixture.path(NginxGateTests.small)
        func ask(_ gate: Int) throws -> Int {
            try CurlExchange.runBlocking(
                "http://127.0.0.1:\(stack.gates[gate].port)/authorize", ["-H", "X-Original-URI: \(path)", "-H", "Authorization: Bearer \(token)"]
            ).status
        }
        // Both gates let it in (and cache the verified token).
        for gate in 0..<2 { #expect(try ask(gate) == 204) }
        #expect(try CurlExchange.runBlocking(nginx.url(path).absoluteString, ["-H", "Authorization: Bearer \(token)"]).status == 200)

        let body = stack.scratch.appending("refund.json")
        try stack.refund(NginxGateTests.small, transaction: transaction).write(to: body)
        let posted = try CurlExchange.runBlocking(
            nginx.url("notifications").absoluteString, ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@\(body.path)"]
        )
        #expect(posted.status == 200)
        #expect(posted.json?["result"] as? String == "revoked")

        for gate in 0..<2 { #expect(try ask(gate) == 403, "gate \(gate)") }
        for _ in 0..<4 {
            #expect(try CurlExchange.runBlocking(nginx.url(path).absoluteString, ["-H", "Authorization: Bearer \(token)"]).status == 403)
        }
    }
}
