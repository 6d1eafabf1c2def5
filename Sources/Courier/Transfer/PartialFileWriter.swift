import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The disk side of one download: writes body chunks to the partial file, hashes them, fsyncs
/// and records checkpoints in the journal. Runs on one serial queue of the engine's bounded
/// worker pool, never on the network thread. Hashing runs on a serial queue of its own
/// (`ChunkHasher`), fed in order with each chunk once it is written: hashing chunk N overlaps
/// writing chunk N+1 and receiving N+2, so a verified download costs about the slowest of the
/// three stages on its own core, not their sum.
///
/// The network thread hands chunks over with `submit`; `shouldPause` applies backpressure
/// (memory stays bounded whatever the file size: a chunk counts until it is hashed) and the
/// writer asks the job to resume receiving once it has caught up.
final class PartialFileWriter: @unchecked Sendable {  // @unchecked: disk state is touched only on `queue`; the handover counters are guarded by `lock`.
    let queue: DispatchQueue
    let file: URL
    private let fd: Int32
    private let store: any ResumeJournalStore
    private let checkpointBytes: Int64
    private let checkpointInterval: Double
    private let highWater: Int

    // Queue-only state.
    /// The SHA-256 of the bytes written, computed on its own queue in write order.
    private let hasher: ChunkHasher
    private(set) var writtenOffset: Int64 = 0
    private(set) var durableOffset: Int64 = 0
    private(set) var journal: ResumeJournal
    private var lastCheckpoint = DispatchTime.now()
    /// Bytes written by this process (all attempts), for `DownloadResult.bytesFetched`.
    private(set) var bytesWrittenThisRun: Int64 = 0
    private let progress: ProgressReporter
    private let growingSpaceCheck: GrowingSpaceCheck?
    /// The store holds no journal for this download yet and a response from byte 0 need not
    /// write one before its first checkpoint (`DownloadRequest.savesFirstJournalEagerly`).
    private var defersFirstJournal: Bool
    /// Up to how many bytes of a body written from byte 0 are also kept in memory (0: none).
    private let retainLimit: Int
    /// The file's bytes from 0 as written, while they are all written by this writer and fit
    /// `retainLimit`; nil otherwise (queue only).
    private var retained: [UInt8]?

    /// The space check of a body whose length was not known in advance: before each chunk is
    /// written, the chunk, `additionalSpaceNeeded` and `reserve` must fit, else the writer fails
    /// with `insufficientSpace` (the partial data is kept and can be resumed).
    struct GrowingSpaceCheck: Sendable {
        var reserve: Int64
        var additionalSpaceNeeded: Int64
    }

    // Handover state, guarded by `lock`.
    private let lock = NSLock()
    private var inFlight = 0
    private var pausedJob: CurlJob?
    private var failure: CourierError?

    init(
        file: URL,
        fd: Int32,
        journal: ResumeJournal,
        store: any ResumeJournalStore,
        queue: DispatchQueue,
        configuration: TransferConfiguration,
        progress: ProgressReporter,
        growingSpaceCheck: GrowingSpaceCheck? = nil,
        defersFirstJournal: Bool = false,
        retainLimit: Int = 0
    ) {
        self.file = file
        self.fd = fd
        self.journal = journal
        self.store = store
        self.queue = queue
        self.checkpointBytes = max(1, configuration.checkpointBytes)
        self.checkpointInterval = configuration.checkpointInterval
        // At most 1 MiB waits for the disk (plus the job's 256 KiB chunk and curl's buffer):
        // peak memory stays flat whatever the file size (4 MiB here cost ~5 MiB of peak RSS).
        self.highWater = 1 << 20
        self.progress = progress
        self.growingSpaceCheck = growingSpaceCheck
        self.defersFirstJournal = defersFirstJournal
        self.retainLimit = max(0, retainLimit)
        self.hasher = ChunkHasher()
    }

    /// The first error the writer met (ENOSPC, EIO, a journal that could not be saved).
    var error: CourierError? {
        lock.lock()
        defer { lock.unlock() }
        return failure
    }

    // MARK: Network thread

