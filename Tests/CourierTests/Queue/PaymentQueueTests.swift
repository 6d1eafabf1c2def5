@testable import Courier
import CourierTestSupport
import Foundation
import GRDB
import Testing

@Suite("Payment queue on a real SQLite store")
struct PaymentQueueTests {
    @Test("the store's writer commits durably (synchronous = FULL, which GRDB's WAL setup lowers); a lazy write restores it")
    func writerIsDurable() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try StateStore(layout: StorageLayout(root: directory.appending("Storage")))
        func synchronous() throws -> Int? { try store.pool.writeWithoutTransaction { try Int.fetchOne($0, sql: "PRAGMA synchronous") } }
        #expect(try synchronous() == 2)  // FULL
        let lazy = try store.write(durable: false) { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
        #expect(lazy == 1)  // NORMAL, for that commit only
        #expect(try synchronous() == 2)
        #expect(try store.pool.read { try String.fetchOne($0, sql: "PRAGMA journal_mode") } == "wal")
    }

    @Test("adding a transaction queues its downloads; adding it again changes nothing")
    func addIsIdempotent() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let t = QueueFixtures.transaction("1000")
        let content = [
            QueueFixtures.content(for: t, identifier: "com.example.pack"),
            QueueFixtures.content(for: t, identifier: "com.example.pack.extra", placement: .documents),
        ]
        let first = try queue.add([t], content: content)
        #expect(first.map(\.state) == [.purchased])
        let downloads = try queue.downloads(transactionId: "1000")
        #expect(downloads.count == 2)
        #expect(downloads.allSatisfy { $0.state == .waiting && $0.progress == 0 })
        #expect(downloads.map(\.placement).sorted { $0.rawValue < $1.rawValue } == [.cache, .documents])

