import Courier
import CourierTestSupport
import Foundation
import Testing

@Suite("TransferEngine against nginx and the fault-injecting origin")
struct TransferEngineTests {
    @Test("a full download from nginx is verified and renamed into place; the journal is gone",
          .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func fullDownload() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(3 << 20 + 123)
        try content.write(to: site.appending("pack.zip"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        let progress = ProgressLog()
        let request = TransferFixture.request(
            nginx.url("pack.zip"), in: folder, sha256: TransferFixture.sha256(content), length: Int64(content.count)
        )
        let result = try await engine.download(request, journal: store) { progress.record($0) }
        #expect(result.length == Int64(content.count))
        #expect(result.sha256 == TransferFixture.sha256(content))
        #expect(result.bytesFetched == Int64(content.count))
        #expect(result.resumedFrom == 0)
        #expect(try Data(contentsOf: folder.appending("file.bin")) == content)
        #expect(!FileManager.default.fileExists(atPath: request.partialFile.path))
        #expect(try store.load(downloadId: request.id) == nil)
        let last = try #require(progress.reports.last)
        #expect(last.bytesReceived == Int64(content.count))
        #expect(last.progress == 1)
    }

    @Test("many downloads at once, under the limits, all verified",
          .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func manyAtOnce() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        var hashes: [String: String] = [:]
        for index in 0..<40 {
            let data = TransferFixture.bytes(20_000 + index * 977, seed: UInt64(index + 1))
            try data.write(to: site.appending("f\(index).bin"))
            hashes["f\(index).bin"] = TransferFixture.sha256(data)
        }
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        var configuration = TransferFixture.configuration()
        configuration.maxConcurrentTransfers = 4
        configuration.maxTransfersPerHost = 3
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        let results = try await withThrowingTaskGroup(of: DownloadResult.self) { group in
            for (name, hash) in hashes {
                group.addTask {
                    try await engine.download(
                        TransferFixture.request(nginx.url(name), in: folder, name: name, sha256: hash),
                        journal: store
                    ) { _ in }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.count == 40)
        #expect(results.allSatisfy { hashes[$0.id] == $0.sha256 })
    }

    @Test("a dropped connection is retried from where it stopped, not from the start")
    func droppedConnectionResumes() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(2 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.dropAfterBytes = 700_000
        behavior.faultyResponses = 2
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let result = try await engine.download(
            TransferFixture.request(origin.url(), in: folder, sha256: TransferFixture.sha256(content)),
            journal: FileResumeJournalStore(directory: folder.url)
        ) { _ in }
        #expect(result.sha256 == TransferFixture.sha256(content))
        #expect(origin.requestedOffsets == [0, 700_000, 1_400_000])
        #expect(origin.bodyBytesSent == content.count)
    }

    @Test("fewer bytes than Content-Length: retried, resumed, verified")
    func shortBody() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(1 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.shortBodyBytes = 300_000
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let result = try await engine.download(
            TransferFixture.request(origin.url(), in: folder, sha256: TransferFixture.sha256(content)),
            journal: FileResumeJournalStore(directory: folder.url)
        ) { _ in }
        #expect(result.length == Int64(content.count))
        #expect(origin.requestedOffsets == [0, 300_000])
    }

    @Test("a stall is caught by the watchdog and retried")
    func stallIsRetried() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(1 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.stallAfterBytes = 200_000
        behavior.stallSeconds = 20
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        var configuration = TransferFixture.configuration()
        configuration.stallTimeout = 1
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        let result = try await engine.download(
            TransferFixture.request(origin.url(), in: folder, sha256: TransferFixture.sha256(content)),
            journal: FileResumeJournalStore(directory: folder.url)
        ) { _ in }
        #expect(result.sha256 == TransferFixture.sha256(content))
        #expect(origin.requestedOffsets == [0, 200_000])
    }

    @Test("503 with Retry-After is retried after the delay the server asked for")
    func serviceUnavailable() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(100_000)
        var behavior = FaultOrigin.Behavior()
        behavior.status = 503
        behavior.retryAfter = "1"
        behavior.faultyResponses = 2
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let started = Date()
        let result = try await engine.download(
            TransferFixture.request(origin.url(), in: folder),
            journal: FileResumeJournalStore(directory: folder.url)
        ) { _ in }
        #expect(result.sha256 == TransferFixture.sha256(content))
        #expect(origin.requests.count == 3)
        // Two Retry-After waits of one second each: a lower bound only, never an upper one.
        #expect(Date().timeIntervalSince(started) >= 2)
    }

    @Test("503 forever: network error after the configured retries")
    func retriesRunOut() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        var behavior = FaultOrigin.Behavior()
        behavior.status = 503
        behavior.faultyResponses = 1000
        let origin = try FaultOrigin(content: Data(count: 10), behavior: behavior)
        defer { origin.stop() }
        var configuration = TransferFixture.configuration()
        configuration.maxRetries = 2
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        let error = await #expect(throws: CourierError.self) {
            try await engine.download(TransferFixture.request(origin.url(), in: folder), journal: FileResumeJournalStore(directory: folder.url)) { _ in }
        }
        #expect(error?.code == .network)
        #expect(error?.exitCode == 5)
        #expect(origin.requests.count == 3)
    }

    @Test("404, 401 and 403 fail at once with their codes")
    func refusals() async throws {
        for (status, code) in [(404, CourierError.Code.serverRejected), (401, .serverRejected), (403, .notEntitled)] {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            var behavior = FaultOrigin.Behavior()
            behavior.status = status
            behavior.faultyResponses = 1000
            let origin = try FaultOrigin(content: Data(count: 10), behavior: behavior)
            defer { origin.stop() }
            let engine = try TransferFixture.engine()
            defer { engine.shutdown() }
            let error = await #expect(throws: CourierError.self) {
                try await engine.download(TransferFixture.request(origin.url(), in: folder), journal: FileResumeJournalStore(directory: folder.url)) { _ in }
            }
            #expect(error?.code == code)
            #expect(error?.message.contains("\(status)") == true)
            #expect(origin.requests.count == 1)
            #expect(!FileManager.default.fileExists(atPath: folder.appending("file.bin").path))
        }
    }

