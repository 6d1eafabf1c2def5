@testable import Courier
import CourierTestSupport
import Foundation
import Testing

/// `PaymentQueue.reconcile`, the shell of the lifecycle's `.reconcile` (decided alone in
/// DownloadLifecycleReconcileTests): on a real store, its actions reach the stored record, the
/// journal and the partial file, in one transaction.
@Suite("PaymentQueue.reconcile carries out the lifecycle's decisions on the store")
struct ReconcileShellTests {
    /// `content` served from `url` instead, the same package.
    static func moved(_ content: QueuedContent, to url: String) -> QueuedContent {
        var moved = content
        moved.url = URL(string: url)!
        return moved
    }

    @Test("same package: relocated with its partial file, validator cleared only for another origin; another package starts over")
    func partialDataAcrossCatalogs() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let t = QueueFixtures.transaction("9100")
        let first = QueueFixtures.content(for: t)
        try queue.add([t], content: [first])
        let download = try #require(try queue.downloads(transactionId: "9100").first)
        let partial = URL(fileURLWithPath: download.partialPath)
        let journals = DatabaseJournalStore(store: queue.store)
        try Data("pay".utf8).write(to: partial)
        try journals.save(
            ResumeJournal(downloadId: download.id, url: download.url, etag: "\"e\"", totalLength: 7, durableOffset: 3))
        try queue.pause([download.id])

        // Another origin serving the same bytes: its validator says nothing there.
        let elsewhere = Self.moved(first, to: "http://127.0.0.2:9/com.example.pack.zip")
        let relocated = try queue.reconcile([elsewhere], redeliverMissing: false)
        #expect(relocated.relocated.map(\.id) == [download.id] && relocated.retargeted.isEmpty && relocated.redelivered.isEmpty)
        let moved = try #require(try queue.download(download.id))
        #expect(moved.url == elsewhere.url && moved.state == .paused)
        #expect(moved.etag == nil && moved.lastModified == nil)
        #expect(moved.durableOffset == 3, "the bytes fetched are kept")
        #expect(FileManager.default.fileExists(atPath: partial.path))

        // The same origin and path with a new token: the validator still applies.
        try journals.save(ResumeJournal(downloadId: download.id, url: moved.url, etag: "\"f\"", totalLength: 7, durableOffset: 3))
        let token = Self.moved(first, to: "http://127.0.0.2:9/com.example.pack.zip?token=2")
        #expect(try queue.reconcile([token], redeliverMissing: false).relocated.map(\.id) == [download.id])
        let signed = try #require(try queue.download(download.id))
        #expect(signed.url == token.url && signed.etag == "\"f\"" && signed.durableOffset == 3)

        // Nothing changed: nothing to do.
        #expect(try queue.reconcile([token], redeliverMissing: true).isEmpty)

        // Another package: the old bytes go and it waits for the new one.
        let other = QueueFixtures.content(for: t, payload: Data("another payload".utf8))
        let retargeted = try queue.reconcile([other], redeliverMissing: false)
        #expect(retargeted.retargeted.map(\.id) == [download.id] && retargeted.relocated.isEmpty)
        let fresh = try #require(try queue.download(download.id))
        #expect(fresh.state == .waiting && fresh.sha256 == other.sha256 && fresh.length == other.length)
        #expect(fresh.durableOffset == 0 && fresh.etag == nil && fresh.bytesReceived == 0)
        #expect(!FileManager.default.fileExists(atPath: partial.path))
    }

    @Test("a cancelled download follows the catalog and stays cancelled; missing content is added only on a restore")
    func cancelledAndMissing() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let t = QueueFixtures.transaction("9200")
        let u = QueueFixtures.transaction("9201", product: "com.example.other")
        let first = QueueFixtures.content(for: t)
        try queue.add([t, u], content: [first])
        let download = try #require(try queue.downloads(transactionId: "9200").first)
        try queue.cancel([download.id])

        let other = QueueFixtures.content(for: t, payload: Data("another payload".utf8))
        #expect(try queue.reconcile([other], redeliverMissing: false).retargeted.map(\.id) == [download.id])
        let cancelled = try #require(try queue.download(download.id))
        #expect(cancelled.state == .cancelled && cancelled.sha256 == other.sha256)

        // The store has no download of u's content: a plain run adds none, a restore does.
        let missing = QueueFixtures.content(for: u)
        #expect(try queue.reconcile([missing], redeliverMissing: false).isEmpty)
        #expect(try queue.downloads(transactionId: "9201").isEmpty)
        let restored = try queue.reconcile([missing], redeliverMissing: true)
        #expect(restored.redelivered.map(\.transactionId) == ["9201"])
        #expect(try queue.downloads(transactionId: "9201").map(\.state) == [.waiting])
    }
}
