import Crypto
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Updates installed content by the entries that changed (docs/packages.md, "Delta updates").
///
/// `update(_:)` fetches the package's manifest (its SHA-256 and length checked against the
/// catalog's), compares it with the per-file records of the installed version (`content_file`),
/// fetches only the byte ranges of new or changed entries from the package's URL (neighbouring
/// ranges coalesced, several ranges per request where the origin allows, one per request where
/// it answers 200 or a single part), unpacks and verifies each (name, SHA-256, size; libarchive checks the CRC-32),
/// then builds the new version in staging from unchanged installed files (a hard link to the
/// installed inode where staging shares its filesystem, else a `FICLONE` reflink where the
/// filesystem supports it, else a copy) plus the fetched entries (hard-linked the same way, so
/// their bytes are written once, when unpacked), and places it with the placer's atomic swap:
/// the old version stays until the new one is in place, and is discarded then (so the new
/// version may share its inodes).
///
/// Fetched entries are kept, unpacked and verified, in `Target.workDirectory` under their
/// SHA-256, so a run killed or paused part way fetches none of them again; the folder is removed
/// once the new version is placed (by the placer, before it records the files' ctimes). An installed file whose size, mtime, ctime or inode differ
/// from its record is not trusted as a source (its entry is fetched).
///
/// Whenever the delta cannot be trusted or used it throws `DeltaUpdater.Fallback` with a
/// one-line reason for the log, having changed nothing installed: no manifest (or a manifest of
/// another package, or a damaged one), nothing installed with per-file records, an origin
/// without Range support, an entry that fails verification, an error of the range requests.
/// The caller then fetches the whole package. Cancelling the calling task throws
/// `CourierError(.paused)`, keeping verified entries; a downgrade or a full disk throw their own
/// `CourierError`s.
public struct DeltaUpdater: Sendable {
    /// Tuning, with documented defaults.
    public struct Configuration: Sendable {
        /// Ranges less than this many bytes apart are fetched as one (the bytes between are
        /// discarded): fewer parts for a few more bytes. Default 64 KiB.
        public var gapThreshold: Int64 = 64 << 10
        /// The most ranges asked for in one request. Default 32.
        public var maxRangesPerRequest: Int = 32
        /// Tries per range request on a network error before falling back. Default 3. The
        /// retries (`attempts` − 1) wait by the transfers' `RetryPolicy` schedule
        /// (`transfer.initialBackoff`, `maxBackoff`, `jitter`).
        public var attempts: Int = 3
        /// Try a reflink clone of unchanged files before copying (turned off to test the copy).
        public var allowReflink: Bool = true
        /// Try a hard link to unchanged installed files before a reflink or a copy (turned off
        /// to test those). Safe because the old version is discarded once the new one is placed.
        public var allowLink: Bool = true
        /// The `linkat(2)` behind `allowLink` (tests inject `EXDEV` or `EPERM` through it).
        package var linker: FileClone.Linker = FileClone.systemLinker

        public init() {}
    }

    /// What the update needs to know: the installed content to update and the new package.
    public struct Target: Sendable {
        public var contentIdentifier: String
        public var productId: String
        /// The new `ContentVersion`.
        public var version: String
        public var placement: Catalog.Placement
        /// The package's absolute URL (ranges are fetched from it).
        public var packageURL: URL
        public var packageSHA256: String
        public var packageLength: Int64
        /// The manifest's absolute URL, SHA-256 and (when the catalog says) length.
        public var manifestURL: URL
        public var manifestSHA256: String
        public var manifestLength: Int64?
        /// Header fields for the package's origin (its `Authorization`); never logged. They are
        /// sent only to that origin (`CredentialScope`): a manifest on another host or port is
        /// fetched without them.
        public var headers: [(String, String)]

        /// The headers a request to `url` carries: `headers` when `url` is of the package's
        /// origin, none otherwise.
        func credentials(for url: URL) -> [(String, String)] {
            CredentialScope.headers(headers, for: packageURL, sendingTo: url)
        }
        /// Where fetched entries are kept between runs; see `workDirectory(in:…)`.
        public var workDirectory: URL
        /// Installed files (paths below the content folder) never used as a source, however
        /// unchanged their records say they are: those `content verify` found damaged (bytes can
        /// rot with no trace in `stat`), which a repair fetches. Default none.
        public var untrustedPaths: Set<String> = []
        /// The download the update belongs to (the queue's id), and the priority it transfers
        /// at: its range requests wait for a slot and share the rate limits as that download, so
        /// `TransferEngine.setPriority` (`courier priority`) changes them while they run, as it
        /// does a whole-file download. nil: ranges of no download, at the engine's
        /// `defaultPriority` (a `content repair`).
        public var downloadId: String? = nil
        public var priority: DownloadPriority? = nil

