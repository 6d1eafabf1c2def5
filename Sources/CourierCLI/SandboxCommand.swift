import ArgumentParser
import Courier
import Foundation

/// `courier sandbox`: a local test store, what StoreKit Testing is in Xcode.
struct SandboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sandbox",
        abstract: "A local test store: a signing chain shaped like the App Store's, and signed purchases.",
        subcommands: [SandboxInitCommand.self, SandboxPurchaseCommand.self]
    )

    /// The sandbox folder: `--dir`, else `<storage>/Sandbox`.
    static func directory(_ dir: String?, _ global: GlobalOptions) -> URL {
        if let dir { return URL(fileURLWithPath: dir, isDirectory: true).standardizedFileURL }
        return global.layout.root.appendingPathComponent("Sandbox", isDirectory: true)
    }
}

/// `courier sandbox init [--dir DIR] [--force]`.
struct SandboxInitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create the sandbox signing chain (root, intermediate, leaf; P-256; keys owner-only), sample packages and a catalog.",
        discussion: "An existing chain is kept (tokens it signed stay valid) unless --force is given."
    )

    @OptionGroup var global: GlobalOptions

    @Option(help: ArgumentHelp("The sandbox folder (default <storage>/Sandbox).", valueName: "dir"))
    var dir: String?

    @Flag(help: "Replace an existing chain with a new one.")
    var force = false

    func run() async throws {
        try await global.run { output in
            let directory = SandboxCommand.directory(dir, global)
            let created = force || !SandboxStore.exists(at: directory)
            let store = created ? try SandboxStore.create(at: directory) : try SandboxStore(directory: directory)
            let configuration = try global.loadConfiguration()
            let catalog = try SandboxCatalog.write(into: store.directory, bundleId: configuration.receipts.bundleId)
            let catalogFile = store.directory.appendingPathComponent("catalog.json")
            // The catalog as a TUF target (docs/trust.md): keys in keys/ (owner-only; kept across
            // --force, since clients trust the root they name), metadata in metadata/.
            let keysFolder = store.directory.appendingPathComponent("keys", isDirectory: true)
            let metadataFolder = store.directory.appendingPathComponent("metadata", isDirectory: true)
            let repository = try TUFPublisher.createRepository(keys: keysFolder, metadata: metadataFolder)
            _ = try TUFPublisher.publish(
                target: try Data(contentsOf: catalogFile), named: "catalog.json", into: store.directory, roots: metadataFolder,
                keys: repository.online)
            let catalogRoot = metadataFolder.appendingPathComponent("1.root.json")
            if output.json {
                output.emit(
                    SandboxInitResult(
                        created: created, directory: store.directory.path, trustRoot: store.rootCertificateFile.path,
                        trustRootDER: store.rootCertificateDERFile.path, catalog: catalogFile.path, catalogRoot: catalogRoot.path,
                        keys: keysFolder.path, products: catalog.products.map(\.productId)))
            } else {
                output.line("\(created ? "created" : "kept") the sandbox store in \(store.directory.path)")
                output.line("trusted root: \(store.rootCertificateFile.path) (DER: \(store.rootCertificateDERFile.path))")
                output.line("catalog: \(catalogFile.path) (\(catalog.products.map(\.productId).joined(separator: ", ")))")
                output.line("catalog signed (TUF): trusted root \(catalogRoot.path), keys in \(keysFolder.path)")
                output.line(
                    "verify with:  courier receipt verify FILE --trust-root \(store.rootCertificateFile.path) --environment Sandbox"
                )
            }
        }
    }
}

