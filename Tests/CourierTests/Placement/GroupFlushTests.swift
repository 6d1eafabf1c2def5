@testable import Courier
import CourierTestSupport
import Foundation
import GRDB
import Logging
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The pipeline's installs in three steps (`ContentPlacer.prepareInstall`, `flush`,
/// `completeInstall`): the `syncfs` before each rename is shared by the installs that wait at
/// once (group commit). What must still hold: a content folder is recorded (and its transaction
/// finished) only after a flush that started once its files were all written has ended.
@Suite("Group flush of installs")
struct GroupFlushTests {
    /// What the flushes saw: at each start, the tree of every staging folder (by the folder's
    /// inode, which the rename into place keeps) and the intents committed in the store; and
    /// which had ended.
    final class FlushLog: Sendable {
        struct Flush: Sendable {
            var trees: [Int64: [String: Int64]]
            var intents: Set<Int64>
            var ended = false
        }
        let flushes = Mutex<[Flush]>([])
        let layout: StorageLayout
        let store: StateStore

        init(layout: StorageLayout, store: StateStore) {
            self.layout = layout
            self.store = store
        }

        /// The flush body: records the staging trees, then flushes for real.
        func flush(_ folder: URL) throws {
            var trees: [Int64: [String: Int64]] = [:]
            for root in [layout.caches, layout.documents].map({ $0.appendingPathComponent(".staging") }) {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
                for name in names where !name.contains(".") {
                    let staging = root.appendingPathComponent(name)
                    trees[GroupFlushTests.inode(staging)] = GroupFlushTests.tree(staging)
                }
            }
            let intents = try store.pool.read { db in
                Set(try Int64.fetchAll(db, sql: "SELECT stagingInode FROM content_installation"))
            }
            let index = flushes.withLock { flushes in
                flushes.append(Flush(trees: trees, intents: intents))
                return flushes.count - 1
            }
            try FilesystemSync.flush(containing: folder)
            flushes.withLock { $0[index].ended = true }
        }

        /// Whether a flush that has ended saw, when it started, the folder of inode `inode`
        /// holding `tree` and its intent committed.
        func covered(inode: Int64, tree: [String: Int64]) -> Bool {
            flushes.withLock { flushes in
                flushes.contains { $0.ended && $0.trees[inode] == tree && $0.intents.contains(inode) }
            }
        }

        var count: Int { flushes.withLock { $0.count } }
    }

    static func inode(_ url: URL) -> Int64 {
        var status = stat()
        guard lstat(url.path, &status) == 0 else { return -1 }
        return Int64(status.st_ino)
    }