        public init(
            contentIdentifier: String, productId: String, version: String, placement: Catalog.Placement, packageURL: URL,
            packageSHA256: String, packageLength: Int64, manifestURL: URL, manifestSHA256: String, manifestLength: Int64?,
            headers: [(String, String)] = [], workDirectory: URL
        ) {
            self.contentIdentifier = contentIdentifier
            self.productId = productId
            self.version = version
            self.placement = placement
            self.packageURL = packageURL
            self.packageSHA256 = packageSHA256.lowercased()
            self.packageLength = packageLength
            self.manifestURL = manifestURL
            self.manifestSHA256 = manifestSHA256.lowercased()
            self.manifestLength = manifestLength
            self.headers = headers
            self.workDirectory = workDirectory
        }
    }

    /// The work folder of an update of `contentIdentifier` to the package `packageSHA256`:
    /// `Downloads/.delta/<contentIdentifier>-<first 16 digits>` of the storage root.
    public static func workDirectory(in layout: StorageLayout, contentIdentifier: String, packageSHA256: String) -> URL {
        layout.downloads.appendingPathComponent(".delta", isDirectory: true)
            .appendingPathComponent("\(contentIdentifier)-\(packageSHA256.lowercased().prefix(16))", isDirectory: true)
    }

    /// Why the update must fetch the whole package instead; `reason` is one line for the log.
    public struct Fallback: Error, Sendable, CustomStringConvertible {
        public var reason: String
        /// The error behind it, when there was one.
        public var cause: CourierError?

        public init(_ reason: String, cause: CourierError? = nil) {
            self.reason = reason
            self.cause = cause
        }

        public var description: String {
            cause.map { "\(reason): \($0)" } ?? reason
        }
    }

    /// What an update did.
    public struct Outcome: Sendable {
        /// The placed new version.
        public var content: DeliveredContent
        /// Body bytes received from the origin for entries (the manifest not counted).
        public var bytesFetched: Int64
        /// The manifest's bytes.
        public var manifestBytes: Int64
        /// Range requests sent.
        public var requests: Int
        /// Entries fetched now, entries found fetched by an earlier run, entries taken from the
        /// installed version (and how many of those were hard links, or reflinks, rather than copies).
        public var entriesFetched: Int
        public var entriesResumed: Int
        public var entriesReused: Int
        public var entriesLinked: Int
        public var entriesReflinked: Int
        /// Files of the new version that are the fetched entries themselves (hard links into
        /// the work folder, not copies): the files of the fetched and resumed entries, less any
        /// second file of one digest and any link the filesystem refused.
        public var fetchedLinked: Int
    }

    public let placer: ContentPlacer
    /// The process's transfer engine: the manifest and the range requests go through its
    /// network thread, slots and connections, like every other transfer.
    public let engine: TransferEngine
    public let http: any HTTPTransport
    public let configuration: Configuration
    let logger: Logger

    public var transfer: TransferConfiguration { engine.configuration }

    public init(placer: ContentPlacer, engine: TransferEngine, configuration: Configuration = .init(), logger: Logger) {
        self.placer = placer
        self.engine = engine
        self.http = engine.httpTransport
        self.configuration = configuration
        self.logger = logger
    }

    /// Updates `target.contentIdentifier` to the new package by its changed entries; see the type.
    /// `progress` receives the entry bytes fetched so far.
    public func update(_ target: Target, progress: (@Sendable (Int64) -> Void)? = nil) async throws -> Outcome {
        do {
            return try await attempt(target, progress: progress)
        } catch let fallback as Fallback {
            // The whole package replaces this update: what it fetched is of no further use.
            try? FileManager.default.removeItem(at: target.workDirectory)
            throw fallback
        }
    }

