import Courier
import CourierServer
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

/// The origin's refunds in PostgreSQL, shared by every gate (`courier serve --state
/// postgresql://…`): the same records and rules as `OriginStateStore`'s SQLite tables, in
/// `origin_notification` and `origin_transaction_status`.
///
/// `apply` commits before it returns (the 200 to Apple) and, in the same transaction, sends
/// `NOTIFY courier_refunds`; every gate LISTENs and updates its in-memory set at once, and
/// reloads the whole set every `refreshInterval` in case a notification was missed while its
/// LISTEN connection was down. `isRevoked` answers from memory. `open` migrates the schema and
/// loads the set before the gate answers anyone; `run()` (a Service) keeps the pool, the LISTEN
/// and the reloads going until graceful shutdown.
public final class PostgresRefundStore: RefundStore, Service, Sendable {
    public let url: PostgresURL
    let client: PostgresClient
    let revoked: RevokedSet
    let refreshInterval: Duration
    let logger: Logger
    static let channel = "courier_refunds"

    private init(url: PostgresURL, client: PostgresClient, revoked: RevokedSet, refreshInterval: Duration, logger: Logger) {
        self.url = url
        self.client = client
        self.revoked = revoked
        self.refreshInterval = refreshInterval
        self.logger = logger
    }

    /// Connects to `url`, creates or migrates the schema and loads the revoked transactions.
    public static func open(url: PostgresURL, refreshInterval: Duration = .seconds(10), logger: Logger) async throws
        -> PostgresRefundStore
    {
        let revocations: [RevokedSet.Revocation]
        do {
            let connection = try await PostgresConnection.connect(configuration: try url.connectionConfiguration, id: 1, logger: logger)
            do {
                try await PostgresSchema.migrate(connection: connection, logger: logger)
                revocations = try await loadRevoked(connection.query(selectRevoked, logger: logger))
                try? await connection.close()
            } catch {
                try? await connection.close()
                throw error
            }
        } catch {
            throw PostgresErrors.wrap(error, "cannot open the origin's refunds in PostgreSQL at \(url)")
        }
        let client = PostgresClient(configuration: try url.clientConfiguration, backgroundLogger: logger)
        return PostgresRefundStore(url: url, client: client, revoked: RevokedSet(revocations), refreshInterval: refreshInterval, logger: logger)
    }

    public func isRevoked(_ transactionId: String) -> Bool {
        revoked.contains(transactionId)
    }

    public func isPurchaseRevoked(originalTransactionId: String) -> Bool {
        revoked.containsPurchase(originalTransactionId)
    }

