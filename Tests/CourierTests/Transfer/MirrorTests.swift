import Courier
import CourierTestSupport
import Foundation
import Testing

/// Mirrors (issue 13): more URLs serving the same bytes; a failing origin hands over to the
/// next one, which resumes where the previous stopped.
@Suite("Mirrors: a failing origin hands over, resuming", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct MirrorTests {
    @Test("an origin that dies mid-transfer hands over to the mirror, which serves only the rest")
    func diesMidTransfer() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(4 << 20, seed: 31)
        try content.write(to: site.appending("pack.zip"))
        var behavior = FaultOrigin.Behavior()
        behavior.dropAfterBytes = 1_500_000
        behavior.faultyResponses = 1000
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let mirror = try NginxServer(root: site.url)
        defer { mirror.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        let progress = ProgressLog()
        var request = TransferFixture.request(
            origin.url(), in: folder, sha256: TransferFixture.sha256(content), length: Int64(content.count))
        request.mirrors = [mirror.url("pack.zip")]
        let result = try await engine.download(request, journal: store) { progress.record($0) }
        #expect(try Data(contentsOf: folder.appending("file.bin")) == content)
        #expect(result.source == mirror.url("pack.zip"))
        #expect(progress.reports.last?.source == mirror.url("pack.zip"))
        // The origin was asked once; the mirror resumed where it stopped, and served the rest.
        #expect(origin.requests.count == 1)
        let lines = mirror.accessLog(atLeast: 1)
        #expect(lines.count == 1)
        #expect(lines.first?.contains("\" 206 ") == true)
        #expect(result.bytesFetched == Int64(content.count))
        #expect(lines.first?.contains(" 206 \(content.count - 1_500_000) ") == true, "\(lines)")
    }

    @Test("the request's headers (a Bearer token) are not sent to a mirror on another host or port")
    func headersStayWithTheirOrigin() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(200_000, seed: 33)
        let primary = try NginxServer(root: site.url)  // has no such file: 404
        defer { primary.stop() }
        let mirror = try FaultOrigin(content: content)
        defer { mirror.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        var request = TransferFixture.request(primary.url("pack.zip"), in: folder, sha256: TransferFixture.sha256(content))
        request.headers = [("Authorization", "Bearer secret-for-the-primary")]
        request.mirrors = [mirror.url()]
        let result = try await engine.download(request, journal: FileResumeJournalStore(directory: folder.url)) { _ in }
        #expect(result.source == mirror.url())
        #expect(mirror.requests.count == 1)
        #expect(mirror.requests.allSatisfy { $0.headers["authorization"] == nil })
    }

    @Test("an origin that refuses (404) hands over to the next mirror; when every source fails, the error says so")
    func refusesThenAllFail() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(300_000, seed: 32)
        try content.write(to: site.appending("pack.zip"))
        var behavior = FaultOrigin.Behavior()
        behavior.status = 404
        behavior.faultyResponses = 1000
        let missing = try FaultOrigin(content: content, behavior: behavior)
        defer { missing.stop() }
        let mirror = try NginxServer(root: site.url)
        defer { mirror.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        var request = TransferFixture.request(missing.url(), in: folder, sha256: TransferFixture.sha256(content))
        request.mirrors = [mirror.url("pack.zip")]
        let result = try await engine.download(request, journal: store) { _ in }
        #expect(result.source == mirror.url("pack.zip"))
        #expect(try Data(contentsOf: folder.appending("file.bin")) == content)

        // Both sources dead: bounded retries, then a network failure.
        mirror.stop()
        missing.stop()
        var dead = TransferFixture.request(missing.url(), in: folder, name: "dead.bin")
        dead.mirrors = [mirror.url("pack.zip")]
        await #expect(throws: CourierError.self) {
            _ = try await engine.download(dead, journal: store) { _ in }
        }
    }
}
