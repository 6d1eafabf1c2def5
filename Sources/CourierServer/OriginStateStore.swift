import Courier
import Foundation
import GRDB
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What applying an App Store Server Notification did.
public enum NotificationOutcome: String, Sendable, Equatable {
    /// The transaction is now recorded as revoked (`REFUND`, `REVOKE`).
    case revoked
    /// A revocation was cleared (`REFUND_REVERSED`).
    case reinstated
    /// A notification type the origin does not act on, or one older than the last applied
    /// for its transaction; acknowledged and recorded as seen.
    case ignored
    /// This `notificationUUID` was applied before; nothing changed.
    case duplicate
}

/// Where the origin records the App Store Server Notifications it applied and the transactions
/// they revoked, and answers the gate's "was this refunded?".
///
/// `OriginStateStore` keeps them in the origin's SQLite file (one gate). `PostgresRefundStore`
/// (CourierPostgres, `courier serve --state postgresql://…`) keeps them in PostgreSQL so a refund
/// received by one gate is refused by every gate. Either way `apply` is durable before it
/// returns (the 200 to Apple), and `isRevoked` answers from memory, asking no database.
public protocol RefundStore: RevocationSource {
    /// Applies a verified notification in one durable transaction: `REFUND` and `REVOKE` revoke
    /// its transaction, `REFUND_REVERSED` reinstates it; a `notificationUUID` seen before changes
    /// nothing; one signed before the last applied to its transaction changes nothing.
    func apply(_ verified: VerifiedServerNotification, now: Date) async throws -> NotificationOutcome
}

extension OriginStateStore: RefundStore {}

/// What the origin keeps across restarts: the App Store Server Notifications it applied and the
/// transactions they revoked (`<storage>/origin.sqlite`, owner-only, SQLite with synchronous =
/// FULL so a recorded notification is on disk before the origin answers 200).
///
/// The set of revoked transaction ids is also held in memory (loaded at open, updated after each
/// commit) so the gate asks no database on a download. Several gates may share the file (one
/// storage root); its tables are created once (`SchemaMigrations`).
public final class OriginStateStore: Sendable {
    public let url: URL
    let queue: DatabaseQueue
    private let revoked: RevokedSet

    /// What applying a notification did.
    public typealias Outcome = NotificationOutcome

    /// Opens (creating if needed) the state file in `directory`, which is created owner-only
    /// (0700) if missing; the file is created 0600 before SQLite opens it.
    public init(directory: URL) throws {
        try StorageLayout.makeOwnerOnlyFolder(directory)
        let path = directory.appendingPathComponent("origin.sqlite").path
        url = URL(fileURLWithPath: path)
        try OwnerOnlyFile.create(atPath: path)
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        do {
            // Gates started together on one storage root create the tables once; the others wait
            // for it (`SchemaMigrations`, docs/origin.md).
            let opened = try SchemaMigrations.retryingBusy {
                let queue = try DatabaseQueue(path: path, configuration: configuration)
                try Self.schema.migrate(queue)
                let ids = try queue.read { db in
                    try String.fetchAll(db, sql: "SELECT transactionId FROM transactionStatus WHERE revoked = 1")
                }
                return (queue: queue, ids: ids)
            }
            queue = opened.queue
            revoked = RevokedSet(Set(opened.ids))
        } catch let error as CourierError {
            throw error
        } catch {
            throw CourierError(.io, "cannot open the origin's state \(url.path)", cause: "\(error)")
        }
    }

    /// The tables of `origin.sqlite`, in order. Append only; never edit a shipped migration.
    static let schema = SchemaMigrations([
        (
            "notifications-v1",
            { db in
                try db.execute(
                    sql: """
                        CREATE TABLE notifications (
                            notificationUUID TEXT PRIMARY KEY NOT NULL,
                            notificationType TEXT NOT NULL,
                            subtype TEXT,
                            transactionId TEXT,
                            signedDate INTEGER,
                            receivedAt INTEGER NOT NULL
                        );
                        CREATE TABLE transactionStatus (
                            transactionId TEXT PRIMARY KEY NOT NULL,
                            originalTransactionId TEXT NOT NULL,
                            productId TEXT NOT NULL,
                            revoked INTEGER NOT NULL,
                            notificationType TEXT NOT NULL,
                            notificationUUID TEXT NOT NULL,
                            signedDate INTEGER NOT NULL,
                            updatedAt INTEGER NOT NULL
                        );
                        """
                )
            }
        )
    ])