    @Test("a checksum mismatch fails with integrity and leaves no file at the destination")
    func checksumMismatch() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let origin = try FaultOrigin(content: TransferFixture.bytes(50_000))
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let request = TransferFixture.request(origin.url(), in: folder, sha256: String(repeating: "0", count: 64))
        let error = await #expect(throws: CourierError.self) {
            try await engine.download(request, journal: FileResumeJournalStore(directory: folder.url)) { _ in }
        }
        #expect(error?.code == .integrity)
        #expect(!FileManager.default.fileExists(atPath: request.destination.path))
        #expect(!FileManager.default.fileExists(atPath: request.partialFile.path))
    }

    @Test("a length mismatch fails with integrity before the body is fetched")
    func lengthMismatch() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let origin = try FaultOrigin(content: TransferFixture.bytes(2 << 20))
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let request = TransferFixture.request(origin.url(), in: folder, length: 1000)
        let error = await #expect(throws: CourierError.self) {
            try await engine.download(request, journal: FileResumeJournalStore(directory: folder.url)) { _ in }
        }
        #expect(error?.code == .integrity)
        #expect(error?.exitCode == 6)
        #expect(!FileManager.default.fileExists(atPath: request.destination.path))
    }

    /// Leaves a partial download of `content` behind: the first response drops after `bytes`
    /// and no retry is allowed.
    private func leavePartial(_ origin: FaultOrigin, in folder: TemporaryDirectory, after bytes: Int) async throws -> FileResumeJournalStore {
        var behavior = FaultOrigin.Behavior()
        behavior.dropAfterBytes = bytes
        origin.setBehavior(behavior)
        var configuration = TransferFixture.configuration()
        configuration.maxRetries = 0
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        await #expect(throws: CourierError.self) {
            try await engine.download(TransferFixture.request(origin.url(), in: folder), journal: store) { _ in }
        }
        return store
    }

    @Test("resume after a failure asks for the durable offset with If-Range")
    func resumesWithIfRange() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(1 << 20)
        let origin = try FaultOrigin(content: content)
        defer { origin.stop() }
        let store = try await leavePartial(origin, in: folder, after: 400_000)
        let journal = try #require(try store.load(downloadId: "file.bin"))
        #expect(journal.durableOffset == 400_000)
        #expect(journal.etag == "\"v1\"")
        origin.setBehavior(FaultOrigin.Behavior())
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let result = try await engine.download(TransferFixture.request(origin.url(), in: folder, sha256: TransferFixture.sha256(content)), journal: store) { _ in }
        #expect(result.resumedFrom == 400_000)
        #expect(result.bytesFetched == Int64(content.count - 400_000))
        #expect(result.sha256 == TransferFixture.sha256(content))
        #expect(origin.requests.last?.headers["if-range"] == "\"v1\"")
        #expect(origin.bodyBytesSent == content.count)
    }

    @Test("the resource changed between pause and resume: started over, the new version verified")
    func resourceChanged() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let original = TransferFixture.bytes(1 << 20, seed: 1)
        let changed = TransferFixture.bytes(900_000, seed: 2)
        let origin = try FaultOrigin(content: original)
        defer { origin.stop() }
        let store = try await leavePartial(origin, in: folder, after: 500_000)
        origin.setContent(changed, etag: "\"v2\"")
        origin.setBehavior(FaultOrigin.Behavior())
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let result = try await engine.download(TransferFixture.request(origin.url(), in: folder, sha256: TransferFixture.sha256(changed)), journal: store) { _ in }
        #expect(result.sha256 == TransferFixture.sha256(changed))
        #expect(try Data(contentsOf: folder.appending("file.bin")) == changed)
        #expect(origin.requestedOffsets == [0, 500_000])
    }

    @Test("a 200 answering a Range: the partial file is truncated and the same response used")
    func twoHundredToRange() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(1 << 20)
        let origin = try FaultOrigin(content: content)
        defer { origin.stop() }
        let store = try await leavePartial(origin, in: folder, after: 300_000)
        var behavior = FaultOrigin.Behavior()
        behavior.ignoreRanges = true
        origin.setBehavior(behavior)
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let result = try await engine.download(TransferFixture.request(origin.url(), in: folder, sha256: TransferFixture.sha256(content)), journal: store) { _ in }
        #expect(result.sha256 == TransferFixture.sha256(content))
        #expect(result.length == Int64(content.count))
        // One request for the resume: the 200 was used, not thrown away.
        #expect(origin.requests.count == 2)
    }

    @Test("the file's bytes come back in memory only when this call wrote every one of them and they fit")
    func retainedBody() async throws {
        let content = TransferFixture.bytes(1 << 20)
        let sha256 = TransferFixture.sha256(content)
        let origin = try FaultOrigin(content: content, behavior: FaultOrigin.Behavior())
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        func download(_ folder: TemporaryDirectory, limit: Int, store: FileResumeJournalStore? = nil) async throws -> DownloadResult {
            var request = TransferFixture.request(origin.url(), in: folder, sha256: sha256)
            request.retainsBodyUpTo = limit
            return try await engine.download(request, journal: store ?? FileResumeJournalStore(directory: folder.url)) { _ in }
        }
        // Whole, in several chunks: the same bytes as the file.
        let whole = try TemporaryDirectory()
        defer { whole.remove() }
        let result = try await download(whole, limit: 2 << 20)
        #expect(result.body.map { Data($0) } == content)
        #expect(try Data(contentsOf: result.file) == content)
        // Larger than the limit, or not asked for: none.
        let larger = try TemporaryDirectory()
        defer { larger.remove() }
        #expect(try await download(larger, limit: 512 << 10).body == nil)
        let unasked = try TemporaryDirectory()
        defer { unasked.remove() }
        #expect(try await download(unasked, limit: 0).body == nil)
        // A dropped connection retried within the call: every byte still written by it.
        var dropping = FaultOrigin.Behavior()
        dropping.dropAfterBytes = 300_000
        dropping.faultyResponses = 1
        origin.setBehavior(dropping)
        let retried = try TemporaryDirectory()
        defer { retried.remove() }
        let again = try await download(retried, limit: 2 << 20)
        #expect(again.resumedFrom == 0 && again.body.map { Data($0) } == content)
        // Resumed from a partial file an earlier call left: the prefix is not in memory.
        let resumed = try TemporaryDirectory()
        defer { resumed.remove() }
        let store = try await leavePartial(origin, in: resumed, after: 300_000)
        origin.setBehavior(FaultOrigin.Behavior())
        let continued = try await download(resumed, limit: 2 << 20, store: store)
        #expect(continued.resumedFrom == 300_000 && continued.body == nil)
        // A 200 answering the resume's Range starts the file over: all of it is this call's again.
        let restarted = try TemporaryDirectory()
        defer { restarted.remove() }
        let restartStore = try await leavePartial(origin, in: restarted, after: 300_000)
        var ignoring = FaultOrigin.Behavior()
        ignoring.ignoreRanges = true
        origin.setBehavior(ignoring)
        let over = try await download(restarted, limit: 2 << 20, store: restartStore)
        #expect(over.body.map { Data($0) } == content)
    }

    @Test("a partial file another process holds (frozen past its lease) is not written; once it lets go, the download completes")
    func partialFileHasOneWriter() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(1 << 20)
        let origin = try FaultOrigin(content: content, behavior: FaultOrigin.Behavior())
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        let request = TransferFixture.request(origin.url(), in: folder, sha256: TransferFixture.sha256(content))
        try Data("bytes of the other writer".utf8).write(to: request.partialFile)
        // The other writer: its own open file description with the exclusive lock.
        let holder = open(request.partialFile.path, O_RDWR | O_CLOEXEC)
        #expect(holder >= 0 && flock(holder, LOCK_EX | LOCK_NB) == 0)
        do {
            _ = try await engine.download(request, journal: store) { _ in }
            Issue.record("the download wrote a partial file another process holds")
        } catch let error as CourierError {
            #expect(error.code == .leased, "\(error)")
        }
        #expect(try Data(contentsOf: request.partialFile) == Data("bytes of the other writer".utf8))
        close(holder)
        let result = try await engine.download(request, journal: store) { _ in }
        #expect(try Data(contentsOf: result.file) == content)
    }

    @Test("cancelling the task pauses with the journal kept; the next call resumes")
    func cancelPauses() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(4 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.bytesPerSecond = 2 << 20
        // Every response stops after 1 MiB: however late the cancel comes on a loaded machine,
        // the download cannot have finished before it (it ran to the end here under load).
        behavior.stallAfterBytes = 1 << 20
        behavior.faultyResponses = 100
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        let request = TransferFixture.request(origin.url(), in: folder, sha256: TransferFixture.sha256(content))
        let progress = ProgressLog()
        let task = Task { try await engine.download(request, journal: store) { progress.record($0) } }
        #expect(await TransferFixture.wait { (progress.reports.last?.bytesReceived ?? 0) > 500_000 })
        task.cancel()
        let outcome = await task.result
        guard case .failure(let error as CourierError) = outcome else {
            Issue.record("expected a paused error, got \(outcome)")
            return
        }
        #expect(error.code == .paused)
        #expect(error.exitCode == 7)
        let journal = try #require(try store.load(downloadId: request.id))
        #expect(journal.durableOffset > 0)
        #expect(TransferFixture.fileSize(request.partialFile) >= journal.durableOffset)
        origin.setBehavior(FaultOrigin.Behavior())
        let result = try await engine.download(request, journal: store) { _ in }
        #expect(result.resumedFrom == journal.durableOffset)
        #expect(try Data(contentsOf: request.destination) == content)
    }
}
