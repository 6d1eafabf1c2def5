import Foundation

/// What `courier deliver` does with a purchase once it is queued (`CourierClient.planDelivery`):
/// the decisions of a foreground delivery, so that a front end only says them and runs it.
public struct DeliveryPlan: Sendable {
    public enum Action: Sendable {
        /// Every purchase was delivered (and finished) by an earlier run, and its content is in
        /// place or was not asked for again (`--restore` asks): nothing to do.
        case alreadyDelivered
        /// Every purchase failed (revoked): this error ends the run, nothing is delivered.
        case refused(CourierError)
        /// Deliver `scope`, its stopped downloads first (`retryStopped`). `contentless`: purchases of
        /// products the catalog lists without hosted content, finished with nothing to download.
        case deliver(contentless: [TransactionRecord])
    }

    /// The queued transactions as stored (already known ones as they are).
    public var transactions: [TransactionRecord]
    public var action: Action
    /// Purchases of products the catalog does not list: not queued, so not finished. Said, and
    /// thrown (exit 3) once the others are delivered.
    public var notInCatalog: CourierError?

    /// The run's scope: the queued transactions.
    public var scope: DeliveryScope { .transactions(Set(transactions.map(\.id))) }

    /// The plan for what `enqueued` queued; `withoutDownloads` answers which of its transaction
    /// ids have no download (one read).
    init(_ enqueued: EnqueueResult, withoutDownloads: (Set<String>) throws -> Set<String>) throws {
        transactions = enqueued.transactions
        notInCatalog = enqueued.notInCatalogError
        if transactions.allSatisfy({ $0.state == .finished }) && enqueued.reconciled.redelivered.isEmpty {
            action = .alreadyDelivered
        } else if let revoked = transactions.first(where: { $0.state == .failed }), transactions.allSatisfy({ $0.state == .failed }) {
            action = .refused(CourierError(revoked.errorCode ?? .notEntitled, revoked.errorMessage ?? "the transaction failed"))
        } else {
            let open = transactions.filter { $0.state != .finished && $0.state != .failed }
            let empty = try withoutDownloads(Set(open.map(\.id)))
            action = .deliver(contentless: open.filter { empty.contains($0.id) })
        }
    }
}

extension CourierClient {
    /// Validates and queues `purchase` (`enqueue`), then decides what a foreground delivery of
    /// it does (`DeliveryPlan`). Throws what `enqueue` throws.
    public func planDelivery(_ purchase: Purchase) async throws -> DeliveryPlan {
        var plan = try DeliveryPlan(try await enqueue(purchase), withoutDownloads: queue.withoutDownloads)
        // Finished purchases whose prefetch content an earlier run left unfinished: continued.
        if case .alreadyDelivered = plan.action, try !queue.unfinishedDownloads(scope: plan.scope).isEmpty {
            plan.action = .deliver(contentless: [])
        }
        return plan
    }
}

extension DeliverySummary {
    /// The error a foreground run over `what` ends with: interrupted (exit 7, resumable), else
    /// the first download error, a space shortage with its next step (the stored error keeps
    /// only its message); nil when it ended delivered.
    public func endError(interrupted: Bool, checkpointed what: String) -> CourierError? {
        if interrupted {
            return CourierError(.paused, "interrupted; the \(what) are checkpointed", hint: "run the same command again to continue")
        }
        guard var error = firstError else { return nil }
        if error.code == .insufficientSpace && error.hint == nil {
            error.hint = "free space there, or lower transfer.diskReserve; then run the same command again (or courier resume --stalled)"
        }
        return error
    }
}
