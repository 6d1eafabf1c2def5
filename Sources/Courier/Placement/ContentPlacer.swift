import Foundation
import GRDB
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Places delivered content: extracts a package into staging on the destination's filesystem,
/// renames it into `Caches/<id>/` or `Documents/<id>/`, records it, and keeps the store and the
/// folders consistent across crashes.
///
/// An install writes its intent (the staging folder's inode) to the store before the rename and
/// swaps an older version out with one atomic `renameat2(RENAME_EXCHANGE)`, so the content folder
/// always holds the old or the new version, never a mix; `recover()` finishes or rolls back an
/// interrupted install and removes leftover staging. Staging lives in `Caches/.staging/` and
/// `Documents/.staging/`, each install guarded by an `flock` on `<id>.lock` so that recovery in
/// another process never touches a live install. Blocking: call from a Dispatch worker.
public final class ContentPlacer: Sendable {
    public let layout: StorageLayout
    public let store: StateStore
    public let packages: PackageConfiguration
    public let placement: PlacementConfiguration
    let logger: Logger
    let freeSpace: FreeSpaceProbe
    /// The group commits of the `syncfs` before each rename (`flush`).
    let stagingSyncs: StagingSyncs

    public convenience init(
        layout: StorageLayout,
        store: StateStore,
        packages: PackageConfiguration,
        placement: PlacementConfiguration,
        logger: Logger,
        freeSpace: FreeSpaceProbe = .statvfs
    ) {
        self.init(
            layout: layout, store: store, packages: packages, placement: placement, logger: logger, freeSpace: freeSpace,
            stagingSyncs: StagingSyncs())
    }

    /// `stagingSyncs`: how `flush` flushes (tests record it).
    init(
        layout: StorageLayout, store: StateStore, packages: PackageConfiguration, placement: PlacementConfiguration,
        logger: Logger, freeSpace: FreeSpaceProbe, stagingSyncs: StagingSyncs
    ) {
        self.layout = layout
        self.store = store
        self.packages = packages
        self.placement = placement
        self.logger = logger
        self.freeSpace = freeSpace
        self.stagingSyncs = stagingSyncs
    }

    // MARK: Paths

    /// The folder holding content of `placement`.
    public func folder(for placement: Catalog.Placement) -> URL {
        placement == .cache ? layout.caches : layout.documents
    }

    /// Where content `contentIdentifier` lives when placed in `placement`.
    public func contentURL(_ contentIdentifier: String, placement: Catalog.Placement) -> URL {
        folder(for: placement).appendingPathComponent(contentIdentifier, isDirectory: true)
    }

    func stagingFolder(_ placement: Catalog.Placement) -> URL {
        folder(for: placement).appendingPathComponent(".staging", isDirectory: true)
    }

    /// Refuses identifiers that are not a single safe folder name.
    static func checkIdentifier(_ identifier: String) throws {
        // By bytes, as the kernel reads a name: "/\u{301}" is one character to `String`, not "/".
        let bytes = identifier.utf8
        guard !bytes.isEmpty, bytes.count <= 200, bytes.first != UInt8(ascii: "."),
            !bytes.contains(UInt8(ascii: "/")), !bytes.contains(UInt8(ascii: "\\")), !bytes.contains(0)
        else {
            throw CourierError(.usage, "\(identifier.debugDescription) is not a usable content identifier")
        }
    }

    // MARK: Install

    /// Extracts and places a package: staging, then rename; an older version replaced only once the
    /// new one is complete; a downgrade refused unless `force`. Records it in the store.
    ///
    /// `productId` must match the package's ContentInfo.plist, and `version` too when given.
    /// Checks space for the unpacked size first (purging caches if allowed); Documents content is
    /// marked excluded from backups before it appears. Pass `verifiedSHA256` when the file's
    /// digest was already checked (by the download) to skip hashing it again.
    public func install(
        package: URL,
        contentIdentifier: String,
        productId: String,
        version: String?,
        placement target: Catalog.Placement,
        force: Bool,
        verifiedSHA256: String? = nil
    ) throws -> DeliveredContent {
        try install(
            package: package, contentIdentifier: contentIdentifier, productId: productId, version: version, placement: target,
            force: force, verifiedSHA256: verifiedSHA256, recording: { placement in try write { db in try placement.record(db) } })
    }

    /// `install`, its record written by `recording` once the folder is in place (while the
    /// install still holds its lock): in a database transaction of the caller's, so that the
    /// delivery's own state (`PaymentQueue.installed`) commits with it (`PlacementRecord`). When
    /// `recording` throws, the record is written alone, then the error is thrown: the folder in
    /// place is recorded either way (else `recover()` records it at the next start).
    func install(
        package: URL,
        contentIdentifier: String,
        productId: String,
        version: String?,
        placement target: Catalog.Placement,
        force: Bool,
        verifiedSHA256: String?,
        recording: (PlacementRecord) throws -> Void
    ) throws -> DeliveredContent {
        // Before a byte of the package is read (`staged`'s attempt): an install that a crash (or
        // a kill) interrupted too often in a row is refused instead of crashing the process again.
        try staged(
            contentIdentifier, placement: target, refusingDowngradeTo: force ? nil : version,
            fingerprint: Self.fingerprint(package, verifiedSHA256: verifiedSHA256), recording: recording,
            body: extracting(
                package, contentIdentifier: contentIdentifier, productId: productId, version: version, force: force,
                verifiedSHA256: verifiedSHA256))
    }