    private func attempt(_ target: Target, progress: (@Sendable (Int64) -> Void)?) async throws -> Outcome {
        var logger = self.logger
        logger[metadataKey: "content-id"] = "\(target.contentIdentifier)"
        let installed = try placer.content(target.contentIdentifier)
        guard let installed else { throw Fallback("\(target.contentIdentifier) is not installed") }
        guard installed.productId.isIdentical(to: target.productId) else {
            throw Fallback("the installed content is of product \(installed.productId), not \(target.productId)")
        }
        let (manifest, manifestBytes) = try await fetchManifest(target)
        let records = try placer.installedFiles(target.contentIdentifier).filter { !target.untrustedPaths.contains($0.path) }
        guard !records.isEmpty || !target.untrustedPaths.isEmpty else { throw Fallback("the installed version has no per-file record (installed before them)") }
        let folder = placer.contentURL(target.contentIdentifier, placement: installed.placement)
        let plan = try DeltaPlan(manifest: manifest, installed: records, folder: folder, limits: placer.packages)
        let store = try DeltaEntryStore(folder: target.workDirectory)
        let blockSize = placer.packages.blockSize
        var missing = try await BlockingWorkerPool.detached {
            var held: [String: Bool] = [:]
            return plan.fetch.filter { entry in
                if let known = held[entry.sha256] { return !known }
                let verified = store.holds(entry, blockSize: blockSize)
                held[entry.sha256] = verified
                return !verified
            }
        }
        let resumed = Set(plan.fetch.map(\.sha256)).count - Set(missing.map(\.sha256)).count
        // Entries with the same digest need fetching once.
        var seen = Set<String>()
        missing = missing.filter { seen.insert($0.sha256).inserted }
        logger.debug(
            "delta plan",
            metadata: [
                "entries": "\(manifest.files.count)", "reused": "\(plan.reuse.count)", "fetch": "\(missing.count)",
                "resumed": "\(resumed)",
            ])

        let clock = ContinuousClock()
        let fetchStarted = clock.now
        let fetch = try await fetchEntries(missing, target: target, store: store, progress: progress, logger: logger)
        let buildStarted = clock.now

        let allowReflink = configuration.allowReflink
        let allowLink = configuration.allowLink
        let linker = configuration.linker
        let limits = placer.packages
        let placer = self.placer
        let build = try await BlockingWorkerPool.detached { () -> (DeliveredContent, linked: Int, reflinked: Int, fetchedLinked: Int) in
            var counts = (linked: 0, reflinked: 0, fetchedLinked: 0)
            // The work folder goes once the new version is placed: its entries may be linked into it.
            let content = try placer.installBuilt(
                contentIdentifier: target.contentIdentifier, productId: target.productId, version: target.version,
                placement: target.placement, unpackedSize: manifest.unpackedSize, fingerprint: "delta:\(target.packageSHA256)",
                discarding: target.workDirectory
            ) { staging in
                let built = try DeltaBuild(
                    staging: staging, manifest: manifest, plan: plan, store: store, limits: limits, allowReflink: allowReflink,
                    allowLink: allowLink, linker: linker
                ).run(packageSHA256: target.packageSHA256)
                counts = (built.linked, built.reflinked, built.fetchedLinked)
                return (built.info, built.files)
            }
            return (content, counts.linked, counts.reflinked, counts.fetchedLinked)
        }
        logger.debug(
            "delta update placed",
            metadata: [
                "version": "\(target.version)", "bytes": "\(fetch.bytes)", "requests": "\(fetch.requests)",
                "fetch-seconds": "\(Self.seconds(buildStarted - fetchStarted))",
                "build-seconds": "\(Self.seconds(clock.now - buildStarted))",
                "linked": "\(build.linked)", "reflinked": "\(build.reflinked)", "fetched-linked": "\(build.fetchedLinked)",
            ])
        return Outcome(
            content: build.0, bytesFetched: fetch.bytes, manifestBytes: manifestBytes, requests: fetch.requests,
            entriesFetched: missing.count, entriesResumed: resumed, entriesReused: plan.reuse.count, entriesLinked: build.linked,
            entriesReflinked: build.reflinked, fetchedLinked: build.fetchedLinked
        )
    }

    // MARK: Manifest

    private func fetchManifest(_ target: Target) async throws -> (PackageManifest, Int64) {
        let cap = min(target.manifestLength ?? Int64(PackageManifest.maxDocumentSize), Int64(PackageManifest.maxDocumentSize))
        let response: HTTPResponse
        do {
            response = try await http.send(
                HTTPRequest(
                    url: target.manifestURL, headers: target.credentials(for: target.manifestURL), timeout: 60,
                    maxResponseBytes: Int(max(cap, 0))))
        } catch let error as CourierError {
            if Task.isCancelled || error.code == .cancelled { throw CourierError(.paused, "the update was paused") }
            throw Fallback("the manifest could not be fetched", cause: error)
        }
        guard response.status == 200 else {
            throw Fallback("the manifest could not be fetched (HTTP \(response.status))")
        }
        if let length = target.manifestLength, Int64(response.body.count) != length {
            throw Fallback("the manifest is \(response.body.count) bytes, not the catalog's \(length)")
        }
        guard SHA256.hash(data: response.body).hex == target.manifestSHA256 else {
            throw Fallback("the manifest's SHA-256 is not the catalog's")
        }
        let manifest: PackageManifest
        do {
            manifest = try PackageManifest.decode(response.body, limits: placer.packages)
        } catch let error as CourierError {
            throw Fallback("the manifest is unusable", cause: error)
        }
        guard manifest.package.sha256 == target.packageSHA256, manifest.package.length == target.packageLength else {
            throw Fallback("the manifest describes another package than the catalog's")
        }
        guard manifest.productId.isIdentical(to: target.productId), manifest.version.isIdentical(to: target.version) else {
            throw Fallback("the manifest is of \(manifest.productId) \(manifest.version), not \(target.productId) \(target.version)")
        }
        return (manifest, Int64(response.body.count))
    }

    // MARK: Fetching

