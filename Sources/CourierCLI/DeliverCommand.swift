import ArgumentParser
import Courier
import Foundation
import Logging

/// `courier deliver --receipt FILE`: the whole flow in the foreground.
struct DeliverCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deliver",
        abstract: "Validate a receipt, then download, verify, unpack and place its content, and finish.",
        discussion: """
            Run it again after any interruption: it continues from the journal without fetching \
            finished bytes again. After success a second run does nothing and says so. With \
            --restore, only the products named by --product are restored.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var purchase: PurchaseOptions

    @Option(
        name: [.customShort("x"), .customLong("proxy")],
        help: ArgumentHelp(
            "Send every request through this proxy (curl's syntax; \"\" for none). Default: transfer.proxy, else http_proxy/https_proxy/no_proxy with loopback direct.",
            valueName: "url"))
    var proxy: String?

    @Option(
        name: .customLong("limit-rate"),
        help: ArgumentHelp(
            "Hold each transfer to this many bytes per second, in curl's syntax: 500k, 2M (default: transfer.limitRate; transfer.maxRate limits all together).",
            valueName: "rate"))
    var limitRate: String?

    func validate() throws {
        if let proxy { try ProxyOption.validate(proxy) }
        if let limitRate { _ = try RateOption.parse(limitRate) }
    }

    func run() async throws {
        try await global.run { output in
            let client = try global.client(purchase.receiptOptions, catalogRoot: purchase.catalogRoot, output: output) { transfer in
                if let proxy { transfer.proxy = proxy }
                if let limitRate { transfer.limitRate = try? RateOption.parse(limitRate) }
            }
            defer { client.shutdown() }
            // SIGHUP: the rate limits of the configuration file, applied to the running transfers.
            let global = self.global
            let reloader = ConfigurationReloader(
                load: { try global.loadConfiguration() }, apply: { client.updateRateLimits($0) }
            ) { applied, message, details in
                if output.json {
                    output.emit(["event": applied ? "reloaded" : "reloadFailed", "message": message].merging(details) { $1 })
                } else {
                    let said = details.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
                    output.note("courier: \(message): \(said)")
                }
            }
            defer { reloader.stop() }
            let plan = try await client.planDelivery(purchase.purchase())
            if let notInCatalog = plan.notInCatalog, !output.json { output.note("courier: \(notInCatalog.message)") }
            switch plan.action {
            case .refused(let error):
                throw error
            case .alreadyDelivered where output.json:
                // The same fields as a first run's result (docs/json.md), nothing new in them.
                try await client.deliver(scope: plan.scope, output: output, retryStopped: false)
            case .alreadyDelivered:
                let count = plan.transactions.count
                output.done("Nothing to do: \(count == 1 ? "this purchase was" : "these \(count) purchases were") already delivered.")
            case .deliver(let contentless):
                if !output.json {
                    for transaction in contentless {
                        output.done("\(transaction.productId): no hosted content in the catalog; nothing to download, purchase finished")
                    }
                }
                try await client.deliver(scope: plan.scope, output: output, retryStopped: true)
            }
            // Said first; thrown (exit 3) after the others are delivered: it stays unfinished.
            if let notInCatalog = plan.notInCatalog { throw notInCatalog }
        }
    }
}

extension CourierClient {
    /// The pipeline over `scope` with its progress view, SIGINT/SIGTERM pausing it; returns when
    /// every event of the run was shown (the client waits for its observer), before any result.
    func runInForeground(
        scope: DeliveryScope, output: Output, retryStopped: Bool
    ) async throws -> (summary: DeliverySummary, view: DeliveryProgressView, interrupted: Bool) {
        let view = DeliveryProgressView(output: output, queue: queue, scope: scope)
        defer { view.finish() }
        let (summary, interrupted) = try await withSignalCancellation {
            (try await self.deliver(scope: scope, retryStopped: retryStopped, observer: view), Task.isCancelled)
        }
        return (summary, view, interrupted)
    }

    /// Runs the pipeline over `scope` in the foreground with progress (a status line on a
    /// terminal, NDJSON events with --json), pausing on SIGINT/SIGTERM (exit 7). Downloads that
    /// stopped for a retryable reason are resumed first when `retryStopped`.
    func deliver(scope: DeliveryScope, output: Output, retryStopped: Bool) async throws {
        let entries = { [queue] in
            try queue.entries(includeFinished: true).filter { scope.contains(downloadId: $0.download?.id, transactionId: $0.transactionId) }
        }
        let before = try entries()
        let finishedBefore = Set(before.compactMap { $0.download?.state == .finished ? $0.download?.id : nil })
        let (summary, view, interrupted) = try await runInForeground(scope: scope, output: output, retryStopped: retryStopped)
        let finished = try entries()
        if output.json {
            output.emit([
                "event": "result",
                "finishedDownloads": summary.finishedDownloads,
                "finishedTransactions": summary.finishedTransactions,
                "unfinished": QueueFormat.unfinished(summary.unfinished),
                "content": finished.compactMap { $0.download?.contentURL?.path },
                "alreadyDelivered": Set(before.filter { $0.transactionState == .finished }.map(\.transactionId)).sorted(),
            ])
        } else {
            // Each download placed by this run was said when it happened (by the view), or now.
            for download in finished.compactMap(\.download) where !finishedBefore.contains(download.id) {
                view.announce(download, byAnotherProcess: !summary.finishedDownloads.contains(download.id))
            }
            // Downloads paused for disk space: one line naming them; the error that ends the
            // run says how much space, once.
            let short = summary.unfinished.filter { $0.errorCode == .insufficientSpace }
            if !short.isEmpty {
                output.info("courier: paused for disk space: \(short.map(\.contentIdentifier).joined(separator: ", "))")
            }
            let failuresSaid = view.failuresSaid
            for download in summary.unfinished
            where download.errorCode != .insufficientSpace && !failuresSaid.contains(download.id) {
                let next = download.state == .cancelled ? "; queue it again with: courier resume \(download.id)" : ""
                let state = download.state.rawValue + QueueFormat.stopReason(download)
                output.info("courier: \(download.contentIdentifier) \(state)\(next)")
            }
        }
        if let error = summary.endError(interrupted: interrupted, checkpointed: "downloads") { throw error }
    }
}