    /// `install` in three steps, for callers that install many packages at once (the delivery
    /// pipeline): `prepareInstall` fills and seals the staging folder and records the intent
    /// (blocking), `flush` waits, without blocking a thread, for a `syncfs` of its filesystem
    /// that started after that (one for every install that waits meanwhile: group commit), and
    /// `completeInstall` swaps the folder into place and records it (blocking). The order of
    /// `install` holds: the content and the intent are on disk before the rename, and the rename
    /// before the record. The intent's commit is lazy when the state database is on the
    /// staging's filesystem (the `syncfs` makes it durable with the content: one WAL sync fewer
    /// per install), durable otherwise. End a prepared install that is not completed with
    /// `abandon` (it is left to `recover()` otherwise). `flush` does nothing when
    /// `placement.syncBeforeRename` is off.
    package func prepareInstall(
        package: URL,
        contentIdentifier: String,
        productId: String,
        version: String?,
        placement target: Catalog.Placement,
        force: Bool,
        verifiedSHA256: String?
    ) throws -> PreparedInstall {
        let session = try beginStaging(
            contentIdentifier, placement: target, refusingDowngradeTo: force ? nil : version,
            fingerprint: Self.fingerprint(package, verifiedSHA256: verifiedSHA256))
        do {
            let (info, files) = try extracting(
                package, contentIdentifier: contentIdentifier, productId: productId, version: version, force: force,
                verifiedSHA256: verifiedSHA256
            )(session.staging, session.existing, session.logger)
            seal(session)
            // The intent before the flush: lazy when the flush covers the state database too
            // (same filesystem as the staging), so the swap still follows it on disk.
            let database = Self.device(of: store.url)
            let covered = placement.syncBeforeRename && database != nil && database == Self.device(of: session.staging)
            let intent = try writeIntent(session, info: info, files: files, durable: !covered)
            return PreparedInstall(session: session, intent: intent)
        } catch {
            session.end()
            throw error
        }
    }

    /// Returns once a `syncfs` of the prepared install's filesystem that started after this
    /// call has completed (see `prepareInstall`); throws its error.
    package func flush(_ prepared: PreparedInstall) async throws {
        guard placement.syncBeforeRename else { return }
        try await stagingSyncs.sync(containing: stagingFolder(prepared.session.target))
    }

    /// Places a prepared and flushed install and records it (by `recording`, as `install`
    /// does); ends it either way.
    package func completeInstall(_ prepared: PreparedInstall, recording: (PlacementRecord) throws -> Void) throws -> DeliveredContent {
        defer { prepared.session.end() }
        return try swapIn(prepared.session, intent: prepared.intent, recording: recording)
    }

    /// The device of the filesystem holding `url`, nil when it cannot be read.
    private static func device(of url: URL) -> UInt64? {
        var status = stat()
        return stat(url.path, &status) == 0 ? UInt64(status.st_dev) : nil
    }

    /// Ends a prepared install that will not be completed: its staging goes, the old version
    /// stays.
    package func abandon(_ prepared: PreparedInstall) {
        prepared.session.end()
    }

    /// What fills an install's staging from `package`: every rule that needs no unpacking (those
    /// of `package inspect`), the product and the version run before the space check, so a
    /// hostile package never purges anything; then the extraction.
    private func extracting(
        _ package: URL, contentIdentifier: String, productId: String, version: String?, force: Bool, verifiedSHA256: String?
    ) -> (_ staging: URL, _ existing: DeliveredContent?, _ logger: Logger) throws -> (PackageInfo, [ExtractedFile]) {
        { [self] staging, existing, logger in
            let preflight = try PackageInspector.preflight(package, limits: packages)
            try preflight.info.check(expectedProductId: productId, expectedVersion: version)
            if let existing, !force {
                try refuseDowngrade(existing: existing, to: preflight.info.version)
            }
            try ensureSpace(bytes: preflight.declaredUnpackedSize, inUse: [contentIdentifier])
            logger.debug("extracting", metadata: ["package": "\(package.path)", "staging": "\(staging.path)"])
            let extractor = PackageExtractor(configuration: packages)
            let (info, files) = try extractor.extractRecording(
                package, into: staging, expectedProductId: productId, expectedVersion: version, verifiedSHA256: verifiedSHA256,
                preflight: preflight
            )
            if let existing, !force {
                try refuseDowngrade(existing: existing, to: info.version)
            }
            return (info, files)
        }
    }

