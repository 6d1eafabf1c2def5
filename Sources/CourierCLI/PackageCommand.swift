import ArgumentParser
import Courier
import Foundation
import Logging

/// `courier package create | inspect | install`: build, read and install hosted content packages.
struct PackageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "package",
        abstract: "Build, inspect and install hosted content packages.",
        subcommands: [PackageCreateCommand.self, PackageInspectCommand.self, PackageInstallCommand.self]
    )
}

/// `courier package create DIR --product ID --version V -o OUT.zip`
struct PackageCreateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Pack a folder as a content package (reproducible: the same input gives the same bytes)."
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The folder whose files become Contents/.")
    var directory: String

    @Option(name: .long, help: "The product identifier (IAPProductIdentifier).")
    var product: String

    @Option(name: .long, help: "The content version (ContentVersion).")
    var version: String

    @Option(name: .shortAndLong, help: "The package file to write.")
    var output: String

    func run() async throws {
        try await global.run { out in
            let info = try PackageBuilder.create(
                from: URL(fileURLWithPath: directory),
                productId: product,
                version: version,
                output: URL(fileURLWithPath: output)
            )
            if out.json {
                out.emit(encodable: info)
            } else {
                out.line("\(output): \(info.productId) \(info.version), \(info.entryCount) entries, \(info.packedSize) bytes, sha256 \(info.sha256)")
            }
        }
    }
}

/// `courier package inspect FILE [--json]`
struct PackageInspectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Print a package's product, version, entry count, sizes and SHA-256 without extracting it."
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The package file.")
    var file: String

    func run() async throws {
        try await global.run { out in
            let configuration = try global.loadConfiguration()
            let info = try PackageInspector.inspect(URL(fileURLWithPath: file), limits: configuration.packages)
            if out.json {
                out.emit(encodable: info)
            } else {
                out.line("product:   \(info.productId)")
                out.line("version:   \(info.version)")
                out.line("entries:   \(info.entryCount)")
                out.line("packed:    \(info.packedSize) bytes")
                out.line("unpacked:  \(info.unpackedSize) bytes")
                out.line("sha256:    \(info.sha256)")
            }
        }
    }
}

/// `courier package install FILE --placement cache|documents [--product ID] [--force]`
struct PackageInstallCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "install",
        abstract: "Install a local package into Caches or Documents.",
        discussion: "Exit 6 when the package is hostile or damaged, 4 when space is short."
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The package file.")
    var file: String

    @Option(name: .long, help: "cache (purgeable) or documents (kept, excluded from backups).")
    var placement: String

    @Option(name: .long, help: "The product the package must name (default: the one its ContentInfo.plist names).")
    var product: String?

    @Option(name: .long, help: "The version the package must carry (default: any).")
    var version: String?

    @Option(name: .long, help: "The content folder name (default: the product identifier).")
    var contentId: String?

    @Flag(name: .long, help: "Install even an older version than the one installed.")
    var force = false

    func validate() throws {
        guard Catalog.Placement(rawValue: placement) != nil else {
            throw ValidationError("--placement must be cache or documents")
        }
    }

    func run() async throws {
        let target = Catalog.Placement(rawValue: placement) ?? .cache
        try await global.run { out in
            let configuration = try global.loadConfiguration()
            let placer = try global.contentPlacer(configuration: configuration)
            let package = URL(fileURLWithPath: file)
            let productId = try product ?? PackageInspector.contentInfo(of: package, limits: configuration.packages).productId
            let delivered = try placer.install(
                package: package,
                contentIdentifier: contentId ?? productId,
                productId: productId,
                version: version,
                placement: target,
                force: force
            )
            if out.json {
                out.emit(encodable: delivered)
            } else {
                out.line("\(delivered.contentIdentifier) \(delivered.version) -> \(delivered.path)")
            }
        }
    }
}

extension GlobalOptions {
    /// The content placer of this storage, logging warnings to standard error (`COURIER_LOG`,
    /// `--verbose` or `--quiet` change the level), its interrupted installs recovered first when
    /// `recover`. With `existingStore` the store must exist: reading never creates one.
    func contentPlacer(
        existingStore: Bool = false, recover: Bool = true, configuration: CourierConfiguration? = nil
    ) throws -> ContentPlacer {
        try core(existingStore: existingStore, configuration: configuration, logger: logger("courier", default: .warning))
            .contentPlacer(recover: recover)
    }
}
