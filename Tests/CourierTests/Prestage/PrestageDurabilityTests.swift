import Crypto
import Foundation
import Logging
import Synchronization
import Testing

@testable import Courier
import CourierTestSupport

/// The pre-staging durability rule: the catalog publish is the durability point. Packages are
/// published without a sync each; the tree is synced once before the catalog that names them, so
/// a package at its path that no published catalog names may be torn (a power cut before the
/// sync) and is checked before it is trusted. A shared queue records a package staged only once
/// a sync covers it.
@Suite("Prestage durability")
struct PrestageDurabilityTests {
    static func hex(_ data: Data) -> String { SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }

    static func content(_ name: String, _ data: Data) -> Catalog.Content {
        Catalog.Content(url: "\(name).zip", sha256: hex(data), length: Int64(data.count), version: "1.0", placement: .cache)
    }

    /// Publishes `bytes` at `path` as the job does (no catalog yet: a run that ended before it).
    static func stage(_ tree: LocalStagingTree, _ bytes: Data, at path: String) throws {
        let file = tree.workDirectory.appendingPathComponent(UUID().uuidString)
        try bytes.write(to: file)
        try tree.publishPackage(file, at: path)
    }

    @Test("a package no published catalog names is trusted only if its bytes match; one the catalog names is not read")
    func unpublishedPackagesAreVerified() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let tree = try LocalStagingTree(root: folder.url)
        let good = PackageFixtures.noise(5_000, seed: 1)
        let torn = PackageFixtures.noise(5_000, seed: 2)
        let upstream = Catalog(bundleId: "com.example.app", products: [
            Catalog.Product(productId: "com.example.good", content: Self.content("good", good)),
            Catalog.Product(productId: "com.example.torn", content: Self.content("torn", torn)),
        ])
        let first = try PrestagePlan(upstream: upstream, upstreamLocation: URL(string: "http://127.0.0.1:9/c.json"), tree: tree)
        #expect(first.tasks.count == 2)
        // A run staged both, then the machine lost power before its catalog: one file kept its
        // bytes, the other came back zeroed at the same length.
        try Self.stage(tree, good, at: first.tasks[0].stagedPath)
        try Self.stage(tree, Data(count: torn.count), at: first.tasks[1].stagedPath)
        let again = try PrestagePlan(upstream: upstream, upstreamLocation: URL(string: "http://127.0.0.1:9/c.json"), tree: tree)
        #expect(again.unchanged == ["com.example.good"])
        #expect(again.tasks.map(\.contentIdentifier) == ["com.example.torn"])

