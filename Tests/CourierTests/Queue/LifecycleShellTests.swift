import CourierTestSupport
import Foundation
import Testing

@testable import Courier

/// `PaymentQueue` as the lifecycle's shell: it performs the actions the machine returns and
/// decides nothing from the state itself.
@Suite("PaymentQueue performs the lifecycle's actions")
struct LifecycleShellTests {
    /// A queue with one download claimed by this process (active, under its lease), and a stop
    /// signal watching it as a worker's would.
    private func activeDownload(_ directory: TemporaryDirectory) throws -> (PaymentQueue, String, StopSignal) {
        let queue = try QueueFixtures.queue(directory)
        let transaction = QueueFixtures.transaction("t1")
        try queue.add([transaction], content: [QueueFixtures.content(for: transaction)])
        let claimed = try queue.claim(scope: .all, limit: 1)
        let id = try #require(claimed.first?.id)
        #expect(claimed.first?.state == .active)
        return (queue, id, queue.watchStop(id))
    }

    /// Issue 30: on 8411a71 the stop signal fired for every committed record not `active`,
    /// whatever the machine said (the worker recording its own failure stopped itself).
    @Test("a worker's own failure moves its download out of active without firing its stop signal")
    func failureDoesNotStop() throws {
        let directory = try TemporaryDirectory(prefix: "courier-shell")
        defer { directory.remove() }
        let (queue, id, stop) = try activeDownload(directory)
        defer { queue.unwatchStop(id, stop) }
        try queue.transition(id, .failed(CourierError(.network, "connection reset")))
        #expect(try queue.download(id)?.state == .failed)
        #expect(!stop.isFired)
    }

    @Test("pause and cancel of an active download fire its stop signal (the stopTransfer action)")
    func pauseAndCancelStop() throws {
        for event in [DownloadLifecycle.Event.pause(.user), .cancel] {
            let directory = try TemporaryDirectory(prefix: "courier-shell")
            defer { directory.remove() }
            let (queue, id, stop) = try activeDownload(directory)
            defer { queue.unwatchStop(id, stop) }
            try queue.transition(id, event)
            #expect(stop.isFired, "\(event)")
        }
    }

    @Test("resume --stalled retries a serverRejected failure at once and leaves a user's pause alone")
    func requeueStalled() throws {
        let directory = try TemporaryDirectory(prefix: "courier-shell")
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let transactions = (1...2).map { QueueFixtures.transaction("t\($0)", product: "com.example.p\($0)") }
        try queue.add(transactions, content: transactions.map { QueueFixtures.content(for: $0) })
        let claimed = try queue.claim(scope: .transactions(["t1"]), limit: 1)
        let rejected = try #require(claimed.first?.id)
        try queue.transition(rejected, .failed(CourierError(.serverRejected, "answered HTTP 404")))
        queue.releaseLease(rejected)
        let paused = try #require(try queue.downloads(transactionId: "t2").first?.id)
        try queue.pause([paused])

        #expect(try queue.entries().first { $0.download?.id == rejected }?.stalled == .network)
        #expect(try queue.requeueStalled().map(\.id) == [rejected])
        #expect(try queue.download(rejected)?.state == .waiting)
        #expect(try queue.download(paused)?.state == .paused)
    }

    @Test("a re-run deliver's review resumes the scope's paused and failed downloads, whatever stopped them, and no others")
    func rerunReview() throws {
        let directory = try TemporaryDirectory(prefix: "courier-shell")
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let transactions = (1...3).map { QueueFixtures.transaction("t\($0)", product: "com.example.p\($0)") }
        try queue.add(transactions, content: transactions.map { QueueFixtures.content(for: $0) })
        let failed = try #require(try queue.claim(scope: .transactions(["t1"]), limit: 1).first?.id)
        try queue.transition(failed, .failed(CourierError(.integrity, "the SHA-256 does not match")))
        queue.releaseLease(failed)
        let paused = try #require(try queue.downloads(transactionId: "t2").first?.id)
        let outside = try #require(try queue.downloads(transactionId: "t3").first?.id)
        try queue.pause([paused, outside])
        // Neither is stalled: resume --stalled leaves both.
        #expect(try queue.requeueStalled().isEmpty)

        let review = try queue.reviewStalled(trigger: .rerun, scope: .transactions(["t1", "t2"]))
        #expect(Set(review.resumed.map(\.id)) == [failed, paused])
        #expect(try queue.download(failed)?.state == .waiting)
        #expect(try queue.download(paused)?.state == .waiting)
        #expect(try queue.download(outside)?.state == .paused)
    }
}