    private struct FetchResult {
        var bytes: Int64 = 0
        var requests = 0
    }

    /// Whether the package's origin answers a request for several ranges with a multipart 206,
    /// asked with a HEAD carrying two of them: only a head crosses the network. An origin that
    /// answers one range per request (`courier serve`; nginx with `max_ranges 1`, as
    /// `courier origin nginx-config` prints it) answers a GET for several with 200 and the whole
    /// package, and on a fast link megabytes of it are sent before the client can close the
    /// connection. No answer, or any other, says one range per request: the safe way.
    private func answersSeveralRanges(_ target: Target, ranges: [Range<Int64>]) async -> Bool {
        let request = HTTPRequest(
            method: "HEAD", url: target.packageURL,
            headers: target.credentials(for: target.packageURL) + [("Range", RangeFetcher.rangeHeaderValue(ranges))], timeout: 60)
        guard let response = try? await http.send(request), response.status == 206 else { return false }
        return response.headers["content-type"]?.lowercased().hasPrefix("multipart/byteranges") == true
    }

    /// Fetches and verifies `entries` into `store`.
    private func fetchEntries(
        _ entries: [DeltaPlan.Entry], target: Target, store: DeltaEntryStore, progress: (@Sendable (Int64) -> Void)?,
        logger: Logger
    ) async throws -> FetchResult {
        var result = FetchResult()
        guard !entries.isEmpty else { return result }
        // One fetcher for all the update's requests: they are metered as its download.
        let fetcher = engine.rangeFetcher(for: target.downloadId, priority: target.priority)
        var pending = entries
        var multipleRanges = true
        let firstGroup = DeltaPlan.coalesce(
            pending.map(\.range), gap: configuration.gapThreshold, maxRangesPerRequest: configuration.maxRangesPerRequest
        ).first ?? []
        if firstGroup.count > 1 {
            multipleRanges = await answersSeveralRanges(target, ranges: Array(firstGroup.prefix(2)))
            if !multipleRanges { logger.debug("the origin answers one range per request (HEAD probe)") }
        }
        var failures = 0
        // The one retry policy: the transfers' schedule, this updater's count of tries.
        var retryPolicy = transfer.retryPolicy
        retryPolicy.maxRetries = max(0, configuration.attempts - 1)
        while !pending.isEmpty {
            if Task.isCancelled { throw CourierError(.paused, "the update was paused") }
            let groups = DeltaPlan.coalesce(
                pending.map(\.range), gap: configuration.gapThreshold,
                maxRangesPerRequest: multipleRanges ? configuration.maxRangesPerRequest : 1)
            let ranges = groups[0]
            let covered = pending.filter { entry in ranges.contains { $0.lowerBound <= entry.range.lowerBound && entry.range.upperBound <= $0.upperBound } }
            let assembler = try EntryAssembler(entries: covered, store: store)
            let answer: RangeAnswer
            result.requests += 1
            do {
                let before = result.bytes
                answer = try await fetcher.fetch(
                    target.packageURL, ranges: ranges, representationLength: target.packageLength,
                    headers: target.credentials(for: target.packageURL)
                ) { offset, bytes in
                    try assembler.write(offset: offset, bytes: bytes)
                    progress?(before + assembler.received)
                }
            } catch let error as CourierError {
                assembler.close()
                result.bytes += assembler.received
                if Task.isCancelled || error.code == .cancelled { throw CourierError(.paused, "the update was paused") }
                failures += 1
                logger.debug("range request failed", metadata: ["error": "\(error)", "attempt": "\(failures)"])
                if error.code == .network && retryPolicy.allows(retry: failures) {
                    // Keep what arrived whole; ask again for the rest, after the transfers'
                    // backoff (an origin that just failed is not asked again at once).
                    let done = try await verify(assembler, store: store)
                    pending.removeAll { done.contains($0.sha256) }
                    let delay = retryPolicy.delay(retry: failures)
                    logger.debug(
                        "retrying the range request", metadata: ["cause": "\(error)", "retry": "\(failures)", "delay": "\(delay)"])
                    do {
                        try await Task.sleep(nanoseconds: UInt64(delay * 1e9))
                    } catch {
                        throw CourierError(.paused, "the update was paused")
                    }
                    continue
                }
                throw Fallback("the range request failed", cause: error)
            }
            assembler.close()
            result.bytes += assembler.received
            switch answer {
            case .wholeRepresentation:
                guard multipleRanges && ranges.count > 1 else {
                    throw Fallback("the origin does not answer Range requests (HTTP 200)")
                }
                logger.debug("the origin answered 200 to several ranges: one range per request")
                multipleRanges = false
                continue
            case .parts(let parts):
                let done = try await verify(assembler, store: store)
                let before = pending.count
                pending.removeAll { done.contains($0.sha256) }
                if ranges.count > 1 && parts.count == 1 && multipleRanges {
                    logger.debug("the origin answered one part to several ranges: one range per request")
                    multipleRanges = false
                }
                if pending.count == before {
                    // Nothing asked for arrived whole: an origin that keeps doing so is not usable.
                    failures += 1
                    guard retryPolicy.allows(retry: failures) else {
                        throw Fallback("the origin's range answers do not hold the entries asked for")
                    }
                    multipleRanges = false
                }
            }
        }
        return result
    }