    /// What `install` and `installBuilt` share: the downgrade check (unless `version` is nil),
    /// lock, attempt and staging around `body`, which fills staging (not yet made), then `place`
    /// and `placed` (the lock still held). Staging and the old version are removed either way.
    private func staged(
        _ contentIdentifier: String, placement target: Catalog.Placement, refusingDowngradeTo version: String?,
        fingerprint: String, recording: (PlacementRecord) throws -> Void,
        body: (_ staging: URL, _ existing: DeliveredContent?, _ logger: Logger) throws -> (PackageInfo, [ExtractedFile]),
        placed done: (_ id: String, _ staging: URL, _ previous: URL) -> Void = { _, _, _ in }
    ) throws -> DeliveredContent {
        let session = try beginStaging(contentIdentifier, placement: target, refusingDowngradeTo: version, fingerprint: fingerprint)
        defer { session.end() }
        let (info, files) = try body(session.staging, session.existing, session.logger)
        seal(session)
        if placement.syncBeforeRename { try FilesystemSync.flush(containing: session.staging) }
        let delivered = try place(session, info: info, files: files, recording: recording)
        done(session.id, session.staging, session.previous)
        return delivered
    }

    /// The first half of `staged`: the checks, the lock and the attempt of a new staging folder
    /// (not yet made). End it with `StagingSession.end()` whatever happens.
    private func beginStaging(
        _ contentIdentifier: String, placement target: Catalog.Placement, refusingDowngradeTo version: String?, fingerprint: String
    ) throws -> StagingSession {
        try Self.checkIdentifier(contentIdentifier)
        var logger = self.logger
        logger[metadataKey: "content-id"] = "\(contentIdentifier)"
        try layout.prepare()
        let existing = try record(contentIdentifier)
        if let existing, let version {
            try refuseDowngrade(existing: existing, to: version)
        }
        let stagingRoot = stagingFolder(target)
        try makeFolder(stagingRoot)
        let id = UUID().uuidString.lowercased()
        let lock = try InstallLock(acquire: stagingRoot.appendingPathComponent("\(id).lock"))
        do {
            try beginAttempt(contentIdentifier, package: fingerprint, lockId: id, placement: target)
        } catch {
            lock.release(removing: true)
            throw error
        }
        return StagingSession(
            placer: self, contentIdentifier: contentIdentifier, target: target, id: id, lock: lock,
            staging: stagingRoot.appendingPathComponent(id, isDirectory: true),
            previous: stagingRoot.appendingPathComponent("\(id).old", isDirectory: true), existing: existing, logger: logger)
    }

    /// One install between its lock and its end: the staging folder, the old version's place
    /// once swapped out, and what the install found in place when it began.
    final class StagingSession: Sendable {
        let placer: ContentPlacer
        let contentIdentifier: String
        let target: Catalog.Placement
        let id: String
        let lock: InstallLock
        let staging: URL
        let previous: URL
        let existing: DeliveredContent?
        let logger: Logger
        /// Whether the install was recorded in place (its attempt then ended in the commit that
        /// records it, `placed`), whether `end()` ran, whether its intent was written, and
        /// whether its folder was swapped into place.
        private let state = Mutex<(placed: Bool, ended: Bool, intent: Bool, swapped: Bool)>((false, false, false, false))

        init(
            placer: ContentPlacer, contentIdentifier: String, target: Catalog.Placement, id: String, lock: InstallLock,
            staging: URL, previous: URL, existing: DeliveredContent?, logger: Logger
        ) {
            self.placer = placer
            self.contentIdentifier = contentIdentifier
            self.target = target
            self.id = id
            self.lock = lock
            self.staging = staging
            self.previous = previous
            self.existing = existing
            self.logger = logger
        }

        func markPlaced() { state.withLock { $0.placed = true } }

        func markIntentWritten() { state.withLock { $0.intent = true } }

        func markSwapped() { state.withLock { $0.swapped = true } }

        /// Releases the lock and nothing else, as a killed process does (tests).
        func leaveAsKilled() {
            guard !state.withLock({ state in defer { state.ended = true }; return state.ended }) else { return }
            lock.release(removing: false)
        }

        /// Removes staging and the old version, ends the attempt unless the install was placed,
        /// and releases the lock. Only the first call does anything.
        func end() {
            let (placed, ended, unswappedIntent) = state.withLock { state in
                defer { state.ended = true }
                return (state.placed, state.ended, state.intent && !state.swapped)
            }
            guard !ended else { return }
            placer.removeTree(staging)
            placer.removeTree(previous)
            if !placed {
                // An intent written before a flush that failed or was never waited for (the
                // swap did not run): forgotten here, else `recover()` rolls it back at the next
                // start. (A swapped install's intent is recovery's to finish.)
                if unswappedIntent { try? placer.forgetInstall(id) }
                placer.endAttempt(contentIdentifier, lockId: id)
            }
            lock.release(removing: true)
        }
    }