    /// True when too much data waits for the disk: the caller pauses receiving and is resumed
    /// through `job.resumeReceiving()` once the writer has caught up.
    func shouldPause(_ job: CurlJob) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if inFlight >= highWater {
            pausedJob = job
            return true
        }
        return false
    }

    /// Hands a chunk over to the worker.
    func submit(_ chunk: [UInt8]) {
        lock.lock()
        inFlight += chunk.count
        lock.unlock()
        queue.async { self.write(chunk) }
    }

    /// Queues a reset of the partial file to empty (a 200 answered a ranged request), then the
    /// new response's journal, saved before any byte of its body is written.
    func submitRestart(journal: ResumeJournal) {
        queue.async {
            self.restartFromZero()
            var updated = journal
            updated.durableOffset = 0
            self.journal = updated
            self.saveJournal()
        }
    }

    /// Queues the journal of a newly accepted response (validator, total length), saved before
    /// any byte of its body is written: whatever the partial file holds past the durable offset
    /// then always belongs to the response this journal names, so a killed process's successor
    /// can resume from the file's length.
    func submitJournal(_ journal: ResumeJournal) {
        queue.async {
            var updated = journal
            updated.durableOffset = self.durableOffset
            self.journal = updated
            // Nothing written and nothing saved yet: the first checkpoint saves it (see
            // `DownloadRequest.savesFirstJournalEagerly`).
            if self.defersFirstJournal && self.writtenOffset == 0 && self.durableOffset == 0 { return }
            self.saveJournal()
        }
    }

    private func saveJournal() {
        guard error == nil else { return }
        defersFirstJournal = false
        do {
            try store.save(journal)
        } catch let error as CourierError {
            fail(error)
        } catch {
            fail(CourierError(.io, "cannot save the journal of \(file.path)", cause: "\(error)"))
        }
    }

    // MARK: Worker queue

    /// Runs `body` on the writer's queue and returns its result.
    func perform<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try body() })
            }
        }
    }

    /// Prepares to continue at `offset`: truncates what follows it and hashes what precedes it.
    /// Returns the offset actually used (0 when the file is shorter than `offset`).
    ///
    /// `durable` (at most `offset`) is how much of the prefix is known to be fsynced; the bytes
    /// between it and `offset` were written by a process that died while the OS lived, so they
    /// are good, and the next checkpoint makes them durable too.
    func prepare(resumingAt offset: Int64, durable: Int64? = nil) throws -> Int64 {
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw CourierError.posix("stat", path: file.path) }
        var start = offset
        if Int64(status.st_size) < offset { start = 0 }
        // Only a longer file is cut: on ext4 any truncate to 0, even of an empty new file, makes
        // the close start the file's writeback at once (auto_da_alloc), once per download.
        if Int64(status.st_size) != start {
            guard ftruncate(fd, off_t(start)) == 0 else { throw CourierError.posix("truncate", path: file.path) }
        }
        // Re-hash the bytes kept (only when resuming: a fresh start needs no buffer). The
        // journal keeps no hash state: the prefix on disk is what the digest must cover.
        try hasher.restart(hashingPrefixOf: fd, length: start, path: file.path)
        writtenOffset = start
        retained = start == 0 && retainLimit > 0 ? [] : nil
        durableOffset = min(start, max(0, durable ?? start))
        journal.durableOffset = durableOffset
        if progress.source == nil { progress.source = journal.url }
        progress.start(at: start, total: journal.totalLength)
        return start
    }

    /// Continues from another URL serving the same bytes (a mirror): the journal names it, and
    /// keeps the old validator only where it still applies (queue only).
    func switchSource(to url: URL) throws {
        if !TransferEngine.validatorApplies(from: journal.url, to: url) {
            journal.etag = nil
            journal.lastModified = nil
        }
        journal.url = url
        progress.source = url
        try checkpoint()
    }

    /// Discards the partial data and starts over with `journal` (queue only).
    func restart(with journal: ResumeJournal) throws {
        self.journal = journal
        _ = try prepare(resumingAt: 0)
        try checkpoint()
    }

    /// Writes `chunk` at once, on the writer's queue (a local file's bytes, read on that queue by
    /// `TransferEngine.copyLocalFile`): the same space check, hashing, progress and checkpoints as
    /// a network chunk. Throws the writer's error. Queue only.
    func writeNow(_ chunk: [UInt8]) throws {
        lock.lock()
        inFlight += chunk.count
        lock.unlock()
        write(chunk)
        if let error { throw error }
    }

    /// Writes `chunk` at the written offset, then hands the bytes that landed to the hasher;
    /// the chunk stops counting against the high water once it is hashed.
    private func write(_ chunk: [UInt8]) {
        let landed = writeLanding(chunk)
        guard landed > 0 else {
            drained(chunk.count)
            return
        }
        hasher.update(chunk, count: landed) { self.drained(chunk.count) }
    }

    /// Writes `chunk` and returns how many of its bytes landed in the file (all of them unless
    /// the writer failed).
    private func writeLanding(_ chunk: [UInt8]) -> Int {
        guard error == nil else { return 0 }
        if let check = growingSpaceCheck, journal.totalLength == nil {
            // Length unknown (no Content-Length, no expected length): nothing was reserved up
            // front, so the reserve is enforced as the file grows.
            do {
                try SpaceCheck.require(
                    bytes: SpaceCheck.sum(Int64(chunk.count), check.additionalSpaceNeeded), reserve: check.reserve, at: file)
            } catch let error as CourierError {
                fail(error)
                return 0
            } catch {
                fail(CourierError(.io, "cannot check the free space at \(file.path)", cause: "\(error)"))
                return 0
            }
        }
        var done = 0
        while done < chunk.count {
            let count = chunk.withUnsafeBytes {
                pwrite(fd, $0.baseAddress.map { $0 + done }, chunk.count - done, off_t(writtenOffset + Int64(done)))
            }
            if count < 0 {
                if errno == EINTR { continue }
                fail(CourierError.posix("write", path: file.path))
                retained = nil
                // Keep what did land: it is valid data and can be checkpointed.
                writtenOffset += Int64(done)
                return done
            }
            done += count
        }
        if var kept = retained {
            // Taken out first so the append below extends the one reference in place.
            retained = nil
            if chunk.count <= retainLimit - kept.count {
                if kept.isEmpty { kept = chunk } else { kept.append(contentsOf: chunk) }
                retained = kept
            }
        }
        writtenOffset += Int64(chunk.count)
        bytesWrittenThisRun += Int64(chunk.count)
        progress.update(bytes: writtenOffset, total: journal.totalLength)
        if writtenOffset - durableOffset >= checkpointBytes
            || Double(DispatchTime.now().uptimeNanoseconds - lastCheckpoint.uptimeNanoseconds) / 1e9 >= checkpointInterval
        {
            do {
                try checkpoint()
            } catch let error as CourierError {
                fail(error)
            } catch {
                fail(CourierError(.io, "cannot checkpoint \(file.path)", cause: "\(error)"))
            }
        }
        return chunk.count
    }

    private func restartFromZero() {
        guard error == nil else { return }
        if ftruncate(fd, 0) != 0 {
            fail(CourierError.posix("truncate", path: file.path))
            return
        }
        hasher.reset()
        writtenOffset = 0
        durableOffset = 0
        retained = retainLimit > 0 ? [] : nil
        progress.start(at: 0, total: nil)
    }

    /// Makes the written bytes durable, then records them in the journal (queue only).
    func checkpoint() throws {
        lastCheckpoint = .now()
        if writtenOffset != durableOffset || journal.durableOffset != writtenOffset {
            guard fdatasync(fd) == 0 else { throw CourierError.posix("fsync", path: file.path) }
            durableOffset = writtenOffset
            journal.durableOffset = durableOffset
        }
        defersFirstJournal = false
        try store.save(journal)
    }

    /// The whole file's bytes as written, when every one of them was written by this writer from
    /// byte 0 and they fit its `retainLimit`; nil otherwise (queue only).
    var retainedBody: [UInt8]? {
        guard let retained, Int64(retained.count) == writtenOffset else { return nil }
        return retained
    }

    /// Makes everything durable (unless `sync` is false: the caller syncs the file later) and
    /// returns the length and SHA-256 of the whole file (queue only).
    func finish(sync: Bool = true) throws -> (length: Int64, sha256: String) {
        if sync {
            guard fdatasync(fd) == 0 else { throw CourierError.posix("fsync", path: file.path) }
            durableOffset = writtenOffset
        } else {
            // The caller syncs many files at once later (a prestage run's one `syncfs`): the disk
            // writes them meanwhile instead of all at that sync.
            FilesystemSync.startWriteback(fd)
        }
        let digest = hasher.digest()
        progress.finish(bytes: writtenOffset)
        return (writtenOffset, digest)
    }

    private func fail(_ error: CourierError) {
        lock.lock()
        if failure == nil { failure = error }
        lock.unlock()
    }

    private func drained(_ count: Int) {
        lock.lock()
        inFlight -= count
        var resume: CurlJob?
        if let job = pausedJob, inFlight <= highWater / 2 || failure != nil {
            resume = job
            pausedJob = nil
        }
        lock.unlock()
        resume?.resumeReceiving()
    }
}