    /// Unpacks and verifies every entry the assembler received whole; returns their digests.
    /// An entry that fails verification is a `Fallback`.
    private func verify(_ assembler: EntryAssembler, store: DeltaEntryStore) async throws -> Set<String> {
        let complete = assembler.completeEntries
        let limits = placer.packages
        return try await BlockingWorkerPool.detached {
            var done = Set<String>()
            for entry in complete {
                do {
                    try store.admit(entry, raw: assembler.rawFile(entry), limits: limits)
                } catch let error as CourierError {
                    throw Fallback("the fetched entry \(entry.path.debugDescription) failed verification", cause: error)
                }
                done.insert(entry.sha256)
            }
            assembler.removeRawFiles()
            return done
        }
    }

    static func seconds(_ duration: Duration) -> String {
        String(format: "%.3f", Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18)
    }
}

// MARK: - Plan

/// What an update takes from where: each file of the manifest either reused from an installed
/// file that is unchanged on disk and has its digest, or fetched. A pure function of the
/// manifest, the records and the files' `lstat`.
struct DeltaPlan: Sendable {
    struct Entry: Sendable, Equatable {
        /// Normalised path (components joined by `/`).
        var path: String
        var components: [String]
        var size: Int64
        var sha256: String
        var range: Range<Int64>
    }

    /// Entries to fetch (a digest may appear for several paths).
    var fetch: [Entry] = []
    /// Entries built from installed files: the entry and the installed file's record.
    var reuse: [(entry: Entry, source: InstalledFile)] = []
    /// Folders to create (normalised paths).
    var folders: [[String]] = []
    /// The installed version's content folder, where reused files are read.
    var installedFolder: URL

    init(manifest: PackageManifest, installed: [InstalledFile], folder: URL, limits: PackageConfiguration) throws {
        installedFolder = folder
        var sources: [String: InstalledFile] = [:]
        for record in installed {
            guard let digest = record.sha256, sources[digest] == nil else { continue }
            var status = stat()
            guard lstat(folder.appendingPathComponent(record.path).path, &status) == 0, record.isUnchanged(status) else {
                continue  // changed or gone on disk: not a source
            }
            sources[digest] = record
        }
        for item in manifest.entries {
            let components = try EntryRules.components(of: item.path, maxDepth: limits.maxPathDepth)
            switch item.type {
            case .directory:
                folders.append(components)
            case .file:
                // `PackageManifest.decode` checked that every file has these fields.
                guard let size = item.size, let sha256 = item.sha256, let range = item.range else {
                    throw DeltaUpdater.Fallback("the manifest entry \(item.path.debugDescription) is incomplete")
                }
                let entry = Entry(
                    path: components.joined(separator: "/"), components: components, size: size, sha256: sha256, range: range)
                if let source = sources[sha256], source.size == size {
                    reuse.append((entry, source))
                } else {
                    fetch.append(entry)
                }
            }
        }
    }

    /// Groups sorted, non-overlapping `ranges` into requests: ranges less than `gap` bytes apart
    /// merge into one, and each request asks for at most `maxRangesPerRequest` ranges.
    static func coalesce(_ ranges: [Range<Int64>], gap: Int64, maxRangesPerRequest: Int) -> [[Range<Int64>]] {
        var merged: [Range<Int64>] = []
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, range.lowerBound <= last.upperBound || range.lowerBound - last.upperBound < max(gap, 0) {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        let size = max(maxRangesPerRequest, 1)
        return stride(from: 0, to: merged.count, by: size).map { Array(merged[$0..<min($0 + size, merged.count)]) }
    }
}

// MARK: - Fetched entries

/// The work folder of one update: `entries/<sha256>` holds each fetched entry unpacked and
/// verified (published by rename after fsync, so one that exists is whole), `raw/` the bytes of
/// entries being fetched.
struct DeltaEntryStore: Sendable {
    let folder: URL
    var entries: URL { folder.appendingPathComponent("entries", isDirectory: true) }
    var raw: URL { folder.appendingPathComponent("raw", isDirectory: true) }

    init(folder: URL) throws {
        self.folder = folder
        for url in [folder, entries, raw] {
            do {
                try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw CourierError(.io, "cannot create \(url.path)", cause: "\(error)")
            }
        }
    }

    func entry(_ sha256: String) -> URL { entries.appendingPathComponent(sha256) }