    /// Places content that `build` makes in a fresh staging folder (the delta update's path):
    /// the same lock, space check, backup mark, intent, atomic swap and records as `install`,
    /// with the old version kept until the new one is in place. A downgrade is refused.
    ///
    /// `build` receives the empty staging folder (on the destination's filesystem) and returns
    /// what it placed there; if it throws, the folder is removed and nothing changes. Blocking.
    /// `discarding`, when given, is a folder removed once the new version is placed, before the
    /// records take the ctimes that removal moved: one whose files `build` hard-linked into the
    /// new version (a delta update's fetched entries), so that they are its only names then.
    package func installBuilt(
        contentIdentifier: String,
        productId: String,
        version: String,
        placement target: Catalog.Placement,
        unpackedSize: Int64,
        fingerprint: String,
        discarding: URL? = nil,
        build: (URL) throws -> (info: PackageInfo, files: [ExtractedFile])
    ) throws -> DeliveredContent {
        try staged(
            contentIdentifier, placement: target, refusingDowngradeTo: version, fingerprint: fingerprint,
            recording: { placement in try write { db in try placement.record(db) } }
        ) { staging, _, logger in
            try ensureSpace(bytes: unpackedSize, inUse: [contentIdentifier])
            guard mkdir(staging.path, 0o755) == 0 else { throw CourierError.posix("mkdir", path: staging.path) }
            logger.debug("building in staging", metadata: ["staging": "\(staging.path)"])
            let (info, files) = try build(staging)
            guard info.productId.isIdentical(to: productId), info.version.isIdentical(to: version) else {
                throw CourierError(.integrity, "the built content is \(info.productId) \(info.version), not \(productId) \(version)")
            }
            return (info, files)
        } placed: { id, staging, previous in
            // A built version may share inodes with the old one and with `discarding` (a delta
            // update's hard links): removing the other names moves their ctime, so remove them
            // now and record it.
            removeTree(staging)
            removeTree(previous)
            if let discarding { removeTree(discarding) }
            refreshChangeTimes(installId: id, in: contentURL(contentIdentifier, placement: target))
        }
    }

    /// Takes the new ctime into the records of install `installId` whose file is otherwise as
    /// recorded (a regular file, one link, same device, inode, size and mtime): the ctime the
    /// removal of a shared inode's other name gave it. Best effort: a record left stale only
    /// makes its file no source for a delta update (it is fetched).
    private func refreshChangeTimes(installId: String, in folder: URL) {
        do {
            let records = try store.pool.read { db in
                try InstalledFile.filter(Column("installId") == installId).fetchAll(db)
            }
            let changed = records.compactMap { record -> (String, Int64)? in
                var status = stat()
                guard lstat(folder.appendingPathComponent(record.path).path, &status) == 0, status.st_mode & S_IFMT == S_IFREG,
                    status.st_nlink == 1, Int64(status.st_dev) == record.device, Int64(status.st_ino) == record.inode,
                    Int64(status.st_size) == record.size, InstalledFile.nanoseconds(status.st_mtim) == record.mtimeNanoseconds
                else { return nil }
                let ctime = InstalledFile.nanoseconds(status.st_ctim)
                return ctime == record.ctimeNanoseconds ? nil : (record.path, ctime)
            }
            guard !changed.isEmpty else { return }
            try write { db in
                for (path, ctime) in changed {
                    try db.execute(
                        sql: "UPDATE content_file SET ctimeNanoseconds = ? WHERE installId = ? AND path = ?",
                        arguments: [ctime, installId, path])
                }
            }
        } catch {
            logger.warning("cannot refresh the file records of an install", metadata: ["error": "\(error)"])
        }
    }

    /// What an install does to its filled staging folder before it is flushed: Documents
    /// content is marked excluded from backups (so the mark is as durable as the files).
    private func seal(_ session: StagingSession) {
        guard session.target == .documents else { return }
        let support = BackupExclusion.mark(session.staging)
        if !support.isSupported {
            session.logger.warning(
                "the filesystem of Documents supports no backup-exclusion mark",
                metadata: ["problems": "\(support.problems.joined(separator: "; "))"]
            )
        }
    }

    /// The rest of an install once `staging` holds the new version, sealed and flushed (when
    /// `placement.syncBeforeRename`): the intent and file records, the atomic swap, the record
    /// (by `recording`, see `install`).
    private func place(
        _ session: StagingSession, info: PackageInfo, files: [ExtractedFile], recording: (PlacementRecord) throws -> Void
    ) throws -> DeliveredContent {
        let intent = try writeIntent(session, info: info, files: files, durable: true)
        return try swapIn(session, intent: intent, recording: recording)
    }

    /// Records the intent of an install whose staging is filled (the staging folder's device and
    /// inode) with the records of its files, in a durable commit, or a lazy one when a flush of
    /// the filesystem that holds the state database follows before the swap (`prepareInstall`).
    private func writeIntent(_ session: StagingSession, info: PackageInfo, files: [ExtractedFile], durable: Bool) throws
        -> ContentInstallation
    {
        let (staging, id, contentIdentifier) = (session.staging, session.id, session.contentIdentifier)
        let (existing, target) = (session.existing, session.target)
        var status = stat()
        guard lstat(staging.path, &status) == 0 else { throw CourierError.posix("stat", path: staging.path) }
        // Each file's identity as it will stay once in place (renaming the folder changes none of it).
        let records = try fileRecords(files, in: staging, installId: id, contentIdentifier: contentIdentifier)
        let now = Date()
        let intent = ContentInstallation(
            id: id,
            contentIdentifier: contentIdentifier,
            productId: info.productId,
            version: info.version,
            placement: target,
            previousPlacement: existing?.placement,
            size: info.unpackedSize,
            sha256: info.sha256,
            stagingDevice: Int64(status.st_dev),
            stagingInode: Int64(status.st_ino),
            createdAt: now
        )
        try write(durable: durable) { db in
            try ContentRows.insert(db, intent)
            for record in records { try ContentRows.insert(db, record) }
        }
        session.markIntentWritten()
        return intent
    }

