import ArgumentParser

/// The purchase a command works on: how its receipt is validated, `--receipt FILE`, the
/// catalog, and which products (`deliver` and `enqueue`).
struct PurchaseOptions: ParsableArguments {
    @OptionGroup var receiptOptions: ReceiptOptions

    @Option(name: .customLong("receipt"), help: ArgumentHelp("The receipt: JWS signed transactions or a legacy receipt.", valueName: "file"))
    var receiptFile: String

    @Option(help: ArgumentHelp("The catalog, a file or URL (default: the configured one).", valueName: "file|url"))
    var catalog: String?

    @Option(
        name: .customLong("catalog-root"),
        help: ArgumentHelp(
            "The publisher's TUF root.json: the catalog is then accepted only through TUF (default: catalog.trustedRoot).",
            valueName: "file"))
    var catalogRoot: String?

    @Option(
        name: .customLong("product"), help: ArgumentHelp("Only this product (repeatable).", valueName: "id"),
        completion: IdCompletion.kind(.products))
    var products: [String] = []

    @Flag(help: "Restore the completed transactions of the products named by --product.")
    var restore = false

    func validate() throws {
        if restore && products.isEmpty { throw ValidationError("--restore needs the products to restore: --product ID") }
    }
}