/// The SHA-256 of one download's bytes, computed on a serial queue of its own in the order the
/// writer hands them over: the writer's queue only enqueues (`update`, `reset`) and waits only
/// for a digest or a re-hashed prefix, so hashing overlaps writing and receiving.
///
/// swift-crypto's `SHA256` is BoringSSL's on Linux, with its x86-64 assembly (SHA-NI where the
/// CPU has it, AVX2 otherwise): as fast as OpenSSL's libcrypto, so no other implementation is
/// linked.
final class ChunkHasher: @unchecked Sendable {  // @unchecked: `state` is touched only on `queue`.
    private let queue: DispatchQueue
    private var state = SHA256()

    init() {
        // The writers' QoS (`WorkerPool`): neither stage outranks the other.
        queue = DispatchQueue(label: "courier.transfer.hash", qos: .utility)
    }

    /// Hashes the first `count` bytes of `chunk` after everything handed over before, then runs
    /// `done` (on the hasher's queue). `chunk` is shared, not copied, until it is hashed.
    func update(_ chunk: [UInt8], count: Int, done: @escaping @Sendable () -> Void) {
        queue.async {
            chunk.withUnsafeBytes { self.state.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            done()
        }
    }

    /// Starts over from empty, after what was handed over before.
    func reset() {
        queue.async { self.state = SHA256() }
    }

    /// Starts over with the first `length` bytes of the file `fd` (a resumed download's prefix),
    /// read and hashed before this returns.
    func restart(hashingPrefixOf fd: Int32, length: Int64, path: String) throws {
        try queue.sync {
            state = SHA256()
            guard length > 0 else { return }
            var buffer = [UInt8](repeating: 0, count: Int(min(length, 256 << 10)))
            var position: Int64 = 0
            while position < length {
                let wanted = Int(min(Int64(buffer.count), length - position))
                let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, wanted, off_t(position)) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { throw CourierError.posix("read", path: path) }
                buffer.withUnsafeBytes { state.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
                position += Int64(count)
            }
        }
    }

    /// Lowercase hex SHA-256 of everything handed over so far (waits until it is hashed).
    func digest() -> String {
        queue.sync { state.finalize().hex }
    }
}

/// Turns byte counts into `TransferProgress` (rate, fraction, time remaining), throttled, and
/// hands them to the caller's closure. Called on the writer's queue only.
final class ProgressReporter: @unchecked Sendable {  // @unchecked: used on one writer queue only.
    private let id: String
    private let handler: @Sendable (TransferProgress) -> Void
    private let interval: UInt64 = 100_000_000
    private var lastReport: UInt64 = 0
    private var lastSampleTime: UInt64 = 0
    private var lastSampleBytes: Int64 = 0
    private var rate: Double = 0
    /// The URL the bytes come from, said in every report.
    var source: URL?