    /// The swap of an install whose intent is recorded (and whose staging and intent are on
    /// disk), then its record by `recording` (see `install`).
    private func swapIn(_ session: StagingSession, intent: ContentInstallation, recording: (PlacementRecord) throws -> Void) throws
        -> DeliveredContent
    {
        let (staging, previous, id, contentIdentifier) = (session.staging, session.previous, session.id, session.contentIdentifier)
        let (target, logger, now) = (session.target, session.logger, intent.createdAt)
        let destination = contentURL(contentIdentifier, placement: target)
        do {
            if access(destination.path, F_OK) == 0 {
                if try !AtomicRename.exchange(staging, destination) {
                    // No atomic exchange on this filesystem: move the old version aside first;
                    // recover() moves it back if the process dies in between.
                    try AtomicRename.renameNoReplace(destination, previous)
                    try AtomicRename.renameNoReplace(staging, destination)
                }
            } else {
                try AtomicRename.renameNoReplace(staging, destination)
            }
        } catch {
            try? forgetInstall(id)
            throw error
        }
        session.markSwapped()
        let placement = try placed(intent, installedAt: now, endingAttempt: true)
        do {
            try recording(placement)
        } catch {
            try? write { db in try placement.record(db) }
            throw error
        }
        session.markPlaced()
        logger.debug("installed", metadata: ["version": "\(intent.version)", "path": "\(destination.path)"])
        return placement.delivered
    }

