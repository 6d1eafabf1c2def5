import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// One resumable download: where from, where to, and what the result must be.
public struct DownloadRequest: Sendable {
    /// The download id: the journal's key and the `download-id` of log messages.
    public var id: String
    public var url: URL
    /// The verified file is renamed here when complete.
    public var destination: URL
    /// Bytes land here while downloading; must be on the destination's filesystem.
    public var partialFile: URL
    public var expectedLength: Int64?
    /// Lowercase hex SHA-256 of the whole file.
    public var expectedSHA256: String?
    /// Extra request headers, e.g. `("Authorization", "Bearer …")`. Values are never logged.
    public var headers: [(String, String)]
    /// Bytes needed beyond the file itself (the unpacked size, say), added to the space check.
    public var additionalSpaceNeeded: Int64
    /// More URLs serving the same bytes (a catalog's mirrors), tried in order after `url`: a
    /// failing origin hands over to the next one, which resumes where the previous stopped.
    public var mirrors: [URL] = []
    /// When the finished file is made durable. Default `onCompletion`.
    public var durability: DownloadDurability = .onCompletion
    /// Whether `download` resets the journal once the file is at `destination` (default). The
    /// queue resets a download's journal itself, in the commit that records it installed, and
    /// turns this off to spare a write per download: a journal left in the meantime names a
    /// partial file that is gone (renamed to `destination`), which the next open discards.
    public var resetsJournalWhenPlaced = true
    /// Whether the journal of a response that starts the file at byte 0 is saved before its
    /// first body byte even when the store holds no journal yet (default). With both
    /// `expectedSHA256` and `expectedLength` the queue turns it off, sparing a write per
    /// download: a process killed before the first checkpoint leaves a file without a journal,
    /// which the next run still resumes from its length (the content is named by its digest),
    /// without `If-Range`, the SHA-256 deciding (and falling back to byte 0 once). A response
    /// that replaces a saved journal is always saved first.
    public var savesFirstJournalEagerly = true
    /// Up to how many bytes the finished file's bytes are also returned in memory
    /// (`DownloadResult.body`), when this call wrote all of them (it did not resume). Default 0:
    /// never. A caller that reads the file back at once (a prestage's check) reads them instead;
    /// memory holds at most this many bytes per download until the result is dropped.
    public var retainsBodyUpTo = 0
    /// Its share of the rate limits against the engine's other transfers and its place in the
    /// queue for a slot (`DownloadPriority`); nil: the engine's `defaultPriority`.
    public var priority: DownloadPriority?

    public init(
        id: String,
        url: URL,
        destination: URL,
        partialFile: URL? = nil,
        expectedLength: Int64? = nil,
        expectedSHA256: String? = nil,
        headers: [(String, String)] = [],
        additionalSpaceNeeded: Int64 = 0
    ) {
        self.id = id
        self.url = url
        self.destination = destination
        self.partialFile = partialFile ?? destination.deletingLastPathComponent()
            .appendingPathComponent(destination.lastPathComponent + ".courier-part")
        self.expectedLength = expectedLength
        self.expectedSHA256 = expectedSHA256?.lowercased()
        self.headers = headers
        self.additionalSpaceNeeded = additionalSpaceNeeded
    }
}

/// When a finished download's bytes and its rename are made durable.
public enum DownloadDurability: Sendable, Equatable {
    /// Before `download` returns: the file is fsynced, then renamed, then its folder fsynced
    /// (`courier get`: the caller reports the file as soon as it returns).
    case onCompletion
    /// Later, by the caller, together with other files (`courier prestage` syncs its staging
    /// tree's filesystem once, before it publishes the catalog that names them, and checks again
    /// what a crashed run left unpublished; the queue's packages, which the install's `syncfs`
    /// flushes and a later run hashes again before using). Checkpoints of a long download still
    /// fsync the data before the journal says it is durable, so a resume never trusts unsynced
    /// bytes.
    case deferredToCaller
}

