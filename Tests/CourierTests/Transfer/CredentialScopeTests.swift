import Courier
import CourierTestSupport
import Foundation
import Testing

/// The one rule for credentials (issue 29, hole 7): same scheme, host and port as the origin
/// they are for, or none.
@Suite("CredentialScope")
struct CredentialScopeTests {
    static let token = [("Authorization", "Bearer a.b.c")]

    @Test("the same scheme, host (any case) and port, a missing port being the scheme's default: the headers go")
    func sameOrigin() throws {
        let pairs: [(String, String)] = [
            ("https://cdn.example.com/a/pack.zip", "https://cdn.example.com/b/pack.manifest.json"),
            ("https://CDN.example.com/pack.zip", "https://cdn.EXAMPLE.com:443/pack.manifest.json"),
            ("http://127.0.0.1/pack.zip", "http://127.0.0.1:80/x"),
            ("http://127.0.0.1:8080/pack.zip", "HTTP://127.0.0.1:8080/x?y=1"),
        ]
        for (origin, url) in pairs {
            let (a, b) = (try #require(URL(string: origin)), try #require(URL(string: url)))
            #expect(CredentialScope.sameOrigin(a, b), "\(origin) \(url)")
            #expect(CredentialScope.headers(Self.token, for: a, sendingTo: b).map(\.1) == ["Bearer a.b.c"], "\(origin) \(url)")
        }
    }

    @Test("another port, host or scheme, or no host: no headers at all")
    func anotherOrigin() throws {
        let pairs: [(String, String)] = [
            ("http://127.0.0.1:8080/pack.zip", "http://127.0.0.1:8081/pack.manifest.json"),
            ("http://127.0.0.1/pack.zip", "http://127.0.0.1:8080/pack.manifest.json"),
            ("https://cdn.example.com/pack.zip", "http://cdn.example.com/pack.manifest.json"),
            ("https://cdn.example.com/pack.zip", "https://cdn.example.com:8443/pack.manifest.json"),
            ("https://cdn.example.com/pack.zip", "https://evil.example.com/pack.manifest.json"),
            ("https://cdn.example.com/pack.zip", "https://cdn.example.com.evil.example/pack.manifest.json"),
            ("https://127.0.0.1/pack.zip", "https://localhost/pack.manifest.json"),
            ("file:///srv/pack.zip", "file:///srv/pack.manifest.json"),
        ]
        for (origin, url) in pairs {
            let (a, b) = (try #require(URL(string: origin)), try #require(URL(string: url)))
            #expect(!CredentialScope.sameOrigin(a, b), "\(origin) \(url)")
            #expect(CredentialScope.headers(Self.token, for: a, sendingTo: b).isEmpty, "\(origin) \(url)")
        }
    }
}

extension CredentialScopeTests {
    @Test("a redirect keeps the token on the same origin and drops it for another port (libcurl, as the rule)")
    func redirects() async throws {
        let other = try LoopbackHTTPServer { _, response in response.send(200, body: Data("there".utf8)) }
        defer { other.stop() }
        let elsewhere = other.url("/target").absoluteString
        let origin = try LoopbackHTTPServer { request, response in
            switch request.path {
            case "/away": response.send(302, headers: [("Location", elsewhere)])
            case "/here": response.send(302, headers: [("Location", "/target")])
            default: response.send(200, body: Data("here".utf8))
            }
        }
        defer { origin.stop() }
        let transport = try CurlHTTPTransport()
        defer { transport.shutdown() }

        let away = try await transport.send(HTTPRequest(url: origin.url("/away"), headers: Self.token))
        #expect(away.status == 200)
        #expect(String(decoding: away.body, as: UTF8.self) == "there")
        #expect(other.receivedRequests.map(\.path) == ["/target"])
        #expect(other.receivedRequests.allSatisfy { $0.headers["authorization"] == nil }, "\(other.receivedRequests.map(\.rawHead))")

        let here = try await transport.send(HTTPRequest(url: origin.url("/here"), headers: Self.token))
        #expect(String(decoding: here.body, as: UTF8.self) == "here")
        let followed = origin.receivedRequests.filter { $0.path == "/target" }
        #expect(followed.count == 1)
        #expect(followed.allSatisfy { $0.headers["authorization"] == "Bearer a.b.c" })
    }
}
