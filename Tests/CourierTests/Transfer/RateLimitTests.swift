import Courier
import CourierTestSupport
import Foundation
import Testing

/// Rate limits on real transfers. A limit makes a transfer take at least (size − burst) / rate:
/// the tests check that lower bound (which a working limiter cannot miss, however slow the
/// machine), never an upper one; the accuracy is measured in Benchmarks/ratelimit.sh.
@Suite("Rate limits on transfers")
struct RateLimitTests {
    @Test("transfer.maxRate holds a download and a range fetch of the same engine to the rate",
          .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func engineLimit() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(640 << 10)
        try content.write(to: site.appending("pack.zip"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        var configuration = TransferFixture.configuration()
        configuration.maxRate = try ByteRate(parsing: "256k")
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        let started = Date()
        _ = try await engine.download(
            TransferFixture.request(nginx.url("pack.zip"), in: folder, length: Int64(content.count)), journal: store
        ) { _ in }
        // 640 KiB at 256 KiB/s with a 32 KiB burst: 2.375 s at the least.
        #expect(Date().timeIntervalSince(started) >= 2.3)
        #expect(try Data(contentsOf: folder.appending("file.bin")) == content)

        let received = Received()
        let rangeStart = Date()
        let answer = try await engine.rangeFetcher.fetch(
            nginx.url("pack.zip"), ranges: [0..<(320 << 10)], representationLength: Int64(content.count)
        ) { received.add($0, $1) }
        #expect(answer == .parts([0...((320 << 10) - 1)]))
        // The bucket is in debt or empty after the download: 320 KiB take 1.1 s at the least.
        #expect(Date().timeIntervalSince(rangeStart) >= 1.1)
    }

    @Test("get --limit-rate in curl's syntax holds one download to the rate; a bad rate is a usage error")
    func getLimitRate() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(512 << 10)
        let origin = try FaultOrigin(content: content, behavior: .init())
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let file = folder.appending("f.bin")
        let started = Date()
        let run = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--limit-rate", "200k", "--config", config.path])
        #expect(run.status == 0, "\(run.stderr)")
        // 512 KiB at 200 KiB/s with a 25 KiB burst: 2.4 s at the least.
        #expect(Date().timeIntervalSince(started) >= 2.4)
        #expect(try Data(contentsOf: file) == content)

        for bad in ["2X", "0", "-1M", "fast", ""] {
            let usage = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--limit-rate", bad])
            #expect(usage.status == 2 || usage.status == 64, "\(bad): \(usage.stderr)")
            #expect(usage.stderr.contains("--limit-rate"), "\(bad): \(usage.stderr)")
        }
    }
}