    public func run() async throws {
        // Bounded: a pool that misses the end of its shutdown (see PostgresClientRunner) must not
        // keep the gate from stopping, nor a LISTEN waiting on that pool.
        await cancelWhenGracefulShutdown {
            await PostgresClientRunner.runCancellable(grace: .seconds(2), logger: self.logger) {
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { await self.client.run() }
                    group.addTask { await self.listen() }
                    group.addTask { await self.refreshPeriodically() }
                    await group.next()
                    group.cancelAll()
                }
            }
        }
    }

    public func apply(_ verified: VerifiedServerNotification, now: Date) async throws -> NotificationOutcome {
        let notification = verified.notification
        let type = notification.notificationType
        let transaction = verified.transaction
        let signed = OriginStateStore.milliseconds(notification.signedDate ?? now)
        let received = OriginStateStore.milliseconds(now)
        let signedColumn = notification.signedDate.map { OriginStateStore.milliseconds($0) }
        let logger = self.logger
        let outcome: NotificationOutcome
        do {
            outcome = try await client.withTransaction(logger: logger) { connection -> NotificationOutcome in
                let inserted = try await connection.query(
                    """
                    INSERT INTO origin_notification
                        (notification_uuid, notification_type, subtype, transaction_id, signed_date, received_at)
                    VALUES (\(notification.notificationUUID), \(type), \(notification.subtype), \(transaction?.transactionId),
                            \(signedColumn), \(received))
                    ON CONFLICT (notification_uuid) DO NOTHING
                    RETURNING 1
                    """, logger: logger)
                var fresh = false
                for try await _ in inserted { fresh = true }
                guard fresh else { return .duplicate }
                guard let transaction, let revoke = OriginStateStore.revokes(type) else { return .ignored }
                // One notification at a time per transaction, whichever gate received it.
                try await connection.query(
                    "SELECT pg_advisory_xact_lock(hashtextextended(\(transaction.transactionId), 1))", logger: logger)
                let last = try await connection.query(
                    "SELECT signed_date FROM origin_transaction_status WHERE transaction_id = \(transaction.transactionId)",
                    logger: logger)
                for try await lastSigned in last.decode(Int64.self) where lastSigned > signed { return .ignored }
                try await connection.query(
                    """
                    INSERT INTO origin_transaction_status
                        (transaction_id, original_transaction_id, product_id, revoked, notification_type, notification_uuid,
                         signed_date, updated_at)
                    VALUES (\(transaction.transactionId), \(transaction.originalTransactionId), \(transaction.productId),
                            \(revoke), \(type), \(notification.notificationUUID), \(signed), \(received))
                    ON CONFLICT (transaction_id) DO UPDATE SET
                        revoked = excluded.revoked, notification_type = excluded.notification_type,
                        notification_uuid = excluded.notification_uuid, signed_date = excluded.signed_date,
                        updated_at = excluded.updated_at
                    """, logger: logger)
                let message = Self.message(
                    RevokedSet.Revocation(transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId),
                    revoked: revoke)
                try await connection.query("SELECT pg_notify(\(Self.channel), \(message))", logger: logger)
                return revoke ? .revoked : .reinstated
            }
        } catch {
            throw PostgresErrors.wrap(error, "cannot record the notification in PostgreSQL at \(url)")
        }
        revoked.record(outcome, for: transaction)
        return outcome
    }

    /// Reloads the whole set from the database now.
    public func refresh() async throws {
        do {
            revoked.replace(with: try await Self.loadRevoked(client.query(Self.selectRevoked, logger: logger)))
        } catch {
            throw PostgresErrors.wrap(error, "cannot reload the origin's refunds from PostgreSQL at \(url)")
        }
    }

    static var selectRevoked: PostgresQuery {
        "SELECT transaction_id, original_transaction_id FROM origin_transaction_status WHERE revoked"
    }

    static func loadRevoked(_ rows: PostgresRowSequence) async throws -> [RevokedSet.Revocation] {
        var revocations: [RevokedSet.Revocation] = []
        for try await (id, original) in rows.decode((String, String).self) {
            revocations.append(RevokedSet.Revocation(transactionId: id, originalTransactionId: original))
        }
        return revocations
    }

    /// The `NOTIFY courier_refunds` payload of a revocation (`1`) or a reinstatement (`0`): the
    /// flag, the transaction id, a line feed and its original's id. (Transaction ids are digits;
    /// a payload without the line feed names the transaction as its own original.)
    static func message(_ revocation: RevokedSet.Revocation, revoked: Bool) -> String {
        (revoked ? "1" : "0") + revocation.transactionId + "\n" + revocation.originalTransactionId
    }

    /// A payload `message` wrote, or nil for anything else.
    static func parse(_ payload: String) -> (RevokedSet.Revocation, revoked: Bool)? {
        guard let flag = payload.first, flag == "1" || flag == "0" else { return nil }
        let ids = payload.dropFirst().split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        guard let id = ids.first, !id.isEmpty else { return nil }
        let original = ids.count > 1 ? ids[1] : id
        guard !original.isEmpty else { return nil }
        return (RevokedSet.Revocation(transactionId: String(id), originalTransactionId: String(original)), flag == "1")
    }

    /// LISTENs for other gates' refunds; reconnects after a pause when the connection drops.
    private func listen() async {
        var retry = 0
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: Self.channel) { notifications in
                        // Anything committed before the LISTEN began is in a full reload.
                        try await self.refresh()
                        for try await notification in notifications {
                            self.applyNotification(notification.payload)
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("lost the PostgreSQL refunds channel; retrying", metadata: ["error": "\(error)"])
            }
            retry += 1
            try? await Task.sleep(for: .seconds(Self.relisten.delay(retry: retry)))
        }
    }

    /// When the channel is listened to again after it ended: a second later, every time (the
    /// one retry policy of Courier, without a limit or jitter).
    static let relisten = RetryPolicy(maxRetries: nil, backoffBase: 1, backoffMax: 1, jitter: false)

    private func applyNotification(_ payload: String) {
        guard let (revocation, flag) = Self.parse(payload) else { return }
        revoked.set(revocation, revoked: flag)
    }

    private func refreshPeriodically() async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: refreshInterval)
                try await refresh()
            } catch is CancellationError {
                return
            } catch {
                logger.warning("cannot reload the refunds from PostgreSQL", metadata: ["error": "\(error)"])
            }
        }
    }
}
