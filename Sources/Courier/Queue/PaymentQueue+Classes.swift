import Foundation
import GRDB

/// Where the essential content of every purchase stands (`courier wait --essential`).
public struct EssentialProgress: Sendable, Equatable {
    /// Essential downloads of delivered purchases not placed yet (waiting, active, paused).
    public var pending: [DownloadRecord]
    /// Essential downloads that failed, or that a user cancelled before the purchase finished.
    public var failed: [DownloadRecord]

    /// Every essential content of every purchase is placed.
    public var isComplete: Bool { pending.isEmpty && failed.isEmpty }
}

extension PaymentQueue {
    /// The essential downloads of purchased, restored and finished transactions that are not
    /// placed (docs/delivery-classes.md): `wait --essential` is done when there are none.
    /// Prefetch and on-demand downloads never count; nor do failed or deferred transactions.
    public func essentialProgress() throws -> EssentialProgress {
        try read { db in
            let rows = try Row.fetchAll(
                db.cachedStatement(sql: """
                    SELECT \(QueueStore.downloadColumns("d.")) FROM downloads d JOIN transactions t ON t.id = d.transactionId
                    WHERE d.delivery = 'essential' AND d.state != 'finished'
                      AND t.state IN ('purchased', 'restored', 'finished')
                      AND NOT (d.state = 'cancelled' AND t.state = 'finished')
                    ORDER BY d.createdAt, d.id
                    """))
            let downloads = try rows.map { try QueueStore.download($0) }
            return EssentialProgress(
                pending: downloads.filter { [.waiting, .active, .paused].contains($0.state) },
                failed: downloads.filter { $0.state == .failed || $0.state == .cancelled })
        }
    }
}