        // Once a catalog names a path, the plan trusts it by its length (it was synced first).
        try tree.publishCatalog(again.catalog(staged: []))
        let staged = first.tasks[0].stagedPath
        try Data(count: good.count).write(to: folder.url.appendingPathComponent(staged))
        let third = try PrestagePlan(upstream: upstream, upstreamLocation: URL(string: "http://127.0.0.1:9/c.json"), tree: tree)
        #expect(third.unchanged == ["com.example.good"], "a published package must not be read again")
    }

    /// Writes each task's bytes, as a verified download would leave them.
    struct BytesFetcher: PackageFetcher {
        let bytes: [String: Data]
        func fetch(_ task: PrestageTask, to destination: URL, workDirectory: URL, progress: @escaping @Sendable (Int64) -> Void) async throws -> Int64 {
            try bytes[task.contentIdentifier, default: Data()].write(to: destination)
            return task.content.length
        }
    }

    /// Accepts every package (no manifest form: the bytes are not a zip).
    struct AcceptingChecker: PackageChecker {
        func check(_ file: URL, task: PrestageTask) throws -> Int64? { nil }
    }

    /// What the tree and the queue did, in order.
    final class Log: Sendable {
        let entries = Mutex<[String]>([])
        func append(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }
    }

    /// A local tree that logs each publish and each sync.
    final class LoggingTree: StagingTree, Sendable {
        let inner: LocalStagingTree
        let log: Log
        init(_ inner: LocalStagingTree, log: Log) {
            self.inner = inner
            self.log = log
        }
        func publishedCatalog() throws -> Catalog? { try inner.publishedCatalog() }
        func hasPackage(at path: String, length: Int64) throws -> Bool { try inner.hasPackage(at: path, length: length) }
        func publishPackage(_ file: URL, at path: String) throws { try publishPackages([(file, path)]) }
        func publishPackages(_ files: [(file: URL, path: String)]) throws {
            try inner.publishPackages(files)
            for file in files { log.append("publish \(file.path)") }
        }
        func syncPublished() throws {
            log.append("sync start")
            try inner.syncPublished()
            log.append("sync end")
        }
        func publishCatalog(_ catalog: Catalog) throws { try inner.publishCatalog(catalog) }
        func removeUnlisted(by catalog: Catalog, grace: TimeInterval) throws -> [String] { try inner.removeUnlisted(by: catalog, grace: grace) }
        var workDirectory: URL { inner.workDirectory }
    }

    /// The in-process queue, standing for a shared one whose records outlive the process.
    struct SharedQueue: PrestageWorkQueue {
        let inner = LocalWorkQueue()
        let log: Log
        var recordsOutliveProcess: Bool { true }
        func enqueue(_ tasks: [PrestageTask]) async throws { await inner.enqueue(tasks) }
        func claim(worker: String) async throws -> PrestageTask? { await inner.claim(worker: worker) }
        func complete(_ task: PrestageTask, worker: String, outcome: PrestageOutcome) async throws -> Bool {
            if case .staged = outcome { log.append("staged \(task.stagedPath)") }
            return await inner.complete(task, worker: worker, outcome: outcome)
        }
        func outcomes() async throws -> [String: PrestageOutcome] { await inner.outcomes() }
    }

    @Test("a shared queue records a package staged only after a sync that started once it was published")
    func sharedQueueRecordsAfterSync() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let log = Log()
        let tree = LoggingTree(try LocalStagingTree(root: folder.url), log: log)
        var bytes: [String: Data] = [:]
        var products: [Catalog.Product] = []
        for index in 0..<12 {
            let data = PackageFixtures.noise(3_000 + index, seed: UInt64(index + 1))
            bytes["com.example.p\(index)"] = data
            products.append(Catalog.Product(productId: "com.example.p\(index)", content: Self.content("p\(index)", data)))
        }
        let plan = try PrestagePlan(
            upstream: Catalog(bundleId: "b", products: products), upstreamLocation: URL(string: "http://127.0.0.1:9/c.json"), tree: tree)
        let job = PrestageJob(
            tree: tree, fetcher: BytesFetcher(bytes: bytes), checker: AcceptingChecker(), queue: SharedQueue(log: log),
            configuration: PrestageConfiguration(jobs: 4), logger: Logger(label: "test"))
        let summary = try await job.run(plan) { _ in }
        #expect(summary.rows.allSatisfy { $0.status == PrestageSummary.Row.Status.staged })
        let entries = log.all
        for task in plan.tasks {
            let published = try #require(entries.firstIndex(of: "publish \(task.stagedPath)"))
            let recorded = try #require(entries.firstIndex(of: "staged \(task.stagedPath)"))
            // Some sync started after the publish and ended before the record.
            let covered = entries.indices.contains { start in
                start > published && entries[start] == "sync start"
                    && (entries[(start + 1)...].firstIndex(of: "sync end").map { $0 < recorded } ?? false)
            }
            #expect(covered, "\(task.stagedPath) was recorded staged before a sync covered it: \(entries)")
        }
        let syncs = entries.filter { $0 == "sync start" }.count
        #expect(syncs >= 1 && syncs <= plan.tasks.count)
    }

    @Test("the in-process queue syncs nothing per package: the catalog publish syncs the tree once")
    func localQueueSyncsOnce() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let log = Log()
        let tree = LoggingTree(try LocalStagingTree(root: folder.url), log: log)
        var bytes: [String: Data] = [:]
        var products: [Catalog.Product] = []
        for index in 0..<6 {
            let data = PackageFixtures.noise(2_000 + index, seed: UInt64(index + 7))
            bytes["com.example.p\(index)"] = data
            products.append(Catalog.Product(productId: "com.example.p\(index)", content: Self.content("p\(index)", data)))
        }
        let plan = try PrestagePlan(
            upstream: Catalog(bundleId: "b", products: products), upstreamLocation: URL(string: "http://127.0.0.1:9/c.json"), tree: tree)
        let job = PrestageJob(
            tree: tree, fetcher: BytesFetcher(bytes: bytes), checker: AcceptingChecker(),
            configuration: PrestageConfiguration(jobs: 3), logger: Logger(label: "test"))
        _ = try await job.run(plan) { _ in }
        #expect(!log.all.contains("sync start"))
        #expect(try tree.publishedCatalog()?.products.count == 6)
    }

    @Test("the pre-staging journal store keeps no journal without a durable byte; one with a checkpoint is kept")
    func unsyncedJournalStore() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let store = FileResumeJournalStore(directory: folder.url, syncs: false)
        var journal = ResumeJournal(downloadId: "prestage-a", url: try #require(URL(string: "http://127.0.0.1:9/a.zip")))
        journal.totalLength = 1 << 20
        try store.save(journal)
        #expect(try store.load(downloadId: "prestage-a") == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).isEmpty, "no file is created for it")
        journal.durableOffset = 4096
        try store.save(journal)
        #expect(try store.load(downloadId: "prestage-a") == journal)
        // A new response starting over (nothing durable) leaves no journal of the old one.
        journal.durableOffset = 0
        journal.etag = "\"new\""
        try store.save(journal)
        #expect(try store.load(downloadId: "prestage-a") == nil)
        // The syncing store (get, deliver) keeps every journal it is given.
        let syncing = FileResumeJournalStore(directory: folder.url)
        try syncing.save(journal)
        #expect(try syncing.load(downloadId: "prestage-a") == journal)
    }

    /// Syncs started and ended.
    final class SyncCounts: Sendable {
        let counts = Mutex<(started: Int, ended: Int)>((0, 0))
        var started: Int { counts.withLock { $0.started } }
        var ended: Int { counts.withLock { $0.ended } }
    }

    @Test("group sync: every caller returns after a sync that started after it called; concurrent callers share syncs")
    func groupSync() async throws {
        let state = SyncCounts()
        let sync = GroupSync {
            state.counts.withLock { $0.started += 1 }
            // Some work, so callers pile up behind a running sync.
            var hasher = SHA256()
            hasher.update(data: Data(count: 1 << 20))
            _ = hasher.finalize()
            state.counts.withLock { $0.ended += 1 }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<64 {
                group.addTask {
                    let startedBefore = state.started
                    try await sync.sync()
                    // Syncs run one at a time, so the one that covers this caller is number
                    // startedBefore + 1 or later, and it has ended.
                    #expect(state.ended >= startedBefore + 1)
                }
            }
            try await group.waitForAll()
        }
        #expect(state.started <= 64)
        struct Failure: Error {}
        let failing = GroupSync { throw Failure() }
        await #expect(throws: Failure.self) { try await failing.sync() }
    }

    @Test("group sync with spacing: a sync starts no sooner than the spacing after the last one, unless flushed; after a flush none waits")
    func groupSyncSpacing() async throws {
        let starts = Mutex<[ContinuousClock.Instant]>([])
        // Closed, a sync waits in its body until the test opens it.
        let gate = Mutex<DispatchSemaphore?>(nil)
        let spacing = Duration.milliseconds(300)
        let sync = GroupSync(spacing: spacing) {
            starts.withLock { $0.append(.now) }
            gate.withLock { $0 }?.wait()
        }
        try await sync.sync()
        // The next caller waits for the spacing: its sync starts 300 ms after the first started.
        try await sync.sync()
        var recorded = starts.withLock { $0 }
        #expect(recorded.count == 2)
        // (Measured inside the syncs, a few milliseconds after each started: a little slack.)
        #expect(recorded[0].duration(to: recorded[1]) >= spacing - .milliseconds(20))
        // Callers that arrive while a sync runs share the one sync that follows it.
        let held = DispatchSemaphore(value: 0)
        gate.withLock { $0 = held }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sync.sync() }
            while starts.withLock({ $0.count }) < 3 { try await Task.sleep(for: .milliseconds(5)) }
            for _ in 0..<8 { group.addTask { try await sync.sync() } }
            while sync.waitingCount < 9 { try await Task.sleep(for: .milliseconds(5)) }
            gate.withLock { $0 = nil }
            held.signal()
            try await group.waitForAll()
        }
        recorded = starts.withLock { $0 }
        #expect(recorded.count == 4)
        // A flush starts a due sync at once (a worker with nothing left to claim), well before
        // a spacing of 5 s.
        let long = Duration.seconds(5)
        let flushedStarts = Mutex<[ContinuousClock.Instant]>([])
        let flushable = GroupSync(spacing: long) { flushedStarts.withLock { $0.append(.now) } }
        try await flushable.sync()
        let asked = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await flushable.sync() }
            group.addTask {
                // Once the caller waits (its sync due in 5 s), a flush starts it now.
                while flushable.waitingCount < 1 { try await Task.sleep(for: .milliseconds(5)) }
                flushable.flush()
            }
            try await group.waitForAll()
        }
        var flushed = flushedStarts.withLock { $0 }
        #expect(flushed.count == 2)
        #expect(asked.duration(to: flushed[1]) < long)
        // After a flush the run is ending: a later caller's sync starts at once too, not 5 s after
        // the previous one.
        let after = ContinuousClock.now
        try await flushable.sync()
        flushed = flushedStarts.withLock { $0 }
        #expect(flushed.count == 3)
        #expect(after.duration(to: flushed[2]) < .seconds(2))
    }
}