/// `courier sandbox purchase PRODUCT`: prints a signed transaction.
struct SandboxPurchaseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "purchase",
        abstract: "Print a signed transaction for PRODUCT, signed by the sandbox chain.",
        discussion: """
            Dates are ISO 8601 (2026-02-20 or 2026-02-20T10:00:00Z), milliseconds since 1970, \
            'now', or an offset from now such as -30d, +1h, +45m, +10s (a negative offset is written as is: --purchase-date -60d). An auto-renewable \
            subscription without --expires runs one month from its purchase date.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("The product identifier.", valueName: "product"))
    var product: String

    @Option(
        help: ArgumentHelp(
            "non-consumable (default), consumable, non-renewing, auto-renewable (or the App Store's names).",
            valueName: "type"
        )
    )
    var type: String = "non-consumable"

    // `.unconditional`: a relative date is a value, not an option (`--purchase-date -60d`).
    @Option(
        name: .customLong("purchase-date"),
        parsing: .unconditional,
        help: ArgumentHelp("When it was bought (default now).", valueName: "date")
    )
    var purchaseDate: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("When the subscription period ends.", valueName: "date"))
    var expires: String?

    @Option(
        help: ArgumentHelp(
            "Production or Sandbox (a verifier accepts Sandbox only with --environment Sandbox).",
            valueName: "name"
        )
    )
    var environment: String = "Sandbox"

    @Option(
        name: .customLong("bundle-id"),
        help: ArgumentHelp("The bundle id (default: the configured one).", valueName: "id")
    )
    var bundleId: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Mark it revoked (refunded) at this date.", valueName: "date"))
    var revoked: String?

    @Option(
        name: .customLong("transaction-id"),
        help: ArgumentHelp("The transaction id (default a fresh one).", valueName: "id")
    )
    var transactionId: String?

    @Option(
        name: .customLong("original-transaction-id"),
        help: ArgumentHelp("The original transaction id, for a renewal (default the transaction id).", valueName: "id")
    )
    var originalTransactionId: String?

    @Option(help: ArgumentHelp("The sandbox folder (default <storage>/Sandbox).", valueName: "dir"))
    var dir: String?

    func validate() throws {
        guard Self.productType(type) != nil else {
            throw ValidationError(
                "--type must be non-consumable, consumable, non-renewing or auto-renewable, not \(type)"
            )
        }
        for (name, value) in [("--purchase-date", purchaseDate), ("--expires", expires), ("--revoked", revoked)] {
            if let value, Self.date(value, now: Date()) == nil {
                throw ValidationError(
                    "\(name) \(value) is not a date (ISO 8601, milliseconds, now, or an offset like -30d)"
                )
            }
        }
    }

    func run() async throws {
        try await global.run { output in
            let configuration = try global.loadConfiguration()
            let store = try SandboxStore(directory: SandboxCommand.directory(dir, global))
            let now = Date()
            let productType = Self.productType(type) ?? .nonConsumable
            let identifier = transactionId ?? SandboxStore.newTransactionId()
            let token = try store.purchase(
                productId: product,
                type: productType,
                bundleId: bundleId ?? configuration.receipts.bundleId,
                environment: ReceiptOptions.canonicalEnvironment(environment) ?? environment,
                purchaseDate: purchaseDate.flatMap { Self.date($0, now: now) },
                expiresDate: expires.flatMap { Self.date($0, now: now) },
                revocationDate: revoked.flatMap { Self.date($0, now: now) },
                transactionId: identifier,
                originalTransactionId: originalTransactionId,
                now: now
            )
            if output.json {
                output.emit(SandboxPurchaseResult(productId: product, transactionId: identifier, signedTransaction: token))
            } else {
                output.line(token)
            }
        }
    }

    static func productType(_ name: String) -> Catalog.ProductType? {
        switch name.lowercased() {
        case "non-consumable", "nonconsumable": return .nonConsumable
        case "consumable": return .consumable
        case "non-renewing", "nonrenewable", "non-renewing subscription", "nonrenewing": return .nonRenewable
        case "auto-renewable", "autorenewable", "auto-renewable subscription", "subscription": return .autoRenewable
        default: return nil
        }
    }

    /// ISO 8601, milliseconds since 1970, `now`, or `±N` followed by s, m, h or d.
    static func date(_ text: String, now: Date) -> Date? {
        if text == "now" { return now }
        if let date = Catalog.parseDate(text) { return date }
        if let milliseconds = Int64(text), milliseconds > 100_000_000_000 {
            return Date(timeIntervalSince1970: Double(milliseconds) / 1000)
        }
        guard let sign = text.first, sign == "+" || sign == "-", let unit = text.last,
            let amount = Double(text.dropFirst().dropLast())
        else { return nil }
        let seconds: Double
        switch unit {
        case "s": seconds = amount
        case "m": seconds = amount * 60
        case "h": seconds = amount * 3600
        case "d": seconds = amount * 86_400
        default: return nil
        }
        return now.addingTimeInterval(sign == "+" ? seconds : -seconds)
    }
}