    /// Whether an App Store notification revoked `transactionId` (and no later one reversed it).
    public func isRevoked(_ transactionId: String) -> Bool {
        revoked.contains(transactionId)
    }

    /// Applies a verified notification in one durable transaction: `REFUND` and `REVOKE` mark its
    /// transaction revoked, `REFUND_REVERSED` clears that; a `notificationUUID` seen before
    /// changes nothing; a notification signed before the last one applied to its transaction
    /// (Apple does not promise order) is recorded but does not change the transaction's status.
    public func apply(_ verified: VerifiedServerNotification, now: Date = Date()) throws -> Outcome {
        let notification = verified.notification
        let type = notification.notificationType
        let transaction = verified.transaction
        let signed = notification.signedDate.map { Self.milliseconds($0) } ?? Self.milliseconds(now)
        let outcome: Outcome
        do {
            outcome = try queue.write { db -> Outcome in
                let seen = try Bool.fetchOne(
                    db, sql: "SELECT 1 FROM notifications WHERE notificationUUID = ?", arguments: [notification.notificationUUID]
                ) ?? false
                if seen { return .duplicate }
                try db.execute(
                    sql: """
                        INSERT INTO notifications (notificationUUID, notificationType, subtype, transactionId, signedDate, receivedAt)
                        VALUES (?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        notification.notificationUUID, type, notification.subtype, transaction?.transactionId,
                        notification.signedDate.map { Self.milliseconds($0) }, Self.milliseconds(now),
                    ]
                )
                guard let transaction, let revoke = Self.revokes(type) else { return .ignored }
                let last = try Int64.fetchOne(
                    db, sql: "SELECT signedDate FROM transactionStatus WHERE transactionId = ?", arguments: [transaction.transactionId]
                )
                if let last, last > signed { return .ignored }
                try db.execute(
                    sql: """
                        INSERT INTO transactionStatus
                            (transactionId, originalTransactionId, productId, revoked, notificationType, notificationUUID, signedDate, updatedAt)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                        ON CONFLICT (transactionId) DO UPDATE SET
                            revoked = excluded.revoked, notificationType = excluded.notificationType,
                            notificationUUID = excluded.notificationUUID, signedDate = excluded.signedDate,
                            updatedAt = excluded.updatedAt
                        """,
                    arguments: [
                        transaction.transactionId, transaction.originalTransactionId, transaction.productId, revoke,
                        type, notification.notificationUUID, signed, Self.milliseconds(now),
                    ]
                )
                return revoke ? .revoked : .reinstated
            }
        } catch {
            throw CourierError(.io, "cannot record the notification in \(url.path)", cause: "\(error)")
        }
        revoked.record(outcome, for: transaction?.transactionId)
        return outcome
    }

    /// Whether a notification type revokes (true), reinstates (false) or is ignored (nil).
    public static func revokes(_ type: String) -> Bool? {
        switch type {
        case "REFUND", "REVOKE": return true
        case "REFUND_REVERSED": return false
        default: return nil
        }
    }

    public static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded())
    }
}

/// The revoked transaction ids, shared by the gate's requests and the notification handler.
public final class RevokedSet: Sendable {
    private let ids: Mutex<Set<String>>

    public init(_ ids: Set<String>) {
        self.ids = Mutex(ids)
    }

    /// Replaces the whole set (a store that reloaded it).
    public func replace(with ids: Set<String>) {
        self.ids.withLock { $0 = ids }
    }

    public func contains(_ id: String) -> Bool {
        ids.withLock { $0.contains(id) }
    }

    /// Marks `id` revoked, or no longer.
    public func set(_ id: String, revoked: Bool) {
        ids.withLock { ids in
            if revoked { ids.insert(id) } else { ids.remove(id) }
        }
    }

    /// Takes in what a store's applying a notification to `transactionId` did.
    public func record(_ outcome: NotificationOutcome, for transactionId: String?) {
        guard let transactionId, outcome == .revoked || outcome == .reinstated else { return }
        set(transactionId, revoked: outcome == .revoked)
    }
}
