import Courier
import CourierTestSupport
import Foundation
import Testing

@Suite("CurlHTTPTransport against a loopback server")
struct CurlHTTPTransportTests {
    @Test("GET sends the headers and returns status, lowercased headers and body")
    func getReturnsResponse() async throws {
        let server = try LoopbackHTTPServer { request, response in
            let auth = request.headers["authorization"] ?? "none"
            response.send(200, headers: [("X-Echo-Auth", auth), ("ETag", "\"abc\"")], body: Data("hello \(request.path)".utf8))
        }
        defer { server.stop() }
        let transport = try CurlHTTPTransport(configuration: TransferFixture.configuration())
        defer { transport.shutdown() }
        let response = try await transport.send(
            HTTPRequest(url: server.url("/catalog.json"), headers: [("Authorization", "Bearer token")])
        )
        #expect(response.status == 200)
        #expect(String(decoding: response.body, as: UTF8.self) == "hello /catalog.json")
        #expect(response.headers["x-echo-auth"] == "Bearer token")
        #expect(response.headers["etag"] == "\"abc\"")
    }

    @Test("a 304 to If-None-Match and a 404 come back as statuses, not errors")
    func statusesAreReturned() async throws {
        let server = try LoopbackHTTPServer { request, response in
            if request.headers["if-none-match"] == "\"v1\"" {
                response.send(304, headers: [("ETag", "\"v1\"")])
            } else {
                response.send(404, body: Data("missing".utf8))
            }
        }
        defer { server.stop() }
        let transport = try CurlHTTPTransport()
        defer { transport.shutdown() }
        let notModified = try await transport.send(HTTPRequest(url: server.url("/c"), headers: [("If-None-Match", "\"v1\"")]))
        #expect(notModified.status == 304)
        #expect(notModified.body.isEmpty)
        let missing = try await transport.send(HTTPRequest(url: server.url("/c")))
        #expect(missing.status == 404)
    }

    @Test("POST sends its body; HEAD gets no body")
    func postAndHead() async throws {
        let server = try LoopbackHTTPServer { request, response in
            if request.method == "POST" {
                response.send(200, headers: [("Content-Type", "application/json")], body: Data("{\"got\":\(request.body.count),\"type\":\"\(request.headers["content-type"] ?? "")\"}".utf8))
            } else {
                response.head(200, headers: [("Content-Length", "1000")])
            }
        }
        defer { server.stop() }
        let transport = try CurlHTTPTransport()
        defer { transport.shutdown() }
        let body = Data(repeating: 0x41, count: 70_000)
        let posted = try await transport.send(
            HTTPRequest(method: "POST", url: server.url("/verifyReceipt"), headers: [("Content-Type", "application/json")], body: body)
        )
        #expect(String(decoding: posted.body, as: UTF8.self) == "{\"got\":70000,\"type\":\"application/json\"}")
        let head = try await transport.send(HTTPRequest(method: "HEAD", url: server.url("/file")))
        #expect(head.status == 200)
        #expect(head.headers["content-length"] == "1000")
        #expect(head.body.isEmpty)
        #expect(server.receivedRequests.map(\.method) == ["POST", "HEAD"])
    }

    @Test("redirects are followed")
    func followsRedirects() async throws {
        let server = try LoopbackHTTPServer { request, response in
            if request.path == "/old" {
                response.send(301, headers: [("Location", "/new")])
            } else {
                response.send(200, body: Data("moved here".utf8))
            }
        }
        defer { server.stop() }
        let transport = try CurlHTTPTransport()
        defer { transport.shutdown() }
        let response = try await transport.send(HTTPRequest(url: server.url("/old")))
        #expect(response.status == 200)
        #expect(String(decoding: response.body, as: UTF8.self) == "moved here")
    }

