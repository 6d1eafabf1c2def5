import Foundation
import GRDB
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Pins on delivered content: pinned content is never purged for space (docs/delivery-classes.md).
///
/// Two kinds, as On-Demand Resources' `beginAccessingResources` / `endAccessingResources`:
/// - **Held** (process-bound): a lock file `Pins/<contentIdentifier>/<uuid>.lock` under an
///   exclusive `flock` of the process that pinned it (`hold`, `courier content open --hold`,
///   `CourierClient.openContent(productID:)`). The kernel drops the lock when that process
///   exits, however it ends, so a crashed app leaves no pin: a lock file nobody holds is stale
///   and is removed by the next reader.
/// - **Open** (until closed): a row of `content_pin`, written by `courier content open` (a
///   command that exits at once) and removed by `courier content close` or `content delete`.
public struct ContentPins: Sendable {
    public let layout: StorageLayout
    let store: StateStore

    public init(layout: StorageLayout, store: StateStore) {
        self.layout = layout
        self.store = store
    }

    /// How `contentIdentifier` is pinned now.
    public struct State: Sendable, Equatable, Codable {
        /// Pinned by `content open` until `content close`.
        public var open: Bool
        /// Live processes holding a pin on it.
        public var holders: Int

        public init(open: Bool, holders: Int) {
            self.open = open
            self.holders = holders
        }

        public var isPinned: Bool { open || holders > 0 }

        /// `-`, `open`, `held`, `held×2`, `open+held`: the PIN column of `content list`.
        public var label: String {
            var parts: [String] = []
            if open { parts.append("open") }
            if holders == 1 { parts.append("held") } else if holders > 1 { parts.append("held×\(holders)") }
            return parts.isEmpty ? "-" : parts.joined(separator: "+")
        }
    }

    // MARK: Held pins

    /// Pins `contentIdentifier` for as long as the returned pin is held (until `release()`, its
    /// deinit, or this process's end). The lock file is created owner-only under a hidden name,
    /// locked, then renamed into place, so a reader never sees an unlocked pin of a live holder.
    public func hold(_ contentIdentifier: String) throws -> HeldPin {
        try ContentPlacer.checkIdentifier(contentIdentifier)
        try StorageLayout.makeOwnerOnlyFolder(layout.pins)
        let folder = layout.pins.appendingPathComponent(contentIdentifier, isDirectory: true)
        try StorageLayout.makeOwnerOnlyFolder(folder)
        let name = UUID().uuidString.lowercased()
        let temporary = folder.appendingPathComponent(".\(name).new")
        let final = folder.appendingPathComponent("\(name).lock")
        let fd = open(temporary.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw CourierError.posix("open", path: temporary.path) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0, rename(temporary.path, final.path) == 0 else {
            let error = CourierError.posix("pin", path: temporary.path)
            unlink(temporary.path)
            close(fd)
            throw error
        }
        return HeldPin(contentIdentifier: contentIdentifier, url: final, fd: fd)
    }

    /// Live processes holding a pin on `contentIdentifier`; stale lock files are removed.
    public func holders(_ contentIdentifier: String) -> Int {
        let folder = layout.pins.appendingPathComponent(contentIdentifier, isDirectory: true)
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder.path) else { return 0 }
        var live = 0
        for name in names {
            let file = folder.appendingPathComponent(name)
            if Self.isHeld(file) {
                live += 1
            } else if name.hasSuffix(".lock") || name.hasSuffix(".new") {
                unlink(file.path)  // its holder is gone (or never finished pinning)
            }
        }
        if live == 0 { rmdir(folder.path) }
        return live
    }

    /// Whether another open file description holds a lock on `file`: a free lock means its
    /// holder is gone. (A lock this process holds through another descriptor also counts:
    /// `flock` locks belong to open file descriptions, not processes.)
    static func isHeld(_ file: URL) -> Bool {
        let fd = open(file.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return false
        }
        return errno == EWOULDBLOCK
    }

    // MARK: Open pins

    /// Pins `contentIdentifier` until `unpin` (`content close`). Returns false if it already was.
    @discardableResult
    public func pin(_ contentIdentifier: String, at date: Date = Date()) throws -> Bool {
        try ContentPlacer.checkIdentifier(contentIdentifier)
        return try write { db in
            try db.execute(
                sql: "INSERT INTO content_pin (contentIdentifier, pinnedAt) VALUES (?, ?) ON CONFLICT DO NOTHING",
                arguments: [contentIdentifier, date])
            return db.changesCount == 1
        }
    }

    /// Removes the `content open` pin of `contentIdentifier`. Returns whether there was one.
    @discardableResult
    public func unpin(_ contentIdentifier: String) throws -> Bool {
        try write { db in
            try Self.removeRecord(db, contentIdentifier: contentIdentifier)
            return db.changesCount == 1
        }
    }

    static func removeRecord(_ db: Database, contentIdentifier: String) throws {
        try db.execute(sql: "DELETE FROM content_pin WHERE contentIdentifier = ?", arguments: [contentIdentifier])
    }

    // MARK: Queries

    public func state(_ contentIdentifier: String) throws -> State {
        let open = try read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM content_pin WHERE contentIdentifier = ?", arguments: [contentIdentifier])
                ?? false
        }
        return State(open: open, holders: holders(contentIdentifier))
    }

    public func isPinned(_ contentIdentifier: String) throws -> Bool { try state(contentIdentifier).isPinned }

    /// Every pinned content identifier: open pins and live held ones.
    public func pinned() throws -> Set<String> {
        var result = Set(try read { db in try String.fetchAll(db, sql: "SELECT contentIdentifier FROM content_pin") })
        let names = (try? FileManager.default.contentsOfDirectory(atPath: layout.pins.path)) ?? []
        for name in names where !name.hasPrefix(".") && holders(name) > 0 { result.insert(name) }
        return result
    }

    private func read<T>(_ body: (Database) throws -> T) throws -> T {
        try CourierError.wrapping(.io, "cannot read content pins from the store") { try store.pool.read { db in try body(db) } }
    }

    private func write<T>(_ body: (Database) throws -> T) throws -> T {
        try CourierError.wrapping(.io, "cannot update content pins in the store") { try store.pool.write { db in try body(db) } }
    }
}

/// A held pin (`ContentPins.hold`): the content stays pinned until `release()`, this object's
/// end, or its process's end.
public final class HeldPin: Sendable {
    public let contentIdentifier: String
    let url: URL
    private let fd: Mutex<Int32?>

    init(contentIdentifier: String, url: URL, fd: Int32) {
        self.contentIdentifier = contentIdentifier
        self.url = url
        self.fd = Mutex(fd)
    }

    /// Ends the pin (`endAccessingResources`). Idempotent.
    public func release() {
        fd.withLock { fd in
            guard let open = fd else { return }
            unlink(url.path)
            close(open)
            fd = nil
        }
    }

    deinit { release() }
}

/// The order cache content is purged in under space pressure: `low` preservation before
/// `normal` before `high`, least recently used first within each (then by identifier, so the
/// order is total); pinned content, content in use and Documents content never.
public enum PurgeOrder {
    public static func candidates(_ contents: [DeliveredContent], pinned: Set<String>, inUse: Set<String> = [])
        -> [DeliveredContent]
    {
        contents.filter { content in
            content.placement == .cache && !pinned.contains(content.contentIdentifier) && !inUse.contains(content.contentIdentifier)
        }.sorted { a, b in
            (a.preservation.rank, a.lastUsedAt, a.contentIdentifier) < (b.preservation.rank, b.lastUsedAt, b.contentIdentifier)
        }
    }
}