    init(id: String, handler: @escaping @Sendable (TransferProgress) -> Void) {
        self.id = id
        self.handler = handler
    }

    func start(at bytes: Int64, total: Int64?) {
        let now = DispatchTime.now().uptimeNanoseconds
        lastSampleTime = now
        lastSampleBytes = bytes
        lastReport = now
        rate = 0
        report(TransferProgress(id: id, bytesReceived: bytes, totalBytes: total, bytesPerSecond: 0))
    }

    func update(bytes: Int64, total: Int64?) {
        let now = DispatchTime.now().uptimeNanoseconds
        guard now - lastReport >= interval else { return }
        let elapsed = Double(now - lastSampleTime) / 1e9
        if elapsed > 0 {
            let instant = Double(bytes - lastSampleBytes) / elapsed
            rate = rate == 0 ? instant : 0.7 * rate + 0.3 * instant
        }
        lastSampleTime = now
        lastSampleBytes = bytes
        lastReport = now
        report(TransferProgress(id: id, bytesReceived: bytes, totalBytes: total, bytesPerSecond: rate))
    }

    func finish(bytes: Int64) {
        report(TransferProgress(id: id, bytesReceived: bytes, totalBytes: bytes, bytesPerSecond: rate))
    }

    private func report(_ progress: TransferProgress) {
        var progress = progress
        progress.source = source
        handler(progress)
    }
}