    /// Every regular file below `folder` with its size.
    static func tree(_ folder: URL) -> [String: Int64] {
        var tree: [String: Int64] = [:]
        for path in PackageFixtures.snapshot(folder) {
            var status = stat()
            guard lstat(folder.appendingPathComponent(path).path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { continue }
            tree[path] = Int64(status.st_size)
        }
        return tree
    }

    /// A queue with `count` purchases of real packages, served by a memory downloader, and a
    /// placer whose flushes `log` records.
    func fixture(_ directory: TemporaryDirectory, count: Int) throws
        -> (PaymentQueue, MemoryDownloader, ContentPlacer, FlushLog, [VerifiedTransaction], [Data])
    {
        let queue = try QueueFixtures.queue(directory) { $0.maxConcurrentDownloads = 4 }
        let log = FlushLog(layout: queue.layout, store: queue.store)
        let placer = ContentPlacer(
            layout: queue.layout, store: queue.store, packages: PackageConfiguration(), placement: PlacementConfiguration(),
            logger: Logger(label: "test"), freeSpace: .statvfs, stagingSyncs: StagingSyncs { try log.flush($0) })
        let downloader = MemoryDownloader()
        var transactions: [VerifiedTransaction] = []
        var content: [QueuedContent] = []
        var payloads: [Data] = []
        for i in 0..<count {
            let t = QueueFixtures.transaction("g\(i)", product: "com.example.group\(i)")
            let payload = PackageFixtures.noise(64 << 10 + i, seed: UInt64(i + 1))
            let zip = directory.appending("group\(i).zip")
            try PackageFixtures.infoZip(product: t.productId, version: "1.0", files: ["data.bin": payload], at: zip)
            let data = try Data(contentsOf: zip)
            downloader.serve(t.productId, data)
            transactions.append(t)
            payloads.append(payload)
            content.append(QueueFixtures.content(for: t, payload: data, placement: i % 2 == 0 ? .cache : .documents))
        }
        try queue.add(transactions, content: content)
        return (queue, downloader, placer, log, transactions, payloads)
    }

    @Test("each install is swapped and recorded only after a flush that started once its files and intent were written has ended")
    func recordedAfterCoveringFlush() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (queue, downloader, placer, log, transactions, payloads) = try fixture(directory, count: 12)
        // Checked at each record, inside the commit that finishes the transaction.
        let uncovered = Mutex<[String]>([])
        let stage = PlacementInstallStage(placer: placer)
        let checking = CheckingInstaller(stage: stage) { url in
            if !log.covered(inode: Self.inode(url), tree: Self.tree(url)) {
                uncovered.withLock { $0.append(url.lastPathComponent) }
            }
        }
        let pipeline = DeliveryPipeline(queue: queue, downloader: downloader, installer: checking, logger: Logger(label: "test"))
        let summary = try await pipeline.run()
        #expect(summary.finishedTransactions.count == 12)
        #expect(uncovered.withLock { $0 }.isEmpty, "recorded before a flush covered them: \(uncovered.withLock { $0 })")
        #expect(checking.records.withLock { $0 } == 12)
        // At most one flush per install (fewer when installs wait at once).
        #expect(log.count >= 1 && log.count <= 12)
        for (i, t) in transactions.enumerated() {
            let download = try #require(try queue.downloads(transactionId: t.transactionId).first)
            let folder = try #require(download.contentURL)
            #expect(try Data(contentsOf: folder.appendingPathComponent("Contents/data.bin")) == payloads[i])
            #expect(try queue.transaction(t.transactionId)?.state == .finished)
        }
    }

    @Test("killed between the group flush and the record: nothing recorded or finished; the next run recovers and delivers once")
    func killedBetweenFlushAndRecord() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (queue, downloader, placer, log, transactions, payloads) = try fixture(directory, count: 3)
        // The first run's installer dies after its flush, before the swap: the process's death
        // as it leaves the disk (lock free, staging and attempt row left), then the run ends.
        let dying = DyingInstaller(placer: placer)
        let first = DeliveryPipeline(queue: queue, downloader: downloader, installer: dying, logger: Logger(label: "test"))
        _ = try await first.run()
        #expect(dying.died.withLock { $0 } == 3)
        #expect(log.count >= 1)
        for t in transactions {
            #expect(try queue.transaction(t.transactionId)?.state != .finished, "finished without its content in place")
            #expect(!FileManager.default.fileExists(atPath: placer.contentURL(t.productId, placement: .cache).path))
            #expect(!FileManager.default.fileExists(atPath: placer.contentURL(t.productId, placement: .documents).path))
            #expect(try placer.content(t.productId) == nil)
        }
        let staging = [queue.layout.caches, queue.layout.documents].map { $0.appendingPathComponent(".staging") }
        #expect(staging.contains { !PackageFixtures.snapshot($0).isEmpty }, "the killed installs left their staging")

