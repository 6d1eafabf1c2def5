@testable import Courier
import CourierTestSupport
import Foundation
import Logging
import Testing

@Suite("Delivery pipeline with in-memory stages")
struct DeliveryPipelineTests {
    private func payload(_ seed: Int, size: Int = 4096) -> Data {
        Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed) })
    }

    @Test("purchases run to finished: content placed, partial files gone, transactions finished")
    func deliversEverything() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory) { $0.maxConcurrentDownloads = 3 }
        let downloader = MemoryDownloader()
        var transactions: [VerifiedTransaction] = []
        var content: [QueuedContent] = []
        for i in 0..<12 {
            let t = QueueFixtures.transaction("p\(i)", product: "com.example.p\(i)")
            let data = payload(i)
            downloader.serve(t.productId, data)
            transactions.append(t)
            content.append(QueueFixtures.content(for: t, payload: data, placement: i % 2 == 0 ? .cache : .documents))
        }
        try queue.add(transactions, content: content)
        let pipeline = DeliveryPipeline(
            queue: queue, downloader: downloader, installer: CopyInstaller(layout: queue.layout), logger: Logger(label: "test"))
        let summary = try await pipeline.run()
        #expect(summary.finishedDownloads.count == 12)
        #expect(Set(summary.finishedTransactions) == Set(transactions.map(\.transactionId)))
        #expect(summary.unfinished.isEmpty)
        #expect(try queue.unfinished().isEmpty)
        for (i, t) in transactions.enumerated() {
            let d = try #require(try queue.downloads(transactionId: t.transactionId).first)
            #expect(d.state == .finished && d.progress == 1)
            let folder = try #require(d.contentURL)
            #expect(try Data(contentsOf: folder.appendingPathComponent("payload")) == payload(i))
            #expect(!FileManager.default.fileExists(atPath: d.partialPath))
            #expect(try queue.lease(d.id) == nil)
        }
        #expect(downloader.snapshot.maxRunning <= 3)
        // A second run has nothing to do.
        let again = try await pipeline.run()
        #expect(again.finishedDownloads.isEmpty && again.finishedTransactions.isEmpty)
        #expect(downloader.snapshot.calls.count == 12)
    }

    @Test("a pause stops the transfer keeping its bytes; resume continues from the journal")
    func pauseAndResume() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let downloader = MemoryDownloader()
        let t = QueueFixtures.transaction("pr1")
        let data = payload(7, size: 10_000)
        downloader.serve(t.productId, data, behaviour: .hangHalfway)
        try queue.add([t], content: [QueueFixtures.content(for: t, payload: data)])
        let id = try #require(try queue.downloads(transactionId: "pr1").first).id
        let pipeline = DeliveryPipeline(
            queue: queue, downloader: downloader, installer: CopyInstaller(layout: queue.layout), logger: Logger(label: "test"))
        let run = Task { try await pipeline.run() }
        #expect(try await eventually { try queue.download(id)?.durableOffset == 5_000 })
        try queue.pause([id])
        let summary = try await run.value
        #expect(summary.finishedDownloads.isEmpty)
        let paused = try #require(try queue.download(id))
        #expect(paused.state == .paused && paused.pauseReason == .user)
        #expect(paused.durableOffset == 5_000)
        #expect(try queue.lease(id) == nil)
        #expect { try queue.finish("pr1") } throws: { ($0 as? CourierError)?.code == .invalidState }

        downloader.setBehaviour(t.productId, .deliver)
        try queue.resume([id])
        let resumed = try await pipeline.run()
        #expect(resumed.finishedDownloads == [id])
        #expect(downloader.snapshot.resumedFrom[t.productId] == 5_000)
        #expect(try queue.transaction("pr1")?.state == .finished)
    }

    @Test("a pause written by another connection reaches the worker at its heartbeat")
    func pauseFromAnotherConnection() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let other = try QueueFixtures.queue(directory)
        let downloader = MemoryDownloader()
        let t = QueueFixtures.transaction("x1")
        let data = payload(3)
        downloader.serve(t.productId, data, behaviour: .hangHalfway)
        try queue.add([t], content: [QueueFixtures.content(for: t, payload: data)])
        let id = try #require(try queue.downloads(transactionId: "x1").first).id
        let pipeline = DeliveryPipeline(
            queue: queue, downloader: downloader, installer: CopyInstaller(layout: queue.layout), logger: Logger(label: "test"))
        let run = Task { try await pipeline.run() }
        #expect(try await eventually { try other.download(id)?.durableOffset == Int64(data.count / 2) })
        #expect { try other.discard(id) } throws: { ($0 as? CourierError)?.code == .invalidState }
        try other.cancel([id])
        _ = try await run.value
        let cancelled = try #require(try other.download(id))
        #expect(cancelled.state == .cancelled)
        #expect(cancelled.durableOffset == 0)
        #expect(!FileManager.default.fileExists(atPath: cancelled.partialPath))
        #expect(try other.lease(id) == nil)
    }

    @Test("network failure fails the download; integrity failure drops its bytes; others still finish")
    func failures() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let downloader = MemoryDownloader()
        let good = QueueFixtures.transaction("f1", product: "com.example.good")
        let flaky = QueueFixtures.transaction("f2", product: "com.example.flaky")
        let corrupt = QueueFixtures.transaction("f3", product: "com.example.corrupt")
        downloader.serve(good.productId, payload(1))
        downloader.serve(flaky.productId, payload(2), behaviour: .fail(CourierError(.network, "connection refused")))
        downloader.serve(corrupt.productId, payload(3))
        var corruptContent = QueueFixtures.content(for: corrupt, payload: payload(3))
        corruptContent.sha256 = String(repeating: "0", count: 64)
        try queue.add(
            [good, flaky, corrupt],
            content: [QueueFixtures.content(for: good, payload: payload(1)), QueueFixtures.content(for: flaky, payload: payload(2)), corruptContent])
        let pipeline = DeliveryPipeline(
            queue: queue, downloader: downloader, installer: CopyInstaller(layout: queue.layout), logger: Logger(label: "test"))
        let summary = try await pipeline.run()
        #expect(summary.finishedTransactions == ["f1"])
        #expect(Set(summary.unfinished.map(\.state)) == [.failed])
        #expect(summary.firstError != nil)
        let failedFlaky = try #require(try queue.downloads(transactionId: "f2").first)
        #expect(failedFlaky.errorCode == .network)
        let failedCorrupt = try #require(try queue.downloads(transactionId: "f3").first)
        #expect(failedCorrupt.errorCode == .integrity)
        #expect(try queue.stalledDownloads().map(\.id) == [failedFlaky.id])

        // The network is back: resume --stalled picks up only the retryable one.
        downloader.setBehaviour(flaky.productId, .deliver)
        #expect(try queue.requeueStalled().map(\.id) == [failedFlaky.id])
        let retry = try await pipeline.run()
        #expect(retry.finishedTransactions == ["f2"])
        #expect(try queue.transaction("f3")?.state == .purchased)
    }

    @Test("a download refused because another process holds its partial file is stalled, and resume --stalled runs it")
    func partialFileBusyIsStalled() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let downloader = MemoryDownloader()
        let t = QueueFixtures.transaction("b1", product: "com.example.busy")
        downloader.serve(t.productId, payload(4), behaviour: .fail(CourierError(.leased, "another process is writing it")))
        try queue.add([t], content: [QueueFixtures.content(for: t, payload: payload(4))])
        let pipeline = DeliveryPipeline(
            queue: queue, downloader: downloader, installer: CopyInstaller(layout: queue.layout), logger: Logger(label: "test"))
        let first = try await pipeline.run()
        #expect(first.finishedTransactions.isEmpty)
        let entry = try #require(try queue.entries().first)
        #expect(entry.download?.state == .failed && entry.download?.errorCode == .leased)
        #expect(entry.stalled == .partialFileBusy)
        // The other process is gone.
        downloader.setBehaviour(t.productId, .deliver)
        #expect(try queue.requeueStalled().count == 1)
        #expect(try await pipeline.run().finishedTransactions == ["b1"])
    }

    @Test("cancelling the run pauses active work as interrupted; the next run picks it up")
    func interruptedRunIsPickedUp() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let downloader = MemoryDownloader()
        let t = QueueFixtures.transaction("i1")
        let data = payload(9)
        downloader.serve(t.productId, data, behaviour: .hangHalfway)
        try queue.add([t], content: [QueueFixtures.content(for: t, payload: data)])
        let id = try #require(try queue.downloads(transactionId: "i1").first).id
        let pipeline = DeliveryPipeline(
            queue: queue, downloader: downloader, installer: CopyInstaller(layout: queue.layout), logger: Logger(label: "test"))
        let run = Task { try await pipeline.run() }
        #expect(try await eventually { try queue.download(id)?.durableOffset == Int64(data.count / 2) })
        run.cancel()
        _ = try await run.value
        let interrupted = try #require(try queue.download(id))
        #expect(interrupted.state == .paused && interrupted.pauseReason == .interrupted)
        #expect(try queue.stalledDownloads().map(\.id) == [id])

        // A new process (a new queue on the same file) picks it up at start.
        let restarted = try QueueFixtures.queue(directory)
        downloader.setBehaviour(t.productId, .deliver)
        let next = DeliveryPipeline(
            queue: restarted, downloader: downloader, installer: CopyInstaller(layout: restarted.layout), logger: Logger(label: "test"))
        let summary = try await next.run()
        #expect(summary.finishedTransactions == ["i1"])
        #expect(downloader.snapshot.resumedFrom[t.productId] == Int64(data.count / 2))
    }

    @Test("an active download whose owner died is taken over")
    func takeOverDeadOwner() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let t = QueueFixtures.transaction("d1")
        let data = payload(5)
        try queue.add([t], content: [QueueFixtures.content(for: t, payload: data)])
        let id = try #require(try queue.downloads(transactionId: "d1").first).id
        // A process claimed it, then died: its row says active under a lease of a gone pid.
        let child = try Shell.run("/bin/sh", ["-c", "echo $$"])
        let deadPid = try #require(Int32(child.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        let dead = LeaseManager(owner: LeaseOwner(pid: deadPid, startTime: 1, host: LeaseOwner.hostName(), token: "dead"), duration: 3600)
        try await queue.store.pool.write { db in
            _ = try dead.acquire(db, downloadId: id)
            try db.execute(sql: "UPDATE downloads SET state = 'active' WHERE id = ?", arguments: [id])
        }
        let entry = try #require(try queue.entries().first)
        #expect(entry.stalled == .ownerDied && entry.ownerAlive == false)
        let downloader = MemoryDownloader()
        downloader.serve(t.productId, data)
        let pipeline = DeliveryPipeline(
            queue: queue, downloader: downloader, installer: CopyInstaller(layout: queue.layout), logger: Logger(label: "test"))
        let summary = try await pipeline.run()
        #expect(summary.finishedTransactions == ["d1"])
    }

    @Test("a transaction without content, or whose downloads were all placed, is finished at pickup")
    func finishesDeliveredAtPickup() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        try queue.add([QueueFixtures.transaction("c1", product: "com.example.coins")], content: [])
        let pipeline = DeliveryPipeline(
            queue: queue, downloader: MemoryDownloader(), installer: CopyInstaller(layout: queue.layout), logger: Logger(label: "test"))
        let summary = try await pipeline.run()
        #expect(summary.finishedTransactions == ["c1"])
        #expect(try queue.transaction("c1")?.state == .finished)
    }
}
