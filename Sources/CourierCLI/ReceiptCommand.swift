import ArgumentParser
import Courier
import Foundation
import Logging

/// `courier receipt`: verify receipts and show what they unlock.
struct ReceiptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receipt",
        abstract: "Verify receipts and list the content they unlock.",
        subcommands: [ReceiptVerifyCommand.self, ReceiptEntitlementsCommand.self]
    )
}

/// `courier receipt verify FILE`: exit 0 and the transactions it proves, or exit 3 and the check
/// that failed.
struct ReceiptVerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify a receipt: JWS signed transactions (one per line) or a legacy receipt.",
        discussion: """
            Prints the transactions the receipt proves. A refused receipt exits 3 and names the \
            failing check: format, certificate, chain, OID, signature, bundle, environment, \
            revoked, future-dated, or status (the verifyReceipt service's).
            """
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var receipt: ReceiptOptions

    @Argument(help: ArgumentHelp("The receipt file ('-' for standard input).", valueName: "file"))
    var file: String

    func run() async throws {
        try await global.run { output in
            let validator = try global.core(receipt, logger: global.logger("courier.receipts", default: .critical))
                .receiptValidator()
            let transactions = try await ReceiptCLI.validate(file, with: validator, output: output)
            if output.json {
                output.emit(ReceiptVerifyResult(transactions: transactions.map(JSONTransaction.init)))
            } else {
                output.line("verified \(transactions.count) transaction\(transactions.count == 1 ? "" : "s")")
                for transaction in transactions { output.line(ReceiptCLI.text(transaction)) }
            }
        }
    }
}

/// `courier receipt entitlements FILE... --catalog C`: the content the receipts unlock.
struct ReceiptEntitlementsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "entitlements",
        abstract: "List the content that verified receipts unlock in a catalog.",
        discussion: "Exits 3 when a receipt is refused or when it unlocks nothing in the catalog."
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var receipt: ReceiptOptions

    @Option(help: ArgumentHelp("The catalog, a file or URL (default: the configured one).", valueName: "file|url"))
    var catalog: String?

    @Option(
        name: .customLong("catalog-root"),
        help: ArgumentHelp(
            "The publisher's TUF root.json: the catalog is then accepted only through TUF (default: catalog.trustedRoot).",
            valueName: "file"))
    var catalogRoot: String?

    @Argument(help: ArgumentHelp("Receipt files.", valueName: "file"))
    var files: [String]

    func validate() throws {
        if files.isEmpty { throw ValidationError("name at least one receipt file") }
    }

    func run() async throws {
        try await global.run { output in
            let core = try global.core(receipt, logger: global.logger("courier.receipts", default: .critical), catalogRoot: catalogRoot)
            let transport = try core.httpTransport()
            let validator = try core.receiptValidator(transport: transport)
            let (location, base) = try core.configuration.catalogLocation(catalog, for: "look the content up in")
            let loaded = try await core.logging(to: global.logger("courier.catalog", default: .warning))
                .catalogLoader(transport: transport).load(location, relativeTo: base)
            var transactions: [VerifiedTransaction] = []
            for file in files { transactions += try await ReceiptCLI.validate(file, with: validator, output: output) }
            let now = Date()
            let entitled = Entitlements.content(for: transactions, catalog: loaded.catalog, now: now)
            if output.json {
                output.emit(EntitlementsResult(content: entitled.map { ReceiptCLI.json($0, catalogURL: loaded.url) }))
            } else {
                for entry in entitled {
                    let url =
                        Catalog.resolve(entry.content.url, relativeTo: loaded.url)?.absoluteString ?? entry.content.url
                    output.line(
                        "\(entry.contentIdentifier)  version \(entry.content.version)  \(entry.content.placement.rawValue)  \(entry.content.length) bytes  \(url)  (transaction \(entry.transactionId))"
                    )
                }
            }
            if entitled.isEmpty {
                throw CourierError(
                    .notEntitled,
                    "the receipts prove \(transactions.count) transaction\(transactions.count == 1 ? "" : "s") but unlock no content in the catalog",
                    hint: "check the product identifiers against the catalog"
                )
            }
        }
    }
}

/// Helpers shared by the receipt and sandbox commands.
enum ReceiptCLI {
    /// A receipt file's contents, bounded (`-` reads standard input).
    static func read(_ path: String) throws -> Data {
        if path == "-" {
            return FileHandle.standardInput.readData(ofLength: ReceiptValidator.maximumReceiptBytes + 1)
        }
        return try ReceiptValidator.readReceipt(URL(fileURLWithPath: path))
    }

    /// The transactions the receipt `file` proves; a rejection with `--json` is reported with its
    /// `check` field.
    static func validate(_ file: String, with validator: ReceiptValidator, output: Output) async throws -> [VerifiedTransaction] {
        do {
            return try await validator.validate(try read(file))
        } catch let error as CourierError {
            guard output.json, let check = ReceiptCheck(failing: error) else { throw error }
            throw output.report(error, check: check.rawValue)
        }
    }

    static func iso(_ date: Date?) -> String? {
        date.map { ISO8601DateFormatter().string(from: $0) }
    }

    static func text(_ transaction: VerifiedTransaction) -> String {
        var parts = [
            transaction.productId,
            "transaction \(transaction.transactionId)",
            "original \(transaction.originalTransactionId)",
            SignedTransactionPayload.appStoreName(of: transaction.type),
            "purchased \(iso(transaction.purchaseDate) ?? "")",
        ]
        if let expires = iso(transaction.expiresDate) { parts.append("expires \(expires)") }
        if let revoked = iso(transaction.revocationDate) { parts.append("REVOKED \(revoked)") }
        parts.append(transaction.environment)
        return parts.joined(separator: "  ")
    }

    static func json(_ entry: EntitledContent, catalogURL: URL?) -> EntitlementsResult.Content {
        EntitlementsResult.Content(
            contentIdentifier: entry.contentIdentifier, productId: entry.productId, transactionId: entry.transactionId,
            url: Catalog.resolve(entry.content.url, relativeTo: catalogURL)?.absoluteString ?? entry.content.url,
            sha256: entry.content.sha256, length: entry.content.length, version: entry.content.version,
            placement: entry.content.placement.rawValue, itemId: entry.itemId)
    }
}