    /// The records of `files` below `staging`: their SHA-256 as written and their `lstat` now.
    private func fileRecords(_ files: [ExtractedFile], in staging: URL, installId: String, contentIdentifier: String) throws
        -> [InstalledFile]
    {
        let root = open(staging.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard root >= 0 else { throw CourierError.posix("open", path: staging.path) }
        defer { close(root) }
        return try files.map { file in
            var status = stat()
            guard fstatat(root, file.path, &status, AT_SYMLINK_NOFOLLOW) == 0 else {
                throw CourierError.posix("stat", path: "\(staging.path)/\(file.path)")
            }
            return InstalledFile(
                installId: installId, contentIdentifier: contentIdentifier, path: file.path, size: Int64(status.st_size),
                sha256: Int64(status.st_size) == file.size ? file.sha256 : nil, device: Int64(status.st_dev),
                inode: Int64(status.st_ino), mtimeNanoseconds: InstalledFile.nanoseconds(status.st_mtim),
                ctimeNanoseconds: InstalledFile.nanoseconds(status.st_ctim)
            )
        }
    }

    /// The files of delivered content `contentIdentifier` as its current install placed them
    /// (none for content installed before per-file records existed).
    package func installedFiles(_ contentIdentifier: String) throws -> [InstalledFile] {
        try CourierError.wrapping(.io, "cannot read delivered files from the store") {
            try store.pool.read { db in
                let inFlight = try String.fetchAll(db, sql: "SELECT id FROM content_installation")
                return try InstalledFile.filter(Column("contentIdentifier") == contentIdentifier)
                    .filter(!inFlight.contains(Column("installId")))
                    .order(Column("path")).fetchAll(db)
            }
        }
    }

    /// Drops the intent and file records of install `id`, whose folder did not take the place.
    fileprivate func forgetInstall(_ id: String) throws {
        try write { db in
            _ = try ContentInstallation.deleteOne(db, key: id)
            _ = try InstalledFile.filter(Column("installId") == id).deleteAll(db)
        }
    }

    /// Removes a copy left in the other placement by an install whose folder is in place, and
    /// returns the rows that record it. `endingAttempt`: the install's attempt row
    /// (`beginAttempt`, lock id = install id) goes with them, instead of a commit of its own.
    private func placed(_ intent: ContentInstallation, installedAt: Date, endingAttempt: Bool) throws -> PlacementRecord {
        let destination = contentURL(intent.contentIdentifier, placement: intent.placement)
        let delivered = DeliveredContent(
            contentIdentifier: intent.contentIdentifier,
            productId: intent.productId,
            version: intent.version,
            placement: intent.placement,
            path: destination.path,
            size: intent.size,
            sha256: intent.sha256,
            installedAt: installedAt,
            lastUsedAt: installedAt
        )
        if let previous = intent.previousPlacement, previous != intent.placement {
            try discard(contentURL(intent.contentIdentifier, placement: previous), placement: previous)
        }
        return PlacementRecord(delivered: delivered, installId: intent.id, endingAttempt: endingAttempt)
    }

    // MARK: Interrupted installs

    /// Records that an install of `package` as `contentIdentifier` starts (table
    /// `content_install_attempt`), counting the attempts before it that never ended: their row
    /// survived and their install lock is free, so their process died in the middle (a crash on
    /// the package, or a kill). After `placement.maxInterruptedInstalls` such attempts in a row,
    /// the install is refused with `integrity` and the count starts over, so a package that
    /// crashes Courier cannot crash it forever (an agent would otherwise retry it at every start).
    ///
    /// The row is written and removed by lazy commits: what it counts are process deaths, which
    /// leave the WAL's unsynced pages to the kernel; a power cut may lose the row, which only
    /// means one interruption not counted (or one counted for an install that ended).
    func beginAttempt(_ contentIdentifier: String, package: String, lockId: String, placement target: Catalog.Placement) throws {
        let limit = placement.maxInterruptedInstalls
        let interrupted = try CourierError.wrapping(.io, "cannot record an install in the store") {
            try store.write(durable: false) { db -> Int in
                var count = 0
                if let row = try ContentRows.attempt(db, contentIdentifier: contentIdentifier), row.package == package {
                    let lockFile = self.stagingFolder(row.placement).appendingPathComponent("\(row.lockId).lock")
                    if let dead = try? InstallLock(ifFree: lockFile) {
                        dead.release(removing: true)
                        count = row.interruptions + 1
                    } else {
                        count = row.interruptions  // another process is installing it right now
                    }
                }
                if limit > 0 && count >= limit {
                    try ContentRows.deleteAttempt(db, contentIdentifier: contentIdentifier)
                } else {
                    try ContentRows.upsert(
                        db,
                        ContentInstallAttempt(
                            contentIdentifier: contentIdentifier, package: package, lockId: lockId, placement: target,
                            interruptions: count, startedAt: Date()))
                }
                return count
            }
        }
        if limit > 0 && interrupted >= limit {
            throw CourierError(
                .integrity,
                "installing \(contentIdentifier) was interrupted \(interrupted) times in a row (Courier crashed or was killed while unpacking this package); it is refused instead of being tried again",
                hint: "resume the download to try once more; if Courier crashed, keep the package file and report it"
            )
        }
    }

    /// Ends the attempt `lockId` (installed, or refused with an error): its row goes.
    func endAttempt(_ contentIdentifier: String, lockId: String) {
        do {
            try store.write(durable: false) { db in
                _ = try ContentInstallAttempt.filter(Column("contentIdentifier") == contentIdentifier && Column("lockId") == lockId)
                    .deleteAll(db)
            }
        } catch {
            logger.warning("cannot clear an install attempt", metadata: ["content-id": "\(contentIdentifier)", "error": "\(error)"])
        }
    }

    /// What identifies one package across runs: the digest the download verified, else the
    /// file's path, size and modification time (hashing a local file again would cost a pass).
    package static func fingerprint(_ package: URL, verifiedSHA256: String?) -> String {
        if let verifiedSHA256 { return "sha256:\(verifiedSHA256)" }
        var status = stat()
        guard stat(package.path, &status) == 0 else { return "file:\(package.path)" }
        return "file:\(package.path):\(status.st_size):\(status.st_mtim.tv_sec).\(status.st_mtim.tv_nsec)"
    }

    private func refuseDowngrade(existing: DeliveredContent, to version: String) throws {
        if ContentVersion.compare(version, existing.version) == .orderedAscending {
            throw CourierError(
                .usage,
                "\(existing.contentIdentifier) \(existing.version) is installed; \(version) would be a downgrade",
                hint: "pass --force to install an older version"
            )
        }
    }

    // MARK: Recovery

    /// Cleans leftover staging and finishes or rolls back an interrupted replacement. Call at start.
    public func recover() throws {
        try layout.prepare()
        let intents = try store.pool.read { db in try ContentInstallation.fetchAll(db) }
        for intent in intents {
            let stagingRoot = stagingFolder(intent.placement)
            guard let lock = try? InstallLock(ifFree: stagingRoot.appendingPathComponent("\(intent.id).lock")) else {
                continue  // a live install in another process
            }
            defer { lock.release(removing: false) }
            let destination = contentURL(intent.contentIdentifier, placement: intent.placement)
            var status = stat()
            if lstat(destination.path, &status) == 0, Int64(status.st_dev) == intent.stagingDevice,
                Int64(status.st_ino) == intent.stagingInode
            {
                logger.debug("recover: finishing an interrupted install", metadata: ["content-id": "\(intent.contentIdentifier)"])
                // Recorded in a commit of its own.
                let placement = try placed(intent, installedAt: intent.createdAt, endingAttempt: false)
                try write { db in try placement.record(db) }
            } else {
                logger.debug("recover: rolling back an interrupted install", metadata: ["content-id": "\(intent.contentIdentifier)"])
                let previous = stagingRoot.appendingPathComponent("\(intent.id).old")
                if access(destination.path, F_OK) != 0 && access(previous.path, F_OK) == 0 {
                    try AtomicRename.renameNoReplace(previous, destination)
                }
                try forgetInstall(intent.id)
            }
        }
        for placement in Catalog.Placement.allCases {
            sweep(stagingFolder(placement))
        }
    }

    /// Removes everything in a staging folder that no live install holds.
    private func sweep(_ stagingRoot: URL) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: stagingRoot.path) else { return }
        var live: Set<String> = []
        var stale: [InstallLock] = []
        for name in names where name.hasSuffix(".lock") {
            let id = String(name.dropLast(5))
            if let lock = try? InstallLock(ifFree: stagingRoot.appendingPathComponent(name)) {
                stale.append(lock)
            } else {
                live.insert(id)
            }
        }
        for name in names where !name.hasSuffix(".lock") {
            let id = name.split(separator: ".").first.map(String.init) ?? name
            if live.contains(id) { continue }
            logger.debug("recover: removing leftover staging", metadata: ["path": "\(stagingRoot.path)/\(name)"])
            removeTree(stagingRoot.appendingPathComponent(name))
        }
        for lock in stale {
            lock.release(removing: true)
        }
    }

    // MARK: Queries

    /// The content `contentIdentifier` if it is delivered and its folder still exists; marks it
    /// used now (for LRU purging). A record whose folder vanished is forgotten and gives nil.
    public func content(_ contentIdentifier: String) throws -> DeliveredContent? {
        guard var delivered = try record(contentIdentifier) else { return nil }
        let url = contentURL(contentIdentifier, placement: delivered.placement)
        guard access(url.path, F_OK) == 0 else {
            try write { db in _ = try DeliveredContent.deleteOne(db, key: contentIdentifier) }
            return nil
        }
        delivered.lastUsedAt = Date()
        delivered.path = url.path
        let updated = delivered
        try write { db in try updated.update(db, columns: ["lastUsedAt"]) }
        return delivered
    }

    /// Every delivered content, by identifier.
    public func list() throws -> [DeliveredContent] {
        try CourierError.wrapping(.io, "cannot read delivered content from the store") {
            try store.pool.read { db in try DeliveredContent.order(Column("contentIdentifier")).fetchAll(db) }
        }
    }

    /// Removes delivered content: its folder disappears in one rename, then its record. A user's
    /// delete leaves it gone (and drops its `content open` pin); a purge for space (`purged`)
    /// records it, so the next `deliver` or `content open` brings it back.
    public func delete(_ contentIdentifier: String) throws {
        try delete(contentIdentifier, purged: false)
    }

    private func delete(_ contentIdentifier: String, purged: Bool) throws {
        try Self.checkIdentifier(contentIdentifier)
        guard let delivered = try record(contentIdentifier) else {
            throw CourierError(.notFound, "no delivered content \(contentIdentifier.debugDescription)")
        }
        try discard(contentURL(contentIdentifier, placement: delivered.placement), placement: delivered.placement)
        let now = Date()
        try write { db in
            _ = try DeliveredContent.deleteOne(db, key: contentIdentifier)
            _ = try InstalledFile.filter(Column("contentIdentifier") == contentIdentifier).deleteAll(db)
            if purged {
                try ContentRows.recordPurge(db, contentIdentifier: contentIdentifier, productId: delivered.productId, at: now)
            } else {
                try ContentRows.forgetPurge(db, contentIdentifier: contentIdentifier)
                try ContentPins.removeRecord(db, contentIdentifier: contentIdentifier)
            }
        }
    }

    /// Moves `url` into staging (an atomic disappearance) and removes it.
    private func discard(_ url: URL, placement: Catalog.Placement) throws {
        guard access(url.path, F_OK) == 0 else { return }
        let stagingRoot = stagingFolder(placement)
        try makeFolder(stagingRoot)
        let trash = stagingRoot.appendingPathComponent("\(UUID().uuidString.lowercased()).deleted")
        try AtomicRename.renameNoReplace(url, trash)
        removeTree(trash)
    }

    // MARK: Space

    /// Makes room for `bytes` (+ reserve) on the filesystem of `layout.root`: purges cache-placed
    /// content when allowed in `PurgeOrder` (low preservation first, least recently used within
    /// each), never Documents, never pinned content, never identifiers in `inUse`; else throws
    /// CourierError(.insufficientSpace) before anything is written.
    public func ensureSpace(bytes: Int64, inUse: Set<String>) throws {
        let (needed, overflow) = max(bytes, 0).addingReportingOverflow(max(placement.diskReserve, 0))
        guard !overflow else {
            throw CourierError(
                .insufficientSpace, "\(bytes) bytes plus a reserve of \(placement.diskReserve) are more than any disk holds")
        }
        var available = try freeSpace.available(layout.root)
        if available >= needed { return }
        if placement.purgeCaches {
            let cached = try store.pool.read { db in
                try DeliveredContent.filter(Column("placement") == Catalog.Placement.cache.rawValue).fetchAll(db)
            }
            let pinned = try pins.pinned()
            for candidate in PurgeOrder.candidates(cached, pinned: pinned, inUse: inUse) {
                logger.debug(
                    "purging cached content to make room",
                    metadata: [
                        "content-id": "\(candidate.contentIdentifier)", "size": "\(candidate.size)",
                        "preservation": "\(candidate.preservation.rawValue)",
                    ]
                )
                // Pinned since the list was read (a `content open` racing the purge): kept.
                guard try !pins.isPinned(candidate.contentIdentifier) else { continue }
                try delete(candidate.contentIdentifier, purged: true)
                available = try freeSpace.available(layout.root)
                if available >= needed { return }
            }
        }
        var shortage = CourierError.notEnoughSpace(
            at: layout.root.path, bytes: bytes, reserve: placement.diskReserve, reserveSetting: "transfer.diskReserve",
            available: available, then: "try again")
        if !placement.purgeCaches, let hint = shortage.hint { shortage.hint = hint + " (or allow purging caches: placement.purgeCaches)" }
        throw shortage
    }

    /// The pins on this store's content (`content open`, `CourierClient.openContent`).
    public var pins: ContentPins { ContentPins(layout: layout, store: store) }

    /// What the filesystem of Documents supports to exclude content from backups (marks the
    /// Documents folder itself, which tools honouring nodump skip as a whole).
    public var backupExclusionSupport: BackupExclusion.Support {
        try? layout.prepare()
        return BackupExclusion.mark(layout.documents)
    }

    // MARK: Helpers

    private func record(_ contentIdentifier: String) throws -> DeliveredContent? {
        try CourierError.wrapping(.io, "cannot read delivered content from the store") {
            try store.pool.read { db in try ContentRows.delivered(db, contentIdentifier: contentIdentifier) }
        }
    }

    private func write(durable: Bool = true, _ body: @escaping @Sendable (Database) throws -> Void) throws {
        do {
            try store.write(durable: durable) { db in try body(db) }
        } catch let error as CourierError {
            throw error
        } catch {
            throw CourierError(.io, "cannot update delivered content in the store", cause: "\(error)")
        }
    }

    private func makeFolder(_ url: URL) throws {
        if mkdir(url.path, 0o700) != 0 && errno != EEXIST { throw CourierError.posix("mkdir", path: url.path) }
    }

    fileprivate func removeTree(_ url: URL) {
        var status = stat()
        guard lstat(url.path, &status) == 0 else { return }
        do {
            try FileManager.default.removeItem(at: url)
        } catch {
            logger.warning("cannot remove \(url.path)", metadata: ["error": "\(error)"])
        }
    }
}

