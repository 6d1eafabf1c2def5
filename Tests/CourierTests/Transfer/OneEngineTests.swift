import Courier
import CourierTestSupport
import Foundation
import Testing

/// The engine owns the only curl loop: downloads, range fetches and one-shot requests share its
/// connections and its slots.
@Suite("One transfer engine for downloads, range fetches and one-shot requests")
struct OneEngineTests {
    @Test("a download, a range fetch and a one-shot request reuse one connection to nginx",
          .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func oneConnection() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let logs = try TemporaryDirectory()
        defer { logs.remove() }
        let content = TransferFixture.bytes(200_000)
        try content.write(to: site.appending("pack.zip"))
        try Data("{}".utf8).write(to: site.appending("catalog.json"))
        let log = logs.appending("connections.log")
        // nginx numbers its connections: one number on every line means one connection.
        let nginx = try NginxServer(root: site.url) { port in
            """
            log_format connections '$connection $request';
            server {
                listen 127.0.0.1:\(port);
                root \(site.path);
                access_log \(log.path) connections;
            }
            """
        }
        defer { nginx.stop() }
        var configuration = TransferFixture.configuration()
        configuration.maxConcurrentTransfers = 1
        configuration.maxTransfersPerHost = 1
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        _ = try await engine.download(
            TransferFixture.request(nginx.url("pack.zip"), in: folder, length: Int64(content.count)), journal: store
        ) { _ in }
        let received = Received()
        let answer = try await engine.rangeFetcher.fetch(
            nginx.url("pack.zip"), ranges: [10..<20], representationLength: Int64(content.count)
        ) { received.add($0, $1) }
        #expect(answer == .parts([10...19]))
        let response = try await engine.httpTransport.send(HTTPRequest(url: nginx.url("catalog.json")))
        #expect(response.status == 200)

        var lines: [Substring] = []
        for _ in 0..<500 {
            lines = ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n")
            if lines.count >= 3 { break }
            usleep(10_000)
        }
        try #require(lines.count == 3, "nginx logged \(lines)")
        let connections = Set(lines.map { $0.split(separator: " ").first ?? "" })
        #expect(connections.count == 1, "requests came on connections \(lines)")
    }

    @Test("a range fetch waits for a slot held by a download, and runs once it is free")
    func rangeFetchTakesASlot() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(4 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.bytesPerSecond = 256 << 10
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        var configuration = TransferFixture.configuration()
        configuration.maxConcurrentTransfers = 1
        configuration.maxTransfersPerHost = 1
        configuration.stallTimeout = 30
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        let download = Task {
            try await engine.download(TransferFixture.request(origin.url(), in: folder), journal: store) { _ in }
        }
        #expect(await TransferFixture.wait { engine.slotUse.active == 1 })
        let fetch = Task {
            // FaultOrigin answers a range to the end of the file: ask for all of it.
            try await engine.rangeFetcher.fetch(
                origin.url(), ranges: [0..<Int64(content.count)], representationLength: Int64(content.count)) { _, _ in }
        }
        // The slow download holds the only slot: the range fetch queues behind it.
        #expect(await TransferFixture.wait { engine.slotUse.waiting == 1 })
        behavior.bytesPerSecond = 0
        origin.setBehavior(behavior)
        download.cancel()
        await #expect(throws: CourierError.self) { _ = try await download.value }
        #expect(try await fetch.value == .parts([0...Int64(content.count - 1)]))
        #expect(engine.slotUse == (0, 0))
    }

    @Test("a one-shot request is not held back by downloads waiting for a slot")
    func requestsGoFirst() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        var behavior = FaultOrigin.Behavior()
        behavior.bytesPerSecond = 256 << 10
        let origin = try FaultOrigin(content: TransferFixture.bytes(4 << 20), behavior: behavior)
        defer { origin.stop() }
        let server = try LoopbackHTTPServer { _, response in response.send(200, body: Data("ok".utf8)) }
        defer { server.stop() }
        var configuration = TransferFixture.configuration()
        configuration.maxConcurrentTransfers = 1
        configuration.stallTimeout = 30
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        let downloads = (0..<2).map { index in
            Task {
                try await engine.download(
                    TransferFixture.request(origin.url(), in: folder, name: "f\(index).bin"), journal: store) { _ in }
            }
        }
        #expect(await TransferFixture.wait { engine.slotUse == (1, 1) })
        let response = try await engine.httpTransport.send(HTTPRequest(url: server.url("/catalog.json")))
        #expect(response.status == 200)
        #expect(engine.slotUse == (1, 1))
        for download in downloads { download.cancel() }
        for download in downloads { _ = try? await download.value }
    }
}