/// Where a download stands: delivered to the progress closure without blocking the transfer.
public struct TransferProgress: Sendable, Equatable {
    public var id: String
    /// Bytes of the whole file on disk so far (including what earlier runs fetched).
    public var bytesReceived: Int64
    /// The file's length, once known.
    public var totalBytes: Int64?
    /// Recent receive rate.
    public var bytesPerSecond: Double
    /// The URL (the request's or one of its mirrors) the bytes are coming from, once known.
    public var source: URL?

    public init(id: String, bytesReceived: Int64, totalBytes: Int64?, bytesPerSecond: Double) {
        self.id = id
        self.bytesReceived = bytesReceived
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
    }

    /// 0...1, when the total is known.
    public var progress: Double? {
        guard let totalBytes, totalBytes > 0 else { return totalBytes == 0 ? 1 : nil }
        return min(1, Double(bytesReceived) / Double(totalBytes))
    }

    /// Seconds left at the current rate, when the total and a rate are known.
    public var timeRemaining: Double? {
        guard let totalBytes, bytesPerSecond > 0 else { return nil }
        return Double(max(0, totalBytes - bytesReceived)) / bytesPerSecond
    }
}

/// A finished, verified download.
public struct DownloadResult: Sendable, Equatable {
    public var id: String
    /// The verified file (the request's destination).
    public var file: URL
    public var length: Int64
    /// Lowercase hex SHA-256 of the whole file.
    public var sha256: String
    /// Bytes fetched over the network by this call (not counting earlier runs).
    public var bytesFetched: Int64
    /// Where this call resumed (0: from the start).
    public var resumedFrom: Int64
    /// The URL (the request's or one of its mirrors) that served the last bytes.
    public var source: URL?
    /// The file's bytes, when the request asked for them (`retainsBodyUpTo`), they fit, and this
    /// call wrote every one of them: the same bytes the file holds and `sha256` hashed.
    public var body: [UInt8]?

    public init(id: String, file: URL, length: Int64, sha256: String, bytesFetched: Int64, resumedFrom: Int64) {
        self.id = id
        self.file = file
        self.length = length
        self.sha256 = sha256
        self.bytesFetched = bytesFetched
        self.resumedFrom = resumedFrom
    }
}

/// Courier's transfer engine: resumable, pausable, verified downloads over libcurl, and every
/// other exchange of a process with the network.
///
/// It owns the only curl multi loop of Courier: one network thread drives every transfer on one
/// multi handle (connection reuse, no signals): whole-file downloads (`download`), range fetches
/// of delta updates (`rangeFetcher`) and one-shot requests (`httpTransport`: catalog, metadata,
/// manifest, verifyReceipt, webhook), all through the same `TransferSlots`. Writing, hashing
/// and fsync run on a bounded Dispatch worker pool. Any number of calls may run at once: the
/// engine runs at most `maxConcurrentTransfers` (and `maxTransfersPerHost` per host) content
/// transfers and queues the rest, so open files and memory stay bounded.
public final class TransferEngine: Sendable {
    public let configuration: TransferConfiguration
    private let logger: Logger
    /// The network thread; only this engine starts one (`CurlMultiLoop`'s one owner).
    let loop: CurlMultiLoop
    let slots: TransferSlots
    private let workers: WorkerPool
    /// Who this engine's downloads are for: `.background` ones (the agent's) also meet
    /// `transfer.backgroundMaxRate`.
    public let trafficClass: TrafficClass
    /// The process's shared rate limits (`transfer.maxRate`, `backgroundMaxRate`, `rateSchedule`).
    package let rateLimiter: RateLimiter

    /// Hears every retry of every download of this engine as it is scheduled (before its
    /// delay), besides the `retrying` closure of each call: the deliver view and the agent's
    /// log say them.
    private let onRetry: (@Sendable (TransferRetry) -> Void)?

    public init(
        configuration: TransferConfiguration, logger: Logger, trafficClass: TrafficClass = .foreground,
        onRetry: (@Sendable (TransferRetry) -> Void)? = nil
    ) throws {
        self.configuration = configuration
        self.logger = logger
        self.onRetry = onRetry
        self.trafficClass = trafficClass
        self.rateLimiter = RateLimiter(limits: RateLimits(configuration))
        self.loop = try CurlMultiLoop(
            name: "courier.transfer",
            maxConnections: configuration.maxConcurrentTransfers * 2
        )
        self.slots = TransferSlots(total: configuration.maxConcurrentTransfers, perHost: configuration.maxTransfersPerHost)
        // Disk-bound work (fsync) dominates small files, hashing large ones: a few more queues than
        // cores lets fsyncs overlap, and the count stays bounded whatever the number of downloads.
        self.workers = WorkerPool(
            count: min(16, max(ProcessInfo.processInfo.activeProcessorCount, configuration.maxConcurrentTransfers / 2, 2))
        )
    }

