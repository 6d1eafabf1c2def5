import CourierTestSupport
import Foundation
import Logging
import Synchronization
import Testing

@testable import Courier

/// The agent's maintenance (`CourierAgent.retryStopped`) against a real store: it runs the
/// download lifecycle's review, so it agrees with `courier resume --stalled` (issue 30).
@Suite("Agent and the download lifecycle (real store, in-process agent)")
struct AgentLifecycleTests {
    /// A store with one download of `length` bytes stopped by `failure` (a real pipeline run whose
    /// download stage fails with it), and a client and agent over the store.
    final class Bench: Sendable {
        let directory: TemporaryDirectory
        let queue: PaymentQueue
        let client: CourierClient
        let downloadId: String

        init(failure: CourierError, length: Int64? = nil) async throws {
            directory = try TemporaryDirectory(prefix: "courier-agent-lifecycle")
            let queue = try QueueFixtures.queue(directory)
            self.queue = queue
            let transaction = QueueFixtures.transaction("t1")
            var content = QueueFixtures.content(for: transaction)
            if let length { content.length = length }
            try queue.add([transaction], content: [content])
            let downloader = MemoryDownloader()
            downloader.serve(content.contentIdentifier, Data(), behaviour: .fail(failure))
            let pipeline = DeliveryPipeline(
                queue: queue, downloader: downloader, installer: CopyInstaller(layout: queue.layout), logger: Logger(label: "test"))
            _ = try await pipeline.run(scope: .all)
            downloadId = try #require(try queue.downloads(transactionId: "t1").first).id
            var configuration = CourierConfiguration()
            configuration.queue = queue.configuration
            var logger = Logger(label: "test")
            logger.logLevel = .warning
            client = try CourierClient(configuration: configuration, layout: queue.layout, logger: logger)
        }

        func download() throws -> DownloadRecord { try #require(try queue.download(downloadId)) }

        /// Fails the download again as its worker would (claimed, then failed with `failure`).
        func failAgain(_ failure: CourierError) throws {
            _ = try queue.claim(scope: .all, limit: 1)
            try queue.transition(downloadId, .failed(failure))
            queue.releaseLease(downloadId)
        }

        func stop() {
            client.shutdown()
            directory.remove()
        }
    }

    /// Issue 30 (a), the agent's side: on 8411a71 the agent never retried a `serverRejected`
    /// failure while `resume --stalled` did.
    @Test("the agent retries a serverRejected failure once its backoff has passed")
    func retriesServerRejected() async throws {
        let bench = try await Bench(failure: CourierError(.serverRejected, "answered HTTP 404", cause: "HTTP 404"))
        defer { bench.stop() }
        let failed = try bench.download()
        #expect(failed.state == .failed && failed.errorCode == .serverRejected)
        var options = CourierAgent.Options()
        options.retryBackoff = 30
        let agent = bench.client.agent(options: options)

        agent.retryStopped(now: failed.updatedAt.addingTimeInterval(10))
        #expect(try bench.download().state == .failed, "retried before its backoff")
        agent.retryStopped(now: failed.updatedAt.addingTimeInterval(31))
        #expect(try bench.download().state == .waiting)
    }

    @Test("the agent stops retrying a serverRejected failure after maxRejectedRetries; resume --stalled still does")
    func serverRejectedCap() async throws {
        let refusal = CourierError(.serverRejected, "answered HTTP 404", cause: "HTTP 404")
        let bench = try await Bench(failure: refusal)
        defer { bench.stop() }
        var options = CourierAgent.Options()
        options.retryBackoff = 1
        options.maxRejectedRetries = 2
        let agent = bench.client.agent(options: options)
        let later = Date().addingTimeInterval(3600)
        for _ in 0..<2 {
            agent.retryStopped(now: later)
            #expect(try bench.download().state == .waiting)
            try bench.failAgain(refusal)
        }
        agent.retryStopped(now: later)
        #expect(try bench.download().state == .failed, "a third automatic retry past the cap")
        // The user's resume --stalled (the same review, by a user) is not capped.
        let resumed = try bench.queue.requeueStalled()
        #expect(resumed.map(\.id) == [bench.downloadId])
    }

    /// Issue 30 (b), the agent's side, with the real file system's free space: a download whose
    /// package length is half the free space (less 1 GiB) fitted the old formula (remaining +
    /// length) but needs remaining + 2 × length + 64 MiB, more than is free. On 8411a71 the
    /// agent resumed it at every check and the transfer paused it again.
    @Test("the agent leaves a download paused for space while remaining + unpacked + reserve do not fit (statvfs)")
    func spaceGapWithStatvfs() async throws {
        let probe = try TemporaryDirectory(prefix: "courier-free")
        let free = try FreeSpaceProbe.statvfs.available(probe.url)
        probe.remove()
        // Old sum 2 × length = free − 2 GiB; new 3 × length + 64 MiB ≥ free + 1 GiB once free ≥ 8 GiB:
        // a margin of 1 GiB either way for what other processes write meanwhile.
        try #require(free >= 8 << 30, "needs 8 GiB free to leave a 1 GiB margin either way")
        let length = free / 2 - (1 << 30)
        let bench = try await Bench(failure: CourierError(.insufficientSpace, "disk full"), length: length)
        defer { bench.stop() }
        let paused = try bench.download()
        #expect(paused.state == .paused && paused.pauseReason == .insufficientSpace)
        let agent = bench.client.agent(options: .init())
        for second in 1...3 {
            agent.retryStopped(now: Date().addingTimeInterval(Double(second)))
            let download = try bench.download()
            #expect(download.state == .paused && download.pauseReason == .insufficientSpace, "check \(second)")
        }
    }

    @Test("the agent resumes a download paused for space exactly when remaining + unpacked + reserve are free (fake free space)")
    func spaceThresholdWithFakeProbe() async throws {
        let length: Int64 = 10 << 20
        let bench = try await Bench(failure: CourierError(.insufficientSpace, "disk full"), length: length)
        defer { bench.stop() }
        let needed = length + 2 * length + (64 << 20)
        let reported = FakeFreeSpace()
        var options = CourierAgent.Options()
        options.freeSpace = FreeSpaceProbe { _ in reported.bytes.withLock { $0 } }
        let agent = bench.client.agent(options: options)
        for free in [length + length, length + 2 * length, needed - 1] {
            reported.bytes.withLock { $0 = free }
            agent.retryStopped()
            #expect(try bench.download().state == .paused, "free \(free) of \(needed)")
        }
        reported.bytes.withLock { $0 = needed }
        agent.retryStopped()
        #expect(try bench.download().state == .waiting)
    }
}

/// The free space a test reports to the agent (`CourierAgent.Options.freeSpace`).
private final class FakeFreeSpace: Sendable {
    let bytes = Mutex<Int64>(0)
}
