import CourierTestSupport
import Foundation
import Logging
import Testing

@testable import Courier

/// The queue's side of updates (issue 13): an update is a download of a finished transaction,
/// claimable, listed while unfinished; queueing it again is idempotent; an active one is left
/// to its worker. The agent's automatic update follows `queue.autoUpdate`.
@Suite("Updates in the queue: queueUpdate, claims, listing; queue.autoUpdate")
struct UpdateQueueTests {
    /// A queue holding one finished purchase of "com.example.pack" 1.0.
    private func delivered(_ folder: TemporaryDirectory) throws -> (PaymentQueue, VerifiedTransaction, DownloadRecord) {
        let queue = try QueueFixtures.queue(folder)
        let transaction = QueueFixtures.transaction("t1")
        try queue.add([transaction], content: [QueueFixtures.content(for: transaction)])
        let claimed = try #require(try queue.claim(scope: .all, limit: 1).first)
        _ = try queue.installed(claimed.id, transactionId: "t1", contentURL: folder.appending("content"), finish: true)
        #expect(try queue.transaction("t1")?.state == .finished)
        return (queue, transaction, try #require(try queue.download(claimed.id)))
    }

    private func newVersion(_ transaction: VerifiedTransaction, payload: String = "version 2") -> QueuedContent {
        var content = QueueFixtures.content(for: transaction, payload: Data(payload.utf8))
        content.version = "2.0"
        content.mirrors = [URL(string: "http://127.0.0.1:9/mirror.zip")!]
        return content
    }

    @Test("a finished delivery is retargeted: waiting, updateFrom 1.0, claimable and listed; the transaction stays finished")
    func retargetsAFinishedDelivery() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let (queue, transaction, first) = try delivered(folder)
        #expect(try queue.entries().isEmpty)
        let update = try #require(try queue.queueUpdate(newVersion(transaction), replacing: "1.0"))
        #expect(update.id == first.id)
        #expect(update.state == .waiting && update.updateFrom == "1.0" && update.version == "2.0")
        #expect(update.progress == 0 && update.bytesReceived == 0 && update.contentURL == nil)
        #expect(update.mirrors.map(\.absoluteString) == ["http://127.0.0.1:9/mirror.zip"])
        #expect(try queue.transaction("t1")?.state == .finished)
        #expect(try queue.entries().map { $0.download?.id } == [first.id])
        #expect(try queue.pendingUpdates().map(\.id) == [first.id])
        #expect(try queue.claim(scope: .all, limit: 5).map(\.id) == [first.id])
    }

    @Test("queueing the same update again keeps its state and partial data; an active one is left to its worker")
    func idempotentAndActive() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let (queue, transaction, first) = try delivered(folder)
        try queue.queueUpdate(newVersion(transaction), replacing: "1.0")
        try queue.pause([first.id])
        let again = try #require(try queue.queueUpdate(newVersion(transaction), replacing: "1.0"))
        #expect(again.state == .paused)
        try queue.resume([first.id])
        _ = try queue.claim(scope: .all, limit: 1)
        #expect(try queue.download(first.id)?.state == .active)
        // A newer package while the update runs: left to the worker (the next check retargets).
        #expect(try queue.queueUpdate(newVersion(transaction, payload: "version 3"), replacing: "1.0") == nil)
        #expect(try queue.download(first.id)?.sha256 == QueueFixtures.sha256(Data("version 2".utf8)))
    }

    @Test("an update of a transaction the store does not hold is refused")
    func unknownTransaction() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let (queue, _, _) = try delivered(folder)
        #expect(throws: CourierError.self) {
            try queue.queueUpdate(newVersion(QueueFixtures.transaction("unknown")), replacing: "1.0")
        }
    }

    @Test("queue.autoUpdate false: the agent does not look at its catalog; true: it does")
    func autoUpdateSetting() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let catalog = folder.appending("catalog.json")
        try Catalog(bundleId: "com.example.app", products: []).encoded().write(to: catalog)
        for enabled in [false, true] {
            var configuration = try CourierConfiguration.decode(
                Data(#"{"queue": {"autoUpdate": \#(enabled), "catalogCheckInterval": 0.5}}"#.utf8))
            #expect(configuration.queue.autoUpdate == enabled && configuration.queue.catalogCheckInterval == 0.5)
            configuration.catalog = catalog.path
            let client = try CourierClient(
                configuration: configuration, layout: StorageLayout(root: folder.appending("Storage")), logger: Logger(label: "test"))
            defer { client.shutdown() }
            let checked = await client.agent().updateIfCatalogChanged(since: nil)
            #expect((checked != nil) == enabled)
        }
        #expect(throws: (any Error).self) {
            try CourierConfiguration.decode(Data(#"{"queue": {"catalogCheckInterval": 0}}"#.utf8))
        }
    }
}
