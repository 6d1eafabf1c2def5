import CourierTestSupport
import Foundation
import Testing

@Suite("Test support: servers on loopback")
struct LoopbackHTTPServerTests {
    @Test("the loopback server answers curl, keeps the connection and records requests")
    func answersCurl() throws {
        let server = try LoopbackHTTPServer { request, response in
            response.send(200, headers: [("Content-Type", "text/plain")], body: Data("hello \(request.path)".utf8))
        }
        defer { server.stop() }
        let first = server.url("/a").absoluteString
        let second = server.url("/b").absoluteString
        let result = try Shell.run("/usr/bin/curl", ["-s", first, second])
        #expect(result.stdout == "hello /ahello /b")
        #expect(server.receivedRequests.map(\.path) == ["/a", "/b"])
    }

    @Test("nginx serves a folder with ranges", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func nginxServesRanges() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        try Data("0123456789".utf8).write(to: folder.appending("file.txt"))
        let nginx = try NginxServer(root: folder.url)
        defer { nginx.stop() }
        let result = try Shell.run("/usr/bin/curl", ["-s", "-r", "2-4", nginx.url("file.txt").absoluteString])
        #expect(result.stdout == "234")
    }
}
