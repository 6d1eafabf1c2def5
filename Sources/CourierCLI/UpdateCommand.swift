import ArgumentParser
import Courier
import Foundation

/// `courier update [--product ID]...`: brings delivered content to the catalog's newer version.
struct UpdateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Bring delivered content to the catalog's newer version.",
        discussion: """
            Finds delivered content whose catalog version is newer, downloads it (resumable, \
            through mirrors, with progress) and installs it with an atomic swap: the old version \
            stays in place until the new one is placed. Only content a stored purchase still \
            entitles is updated (not a refunded or revoked purchase, nor an expired \
            subscription's); --receipt adds a fresh receipt's copies of the stored purchases, so \
            a refund it carries counts. A catalog version older than the installed one is \
            refused (no downgrade). Run it again after any interruption: it continues.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var receiptOptions: ReceiptOptions

    @Option(
        name: .customLong("product"), help: ArgumentHelp("Only this product's content (repeatable).", valueName: "id"),
        completion: IdCompletion.kind(.products))
    var products: [String] = []

    @Option(help: ArgumentHelp("The catalog, a file or URL (default: the configured one).", valueName: "file|url"))
    var catalog: String?

    @Option(
        name: .customLong("catalog-root"),
        help: ArgumentHelp(
            "The publisher's TUF root.json: the catalog is then accepted only through TUF (default: catalog.trustedRoot).",
            valueName: "file"))
    var catalogRoot: String?

    @Option(
        name: .customLong("receipt"),
        help: ArgumentHelp("A fresh receipt whose copies of the stored purchases count (a refund stops an update).", valueName: "file"))
    var receiptFile: String?

    func run() async throws {
        try await global.run { output in
            let receipt = try receiptFile.map { try ReceiptValidator.readReceipt(URL(fileURLWithPath: $0)) }
            // Only a store with delivered content has anything to update: none is created here.
            let client = try global.client(receiptOptions, existingStore: true, catalogRoot: catalogRoot)
            defer { client.shutdown() }
            let run = try await client.prepareUpdates(.init(products: products, catalog: catalog, receipt: receipt))
            let (plan, skipped) = (run.plan, run.skipped)
            if !output.json {
                for skip in skipped { output.info("courier: \(skip.message)") }
                // Said once: by the error the run ends with, when that is what it ends with.
                if !run.missing.isEmpty && run.refusal?.code != .notFound {
                    output.info("courier: not delivered in this store: \(run.missing.joined(separator: ", "))")
                }
            }
            guard !run.downloads.isEmpty else {
                if output.json {
                    output.emit(UpdateResult(updated: [], unfinished: [], plan: plan, skipped: skipped))
                } else if plan.updates.isEmpty && (run.refusal == nil || !plan.upToDate.isEmpty) {
                    // Not "Nothing to update" when nothing named could be looked at: the
                    // error below is the whole answer.
                    let current = plan.upToDate.count
                    output.done(
                        "Nothing to update: "
                            + (current == 0 ? "no delivered content has a newer version in the catalog."
                                : current == 1 ? "\(plan.upToDate[0].contentIdentifier) \(plan.upToDate[0].version) is up to date."
                                : "\(current) delivered contents are up to date."))
                }
                if let refusal = run.refusal { throw refusal }
                return
            }
            for record in run.downloads {
                let from = record.updateFrom ?? "?"
                if output.json {
                    output.emit(
                        UpdateEvent(
                            downloadId: record.id, contentIdentifier: record.contentIdentifier, fromVersion: from,
                            toVersion: record.version, contentLength: record.length, url: record.url.absoluteString))
                } else {
                    output.info("courier: updating \(record.contentIdentifier) \(from) -> \(record.version)")
                }
            }

            let (summary, view, interrupted) = try await client.runInForeground(scope: run.scope, output: output, retryStopped: true)
            let updated = try summary.finishedDownloads.compactMap { try client.queue.download($0) }
            if output.json {
                output.emit(UpdateResult(updated: updated, unfinished: summary.unfinished, plan: plan, skipped: skipped))
            } else {
                for record in updated { view.announce(record) }  // what the view did not say
                for download in summary.unfinished {
                    let state = download.state.rawValue + QueueFormat.stopReason(download)
                    output.info("courier: the update of \(download.contentIdentifier) is \(state)")
                }
            }
            if let error = summary.endError(interrupted: interrupted, checkpointed: "updates") { throw error }
            if let refusal = run.refusal { throw refusal }
        }
    }
}
