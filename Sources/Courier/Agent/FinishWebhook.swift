import Foundation
import GRDB
import Logging

extension QueueSchema {
    /// The agent's finish-webhook outbox: one row per finished transaction to announce, kept
    /// until the configured URL acknowledges it with a 2xx, so a restart keeps retrying.
    static func createAgentV1(_ db: Database) throws {
        try db.execute(sql: """
                CREATE TABLE webhook_outbox (
                    transactionId TEXT PRIMARY KEY NOT NULL,
                    url TEXT NOT NULL,
                    body TEXT NOT NULL,                        -- the JSON POSTed
                    attempts INTEGER NOT NULL DEFAULT 0,
                    nextAttemptAt REAL NOT NULL,
                    lastError TEXT,
                    createdAt REAL NOT NULL,
                    deliveredAt REAL                           -- set on a 2xx
                );
                CREATE INDEX webhook_outbox_pending ON webhook_outbox (deliveredAt, nextAttemptAt);
                """)
    }
}

/// The finish webhook: records each finished transaction in the store's outbox (durably, as the
/// pipeline's `FinishNotifying`) and POSTs `{"transactionId": ..., "productId": ...}` to `url`
/// through an `HTTPTransport` until a 2xx arrives, backing off exponentially between attempts.
public final class FinishWebhook: FinishNotifying, Sendable {
    public let url: URL
    let store: StateStore
    let transport: any HTTPTransport
    let initialBackoff: Double
    let maxBackoff: Double
    let logger: Logger

    public init(
        url: URL, store: StateStore, transport: any HTTPTransport, initialBackoff: Double = 1, maxBackoff: Double = 300,
        logger: Logger
    ) {
        self.url = url
        self.store = store
        self.transport = transport
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
        self.logger = logger
    }

    /// Writes the outbox row of every transaction `queue` finishes in the finishing database
    /// transaction itself, so a crash between the two cannot lose an announcement.
    public func attach(to queue: PaymentQueue) {
        let url = url
        queue.onFinish { db, transaction in try Self.record(transaction, url: url, in: db) }
    }

    /// Queues the announcement of `transaction` (idempotent: a no-op when `attach(to:)` wrote it
    /// already); `deliverDue` sends it.
    public func transactionFinished(_ transaction: TransactionRecord) async throws {
        let url = url
        try await store.pool.write { db in try Self.record(transaction, url: url, in: db) }
    }

    static func record(_ transaction: TransactionRecord, url: URL, in db: Database) throws {
        let body = try JSONSerialization.data(
            withJSONObject: ["event": "finished", "transactionId": transaction.id, "productId": transaction.productId],
            options: [.sortedKeys])
        let now = Date().timeIntervalSince1970
        try db.cachedStatement(
            sql: """
                INSERT OR IGNORE INTO webhook_outbox (transactionId, url, body, nextAttemptAt, createdAt)
                VALUES (?, ?, ?, ?, ?)
                """
        ).execute(arguments: [transaction.id, url.absoluteString, String(decoding: body, as: UTF8.self), now, now])
    }

    private struct Due: Sendable {
        var id: String
        var url: String
        var body: String
        var attempts: Int
    }

    /// A row of the outbox.
    public struct Pending: Sendable, Equatable {
        public var transactionId: String
        public var url: String
        public var attempts: Int
        public var deliveredAt: Date?
        public var lastError: String?
    }

    /// The outbox, oldest first.
    public func outbox() throws -> [Pending] {
        try store.pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT * FROM webhook_outbox ORDER BY createdAt, transactionId")).map { row in
                Pending(
                    transactionId: row["transactionId"], url: row["url"], attempts: row["attempts"],
                    deliveredAt: (row["deliveredAt"] as Double?).map { Date(timeIntervalSince1970: $0) },
                    lastError: row["lastError"])
            }
        }
    }

    /// Sends every announcement that is due; returns how many were acknowledged.
    @discardableResult
    public func deliverDue(now: Date = Date()) async -> Int {
        let due: [Due]
        do {
            due = try await store.pool.read { db in
                try Row.fetchAll(
                    db.cachedStatement(sql: """
                        SELECT transactionId, url, body, attempts FROM webhook_outbox
                        WHERE deliveredAt IS NULL AND nextAttemptAt <= ? ORDER BY nextAttemptAt LIMIT 32
                        """),
                    arguments: [now.timeIntervalSince1970]
                ).map { row in Due(id: row["transactionId"], url: row["url"], body: row["body"], attempts: row["attempts"]) }
            }
        } catch {
            logger.error("cannot read the webhook outbox", metadata: ["error": "\(error)"])
            return 0
        }
        var acknowledged = 0
        for item in due {
            if Task.isCancelled { break }
            var failure: String?
            if let target = URL(string: item.url) {
                let request = HTTPRequest(
                    method: "POST", url: target, headers: [("Content-Type", "application/json")], body: Data(item.body.utf8),
                    timeout: 15, maxResponseBytes: 64 * 1024)
                do {
                    let response = try await transport.send(request)
                    if !(200..<300).contains(response.status) { failure = "HTTP \(response.status)" }
                } catch {
                    failure = (error as? CourierError)?.description ?? "\(error)"
                }
            } else {
                failure = "not a URL: \(item.url)"
            }
            let attempts = item.attempts + 1
            let delay = RetryPolicy(maxRetries: nil, backoffBase: initialBackoff, backoffMax: maxBackoff, jitter: false).delay(retry: attempts)
            let stamp = Date().timeIntervalSince1970
            let outcome = failure
            do {
                try await store.pool.write { db in
                    if let outcome {
                        try db.cachedStatement(sql: "UPDATE webhook_outbox SET attempts = ?, nextAttemptAt = ?, lastError = ? WHERE transactionId = ?").execute(arguments: [attempts, stamp + delay, outcome, item.id])
                    } else {
                        try db.cachedStatement(sql: "UPDATE webhook_outbox SET attempts = ?, deliveredAt = ?, lastError = NULL WHERE transactionId = ?").execute(arguments: [attempts, stamp, item.id])
                    }
                }
            } catch {
                logger.error("cannot update the webhook outbox", metadata: ["error": "\(error)"])
            }
            if let failure {
                logger.warning(
                    "finish webhook not acknowledged (\(failure)); retry \(attempts) in \(delay) s",
                    metadata: ["transaction-id": "\(item.id)", "attempt": "\(attempts)", "error": "\(failure)", "retry-in": "\(delay)"])
            } else {
                acknowledged += 1
                logger.info("finish webhook acknowledged", metadata: ["transaction-id": "\(item.id)"])
            }
        }
        return acknowledged
    }
}