    /// Whether `entries/<sha256>` holds `entry` whole. Entries are written without an fsync (the
    /// placer's `syncfs` before the swap makes them durable with the rest of the new version), so
    /// one an earlier run left, which a power cut may have torn, is trusted only once its length
    /// and SHA-256 check again; a bad one is removed and fetched anew.
    func holds(_ entry: DeltaPlan.Entry, blockSize: Int) -> Bool {
        let url = self.entry(entry.sha256)
        var status = stat()
        guard lstat(url.path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { return false }
        if Int64(status.st_size) == entry.size, case .success(let digest) = PackageHasher.hash(url, blockSize: blockSize),
            digest == entry.sha256
        {
            return true
        }
        unlink(url.path)
        return false
    }

    /// Unpacks the fetched bytes `raw` of `entry` (local header, data, descriptor), checking its
    /// name, size (never more than the manifest's) and SHA-256 (libarchive checks the zip's CRC-32
    /// as it unpacks), into `entries/<sha256>`. Anything wrong is `integrity` (or `hostilePackage`
    /// for a bad name); nothing is kept then. No fsync: see `holds`.
    func admit(_ entry: DeltaPlan.Entry, raw file: URL, limits: PackageConfiguration) throws {
        let partial = entries.appendingPathComponent("\(entry.sha256).partial")
        let fd = open(partial.path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CourierError.posix("open", path: partial.path) }
        var closed = false
        defer {
            if !closed { close(fd) }
            unlink(partial.path)
        }
        // libarchive reads ahead 24 bytes for a data descriptor (a Zip64 one is that long): pad
        // the entry's bytes so that a 16-byte descriptor at the very end is not "truncated".
        let rawFD = open(file.path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
        guard rawFD >= 0 else { throw CourierError.posix("open", path: file.path) }
        let padding = [UInt8](repeating: 0, count: 64)
        let padded = padding.withUnsafeBytes { pwrite(rawFD, $0.baseAddress, $0.count, off_t(entry.range.count)) }
        close(rawFD)
        guard padded == padding.count else { throw CourierError.posix("write", path: file.path) }
        let reader = try ArchiveReader(url: file, blockSize: limits.blockSize, streamable: true)
        defer { reader.close() }
        guard let header = try reader.next() else {
            throw CourierError(.integrity, "the fetched bytes of \(entry.path.debugDescription) hold no entry")
        }
        guard let name = header.name, try EntryRules.components(of: name, maxDepth: limits.maxPathDepth) == entry.components else {
            throw CourierError(.integrity, "the fetched bytes for \(entry.path.debugDescription) are another entry (\(header.name?.debugDescription ?? "?"))")
        }
        try EntryRules.checkMode(header.mode, name: name, allowSymlink: false)
        var hasher = SHA256()
        var written: Int64 = 0
        try reader.readData { offset, bytes in
            let (end, overflow) = offset.addingReportingOverflow(Int64(bytes.count))
            guard offset == written, !overflow, end <= entry.size else {
                throw CourierError(.integrity, "\(entry.path.debugDescription) unpacks to more than its \(entry.size) bytes")
            }
            hasher.update(bufferPointer: bytes)
            var done = 0
            while done < bytes.count {
                let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
                if n < 0 {
                    if errno == EINTR { continue }
                    throw CourierError.posix("write", path: partial.path)
                }
                done += n
            }
            written = end
        }
        guard written == entry.size else {
            throw CourierError(.integrity, "\(entry.path.debugDescription) unpacks to \(written) bytes, not \(entry.size)")
        }
        guard hasher.finalize().hex == entry.sha256 else {
            throw CourierError(.integrity, "the SHA-256 of \(entry.path.debugDescription) is not the manifest's")
        }
        close(fd)
        closed = true
        guard rename(partial.path, self.entry(entry.sha256).path) == 0 else { throw CourierError.posix("rename", path: partial.path) }
    }
}

/// Routes the bytes of range answers to the raw files of the entries they belong to (bytes of
/// the gaps between coalesced ranges are dropped). Written on the network thread, read after
/// the request ended.
final class EntryAssembler: @unchecked Sendable {  // @unchecked: `lock` guards the counters; files are written by one request at a time.
    private let entries: [DeltaPlan.Entry]
    private let store: DeltaEntryStore
    private var descriptors: [Int32]
    private var counts: [Int64]
    private var total: Int64 = 0
    private let lock = NSLock()

    init(entries: [DeltaPlan.Entry], store: DeltaEntryStore) throws {
        self.entries = entries.sorted { $0.range.lowerBound < $1.range.lowerBound }
        self.store = store
        descriptors = []
        counts = Array(repeating: 0, count: entries.count)
        for entry in self.entries {
            let url = store.raw.appendingPathComponent(entry.sha256)
            let fd = open(url.path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                let error = CourierError.posix("open", path: url.path)
                close()
                throw error
            }
            descriptors.append(fd)
        }
    }

    deinit { close() }

    func rawFile(_ entry: DeltaPlan.Entry) -> URL { store.raw.appendingPathComponent(entry.sha256) }

    /// Body bytes received so far (gaps included).
    var received: Int64 {
        lock.lock()
        defer { lock.unlock() }
        return total
    }

    /// Writes the piece at `offset` of the package into the entries it overlaps.
    func write(offset: Int64, bytes: UnsafeRawBufferPointer) throws {
        lock.lock()
        total += Int64(bytes.count)
        lock.unlock()
        let end = offset + Int64(bytes.count)
        // First entry that may overlap: binary search on the end of each range.
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].range.upperBound <= offset { low = middle + 1 } else { high = middle }
        }
        var index = low
        while index < entries.count, entries[index].range.lowerBound < end {
            let range = entries[index].range
            let start = max(range.lowerBound, offset)
            let stop = min(range.upperBound, end)
            if start < stop {
                let slice = UnsafeRawBufferPointer(rebasing: bytes[Int(start - offset)..<Int(stop - offset)])
                var done = 0
                while done < slice.count {
                    let n = pwrite(descriptors[index], slice.baseAddress! + done, slice.count - done, off_t(start - range.lowerBound) + off_t(done))
                    if n < 0 {
                        if errno == EINTR { continue }
                        throw CourierError.posix("write", path: rawFile(entries[index]).path)
                    }
                    done += n
                }
                lock.lock()
                counts[index] += Int64(slice.count)
                lock.unlock()
            }
            index += 1
        }
    }

