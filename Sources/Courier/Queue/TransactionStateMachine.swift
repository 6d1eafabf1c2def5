import Foundation

/// The lifecycle of one transaction: `purchasing | deferred -> purchased | restored | failed -> finished`.
///
/// A value type with no I/O; `PaymentQueue` persists each move and carries out its actions. `finish` is refused while any download is unsettled (waiting,
/// active, paused or failed: only finished or cancelled downloads let a transaction finish, as
/// StoreKit refuses to finish a transaction with downloads in progress), and is idempotent once
/// finished. A finished transaction never moves again, so it is never delivered twice.
public struct TransactionStateMachine: Sendable, Equatable {
    /// What the shell must do after a transition.
    public enum Action: Sendable, Equatable {
        /// Queue the downloads of the transaction's content.
        case queueDownloads
        /// Record the finish time, run the finish recorders (the webhook's outbox), drop the
        /// leases and tell observers the transaction left the queue.
        case markFinished
    }

    public enum Event: Sendable, Equatable {
        /// The receipt proved the purchase (`restored` when a restore found it).
        case verified(restored: Bool)
        case deferred
        case failed(CourierError)
        /// Finish, given the states of the transaction's downloads.
        case finish(downloads: [DownloadState])
    }

    public private(set) var state: TransactionState
    public private(set) var error: CourierError?

    public init(state: TransactionState = .purchasing, error: CourierError? = nil) {
        self.state = state
        self.error = error
    }

    public mutating func handle(_ event: Event) throws -> [Action] {
        switch (event, state) {
        case (.verified(let restored), .purchasing), (.verified(let restored), .deferred):
            state = restored ? .restored : .purchased
            return [.queueDownloads]
        case (.verified, .purchased), (.verified, .restored):
            return []
        case (.verified, _):
            throw refusal("verify")

        case (.deferred, .purchasing):
            state = .deferred
            return []
        case (.deferred, .deferred):
            return []
        case (.deferred, _):
            throw refusal("defer")

        case (.failed(let failure), .purchasing), (.failed(let failure), .deferred),
            (.failed(let failure), .purchased), (.failed(let failure), .restored):
            state = .failed
            error = failure
            return []
        case (.failed, _):
            throw refusal("fail")

        case (.finish, .finished):
            return []
        case (.finish, .purchasing), (.finish, .deferred):
            throw refusal("finish")
        case (.finish(let downloads), _):
            let unsettled = downloads.filter { !$0.isSettled }
            guard unsettled.isEmpty else {
                throw CourierError(
                    .invalidState,
                    "cannot finish the transaction: \(unsettled.count) of its \(downloads.count) downloads are not finished",
                    cause: unsettled.map(\.rawValue).joined(separator: ", "),
                    hint: "resume or cancel them first")
            }
            state = .finished
            return [.markFinished]
        }
    }

    private func refusal(_ operation: String) -> CourierError {
        CourierError(.invalidState, "cannot \(operation) a transaction that is \(state.rawValue)")
    }
}
