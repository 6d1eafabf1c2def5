import Foundation

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
}

extension PaymentQueueObserver {
    public func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [TransactionRecord]) {}
    public func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord]) {}
    public func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [TransactionRecord]) {}
    public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue, productIds: [String]) {}
    public func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: CourierError) {}
    public func paymentQueue(_ queue: PaymentQueue, downloads: [DownloadRecord], workedBy owner: LeaseOwner) {}
    public func paymentQueue(
        _ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord], workedBy owner: LeaseOwner
    ) {
        paymentQueue(queue, updatedDownloads: downloads)
    }
}

/// Fans committed events out to observers (on a serial queue) and to `AsyncStream`s.
final class PaymentQueueEvents: @unchecked Sendable {  // @unchecked: mutable state is guarded by `lock`.
    private struct WeakObserver {
        weak var observer: (any PaymentQueueObserver)?
    }

    private let lock = NSLock()
    private var observers: [WeakObserver] = []
    private var continuations: [UUID: AsyncStream<PaymentQueueEvent>.Continuation] = [:]
    private let delivery = DispatchQueue(label: "courier.payment-queue.observers")

    func add(_ observer: any PaymentQueueObserver) {
        lock.withLock {
            observers.removeAll { $0.observer == nil || $0.observer === observer }
            observers.append(WeakObserver(observer: observer))
        }
    }

    func remove(_ observer: any PaymentQueueObserver) {
        lock.withLock { observers.removeAll { $0.observer == nil || $0.observer === observer } }
    }

    func stream() -> AsyncStream<PaymentQueueEvent> {
        let (stream, continuation) = AsyncStream<PaymentQueueEvent>.makeStream(bufferingPolicy: .bufferingNewest(4096))
        let id = UUID()
        lock.withLock { continuations[id] = continuation }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            self.lock.withLock { _ = self.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    /// Publishes `events` in order. The caller holds the queue's commit lock, so the order of
    /// publication is the order of commits.
    func publish(_ events: [PaymentQueueEvent], from queue: PaymentQueue) {
        guard !events.isEmpty else { return }
        let (targets, streams) = lock.withLock { (observers.compactMap(\.observer), Array(continuations.values)) }
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

    /// Returns once every observer call queued so far has been made.
    func drain() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            delivery.async { continuation.resume() }
        }
    }

    func finishStreams() {
        let streams = lock.withLock { Array(continuations.values) }
        for continuation in streams { continuation.finish() }
    }
}