    /// The entries whose every byte arrived (each byte once: a duplicated part would overcount and
    /// then fail verification, never pass it).
    var completeEntries: [DeltaPlan.Entry] {
        lock.lock()
        defer { lock.unlock() }
        return entries.indices.filter { counts[$0] == Int64(entries[$0].range.count) }.map { entries[$0] }
    }

    func close() {
        for fd in descriptors where fd >= 0 { Glibc.close(fd) }
        descriptors = descriptors.map { _ in -1 }
    }

    func removeRawFiles() {
        for entry in entries { unlink(rawFile(entry).path) }
    }
}

// MARK: - Building

/// Fills a staging folder with the new version: folders, then each file hard-linked, cloned or
/// copied from the installed version or from the fetched entries. Runs on one Dispatch thread.
///
/// A hard link shares the installed file's inode: safe because the placer discards the old
/// version once the new one is in place (and a crash before leaves the old version's bytes as
/// they were: a link writes no data), and cheap because the data is already durable, so the
/// `syncfs` before the swap has none of it to write. Each installed inode is linked once (two
/// entries with the same digest get their own files); the placer records each file's identity
/// after the build, so the records show the ctime the link gave it.
///
/// A fetched entry (`entries/<sha256>`, verified and flushed by that `syncfs`) is linked the same way,
/// its mode first set to an extracted file's: its bytes are then written once, when unpacked.
/// The placer removes the work folder once the new version is placed and before it takes the
/// ctimes that removal moved into the records.
private struct DeltaBuild {
    let staging: URL
    let manifest: PackageManifest
    let plan: DeltaPlan
    let store: DeltaEntryStore
    let limits: PackageConfiguration
    let allowReflink: Bool
    let allowLink: Bool
    let linker: FileClone.Linker

    init(
        staging: URL, manifest: PackageManifest, plan: DeltaPlan, store: DeltaEntryStore, limits: PackageConfiguration,
        allowReflink: Bool, allowLink: Bool, linker: @escaping FileClone.Linker
    ) {
        self.staging = staging
        self.manifest = manifest
        self.plan = plan
        self.store = store
        self.limits = limits
        self.allowReflink = allowReflink
        self.allowLink = allowLink
        self.linker = linker
    }