        _ = try queue.add([t], content: content)
        #expect(try queue.downloads(transactionId: "1000").count == 2)
        #expect(try queue.unfinished().map(\.id) == ["1000"])
    }

    @Test("a revoked transaction is queued as failed, with no downloads")
    func revoked() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        var t = QueueFixtures.transaction("2000")
        t.revocationDate = Date()
        let records = try queue.add([t], content: [QueueFixtures.content(for: t)])
        #expect(records.first?.state == .failed)
        #expect(records.first?.errorCode == .notEntitled)
        #expect(try queue.downloads(transactionId: "2000").isEmpty)
    }

    @Test("withoutDownloads names, in one read, the transactions that have no download")
    func withoutDownloads() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let hosted = QueueFixtures.transaction("3000")
        let contentless = QueueFixtures.transaction("3001", product: "com.example.subscription")
        _ = try queue.add([hosted, contentless], content: [QueueFixtures.content(for: hosted)])
        #expect(try queue.withoutDownloads(["3000", "3001"]) == ["3001"])
        #expect(try queue.withoutDownloads(["3000"]).isEmpty)
        #expect(try queue.withoutDownloads([]).isEmpty)
    }

    @Test("finish is refused while downloads are unfinished, idempotent after, and never re-queues")
    func finish() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let t = QueueFixtures.transaction("3000")
        try queue.add([t], content: [QueueFixtures.content(for: t)])
        #expect { try queue.finish("3000") } throws: { ($0 as? CourierError)?.code == .invalidState }
        #expect(try queue.transaction("3000")?.state == .purchased)

        let download = try #require(try queue.downloads(transactionId: "3000").first)
        try queue.cancel([download.id])
        let (record, finishedNow) = try queue.finish("3000")
        #expect(finishedNow)
        #expect(record.state == .finished)
        #expect(record.finishedAt != nil)
        let again = try queue.finish("3000")
        #expect(!again.finishedNow)
        #expect(again.transaction.finishedAt == record.finishedAt)

        // The same purchase arriving again is not delivered twice.
        try queue.add([t], content: [QueueFixtures.content(for: t)])
        #expect(try queue.transaction("3000")?.state == .finished)
        #expect(try queue.downloads(transactionId: "3000").map(\.state) == [.cancelled])
        #expect(try queue.unfinished().isEmpty)
    }

    @Test("observers and the event stream hear committed changes in order")
    func events() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let observer = RecordingObserver()
        queue.addObserver(observer)
        let stream = queue.eventStream()
        let t = QueueFixtures.transaction("4000")
        try queue.add([t], content: [QueueFixtures.content(for: t)])
        let download = try #require(try queue.downloads(transactionId: "4000").first)
        try queue.pause([download.id])
        try queue.cancel([download.id])
        try queue.finish("4000")

        var received: [PaymentQueueEvent] = []
        for await event in stream {
            received.append(event)
            if case .removedTransactions = event { break }
        }
        let summary = received.map { event -> String in
            switch event {
            case .updatedTransactions(let t): return "t:" + t.map(\.state.rawValue).joined(separator: ",")
            case .updatedDownloads(let d): return "d:" + d.map(\.state.rawValue).joined(separator: ",")
            case .removedTransactions(let t): return "removed:" + t.map(\.id).joined(separator: ",")
            case .restoreCompleted: return "restore"
            case .restoreFailed: return "restoreFailed"
            }
        }
        #expect(summary == ["t:purchased", "d:waiting", "d:paused", "d:cancelled", "t:finished", "removed:4000"])
        #expect(try await eventually { observer.events.count == 6 })
        #expect(observer.events == [
            "transaction 4000 purchased", "download com.example.pack waiting", "download com.example.pack paused",
            "download com.example.pack cancelled", "transaction 4000 finished", "removed 4000",
        ])
    }

    @Test("restore queues only the chosen products, as restored, and refuses an empty choice")
    func restore() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let observer = RecordingObserver()
        queue.addObserver(observer)
        let a = QueueFixtures.transaction("5001", product: "com.example.a")
        let b = QueueFixtures.transaction("5002", product: "com.example.b")
        let content = [QueueFixtures.content(for: a), QueueFixtures.content(for: b)]
        let restored = try queue.restore([a, b], content: content, productIds: ["com.example.b"])
        #expect(restored.map(\.id) == ["5002"])
        #expect(restored.first?.state == .restored)
        #expect(try queue.transaction("5001") == nil)
        #expect(try queue.downloads(transactionId: "5002").count == 1)
        #expect { try queue.restore([a, b], content: content, productIds: []) } throws: {
            ($0 as? CourierError)?.code == .usage
        }
        #expect(try await eventually {
            observer.events.contains("restore completed com.example.b") && observer.events.contains("restore failed usage")
        })
    }

    @Test("the database journal store keeps the journal in the download's row")
    func journalStore() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let t = QueueFixtures.transaction("6000")
        try queue.add([t], content: [QueueFixtures.content(for: t)])
        let download = try #require(try queue.downloads(transactionId: "6000").first)
        let journals = DatabaseJournalStore(store: queue.store)
        var journal = try #require(try journals.load(downloadId: download.id))
        #expect(journal.durableOffset == 0)
        journal.etag = "\"abc\""
        journal.lastModified = "Sat, 21 Nov 2026 10:00:00 GMT"
        journal.totalLength = 7
        journal.durableOffset = 4
        try journals.save(journal)
        // A second connection to the same file sees it: it is durable, not cached.
        let reopened = try StateStore(url: queue.layout.stateDatabase)
        #expect(try DatabaseJournalStore(store: reopened).load(downloadId: download.id) == journal)
        #expect(try queue.download(download.id)?.bytesReceived == 4)
        try journals.remove(downloadId: download.id)
        let reset = try #require(try journals.load(downloadId: download.id))
        #expect(reset.durableOffset == 0 && reset.etag == nil && reset.totalLength == nil)
        #expect(try journals.load(downloadId: "missing") == nil)
    }

    @Test("discard drops the partial file and the journal, keeping the state")
    func discard() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let t = QueueFixtures.transaction("7000")
        try queue.add([t], content: [QueueFixtures.content(for: t)])
        let download = try #require(try queue.downloads(transactionId: "7000").first)
        try Data("pay".utf8).write(to: URL(fileURLWithPath: download.partialPath))
        try DatabaseJournalStore(store: queue.store).save(
            ResumeJournal(downloadId: download.id, url: download.url, etag: "\"e\"", totalLength: 7, durableOffset: 3))
        try queue.pause([download.id])
        let after = try #require(try queue.discard(download.id))
        #expect(after.state == .paused)
        #expect(after.durableOffset == 0 && after.etag == nil && after.bytesReceived == 0)
        #expect(!FileManager.default.fileExists(atPath: download.partialPath))
    }

    @Test("ids resolve by download id, transaction id and unambiguous prefix")
    func resolve() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let t = QueueFixtures.transaction("8000")
        let u = QueueFixtures.transaction("8001")
        try queue.add([t, u], content: [QueueFixtures.content(for: t), QueueFixtures.content(for: u)])
        let download = try #require(try queue.downloads(transactionId: "8000").first)
        #expect(try queue.resolve(download.id).map(\.id) == [download.id])
        #expect(try queue.resolve("8000").map(\.id) == [download.id])
        #expect(try queue.resolve(String(download.id.prefix(12))).map(\.id) == [download.id])
        #expect { try queue.resolve("800") } throws: { ($0 as? CourierError)?.code == .usage }
        #expect { try queue.resolve("nope") } throws: { ($0 as? CourierError)?.code == .notFound }
    }

    @Test("the schema has the documented tables and indexes, in WAL mode")
    func schema() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let (tables, indexes, mode) = try queue.store.pool.read { db in
            (
                try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"),
                try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%'"),
                try String.fetchOne(db, sql: "PRAGMA journal_mode")
            )
        }
        #expect(Set(["transactions", "downloads", "leases"]).isSubset(of: Set(tables)))
        #expect(Set(["transactions_by_created", "downloads_by_transaction", "downloads_by_state"]).isSubset(of: Set(indexes)))
        #expect(mode == "wal")
    }
}
