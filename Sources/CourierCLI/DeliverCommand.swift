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
            --restore, only the products named by --product are restored. On a metered connection \
            (NetworkManager) it asks first on a terminal; --allow-metered or transfer.allowMetered \
            answer yes in advance; without a terminal it downloads nothing and exits 7, the purchase \
            queued for `courier agent` once the connection is not metered.
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

    @Flag(
        name: .customLong("allow-metered"),
        help: "Download even when NetworkManager says the connection is metered, without asking (default: transfer.allowMetered).")
    var allowMetered = false

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
                    if applied {
                        output.emit(
                            ReloadedEvent(
                                message: message, maxRate: details["max-rate"] ?? "none",
                                backgroundMaxRate: details["background-max-rate"] ?? "none", rateSchedule: details["rate-schedule"] ?? "none"))
                    } else {
                        output.emit(ReloadFailedEvent(message: message, error: details["error"] ?? ""))
                    }
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
                if !allowMetered && !client.configuration.transfer.allowMetered {
                    try MeteredQuestion.ask(remaining: try client.queue.remainingBytes(scope: plan.scope), output: output)
                }
                try await client.deliver(scope: plan.scope, output: output, retryStopped: true)
            }
            // Said first; thrown (exit 3) after the others are delivered: it stays unfinished.
            if let notInCatalog = plan.notInCatalog { throw notInCatalog }
        }
    }
}

/// A foreground `deliver` on a metered connection (docs/transfer.md, "Metered networks"): as
/// Play asks before using mobile data, it asks once on a terminal; without one (a script, a
/// unit) it downloads nothing and exits 7, as BITS keeps a job waiting for an unmetered network.
enum MeteredQuestion {
    /// Returns when the run may download `remaining` bytes; throws `paused` (exit 7) when not.
    static func ask(remaining: Int64, output: Output) throws {
        guard remaining > 0 else { return }
        let reading = NetworkMeter.read()
        guard reading.isMetered else { return }
        let refusal = CourierError(
            .paused, "the connection is metered (NetworkManager); nothing was downloaded",
            hint: "run it again with --allow-metered (or set transfer.allowMetered), or let courier agent deliver it once the connection is not metered")
        guard !output.json, output.stderrIsTerminal, isatty(STDIN_FILENO) == 1 else { throw refusal }
        let megabytes = max(1, (remaining + 999_999) / 1_000_000)
        FileHandle.standardError.write(Data("The connection is metered. Download \(megabytes) MB anyway? [y/N] ".utf8))
        let answer = readLine(strippingNewline: true)?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        guard answer == "y" || answer == "yes" else { throw refusal }
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
            output.emit(
                DeliverResult(
                    finishedDownloads: summary.finishedDownloads,
                    finishedTransactions: summary.finishedTransactions,
                    unfinished: UnfinishedDownload.list(summary.unfinished),
                    content: finished.compactMap { $0.download?.contentURL?.path },
                    alreadyDelivered: Set(before.filter { $0.transactionState == .finished }.map(\.transactionId)).sorted()))
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