/// The rows that record an install whose folder is in place: the delivered content (one
/// upsert), the end of its intent and attempt, the files of the version it replaced. Written in
/// one database transaction; a crash before it leaves the intent, which `recover()` finishes.
public struct PlacementRecord: Sendable {
    let delivered: DeliveredContent
    let installId: String
    let endingAttempt: Bool

    func record(_ db: Database) throws {
        try ContentRows.upsert(db, delivered)  // one INSERT ... ON CONFLICT DO UPDATE, not an UPDATE then an INSERT
        try ContentRows.forgetPurge(db, contentIdentifier: delivered.contentIdentifier)
        try ContentRows.deleteInstallation(db, id: installId)
        if endingAttempt { try ContentRows.deleteAttempt(db, contentIdentifier: delivered.contentIdentifier, lockId: installId) }
        try ContentRows.deleteFiles(db, contentIdentifier: delivered.contentIdentifier, otherThan: installId)
    }
}

/// An exclusive `flock` on a file in a staging folder: held for the whole of one install, so
/// another process's recovery can tell live staging from leftovers (a killed process drops it).
final class InstallLock: Sendable {
    let url: URL
    private let fd: Int32

    /// Creates and locks `url`, waiting if needed.
    convenience init(acquire url: URL) throws { try self.init(url, waiting: true) }

