@testable import Courier
import CourierTestSupport
import Foundation
import Logging
import Synchronization
import Testing

/// What a foreground run tells its observer about another process's downloads.
private final class OwnerRecorder: PaymentQueueObserver, Sendable {
    /// Each change heard, with the token of the owner it came with (nil: none).
    let changes = Mutex<[(owner: String?, record: DownloadRecord)]>([])
    /// The owners announced, in order.
    let owners = Mutex<[String]>([])

    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord]) {
        changes.withLock { $0 += downloads.map { (nil, $0) } }
    }

    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord], workedBy owner: LeaseOwner) {
        changes.withLock { $0 += downloads.map { (owner.token, $0) } }
    }

    func paymentQueue(_ queue: PaymentQueue, downloads: [DownloadRecord], workedBy owner: LeaseOwner) {
        owners.withLock { $0.append(owner.token) }
    }

    func heard(bytes: Int64) -> Bool {
        changes.withLock { $0.contains { $0.record.bytesReceived == bytes } }
    }
}

/// `CourierClient.deliver` beside another owner of the same store (a second queue, so a second
/// lease token): the follower's reads, without a network or a second process.
@Suite("a foreground run follows another owner's download from the store")
struct FollowOwnerTests {
    @Test("its bytes come from the owner's partial file, ahead of its record; every change comes with the owner")
    func followsThePartialFile() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        // The other process: it claims the download and writes its partial file, recording nothing.
        let other = try QueueFixtures.queue(directory) { $0.leaseDuration = 600 }
        let transaction = QueueFixtures.transaction("f1")
        let payload = Data(repeating: 7, count: 100_000)
        try other.add([transaction], content: [QueueFixtures.content(for: transaction, payload: payload)])
        let claimed = try #require(try other.claim(scope: .all, limit: 1).first)
        #expect(claimed.state == .active && claimed.bytesReceived == 0)
        let partial = URL(fileURLWithPath: claimed.partialPath)
        try FileManager.default.createDirectory(
            at: partial.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(payload.prefix(30_000)).write(to: partial)

        var configuration = CourierConfiguration()
        configuration.queue = other.configuration
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let client = try CourierClient(configuration: configuration, layout: other.layout, logger: logger)
        defer { client.shutdown() }
        let recorder = OwnerRecorder()
        let run = Task {
            try await client.deliver(scope: .transactions(["f1"]), observer: recorder, followInterval: 0.05)
        }
        let deadline = Date().addingTimeInterval(30)
        while !recorder.heard(bytes: 30_000) && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        try Data(payload.prefix(60_000)).write(to: partial)
        while !recorder.heard(bytes: 60_000) && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        // Nothing was recorded in the store's row: the bytes were the partial file's.
        #expect(try other.download(claimed.id)?.bytesReceived == 0)
        // The owner places it: the run ends, its last read gives the finished record.
        let placed = directory.appending("placed")
        _ = try other.installed(claimed.id, transactionId: "f1", contentURL: placed, finish: true)
        let summary = try await run.value

        let token = other.leases.owner.token
        #expect(recorder.owners.withLock { $0 } == [token])
        let changes = recorder.changes.withLock { $0 }
        #expect(!changes.isEmpty)
        for change in changes {
            #expect(change.owner == token, "\(change.record.state) \(change.record.bytesReceived)")
        }
        let active = changes.map(\.record).filter { $0.state == .active }
        let counts = active.map(\.bytesReceived)
        #expect(active.contains { $0.bytesReceived == 30_000 && abs($0.progress - 0.3) < 1e-9 }, "\(counts)")
        #expect(counts.contains(60_000), "\(counts)")
        #expect(counts == counts.sorted())
        #expect(changes.last?.record.state == .finished)
        #expect(changes.last?.record.contentURL == placed)
        #expect(summary.finishedDownloads.isEmpty && summary.unfinished.isEmpty)
    }
}
