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
    @OptionGroup var receiptOptions: ReceiptOptions

    @OptionGroup var purchase: PurchaseOptions

    func run() async throws {
        try await global.run { output in
            var configuration = try global.loadConfiguration()
            receiptOptions.apply(to: &configuration)
            if let catalog = purchase.catalog { configuration.catalog = catalog }
            if let agent = AgentRoute.client(global) {  // hand the purchase to the running agent
                let receipt = try ReceiptValidator.readReceipt(URL(fileURLWithPath: purchase.receiptFile))
                let answer = try agent.send(
                    AgentRequest(
                        .enqueue, receipt: receipt, catalog: AgentRoute.absoluteCatalog(purchase.catalog),
                        products: purchase.products.isEmpty ? nil : purchase.products, restore: purchase.restore ? true : nil))
                let downloads = answer.downloads ?? []
                report(answer.transactions ?? [], output: output, via: "the agent") { id in downloads.filter { $0.transactionId == id } }
                return
            }
            let runtime = try DeliveryRuntime(global: global, configuration: configuration)
            defer { runtime.shutdown() }
            let enqueued = try await runtime.enqueue(
                receiptFile: purchase.receiptFile, catalogOverride: purchase.catalog, products: purchase.products, restore: purchase.restore,
                configuration: configuration)
            let queue = runtime.queue
            try report(enqueued.transactions, output: output, via: nil) { try queue.downloads(transactionId: $0) }
            // The others are queued; a purchase of a product the catalog does not list is not (exit 3).
            if let notInCatalog = enqueued.notInCatalogError { throw notInCatalog }
        }
    }

    /// Prints what was queued (one line per transaction, or one `enqueued` JSON event).
    private func report(
        _ transactions: [TransactionRecord], output: Output, via: String?, downloadsOf: (String) throws -> [DownloadRecord]
    ) rethrows {
        do {
            var lines: [[String: Any]] = []
            for transaction in transactions {
                let downloads = try downloadsOf(transaction.id)
                lines.append([
                    "transactionId": transaction.id, "productId": transaction.productId, "state": transaction.state.rawValue,
                    "downloads": downloads.map { ["id": $0.id, "contentIdentifier": $0.contentIdentifier, "state": $0.state.rawValue] },
                ])
                if !output.json {
                    output.line("queued \(transaction.id) (\(transaction.productId)): \(transaction.state.rawValue), \(downloads.count) download\(downloads.count == 1 ? "" : "s")\(via.map { " with \($0)" } ?? "")")
                }
            }
            if output.json { output.emit(["event": "enqueued", "transactions": lines, "agent": via != nil]) }
        }
    }
}