    @Test("a loopback plain-http origin cannot redirect off loopback: refused before connecting, in requests and downloads")
    func plainHTTPRedirectStaysOnLoopback() async throws {
        // 0.0.0.0 is not loopback to the policy; were the socket opened, Linux would connect it
        // to this host, so nothing could leave the machine even if the check failed.
        let server = try LoopbackHTTPServer { request, response in
            if request.path.hasPrefix("/old") {
                response.send(302, headers: [("Location", "http://0.0.0.0:\(request.headers["host"]?.split(separator: ":").last ?? "9")/new")])
            } else if request.path == "/inside" {
                response.send(302, headers: [("Location", "/new")])
            } else {
                response.send(200, body: Data("moved here".utf8))
            }
        }
        defer { server.stop() }
        let transport = try CurlHTTPTransport()
        defer { transport.shutdown() }
        do {
            _ = try await transport.send(HTTPRequest(url: server.url("/old")))
            Issue.record("the redirect off loopback was followed")
        } catch let error as CourierError {
            #expect(error.message.contains("insecure URL http://0.0.0.0:"), "\(error)")
        }
        #expect(server.receivedRequests.map(\.path) == ["/old"])
        // Within loopback, redirects still work.
        let inside = try await transport.send(HTTPRequest(url: server.url("/inside")))
        #expect(inside.status == 200 && String(decoding: inside.body, as: UTF8.self) == "moved here")

        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let target = directory.appending("file.bin")
        let config = try TransferFixture.writeConfigFile(in: directory)
        let get = try CourierBinary.run(["get", server.url("/old-download").absoluteString, "-o", target.path, "--config", config.path])
        #expect(get.status != 0)
        #expect(get.stderr.contains("insecure URL http://0.0.0.0:"), "\(get.stderr)")
        #expect(!FileManager.default.fileExists(atPath: target.path))
        #expect(server.receivedRequests.map(\.path).filter { $0 == "/new" }.count == 1)  // the /inside one only
    }

    @Test("a body over maxResponseBytes fails with integrity")
    func boundedBody() async throws {
        let server = try LoopbackHTTPServer { _, response in
            response.send(200, body: Data(repeating: 1, count: 200_000))
        }
        defer { server.stop() }
        let transport = try CurlHTTPTransport()
        defer { transport.shutdown() }
        await #expect(throws: CourierError.self) {
            try await transport.send(HTTPRequest(url: server.url("/big"), maxResponseBytes: 100_000))
        }
        do {
            _ = try await transport.send(HTTPRequest(url: server.url("/big"), maxResponseBytes: 100_000))
        } catch let error as CourierError {
            #expect(error.code == .integrity)
        }
    }

    @Test("no server, a timeout: network errors; plain http off loopback: refused before sending")
    func failures() async throws {
        let transport = try CurlHTTPTransport()
        defer { transport.shutdown() }
        let port = try Loopback.freePort()
        do {
            _ = try await transport.send(HTTPRequest(url: URL(string: "http://127.0.0.1:\(port)/x")!, timeout: 5))
            Issue.record("expected a network error")
        } catch let error as CourierError {
            #expect(error.code == .network)
        }
        let slow = try LoopbackHTTPServer { _, response in
            Thread.sleep(forTimeInterval: 3)
            response.send(200)
        }
        defer { slow.stop() }
        do {
            _ = try await transport.send(HTTPRequest(url: slow.url("/slow"), timeout: 0.5))
            Issue.record("expected a timeout")
        } catch let error as CourierError {
            #expect(error.code == .network)
        }
        do {
            _ = try await transport.send(HTTPRequest(url: URL(string: "http://example.invalid/receipt")!))
            Issue.record("expected plain http to a remote host to be refused")
        } catch let error as CourierError {
            #expect(error.code == .usage)
        }
    }

    @Test("the engine's transport shares its network thread")
    func engineTransport() async throws {
        let server = try LoopbackHTTPServer { _, response in response.send(200, body: Data("ok".utf8)) }
        defer { server.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let response = try await engine.httpTransport.send(HTTPRequest(url: server.url("/")))
        #expect(String(decoding: response.body, as: UTF8.self) == "ok")
    }
}
