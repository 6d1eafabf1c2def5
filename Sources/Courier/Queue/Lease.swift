import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// Who holds a lease: a process on a host, and a token unique to one `LeaseManager`.
public struct LeaseOwner: Sendable, Equatable, Codable {
    public var pid: Int32
    /// The process's start time in clock ticks since boot (`/proc/PID/stat`), so a reused pid is
    /// not mistaken for the owner.
    public var startTime: Int64?
    public var host: String
    public var token: String

    public init(pid: Int32, startTime: Int64?, host: String, token: String) {
        self.pid = pid
        self.startTime = startTime
        self.host = host
        self.token = token
    }

    /// This process, with a fresh token.
    public static func current() -> LeaseOwner {
        let pid = getpid()
        return LeaseOwner(pid: pid, startTime: processStartTime(pid), host: hostName(), token: UUID().uuidString)
    }

    /// This machine's host name.
    public static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "localhost" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The start time of process `pid` (field 22 of /proc/PID/stat), or nil if it does not exist.
    public static func processStartTime(_ pid: Int32) -> Int64? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        // Fields after the command name start at field 3 (state); starttime is field 22.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 19 else { return nil }
        return Int64(fields[19])
    }

    /// Whether process `pid` started at `startTime` is alive on this host.
    public static func isAlive(pid: Int32, startTime: Int64?) -> Bool {
        if kill(pid, 0) != 0 && errno == ESRCH { return false }
        if let startTime, let current = processStartTime(pid), current != startTime { return false }
        if startTime != nil && processStartTime(pid) == nil { return false }
        return true
    }
}

/// A download's lease: one process works a download at a time, and renews its lease with a
/// heartbeat. A lease is stale, and may be taken over, once its expiry passed or, on the same
/// host, once its owner process is gone.
public struct Lease: Sendable, Equatable, Codable {
    public var downloadId: String
    public var owner: LeaseOwner
    public var acquiredAt: Date
    public var heartbeatAt: Date
    public var expiresAt: Date

    /// Whether another process may take this lease over at `now`, seen from `host`.
    public func isStale(now: Date = Date(), host: String = LeaseOwner.hostName()) -> Bool {
        if expiresAt <= now { return true }
        if owner.host == host && !LeaseOwner.isAlive(pid: owner.pid, startTime: owner.startTime) { return true }
        return false
    }
}

// In an extension, so that `Lease` keeps its memberwise init.
extension Lease {
    /// The columns of `leases` in the order `init(row:at:)` reads them (read by index: see
    /// `QueueStore.transactionColumnNames`).
    static let columnNames = ["downloadId", "ownerPid", "ownerStartTime", "host", "token", "acquiredAt", "heartbeatAt", "expiresAt"]

    /// `columnNames` as a select list, each name after `prefix` (a table alias and a dot).
    static func columns(_ prefix: String = "") -> String {
        columnNames.map { prefix + $0 }.joined(separator: ", ")
    }

    static let selectColumns = columns()

    /// The lease in `row`, whose columns from `offset` on are `columns`.
    init(row: Row, at offset: Int = 0) {
        downloadId = row[offset]
        owner = LeaseOwner(pid: row[offset + 1], startTime: row[offset + 2], host: row[offset + 3], token: row[offset + 4])
        acquiredAt = Date(timeIntervalSince1970: row[offset + 5])
        heartbeatAt = Date(timeIntervalSince1970: row[offset + 6])
        expiresAt = Date(timeIntervalSince1970: row[offset + 7])
    }
}

/// Takes, renews and releases download leases for one owner. Each operation is one database
/// transaction (IMMEDIATE), so two processes racing for one download serialise in SQLite and
/// exactly one wins.
public struct LeaseManager: Sendable {
    public let owner: LeaseOwner
    /// Seconds a lease lasts past its last heartbeat.
    public let duration: Double

    public init(owner: LeaseOwner = .current(), duration: Double) {
        self.owner = owner
        self.duration = duration
    }

    /// The lease on `downloadId`, if any.
    public static func lease(_ db: Database, downloadId: String) throws -> Lease? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Lease.selectColumns) FROM leases WHERE downloadId = ?"), arguments: [downloadId])
            .map { Lease(row: $0) }
    }

    /// Takes the lease on `downloadId` inside the caller's transaction: free, ours already, or
    /// stale. Throws `CourierError(.leased)` when a live owner holds it.
    @discardableResult
    public func acquire(_ db: Database, downloadId: String, now: Date = Date()) throws -> Lease {
        if let existing = try Self.lease(db, downloadId: downloadId), existing.owner.token != owner.token,
            !existing.isStale(now: now, host: owner.host)
        {
            throw CourierError(
                .leased,
                "download \(downloadId) is being worked by process \(existing.owner.pid) on \(existing.owner.host)",
                hint: "pause or cancel it there, or wait for its lease to expire")
        }
        return try take(db, downloadId: downloadId, now: now)
    }

    /// Writes this owner's lease on `downloadId` inside the caller's transaction, replacing any:
    /// for a caller that has just read the lease and found it free, ours or stale. Returns the
    /// lease as written (the times as stored: seconds since 1970).
    @discardableResult
    func take(_ db: Database, downloadId: String, now: Date = Date()) throws -> Lease {
        let acquired = now.timeIntervalSince1970
        let expires = now.addingTimeInterval(duration).timeIntervalSince1970
        try db.cachedStatement(sql: """
                INSERT OR REPLACE INTO leases (downloadId, ownerPid, ownerStartTime, host, token, acquiredAt, heartbeatAt, expiresAt)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """).execute(arguments: [
                downloadId, owner.pid, owner.startTime, owner.host, owner.token, acquired, acquired, expires,
            ])
        return Lease(
            downloadId: downloadId, owner: owner, acquiredAt: Date(timeIntervalSince1970: acquired),
            heartbeatAt: Date(timeIntervalSince1970: acquired), expiresAt: Date(timeIntervalSince1970: expires))
    }

    /// Renews our lease on `downloadId`; returns false when we no longer hold it.
    public func heartbeat(_ db: Database, downloadId: String, now: Date = Date()) throws -> Bool {
        try db.cachedStatement(sql: "UPDATE leases SET heartbeatAt = ?, expiresAt = ? WHERE downloadId = ? AND token = ?").execute(arguments: [
                now.timeIntervalSince1970, now.addingTimeInterval(duration).timeIntervalSince1970, downloadId,
                owner.token,
            ])
        return db.changesCount == 1
    }

    /// Gives up our lease on `downloadId` (no effect if another owner took it over).
    public func release(_ db: Database, downloadId: String) throws {
        try db.cachedStatement(sql: "DELETE FROM leases WHERE downloadId = ? AND token = ?").execute(arguments: [downloadId, owner.token])
    }
}