        // The next start: recovery sweeps the dead staging; the work is picked up again.
        try placer.recover()
        #expect(staging.allSatisfy { PackageFixtures.snapshot($0).isEmpty })
        try queue.resume(try transactions.flatMap { try queue.downloads(transactionId: $0.transactionId).map(\.id) })
        let second = DeliveryPipeline(
            queue: queue, downloader: downloader, installer: PlacementInstallStage(placer: placer), logger: Logger(label: "test"))
        let summary = try await second.run()
        #expect(Set(summary.finishedTransactions) == Set(transactions.map(\.transactionId)))
        for (i, t) in transactions.enumerated() {
            let delivered = try #require(try placer.content(t.productId))
            #expect(try Data(contentsOf: URL(fileURLWithPath: delivered.path).appendingPathComponent("Contents/data.bin")) == payloads[i])
            #expect(try queue.transaction(t.transactionId)?.state == .finished)
        }
    }

    @Test("a package a power cut left torn (downloads are not fsynced before the install) is hashed again and fetched anew")
    func tornPackageFetchedAgain() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (queue, downloader, placer, _, transactions, payloads) = try fixture(directory, count: 2)
        // What a power cut can leave of an unsynced package: its name and length, not its bytes
        // (one zeroed at its start, one at its end).
        for (i, t) in transactions.enumerated() {
            let download = try #require(try queue.downloads(transactionId: t.transactionId).first)
            let package = queue.packageFile(forDownload: download.id)
            try FileManager.default.createDirectory(at: package.deletingLastPathComponent(), withIntermediateDirectories: true)
            var bytes = try Data(contentsOf: directory.appending("group\(i).zip"))
            let range = i == 0 ? 0..<4096 : (bytes.count - 4096)..<bytes.count
            bytes.replaceSubrange(range, with: Data(count: 4096))
            try bytes.write(to: package)
        }
        let pipeline = DeliveryPipeline(
            queue: queue, downloader: downloader, installer: PlacementInstallStage(placer: placer), logger: Logger(label: "test"))
        let summary = try await pipeline.run()
        #expect(Set(summary.finishedTransactions) == Set(transactions.map(\.transactionId)))
        // Each fetched again, never installed from the torn file.
        #expect(downloader.snapshot.calls.count == 2)
        for (i, t) in transactions.enumerated() {
            let delivered = try #require(try placer.content(t.productId))
            #expect(try Data(contentsOf: URL(fileURLWithPath: delivered.path).appendingPathComponent("Contents/data.bin")) == payloads[i])
        }
    }
}

/// The placement stage, checking each content folder in `check` as it is recorded.
final class CheckingInstaller: ContentInstalling {
    let stage: PlacementInstallStage
    let check: @Sendable (URL) -> Void
    let records = Mutex<Int>(0)

    init(stage: PlacementInstallStage, check: @escaping @Sendable (URL) -> Void) {
        self.stage = stage
        self.check = check
    }

    func install(package: URL, for download: DownloadRecord) throws -> URL {
        try stage.install(package: package, for: download)
    }

    func install<T: Sendable>(
        package: URL, for download: DownloadRecord, on pool: BlockingWorkerPool,
        installed: @escaping @Sendable (URL, PlacementRecord?) throws -> T
    ) async throws -> T {
        try await stage.install(package: package, for: download, on: pool) { [self] url, placement in
            check(url)
            records.withLock { $0 += 1 }
            return try installed(url, placement)
        }
    }
}

/// An installer whose process dies after the group flush, before the swap.
final class DyingInstaller: ContentInstalling {
    let placer: ContentPlacer
    let died = Mutex<Int>(0)

    init(placer: ContentPlacer) { self.placer = placer }

    func install(package: URL, for download: DownloadRecord) throws -> URL {
        throw CourierError(.internal, "not used")
    }

    func install<T: Sendable>(
        package: URL, for download: DownloadRecord, on pool: BlockingWorkerPool,
        installed: @escaping @Sendable (URL, PlacementRecord?) throws -> T
    ) async throws -> T {
        let placer = self.placer
        let prepared = try await pool.run {
            try placer.prepareInstall(
                package: package, contentIdentifier: download.contentIdentifier, productId: download.productId,
                version: download.version, placement: download.placement, force: false, verifiedSHA256: download.sha256)
        }
        try await placer.flush(prepared)
        prepared.leaveAsKilled()
        died.withLock { $0 += 1 }
        // A failure the run does not retry: the test resumes it, as the next start would take it up.
        throw CourierError(.io, "killed")
    }
}
