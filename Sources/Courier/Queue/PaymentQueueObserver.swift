import Foundation
import Synchronization

/// Observes a payment queue, as StoreKit's `SKPaymentTransactionObserver` does. Every method has
/// an empty default. Calls arrive on one serial Dispatch queue, in the order the store committed
/// the changes, after they are durable.
public protocol PaymentQueueObserver: AnyObject, Sendable {
    func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [TransactionRecord])
    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord])
    /// Transactions finished and left the queue.
    func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [TransactionRecord])
    func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue, productIds: [String])
    func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: CourierError)
    /// Downloads of a foreground run (`CourierClient.deliver`) that another live process works:
    /// said once per owner, when first seen. Their later changes arrive as
    /// `updatedDownloads(_:workedBy:)`, read from the store.
    func paymentQueue(_ queue: PaymentQueue, downloads: [DownloadRecord], workedBy owner: LeaseOwner)
    /// Changes of downloads another live process (`owner`) works, read from the store by a
    /// foreground run that follows it. Default: `updatedDownloads`.
    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord], workedBy owner: LeaseOwner)
    /// An update of `download` could not go by changed entries (its manifest could not be
    /// fetched or used, the origin answers no ranges, …) and fetches the whole package instead;
    /// `reason` says why, in one line. Said by this process, before the whole download starts.
    func paymentQueue(_ queue: PaymentQueue, download: DownloadRecord, fetchesWholePackageBecause reason: String)
}

extension PaymentQueueObserver {
    public func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [TransactionRecord]) {}
    public func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord]) {}
    public func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [TransactionRecord]) {}
    public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue, productIds: [String]) {}
    public func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: CourierError) {}
    public func paymentQueue(_ queue: PaymentQueue, downloads: [DownloadRecord], workedBy owner: LeaseOwner) {}
    public func paymentQueue(_ queue: PaymentQueue, download: DownloadRecord, fetchesWholePackageBecause reason: String) {}
    public func paymentQueue(
        _ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord], workedBy owner: LeaseOwner
    ) {
        paymentQueue(queue, updatedDownloads: downloads)
    }
}

/// Fans committed events out to observers (on a serial queue) and to `AsyncStream`s.
final class PaymentQueueEvents: Sendable {
    private struct WeakObserver {
        weak var observer: (any PaymentQueueObserver)?
    }

    private struct Subscribers {
        var observers: [WeakObserver] = []
        var continuations: [UUID: AsyncStream<PaymentQueueEvent>.Continuation] = [:]
    }

    private let subscribers = Mutex(Subscribers())
    private let delivery = DispatchQueue(label: "courier.payment-queue.observers")

    func add(_ observer: any PaymentQueueObserver) {
        subscribers.withLock { subscribers in
            subscribers.observers.removeAll { $0.observer == nil || $0.observer === observer }
            subscribers.observers.append(WeakObserver(observer: observer))
        }
    }

    func remove(_ observer: any PaymentQueueObserver) {
        subscribers.withLock { $0.observers.removeAll { $0.observer == nil || $0.observer === observer } }
    }

    func stream() -> AsyncStream<PaymentQueueEvent> {
        let (stream, continuation) = AsyncStream<PaymentQueueEvent>.makeStream(bufferingPolicy: .bufferingNewest(4096))
        let id = UUID()
        subscribers.withLock { $0.continuations[id] = continuation }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            self.subscribers.withLock { _ = $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    /// Publishes `events` in order. The caller holds the queue's commit lock, so the order of
    /// publication is the order of commits.
    func publish(_ events: [PaymentQueueEvent], from queue: PaymentQueue) {
        guard !events.isEmpty else { return }
        let (targets, streams) = subscribers.withLock { ($0.observers.compactMap(\.observer), Array($0.continuations.values)) }
        for event in events {
            for continuation in streams { continuation.yield(event) }
        }
        guard !targets.isEmpty else { return }
        delivery.async {
            for event in events {
                for observer in targets {
                    switch event {
                    case .updatedTransactions(let t): observer.paymentQueue(queue, updatedTransactions: t)
                    case .updatedDownloads(let d): observer.paymentQueue(queue, updatedDownloads: d)
                    case .removedTransactions(let t): observer.paymentQueue(queue, removedTransactions: t)
                    case .restoreCompleted(let products):
                        observer.paymentQueueRestoreCompletedTransactionsFinished(queue, productIds: products)
                    case .restoreFailed(let error):
                        observer.paymentQueue(queue, restoreCompletedTransactionsFailedWithError: error)
                    }
                }
            }
        }
    }

    /// Runs `call` on the observers' queue, after every observer call queued so far.
    func deliver(_ call: @escaping @Sendable () -> Void) {
        delivery.async(execute: call)
    }

    /// Calls `call` with each observer, on the observers' queue, after every call queued so far:
    /// news that is no committed change (nothing for the event streams).
    func notify(_ call: @escaping @Sendable (any PaymentQueueObserver) -> Void) {
        let targets = subscribers.withLock { $0.observers.compactMap(\.observer) }
        guard !targets.isEmpty else { return }
        delivery.async {
            for observer in targets { call(observer) }
        }
    }

    /// Returns once every observer call queued so far has been made.
    func drain() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            delivery.async { continuation.resume() }
        }
    }

}

/// Fired once, when the download it watches leaves `active` by a commit of this process (a
/// pause or cancel): what stops a supervised transfer at once (`PaymentQueue.watchStop`,
/// `DeliveryPipeline.supervised`). A direct call, not an event stream per download.
final class StopSignal: Sendable {
    private struct State {
        var fired = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    func fire() {
        state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.fired = true
            defer { state.waiter = nil }
            return state.waiter
        }?.resume()
    }

    /// Whether it fired.
    var isFired: Bool { state.withLock { $0.fired } }

    /// Returns once fired, or once the calling task is cancelled.
    func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let fired = state.withLock { state -> Bool in
                    if state.fired { return true }
                    state.waiter = continuation
                    return false
                }
                if fired { continuation.resume() }
            }
        } onCancel: {
            fire()
        }
    }
}
