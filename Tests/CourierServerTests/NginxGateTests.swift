import Courier
import CourierTestSupport
import CourierServer
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
        /// Where nginx caches the gates' decisions (`--decision-cache-path`).
        let decisionFolder: URL

        /// - Parameters:
        ///   - decisionCache: `courier origin nginx-config --decision-cache` (seconds; 0 off).
        ///   - maxTokenAge: the gates' `--max-token-age`.
        init(decisionCache: Int = 0, maxTokenAge: Int? = nil) throws {
            fixture = try ContentFixture()
            try fixture.addPackage(NginxGateTests.big, size: NginxGateTests.bigSize)
            try fixture.addPackage(NginxGateTests.small, size: 10_000)
            try fixture.publishCatalog(products: [NginxGateTests.big, NginxGateTests.small])
            chain = try TestSigningChain()
            scratch = try TemporaryDirectory(prefix: "courier-gates")
            storage = scratch.appending("storage")
            decisionFolder = scratch.appending("decisions")
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
                        ] + (maxTokenAge.map { ["--max-token-age", "\($0)"] } ?? []),
                        scratch: folder
                    )
                    gates.append((process, port, log))
                }
                let gateArguments = gates.flatMap { ["--gate", "127.0.0.1:\($0.port)"] }
                var printed = ""
                let content = fixture.url.path
                let cacheArguments = ["--decision-cache", "\(decisionCache)", "--decision-cache-path", decisionFolder.path]
                nginx = try NginxServer(root: fixture.url) { port in
                    let result = try CourierBinary.run(
                        ["origin", "nginx-config", "--content", content, "--listen", "127.0.0.1:\(port)"] + gateArguments + cacheArguments
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
        /// `original`: the original purchase's transaction id, for a restored copy.
        func token(_ product: String, transaction id: String, original: String? = nil) throws -> String {
            try chain.token(
                TestSigningChain.payload(productId: product, transactionId: id, originalTransactionId: original, environment: "Sandbox"))
        }

        /// Apple's POST body for a REFUND of transaction `id` of `product` (a copy of `original`).
        func refund(_ product: String, transaction id: String, original: String? = nil) throws -> Data {
            let signed = Date().addingTimeInterval(-30)
            let info = try chain.token(
                TestSigningChain.payload(
                    productId: product, transactionId: id, originalTransactionId: original, revocationDate: signed.addingTimeInterval(-5),
                    environment: "Sandbox", signedDate: signed
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

        /// The `/authorize` requests both gates answered so far.
        func authorizations() -> Int {
            (0..<gates.count).map { gate in accessLog(gate).filter { $0["http.target"] as? String == "/authorize" }.count }.reduce(0, +)
        }

        /// The `/authorize` requests both gates answered, once they logged at least `count` (a
        /// gate logs a request after answering it), or as many as they logged within `timeout`.
        func authorizations(atLeast count: Int, timeout: Double = 10) -> Int {
            let deadline = Date().addingTimeInterval(timeout)
            var answered = authorizations()
            while answered < count, Date() < deadline {
                usleep(20_000)
                answered = authorizations()
            }
            return answered
        }

        /// GET `path` through nginx with `token`; the status.
        func fetch(_ path: String, token: String, range: String? = nil) throws -> Int {
            guard let nginx else { return 0 }
            var arguments = ["-H", "Authorization: Bearer \(token)"]
            if let range { arguments += ["-r", range] }
            return try CurlExchange.runBlocking(nginx.url(path).absoluteString, arguments).status
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
        let stack = try Stack(decisionCache: 0)
        defer { stack.stop() }
        for line in [
            "sendfile on;", "auth_request /authorize;", "proxy_pass_request_body off;", "proxy_set_header X-Original-URI $request_uri;",
            "proxy_set_header Authorization $http_authorization;", "proxy_next_upstream error timeout;", "keepalive 32;",
            "server 127.0.0.1:\(stack.gates[0].port)", "server 127.0.0.1:\(stack.gates[1].port)", "internal;",
        ] {
            #expect(stack.printed.contains(line), "\(line)")
        }
        // --decision-cache 0: no cache directive at all.
        for word in ["proxy_cache", "proxy_no_cache", "X-Courier-Decision-Cache", "map ", "open_file_cache", "courier_token_key", "if ("] {
            #expect(!stack.printed.contains(word), "\(word)")
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
            (["--content", folder.path, "--gate", "127.0.0.1:1", "--decision-cache=-1"], "--decision-cache -1 is not 0...3600 seconds"),
            (["--content", folder.path, "--gate", "127.0.0.1:1", "--decision-cache", "3601"], "--decision-cache 3601 is not 0...3600 seconds"),
            (["--content", folder.path, "--gate", "127.0.0.1:1", "--decision-cache-path", "cache"], "the decision cache folder must be an absolute path"),
            (["--content", folder.path, "--gate", "127.0.0.1:1", "--decision-cache-path", "/a;b$c"], "cannot carry"),
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

    @Test(
        "kill -9 of one gate while a client downloads with Range requests: every range arrives, the file is whole",
        arguments: [0, 60]
    )
    func gateKilledMidDownload(decisionCache: Int) throws {
        let stack = try Stack(decisionCache: decisionCache)
        defer { stack.stop() }
        guard let nginx = stack.nginx else { return }
        var token = try stack.token(NginxGateTests.big, transaction: "3000000000000002")
        let url = nginx.url(ContentFixture.path(NginxGateTests.big)).absoluteString
        let chunk = 256 << 10
        var received = Data()
        var killed = false
        var offset = 0
        while offset < NginxGateTests.bigSize {
            let end = min(offset + chunk, NginxGateTests.bigSize) - 1
            // A third of the way through, once the gates have answered some of this download's
            // checks, the first gate dies without a word (nginx holds keepalive connections to it).
            if !killed, offset >= NginxGateTests.bigSize / 3 {
                let answered = stack.accessLog(0).filter { $0["http.target"] as? String == "/authorize" }.count
                if decisionCache == 0 {
                    #expect(answered > 0, "nginx sent the first gate nothing before it was killed")
                } else {
                    // nginx asked once and reuses the answer; the client then presents a freshly
                    // signed transaction, which nginx must put to a gate after the kill.
                    #expect(stack.authorizations() == 1, "nginx asked the gates more than once for one token")
                    token = try stack.token(NginxGateTests.big, transaction: "3000000000000012")
                }
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

    @Test(
        "a refund POSTed through nginx to one gate is refused by both gates (token cached by each); by nginx at once, or within its decision cache",
        arguments: [0, 2]
    )
    func refundReachesBothGates(decisionCache: Int) throws {
        let stack = try Stack(decisionCache: decisionCache)
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
        if decisionCache > 0 {
            // nginx may still serve its cached allow, for the window (and the second it counts)
            // at most; then it asks a gate again and refuses. Wait for that, with a deadline far
            // past the window for a busy machine.
            let deadline = Date().addingTimeInterval(Double(decisionCache) + 30)
            var status = 200
            while status == 200, Date() < deadline {
                status = try stack.fetch(path, token: token)
            }
            #expect(status == 403, "nginx still served a refunded purchase \(Int(Double(decisionCache) + 30)) s after the refund")
        }
        // The refusal is not kept in nginx's cache: each request is put to a gate again (and
        // refused), so it can never stand in for another request's answer.
        let asked = stack.authorizations()
        for _ in 0..<8 {
            #expect(try CurlExchange.runBlocking(nginx.url(path).absoluteString, ["-H", "Authorization: Bearer \(token)"]).status == 403)
        }
        let answered = stack.authorizations(atLeast: asked + 8)
        #expect(answered - asked >= 8, "8 refused requests asked the gates \(answered - asked) times")
    }

    @Test("a refund of a restored copy POSTed through nginx: the original's token and every copy's are refused by both gates")
    func refundOfARestoredCopy() throws {
        let stack = try Stack()
        defer { stack.stop() }
        guard let nginx = stack.nginx else { return }
        let original = "3000000000000100"
        let tokens = try [stack.token(NginxGateTests.small, transaction: original, original: original)]
            + ["3000000000000101", "3000000000000102"].map { try stack.token(NginxGateTests.small, transaction: $0, original: original) }
        let path = "/" + ContentFixture.path(NginxGateTests.small)
        func ask(_ gate: Int, _ token: String) throws -> Int {
            try CurlExchange.runBlocking(
                "http://127.0.0.1:\(stack.gates[gate].port)/authorize", ["-H", "X-Original-URI: \(path)", "-H", "Authorization: Bearer \(token)"]
            ).status
        }
        for token in tokens { #expect(try stack.fetch(path, token: token) == 200) }
        let body = stack.scratch.appending("refund.json")
        try stack.refund(NginxGateTests.small, transaction: "3000000000000101", original: original).write(to: body)
        let posted = try CurlExchange.runBlocking(
            nginx.url("notifications").absoluteString, ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@\(body.path)"]
        )
        #expect(posted.json?["result"] as? String == "revoked")
        for (index, token) in tokens.enumerated() {
            #expect(try stack.fetch(path, token: token) == 403, "token \(index) still downloads through nginx")
            for gate in 0..<2 { #expect(try ask(gate, token) == 403, "gate \(gate), token \(index)") }
        }
    }

    @Test("with the decision cache, the Range requests of one download reach a gate once; another token or path asks again")
    func decisionCacheAsksOnce() throws {
        let stack = try Stack(decisionCache: 60)
        defer { stack.stop() }
        guard let nginx = stack.nginx else { return }
        for line in [
            "proxy_cache courier_decisions;", "proxy_cache_key \"$courier_original_path $courier_token_key\";",
            "proxy_cache_valid 204 60s;", "proxy_no_cache $courier_no_cache;", "proxy_cache_lock off;", "proxy_cache_use_stale off;",
            "proxy_set_header X-Courier-Decision-Cache 60;", "proxy_cache_path \"\(stack.decisionFolder.path)\"",
            "open_file_cache max=\(NginxGateConfiguration.openDecisionFiles) inactive=10s;", "open_file_cache_valid 1s;",
        ] {
            #expect(stack.printed.contains(line), "\(line)")
        }
        let token = try stack.token(NginxGateTests.big, transaction: "3000000000000004")
        let path = ContentFixture.path(NginxGateTests.big)
        let chunk = 512 << 10
        var received = Data()
        for offset in stride(from: 0, to: NginxGateTests.bigSize, by: chunk) {
            let answer = try CurlExchange.runBlocking(
                nginx.url(path).absoluteString, ["-H", "Authorization: Bearer \(token)", "-r", "\(offset)-\(offset + chunk - 1)"]
            )
            #expect(answer.status == 206)
            received.append(answer.body)
        }
        #expect(received == stack.fixture.packages[NginxGateTests.big])
        #expect(stack.authorizations() == 1, "\(NginxGateTests.bigSize / chunk) ranges of one download")
        // A query does not make another key (the gate ignores it too).
        #expect(try stack.fetch(path + "?attempt=2", token: token, range: "0-9") == 206)
        #expect(stack.authorizations() == 1)
        // Another token, another path: asked again; refusals are not kept, each is asked.
        let other = try stack.token(NginxGateTests.big, transaction: "3000000000000005")
        #expect(try stack.fetch(path, token: other, range: "0-9") == 206)
        #expect(stack.authorizations() == 2)
        for _ in 0..<3 { #expect(try stack.fetch(ContentFixture.path(NginxGateTests.small), token: token) == 403) }
        #expect(stack.authorizations(atLeast: 5) == 5)
        // nginx made the cache folder owner-only.
        let attributes = try FileManager.default.attributesOfItem(atPath: stack.decisionFolder.path)
        let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
        #expect(mode & 0o077 == 0, "mode \(String(mode, radix: 8))")
    }

    @Test(
        "the decision cache keys a signed transaction by its payload and signature: a copy with another header is refused while nothing is cached, and its refusal never refuses the original"
    )
    func decisionCacheKeyIsPayloadAndSignature() throws {
        let stack = try Stack(decisionCache: 60)
        defer { stack.stop() }
        let token = try stack.token(NginxGateTests.small, transaction: "3000000000000007")
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        try #require(parts.count == 3)
        // The same payload and signature under another header (one more field): the signature
        // covers the header, so it does not verify.
        let header = try #require(Base64URL.decode(parts[0]))
        var fields = try #require(try JSONSerialization.jsonObject(with: header) as? [String: Any])
        fields["kid"] = "altered"
        let altered = Base64URL.encode(try JSONSerialization.data(withJSONObject: fields)) + "." + parts[1] + "." + parts[2]
        let path = ContentFixture.path(NginxGateTests.small)

        // Nothing cached: the copy is put to a gate each time and refused; nothing is kept.
        for _ in 0..<3 { #expect(try stack.fetch(path, token: altered) == 401) }
        #expect(stack.authorizations(atLeast: 3) == 3)
        // The refusals did not make the original's answer: it is asked, allowed, and kept.
        #expect(try stack.fetch(path, token: token) == 200)
        #expect(try stack.fetch(path, token: token) == 200)
        #expect(stack.authorizations(atLeast: 4) == 4)
        // Now the copy shares the original's allow (its holder has the signed parts, so the
        // original token, already): what the key is, stated.
        #expect(try stack.fetch(path, token: altered) == 200)
        #expect(stack.authorizations() == 4)
        // Another scheme is keyed by the whole value, and refused each time (not kept either).
        for _ in 0..<2 {
            let basic = try CurlExchange.runBlocking(stack.nginx?.url(path).absoluteString ?? "", ["-H", "Authorization: Basic x.\(parts[1]).\(parts[2])"])
            #expect(basic.status == 401)
        }
        #expect(stack.authorizations(atLeast: 6) == 6)
        // The token in another spelling of the scheme (the gate takes any case) is not keyed
        // by its parts but whole: asked, allowed, and kept under its own key.
        let lower = try CurlExchange.runBlocking(stack.nginx?.url(path).absoluteString ?? "", ["-H", "Authorization: bearer \(token)"])
        #expect(lower.status == 200)
        #expect(stack.authorizations(atLeast: 7) == 7)

        // What nginx stored: the allow keyed by the path and the payload and signature, which
        // holds no JWS header (the certificates), and the one keyed by the other spelling whole.
        let files = (FileManager.default.enumerator(at: stack.decisionFolder, includingPropertiesForKeys: nil)?.allObjects as? [URL] ?? [])
            .filter { (try? $0.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true }
        let stored = try files.map { try Data(contentsOf: $0) }
        #expect(stored.count == 2, "\(files)")
        let byParts = stored.filter { $0.range(of: Data("\nKEY: /\(path) jws \(parts[1]).\(parts[2])\n".utf8)) != nil }
        #expect(byParts.count == 1)
        #expect(byParts.allSatisfy { $0.range(of: Data(parts[0].utf8)) == nil })
        #expect(stored.filter { $0.range(of: Data("\nKEY: /\(path) header bearer \(token)\n".utf8)) != nil }.count == 1)
    }

    @Test("an allow cached by nginx never outlives its token: nothing is served after the token's end")
    func cachedAllowEndsWithToken() throws {
        let maxTokenAge = 60
        let stack = try Stack(decisionCache: 600, maxTokenAge: maxTokenAge)
        defer { stack.stop() }
        // Signed so that the gates take it for 8 more seconds.
        let expiry = Date().addingTimeInterval(8)
        let token = try stack.chain.token(
            TestSigningChain.payload(
                productId: NginxGateTests.small, transactionId: "3000000000000006", environment: "Sandbox",
                signedDate: expiry.addingTimeInterval(-Double(maxTokenAge))
            )
        )
        let path = ContentFixture.path(NginxGateTests.small)
        var served = 0
        var status = 200
        let deadline = expiry.addingTimeInterval(30)
        while status == 200, Date() < deadline {
            let asked = Date()
            status = try stack.fetch(path, token: token)
            if status == 200 {
                served += 1
                #expect(asked < expiry, "nginx served the package \(asked.timeIntervalSince(expiry)) s after the token's end")
            }
        }
        #expect(status == 401, "the token was still taken \(deadline.timeIntervalSince(expiry)) s after its end")
        #expect(served > 0)
        // nginx did cache the allow (the gates were asked less often than it served), for less
        // than the token had left.
        #expect(stack.authorizations() < served + 1, "served \(served), asked \(stack.authorizations())")
    }
}