    /// An `HTTPTransport` sharing this engine's network thread, slots and connection cache.
    public var httpTransport: any HTTPTransport {
        CurlHTTPTransport(engine: self)
    }

    /// A `RangeFetcher` sharing this engine's network thread, slots and connection cache, for
    /// ranges that belong to no download: they wait for a slot and share the rate limits at
    /// `defaultPriority`.
    package var rangeFetcher: RangeFetcher {
        RangeFetcher(engine: self, downloadId: nil, priority: nil)
    }

    /// A `RangeFetcher` for the ranges of download `downloadId` (a delta update's entries): its
    /// requests wait for a slot and share the rate limits at `priority` (nil: `defaultPriority`),
    /// and `setPriority(_:downloadId:)` changes that while the fetcher lives, as it does for a
    /// whole-file download, from the running request's next chunk and the next request's slot on.
    package func rangeFetcher(for downloadId: String?, priority: DownloadPriority?) -> RangeFetcher {
        RangeFetcher(engine: self, downloadId: downloadId, priority: priority)
    }

    /// Content transfers holding a slot now, and callers waiting for one.
    package var slotUse: (active: Int, waiting: Int) {
        (slots.active, slots.waiting)
    }

    /// Runs `job` on the network thread once it holds a slot of `kind` for `host`; the slot is
    /// released when the job ends. Cancelling the caller while it waits throws `.paused`.
    ///
    /// Content (a range fetch) is metered like a download, by `throttle` (the download's it
    /// belongs to: its id and priority), and waits for its slot at the throttle's priority now;
    /// without one, at `defaultPriority` and for no download. Small requests are not metered.
    func run<Value>(
        _ job: AwaitedJob<Value>, host: String, kind: TransferSlots.Kind, throttle: TransferThrottle? = nil
    ) async throws -> Value {
        var priority = defaultPriority
        if kind == .content {
            let throttle = throttle ?? makeThrottle(priority: defaultPriority, downloadId: nil)
            priority = throttle.priority
            job.throttle = throttle
        }
        try await slots.acquire(host: host, kind: kind, priority: priority)
        defer { slots.release(host: host) }
        return try await loop.run(job)
    }

    /// Replaces the shared rate limits (a configuration reloaded): running transfers follow
    /// from their next chunk on, without a restart.
    public func updateRateLimits(_ limits: RateLimits) {
        rateLimiter.update(limits)
    }

    /// The metering of one transfer: its own `limitRate` and the engine's shared limits, shared
    /// by `priority`. Every content transfer is metered (a limit set later applies to it too).
    func makeThrottle(priority: DownloadPriority, downloadId: String?) -> TransferThrottle {
        TransferThrottle(
            limiter: rateLimiter, trafficClass: trafficClass, perTransfer: configuration.limitRate, priority: priority,
            downloadId: downloadId)
    }

    /// The priority of a transfer that names none: `high` for a foreground engine (the user is
    /// waiting at a terminal), `normal` for a background one (the agent).
    public var defaultPriority: DownloadPriority { trafficClass == .foreground ? .high : .normal }

    /// Changes the priority of download `downloadId` while it runs: its share of the rate
    /// limits follows from its next chunk on. False when it does not run in this engine.
    @discardableResult
    public func setPriority(_ priority: DownloadPriority, downloadId: String) -> Bool {
        rateLimiter.setPriority(priority, downloadId: downloadId)
    }

    /// Pauses every running download (they throw `.paused`) and ends the network thread.
    public func shutdown() {
        loop.shutdown()
    }

