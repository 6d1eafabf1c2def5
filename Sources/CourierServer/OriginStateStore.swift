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
                let revocations = try queue.read { db in try Self.revocations(db) }
                return (queue: queue, revocations: revocations)
            }
            queue = opened.queue
            revoked = RevokedSet(opened.revocations)
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

    /// The revoked transactions recorded in `db`, each with its original purchase.
    static func revocations(_ db: Database) throws -> [RevokedSet.Revocation] {
        try Row.fetchAll(db, sql: "SELECT transactionId, originalTransactionId FROM transactionStatus WHERE revoked = 1").compactMap {
            row -> RevokedSet.Revocation? in
            guard let id: String = row["transactionId"], let original: String = row["originalTransactionId"] else { return nil }
            return RevokedSet.Revocation(transactionId: id, originalTransactionId: original)
        }
    }

    /// Whether an App Store notification revoked `transactionId` (and no later one reversed it).
    public func isRevoked(_ transactionId: String) -> Bool {
        revoked.contains(transactionId)
    }

    /// Whether an App Store notification revoked any copy of the purchase `originalTransactionId`.
    public func isPurchaseRevoked(originalTransactionId: String) -> Bool {
        revoked.containsPurchase(originalTransactionId)
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
        revoked.record(outcome, for: transaction)
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

/// The revoked transactions, shared by the gate's requests and the notification handler, each
/// with the original purchase it is a copy of (`originalTransactionId`: the purchase itself, or
/// a restored copy of it, or a subscription's renewal).
///
/// `contains` answers for one transaction; `containsPurchase` for every copy of one original:
/// a refund names one copy (the one the user asked about), and for a one-time purchase it takes
/// the purchase back, so the gate refuses the original's token and every restored copy's
/// (`ReceiptAccessGate`). A subscription's renewals share an original too; the gate asks only
/// `contains` for them (one period's refund is that period's).
public final class RevokedSet: Sendable {
    /// One revoked transaction and the original purchase it belongs to.
    public struct Revocation: Sendable, Hashable {
        public var transactionId: String
        public var originalTransactionId: String

        public init(transactionId: String, originalTransactionId: String) {
            self.transactionId = transactionId
            self.originalTransactionId = originalTransactionId
        }
    }

    private struct State {
        /// Revoked transaction id → its original's id.
        var transactions: [String: String] = [:]
        /// Original id → how many of its copies are revoked.
        var originals: [String: Int] = [:]

        init(_ revocations: [Revocation]) {
            for revocation in revocations { set(revocation, revoked: true) }
        }

        mutating func set(_ revocation: Revocation, revoked: Bool) {
            if let previous = transactions.removeValue(forKey: revocation.transactionId) {
                originals[previous, default: 1] -= 1
                if originals[previous] ?? 0 <= 0 { originals[previous] = nil }
            }
            guard revoked else { return }
            transactions[revocation.transactionId] = revocation.originalTransactionId
            originals[revocation.originalTransactionId, default: 0] += 1
        }
    }

    private let state: Mutex<State>

    public init(_ revocations: [Revocation]) {
        state = Mutex(State(revocations))
    }

    /// Replaces the whole set (a store that reloaded it).
    public func replace(with revocations: [Revocation]) {
        let fresh = State(revocations)
        state.withLock { $0 = fresh }
    }

    /// Whether transaction `id` itself is revoked.
    public func contains(_ id: String) -> Bool {
        state.withLock { $0.transactions[id] != nil }
    }

    /// Whether any copy of the original purchase `originalTransactionId` is revoked (the
    /// original itself included).
    public func containsPurchase(_ originalTransactionId: String) -> Bool {
        state.withLock { $0.originals[originalTransactionId] != nil || $0.transactions[originalTransactionId] != nil }
    }

    /// Marks a transaction revoked, or no longer.
    public func set(_ revocation: Revocation, revoked: Bool) {
        state.withLock { $0.set(revocation, revoked: revoked) }
    }

    /// Takes in what a store's applying a notification about `transaction` did.
    public func record(_ outcome: NotificationOutcome, for transaction: VerifiedTransaction?) {
        guard let transaction, outcome == .revoked || outcome == .reinstated else { return }
        let revocation = Revocation(transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId)
        set(revocation, revoked: outcome == .revoked)
    }
}
