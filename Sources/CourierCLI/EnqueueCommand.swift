import ArgumentParser
import Courier
import Foundation

/// `courier enqueue --receipt FILE`: validate a purchase and queue it for delivery.
struct EnqueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enqueue",
        abstract: "Validate a receipt and queue its purchases in the store for the agent or `courier resume`.",
        discussion: "Nothing is downloaded here; `courier deliver` or `courier resume --all` delivers what is queued.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var purchase: PurchaseOptions

    func run() async throws {
        try await global.run { output in
            let configuration = try global.loadConfiguration()  // a bad configuration is said (exit 2), agent or not
            if let agent = global.agentControl() {  // hand the purchase to the running agent
                // With --catalog-root, the catalog must pass TUF here before the agent (which
                // checks it again with its own catalog.trustedRoot) is given the purchase.
                if purchase.catalogRoot != nil {
                    let core = try global.core(
                        configuration: configuration, logger: global.logger("courier", default: .warning),
                        catalogRoot: purchase.catalogRoot)
                    let (location, base) = try core.configuration.catalogLocation(purchase.catalog, for: "look the purchase up in")
                    // The loader's own transport ends with it.
                    _ = try await core.catalogLoader().load(location, relativeTo: base)
                }
                try report(await agent.perform(.enqueue(purchase.purchase())), output: output, via: "the agent")
                return
            }
            let client = try global.client(purchase.receiptOptions, catalogRoot: purchase.catalogRoot)
            defer { client.shutdown() }
            try report(await client.control.perform(.enqueue(purchase.purchase())), output: output, via: nil)
        }
    }

    /// Prints what was queued (one line per transaction, or the `result` JSON line), then
    /// throws for purchases of products the catalog does not list (exit 3; the others are queued).
    private func report(_ result: QueueResult, output: Output, via: String?) throws {
        var lines: [EnqueueResult.Transaction] = []
        for transaction in result.transactions {
            let downloads = result.downloads.filter { $0.transactionId == transaction.id }
            lines.append(
                EnqueueResult.Transaction(
                    transactionId: transaction.id, productId: transaction.productId, state: transaction.state.rawValue,
                    downloads: downloads.map {
                        EnqueueResult.Download(downloadId: $0.id, contentIdentifier: $0.contentIdentifier, state: $0.state.rawValue)
                    }))
            if !output.json {
                output.done("queued \(transaction.id) (\(transaction.productId)): \(transaction.state.rawValue), \(downloads.count) download\(downloads.count == 1 ? "" : "s")\(via.map { " with \($0)" } ?? "")")
            }
        }
        if output.json { output.emit(EnqueueResult(transactions: lines, agent: via != nil)) }
        // Queued with no agent to take it: nothing moves until one runs. Say so, and how.
        if via == nil, !output.json, result.downloads.contains(where: { $0.state == .waiting }) {
            output.info(
                "courier: no agent runs on this store, so nothing downloads yet: start one (`courier agent`, or the "
                    + "systemd unit) or deliver here with `courier resume --all`")
        }
        if let notInCatalog = result.notInCatalogError { throw notInCatalog }
    }
}

extension PurchaseOptions {
    /// The purchase these options name, its receipt read from `--receipt`.
    func purchase() throws -> Purchase {
        Purchase(
            receipt: try ReceiptValidator.readReceipt(URL(fileURLWithPath: receiptFile)), catalog: catalog, products: products,
            restore: restore)
    }
}