    /// Runs one download to completion. Cancelling the calling Task pauses it: the partial data
    /// is checkpointed, the journal kept, and it throws CourierError(.paused).
    ///
    /// Resumes from `journal` when it holds a checkpoint for `request.id` (and the partial file
    /// backs it). Fails with `.insufficientSpace` (partial data kept), `.integrity` (length or
    /// SHA-256 mismatch; the bad file is removed and the next call starts over), `.network`,
    /// `.serverRejected` (401) or `.notEntitled` (403). On success the journal is removed (unless
    /// the request leaves that to its caller: `resetsJournalWhenPlaced`).
    /// `retrying` hears each retry as it is scheduled (before the wait), so a front end can say it;
    /// `handingOver` hears each switch to another of the request's URLs (a mirror) before its
    /// first request, with the failure that caused it.
    public func download(
        _ request: DownloadRequest,
        journal store: any ResumeJournalStore,
        progress: @escaping @Sendable (TransferProgress) -> Void,
        retrying: (@Sendable (TransferRetry) -> Void)? = nil,
        handingOver: (@Sendable (TransferHandover) -> Void)? = nil
    ) async throws -> DownloadResult {
        var logger = self.logger
        logger[metadataKey: "download-id"] = "\(request.id)"
        if request.url.isFileURL {
            try Self.checkLocalFile(request.url)
        } else {
            try URLPolicy.check(request.url, allowInsecureHTTP: configuration.allowInsecureHTTP)
        }
        for mirror in request.mirrors {
            try URLPolicy.check(mirror, allowInsecureHTTP: configuration.allowInsecureHTTP)
        }
        let host = request.url.host ?? ""
        try await slots.acquire(host: host, priority: request.priority ?? defaultPriority)
        defer { slots.release(host: host) }

        let queue = workers.next()
        let openLogger = logger
        let configuration = self.configuration
        let reporter = ProgressReporter(id: request.id, handler: progress)
        // One hop to the writer's queue opens the partial file and its journal and prepares the writer.
        let (opened, writer, resumedFrom): (OpenedDownload, PartialFileWriter, Int64) = try await BlockingWorkerPool.detached(
            on: queue
        ) {
            let opened = try Self.open(request, store: store, logger: openLogger)
            let writer = PartialFileWriter(
                file: request.partialFile,
                fd: opened.fd,
                journal: opened.journal,
                store: store,
                queue: queue,
                configuration: configuration,
                progress: reporter,
                // With no expected length, the space check follows the body as it grows.
                growingSpaceCheck: request.expectedLength == nil
                    ? .init(reserve: configuration.diskReserve, additionalSpaceNeeded: request.additionalSpaceNeeded) : nil,
                defersFirstJournal: !request.savesFirstJournalEagerly && opened.storeIsEmpty && request.expectedSHA256 != nil
                    && request.expectedLength != nil,
                retainLimit: request.retainsBodyUpTo
            )
            do {
                return (opened, writer, try writer.prepare(resumingAt: opened.resumeAt, durable: opened.journal.durableOffset))
            } catch {
                close(opened.fd)
                throw error
            }
        }
        defer { close(opened.fd) }
        let knownTotal = request.expectedLength ?? opened.journal.totalLength
        try SpaceCheck.require(
            bytes: SpaceCheck.sum(knownTotal.map { max(0, $0) - resumedFrom } ?? 0, request.additionalSpaceNeeded),
            reserve: configuration.diskReserve,
            at: request.partialFile
        )
        logger.debug(
            "download starting",
            metadata: [
                "url": "\(request.url.absoluteString)", "resume-from": "\(resumedFrom)",
                "durable": "\(min(resumedFrom, opened.journal.durableOffset))",
            ])

        // Where to fetch again from if the whole file fails its SHA-256 after this resume: the
        // last durable checkpoint when the resume trusted the bytes past it (only a power cut can
        // have torn them), then 0 when the bytes came from another URL. Each is tried once.
        var fallbacks: [Int64] = []
        if resumedFrom > opened.journal.durableOffset { fallbacks.append(opened.journal.durableOffset) }
        if opened.fromAnotherURL && resumedFrom > 0 && fallbacks.last != 0 { fallbacks.append(0) }
        var attempts = TransferAttempts(
            policy: configuration.retryPolicy, sourceCount: 1 + request.mirrors.count, url: request.url,
            fallbacks: fallbacks, start: Self.now(), timeLimit: configuration.maxTime)

        var length: Int64
        var digest: String
        var fetched: Int64
        var finalJournal: ResumeJournal
        var placed: Bool
        var body: [UInt8]?
        while true {
            if request.url.isFileURL {
                try await copyLocalFile(request, writer: writer, logger: logger)
            } else {
                try await transfer(
                    request, attempts: &attempts, writer: writer, store: store, logger: logger, retrying: retrying,
                    handingOver: handingOver)
            }
            let syncs = request.durability == .onCompletion
            // One hop to the writer's queue for the end (each is a thread hand-off and back):
            // finish, verify and, when the file passes, place it.
            (length, digest, fetched, finalJournal, placed, body) = try await writer.perform {
                let (length, digest) = try writer.finish(sync: syncs)
                let journal = writer.journal
                guard Self.mismatch(request, length: length, digest: digest, journal: journal) == nil else {
                    return (length, digest, writer.bytesWrittenThisRun, journal, false, nil)
                }
                try Self.place(request)
                if request.resetsJournalWhenPlaced { try store.remove(downloadId: request.id) }
                return (length, digest, writer.bytesWrittenThisRun, journal, true, writer.retainedBody)
            }
            guard !placed, let expected = request.expectedSHA256, expected != digest, length == request.expectedLength ?? length
            else { break }
            let mismatch = CourierError(.integrity, "SHA-256 is \(digest), expected \(expected)")
            guard case .fallBack(let fallback) = attempts.next(after: .verificationFailed(mismatch), now: Self.now()) else { break }
            logger.debug(
                "SHA-256 mismatch after a resume: fetching again",
                metadata: ["from": "\(fallback)", "resumed-from": "\(resumedFrom)"])
            _ = try await writer.perform { () -> Int64 in
                let start = try writer.prepare(resumingAt: fallback)
                try writer.checkpoint()
                return start
            }
        }
        if !placed, let mismatch = Self.mismatch(request, length: length, digest: digest, journal: finalJournal) {
            try? FileManager.default.removeItem(at: request.partialFile)
            try? store.remove(downloadId: request.id)
            throw CourierError(
                .integrity,
                "\(request.url.absoluteString) failed verification: \(mismatch)",
                cause: mismatch.hasPrefix("SHA") ? "checksum mismatch" : "length mismatch",
                hint: "the download was discarded; running it again starts over"
            )
        }
        logger.debug("download finished", metadata: ["length": "\(length)", "fetched": "\(fetched)"])
        var result = DownloadResult(
            id: request.id,
            file: request.destination,
            length: length,
            sha256: digest,
            bytesFetched: fetched,
            resumedFrom: resumedFrom
        )
        result.source = finalJournal.url
        result.body = body
        return result
    }

