import Foundation
import Synchronization

/// The agent's desktop notifications (`agent.notifications`, docs/agent.md): one when a
/// delivery (a transaction) finishes, one when a download of it fails for good. A failure the
/// agent retries by itself (the network, a busy partial file, a refusal under its retry cap) is
/// not said; each download's failure is said once per agent run.
final class AgentNotifications: PaymentQueueObserver {
    private let notifier: DesktopNotifier
    private let failuresSaid = Mutex<Set<String>>([])

    init(notifier: DesktopNotifier) { self.notifier = notifier }

    func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [TransactionRecord]) {
        for transaction in transactions where transaction.state == .finished {
            notifier.notify(summary: "Delivered \(transaction.productId)", body: "Its content is in place.")
        }
    }

    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord]) {
        for download in downloads where download.state == .failed {
            // Failures the agent retries by itself are not final.
            if let code = download.errorCode, [.network, .leased, .serverRejected].contains(code) { continue }
            guard failuresSaid.withLock({ $0.insert(download.id).inserted }) else { continue }
            notifier.notify(
                summary: "Delivery of \(download.contentIdentifier) failed",
                body: download.errorMessage ?? download.errorCode?.rawValue ?? "failed")
        }
    }
}