    func run(packageSHA256: String) throws -> (
        info: PackageInfo, files: [ExtractedFile], linked: Int, reflinked: Int, fetchedLinked: Int
    ) {
        let root = Glibc.open(staging.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard root >= 0 else { throw CourierError.posix("open", path: staging.path) }
        defer { close(root) }
        for folder in plan.folders { close(try EntryFolders.open(folder, below: root)) }
        var files: [ExtractedFile] = []
        var linked: [(entry: DeltaPlan.Entry, source: InstalledFile)] = []
        var linkedInodes = Set<Int64>()
        var reflinked = 0
        var info: ContentInfo?
        for (entry, source) in plan.reuse {
            let (fd, status) = try open(source: source)
            defer { close(fd) }
            // One name per installed inode: a second entry with the same digest gets its own file.
            let path = plan.installedFolder.appendingPathComponent(source.path).path
            let mayLink = allowLink && linkedInodes.insert(source.inode).inserted
            switch try place(entry, from: fd, root: root, link: mayLink ? (path, status) : nil) {
            case .link: linked.append((entry, source))
            case .reflink: reflinked += 1
            case .copy: break
            }
            // Written while it was linked, cloned or copied: not the manifest's bytes for sure.
            var after = stat()
            guard fstat(fd, &after) == 0, Int64(after.st_size) == source.size,
                InstalledFile.nanoseconds(after.st_mtim) == source.mtimeNanoseconds
            else {
                throw DeltaUpdater.Fallback("the installed file \(source.path) changed during the update")
            }
            files.append(ExtractedFile(path: entry.path, size: entry.size, sha256: entry.sha256))
        }
        var linkedEntries = Set<String>()
        var fetchedLinked = 0
        for entry in plan.fetch {
            let url = store.entry(entry.sha256)
            let fd = Glibc.open(url.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw CourierError.posix("open", path: url.path) }
            defer { close(fd) }
            // One name per fetched entry: a second path with the same digest gets its own file.
            var link: (path: String, status: stat)?
            if allowLink && linkedEntries.insert(entry.sha256).inserted {
                var status = stat()
                guard fchmod(fd, 0o644) == 0, fstat(fd, &status) == 0 else { throw CourierError.posix("fstat", path: url.path) }
                link = (url.path, status)
            }
            if try place(entry, from: fd, root: root, link: link) == .link { fetchedLinked += 1 }
            files.append(ExtractedFile(path: entry.path, size: entry.size, sha256: entry.sha256))
        }
        // The plist of the new version names the product and version the manifest claims.
        let plist = openat(root, ContentInfo.fileName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard plist >= 0 else { throw EntryRules.hostile("the new version has no ContentInfo.plist at its root") }
        defer { close(plist) }
        var buffer = [UInt8](repeating: 0, count: limits.maxInfoPlistSize + 1)
        let n = buffer.withUnsafeMutableBytes { pread(plist, $0.baseAddress, $0.count, 0) }
        guard n >= 0, n <= limits.maxInfoPlistSize else { throw EntryRules.hostile("ContentInfo.plist is too large") }
        info = try ContentInfo.parse(Data(buffer[0..<n]))
        guard let info, info.productId.isIdentical(to: manifest.productId), info.version.isIdentical(to: manifest.version) else {
            throw CourierError(.integrity, "the new version's ContentInfo.plist does not name \(manifest.productId) \(manifest.version)")
        }
        let packageInfo = PackageInfo(
            productId: info.productId, version: info.version, entryCount: manifest.entries.count,
            packedSize: manifest.package.length, unpackedSize: manifest.unpackedSize, sha256: packageSHA256
        )
        // A linked file is the installed file: one written while the others were built (its
        // mtime or size moved) must not be recorded as the manifest's bytes.
        for (entry, source) in linked {
            var status = stat()
            guard fstatat(root, entry.path, &status, AT_SYMLINK_NOFOLLOW) == 0, status.st_mode & S_IFMT == S_IFREG,
                Int64(status.st_ino) == source.inode, Int64(status.st_size) == source.size,
                InstalledFile.nanoseconds(status.st_mtim) == source.mtimeNanoseconds
            else {
                throw DeltaUpdater.Fallback("the installed file \(source.path) changed during the update")
            }
        }
        return (packageInfo, files, linked.count, reflinked, fetchedLinked)
    }

    /// Opens an installed file, refusing it if it changed since its record was taken; returns
    /// the descriptor and its `fstat`.
    private func open(source: InstalledFile) throws -> (Int32, stat) {
        let path = plan.installedFolder.appendingPathComponent(source.path).path
        let fd = Glibc.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DeltaUpdater.Fallback("the installed file \(source.path) vanished during the update") }
        var status = stat()
        guard fstat(fd, &status) == 0, source.isUnchanged(status) else {
            close(fd)
            throw DeltaUpdater.Fallback("the installed file \(source.path) changed during the update")
        }
        return (fd, status)
    }

    /// Creates the file of `entry` in staging with the bytes of `source`: a hard link to
    /// `link.path` when given and possible (it must still be the file `link.status` describes),
    /// else a new file cloned or copied from `source`.
    private func place(_ entry: DeltaPlan.Entry, from source: Int32, root: Int32, link: (path: String, status: stat)?) throws
        -> FileClone.Method
    {
        let parent = try EntryFolders.open(Array(entry.components.dropLast()), below: root)
        defer { close(parent) }
        let name = entry.components[entry.components.count - 1]
        if let link, FileClone.link(link.path, matching: link.status, into: parent, name: name, linker: linker) {
            return .link
        }
        let fd = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            if errno == EEXIST { throw EntryRules.hostile("the entry \(entry.path.debugDescription) appears twice") }
            throw CourierError.posix("create", path: entry.path)
        }
        defer { close(fd) }
        return try FileClone.clone(from: source, to: fd, size: entry.size, allowReflink: allowReflink)
    }
}