    /// Runs attempts until the body is complete on disk from the writer's current offset: each
    /// attempt's outcome goes to `attempts`, whose action (retry, hand over, restart, pause,
    /// fail) is performed here.
    private func transfer(
        _ request: DownloadRequest,
        attempts: inout TransferAttempts,
        writer: PartialFileWriter,
        store: any ResumeJournalStore,
        logger: Logger,
        retrying: (@Sendable (TransferRetry) -> Void)?,
        handingOver: (@Sendable (TransferHandover) -> Void)?
    ) async throws {
        // The request's URL first, then its mirrors in order.
        let sources = [request.url] + request.mirrors
        // One throttle for all the attempts of the download: a retry does not get a new burst.
        let throttle = makeThrottle(priority: request.priority ?? defaultPriority, downloadId: request.id)
        var current = attempts.source
        // The failure of the last attempt: the cause a handover names.
        var lastFailure: CourierError?
        while true {
            if Task.isCancelled { try await pause(writer, logger: logger) }
            if current != attempts.source {
                // Hands the download over to another source, resuming where this one stopped.
                let previous = sources[current]
                current = attempts.source
                let url = sources[current]
                logger.debug("handing over to another URL", metadata: ["url": "\(url.absoluteString)"])
                if let lastFailure {
                    handingOver?(TransferHandover(id: request.id, from: previous, to: url, error: lastFailure))
                }
                try await writer.perform { try writer.switchSource(to: url) }
            }
            let (offset, journal) = try await writer.perform { (writer.writtenOffset, writer.journal) }
            var attemptRequest = request
            attemptRequest.url = sources[current]
            // The caller's headers (a Bearer token for its origin) never go to another origin.
            attemptRequest.headers = CredentialScope.headers(request.headers, for: request.url, sendingTo: sources[current])
            let job = DownloadAttemptJob(
                request: attemptRequest,
                journal: journal,
                requestedOffset: offset,
                writer: writer,
                configuration: configuration,
                timeLimit: attempts.remaining(at: Self.now())
            )
            job.throttle = throttle
            // An outcome, never an error. The download holds its slot from `download`.
            let outcome = try await loop.run(job)
            // Every accepted byte is on its way to the writer; wait until it is written.
            _ = try? await writer.perform {}
            if let error = writer.error {
                try? await writer.perform { try writer.checkpoint() }
                logger.debug("download stopped by the disk", metadata: ["error": "\(error)"])
                throw error
            }
            let event: TransferAttempts.Event
            switch outcome {
            case .completed, .alreadyComplete: event = .completed
            case .restartFromZero: event = .restartFromZero
            case .paused: event = .paused
            case .writerFailed: throw writer.error ?? CourierError(.io, "writing \(request.partialFile.path) failed")
            case .fail(let error): event = .failed(error)
            case .retry(let retryAfter, let error): event = .retryable(error, retryAfter: retryAfter, receivedBytes: job.receivedBytes)
            }
            switch attempts.next(after: event, now: Self.now()) {
            case .finish:
                return
            case .pause:
                try await pause(writer, logger: logger)
            case .restartFromZero:
                logger.debug("resource changed: starting over")
                var fresh = journal
                fresh.etag = nil
                fresh.lastModified = nil
                fresh.totalLength = nil
                fresh.durableOffset = 0
                let restarted = fresh
                try await writer.perform { try writer.restart(with: restarted) }
            case .handOver(_, let error):
                lastFailure = error
                logger.debug("source failed: handing over", metadata: ["error": "\(error)"])
                try? await writer.perform { try writer.checkpoint() }
            case .fallBack:
                // Only after a verification, which `download` handles.
                return
            case .fail(let error):
                if error.code == .integrity {
                    // The server announced the wrong file: keep nothing of it.
                    try? FileManager.default.removeItem(at: request.partialFile)
                    try? store.remove(downloadId: request.id)
                } else {
                    try? await writer.perform { try writer.checkpoint() }
                }
                logger.debug("download failed", metadata: ["error": "\(error)"])
                throw error
            case .retry(let retry, let maxRetries, _, let delay, let error):
                lastFailure = error
                try? await writer.perform { try writer.checkpoint() }
                logger.debug("retrying", metadata: ["error": "\(error)", "delay": "\(delay)", "retry": "\(retry)"])
                let scheduled = TransferRetry(id: request.id, retry: retry, maxRetries: maxRetries ?? 0, delay: delay, error: error)
                retrying?(scheduled)
                onRetry?(scheduled)
                do {
                    try await Task.sleep(nanoseconds: UInt64(delay * 1e9))
                } catch {
                    try await pause(writer, logger: logger)
                }
            }
        }
    }