    /// Locks `url` (creating it if missing) if no one holds it; throws otherwise.
    convenience init(ifFree url: URL) throws { try self.init(url, waiting: false) }

    private init(_ url: URL, waiting: Bool) throws {
        self.url = url
        fd = open(url.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CourierError.posix("open", path: url.path) }
        while flock(fd, waiting ? LOCK_EX : LOCK_EX | LOCK_NB) != 0 {
            if waiting && errno == EINTR { continue }
            let error = CourierError.posix("flock", path: url.path)
            close(fd)
            throw error
        }
    }

    /// Unlocks and closes, first removing the lock file if `removing`. Call once.
    func release(removing: Bool) {
        if removing { unlink(url.path) }
        close(fd)
    }
}

/// An install whose staging folder is filled and sealed (`ContentPlacer.prepareInstall`),
/// holding its lock until it is completed or abandoned.
package final class PreparedInstall: Sendable {
    let session: ContentPlacer.StagingSession
    /// Its intent, recorded (lazily when the flush covers the state database).
    let intent: ContentInstallation

    init(session: ContentPlacer.StagingSession, intent: ContentInstallation) {
        self.session = session
        self.intent = intent
    }

    /// A prepared install dropped without an end is ended.
    deinit { session.end() }

    /// What a process killed here leaves (tests): its lock free, its staging and its attempt row
    /// left for `recover()` and the next attempt.
    func leaveAsKilled() { session.leaveAsKilled() }
}

/// The group commits of `syncfs` of a placer's installs: one `GroupSync` per filesystem (by the
/// device of the folder asked for), so that the installs waiting at once share one flush.
final class StagingSyncs: Sendable {
    private let syncs = Mutex<[UInt64: GroupSync]>([:])
    private let flush: @Sendable (URL) throws -> Void

    /// `flush`: one sync of the filesystem holding a folder (tests record it).
    init(flush: @escaping @Sendable (URL) throws -> Void = { try FilesystemSync.flush(containing: $0) }) {
        self.flush = flush
    }

    /// Returns once a `syncfs` of the filesystem holding `folder`, started after this call,
    /// has completed.
    func sync(containing folder: URL) async throws {
        var status = stat()
        guard stat(folder.path, &status) == 0 else { throw CourierError.posix("stat", path: folder.path) }
        let device = UInt64(status.st_dev)
        let group = syncs.withLock { syncs in
            if let group = syncs[device] { return group }
            let group = GroupSync { [flush] in try flush(folder) }
            syncs[device] = group
            return group
        }
        try await group.sync()
    }
}