    /// Seconds on the monotonic clock (the attempts' deadline).
    static func now() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1e9
    }

    /// Checkpoints and throws `.paused`, saying where the download stopped.
    private func pause(_ writer: PartialFileWriter, logger: Logger) async throws -> Never {
        let (offset, total) = (try? await writer.perform { () -> (Int64, Int64?) in
            try writer.checkpoint()
            return (writer.durableOffset, writer.journal.totalLength)
        }) ?? (0, nil)
        logger.debug("download paused", metadata: ["offset": "\(offset)"])
        var place = "paused at byte \(offset)"
        if let total, total > 0 {
            place += " of \(total) (\(offset * 100 / total)%)"
        }
        throw CourierError(.paused, place, hint: "run the same command again to resume")
    }

    /// A partial file opened for a download, its journal and where to resume.
    struct OpenedDownload: Sendable {
        var fd: Int32
        /// The journal to continue, its `durableOffset` the last durable checkpoint.
        var journal: ResumeJournal
        /// Where to resume: the partial file's length when a journal backs it (a crashed
        /// process's bytes are good while the OS lived), capped at the known length; else 0.
        var resumeAt: Int64
        /// The journal was written while fetching from another URL serving the same content.
        var fromAnotherURL: Bool
        /// The store held no journal for the download, or one with nothing in it (no
        /// validator, no length, nothing durable): what the store holds once reset.
        var storeIsEmpty: Bool
    }

    /// Opens (creating) the partial file and loads the journal; a journal for other content
    /// (another URL, unless the expected SHA-256 and length say the content is the same), or one
    /// that breaks an invariant of `ResumeJournal.validationProblem`, is discarded and the
    /// download starts over.
    ///
    /// A journal of another URL is resumed when the request names the content (expected SHA-256
    /// and length) and the journal was for the same content (its length, and its SHA-256 when it
    /// recorded one). Its validator is kept for `If-Range` only when the new URL differs from
    /// the old one by its query alone (a signed URL with a new token); otherwise the range is
    /// asked for without one and the final SHA-256 decides (falling back to byte 0 once).
    ///
    /// The partial file is never reached through a symlink: one planted at its path is removed
    /// (the link, not its target) and the file created afresh with `O_EXCL | O_NOFOLLOW`;
    /// anything else that is not a regular file is refused.
    private static func open(
        _ request: DownloadRequest,
        store: any ResumeJournalStore,
        logger: Logger
    ) throws -> OpenedDownload {
        let path = request.partialFile.path
        let folder = request.partialFile.deletingLastPathComponent()
        try CourierError.wrapping(.io, "cannot create \(folder.path)") {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        var status = stat()
        var exists = lstat(path, &status) == 0
        if exists && status.st_mode & S_IFMT == S_IFLNK {
            logger.debug("a symlink stood at the partial file: replaced, not followed", metadata: ["file": "\(path)"])
            guard unlink(path) == 0 || errno == ENOENT else { throw CourierError.posix("remove", path: path) }
            exists = false
        }
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (exists ? 0 : O_EXCL), 0o644)
        guard fd >= 0 else {
            if errno == ELOOP || errno == EEXIST {
                throw CourierError(
                    .io, "\(path) changed while it was opened (a symlink or another file appeared there)",
                    hint: "remove it, then run again")
            }
            throw CourierError.posix("open", path: path)
        }
        guard fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw CourierError(.io, "\(path) is not a regular file", hint: "remove it, then run again")
        }
        // One writer per partial file across processes: a process frozen past its lease still
        // holds this lock, so whoever took the download over cannot write the file until that
        // process is gone (the kernel drops the lock when it exits or closes the file).
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            close(fd)
            if code == EWOULDBLOCK {
                throw CourierError(
                    .leased, "another process is writing \(path)",
                    hint: "it may be stopped or frozen; run again once it has exited")
            }
            throw CourierError.posix("flock", path: path, errno: code)
        }
        // The journal is read under the lock, so it is the last one its previous writer saved.
        let fresh = ResumeJournal(downloadId: request.id, url: request.url)
        var journal: ResumeJournal
        let storeIsEmpty: Bool
        do {
            let loaded = try store.load(downloadId: request.id)
            storeIsEmpty = loaded.map { $0.etag == nil && $0.lastModified == nil && $0.totalLength == nil && $0.durableOffset == 0 } ?? true
            journal = loaded ?? fresh
        } catch {
            close(fd)
            throw error
        }
        // The stores validate what they load; a store of the caller's own may not.
        if let problem = journal.validationProblem {
            logger.debug("resume journal discarded: the download starts over", metadata: ["reason": "\(problem)"])
            journal = fresh
        }
        let expectedSHA256 = request.expectedSHA256.flatMap { ResumeJournal.isSHA256Hex($0) ? $0 : nil }
        var fromAnotherURL = false
        if journal.url != request.url, let expectedSHA256, let expectedLength = request.expectedLength,
            journal.totalLength == expectedLength, journal.contentSHA256 == nil || journal.contentSHA256 == expectedSHA256
        {
            // The same content from another URL (another port, a CDN host, a new token).
            fromAnotherURL = true
            if !Self.validatorApplies(from: journal.url, to: request.url) {
                journal.etag = nil
                journal.lastModified = nil
            }
            logger.debug(
                "resuming from another URL serving the same content",
                metadata: ["previous-url": "\(journal.url.absoluteString)", "durable": "\(journal.durableOffset)"])
            journal.url = request.url
        }
        if journal.url != request.url || !exists
            || (request.expectedLength != nil && journal.totalLength != nil && journal.totalLength != request.expectedLength)
            || (expectedSHA256 != nil && journal.contentSHA256 != nil && journal.contentSHA256 != expectedSHA256)
        {
            journal = fresh
            fromAnotherURL = false
        }
        if let expectedSHA256 { journal.contentSHA256 = expectedSHA256 }
        // The journal is saved before a response's first body byte is written, so whatever the
        // file holds past its durable offset came from the response it names.
        let fileLength = Int64(status.st_size)
        var resumeAt = journal.durableOffset
        if journal != fresh && fileLength > resumeAt {
            resumeAt = min(fileLength, request.expectedLength ?? journal.totalLength ?? fileLength)
        }
        return OpenedDownload(fd: fd, journal: journal, resumeAt: resumeAt, fromAnotherURL: fromAnotherURL, storeIsEmpty: storeIsEmpty)
    }

    /// Whether `a` and `b` have the same scheme, host and port.
    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        CredentialScope.sameOrigin(a, b)
    }

    /// Whether a validator (ETag, Last-Modified) the server at `old` gave still applies at `new`:
    /// the same scheme, host, port and path (a signed URL with a new token differs by its query).
    static func validatorApplies(from old: URL, to new: URL) -> Bool {
        sameOrigin(old, new) && old.path == new.path
    }

    /// Why a finished file fails verification (its length against the request's and the
    /// server's, its SHA-256 against the request's), or nil when it passes.
    private static func mismatch(_ request: DownloadRequest, length: Int64, digest: String, journal: ResumeJournal) -> String? {
        if let expected = request.expectedLength, expected != length {
            return "received \(length) bytes, expected \(expected)"
        } else if let total = journal.totalLength, total != length {
            return "received \(length) bytes, the server announced \(total)"
        } else if let expected = request.expectedSHA256, expected != digest {
            return "SHA-256 is \(digest), expected \(expected)"
        }
        return nil
    }

    /// Renames the verified partial file to its destination and makes the rename durable
    /// (unless the request defers that to its caller).
    private static func place(_ request: DownloadRequest) throws {
        guard rename(request.partialFile.path, request.destination.path) == 0 else {
            throw CourierError.posix("rename to", path: request.destination.path)
        }
        guard request.durability == .onCompletion else { return }
        let folder = Glibc.open(request.destination.deletingLastPathComponent().path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if folder >= 0 {
            fsync(folder)
            close(folder)
        }
    }
}

/// A switch of `TransferEngine.download` to another URL of the request (its URL or a mirror):
/// `from` failed with `error`, and the download continues from `to`, resuming where it stopped.
public struct TransferHandover: Sendable {
    public var id: String
    public var from: URL
    public var to: URL
    public var error: CourierError

    public init(id: String, from: URL, to: URL, error: CourierError) {
        self.id = id
        self.from = from
        self.to = to
        self.error = error
    }
}

/// A retry `TransferEngine.download` has scheduled: retry `retry` of `maxRetries`, starting in
/// `delay` seconds, after `error` (a refused connection, a timeout, an HTTP 503...).
public struct TransferRetry: Sendable {
    public var id: String
    /// 1 for the first retry (the second attempt). Reset to 0 once bytes arrive again.
    public var retry: Int
    public var maxRetries: Int
    public var delay: Double
    public var error: CourierError

    public init(id: String, retry: Int, maxRetries: Int, delay: Double, error: CourierError) {
        self.id = id
        self.retry = retry
        self.maxRetries = maxRetries
        self.delay = delay
        self.error = error
    }
}
