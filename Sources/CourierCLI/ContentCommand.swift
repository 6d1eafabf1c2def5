import ArgumentParser
import Courier
import Foundation

/// `courier content list | path | delete`: StoreKit's contentURL and deleteContent.
struct ContentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "content",
        abstract: "Where delivered content is; remove it.",
        subcommands: [ContentListCommand.self, ContentPathCommand.self, ContentDeleteCommand.self]
    )
}

/// `courier content list [--json]`
struct ContentListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List delivered content.")

    @OptionGroup var global: GlobalOptions

    func run() async throws {
        try await global.run { out in
            let placer = try global.contentPlacer(existingStore: true, recover: true)
            let contents = try placer.list()
            let support = placer.backupExclusionSupport
            if out.json {
                struct Listing: Encodable {
                    var content: [DeliveredContent]
                    var backupExclusion: BackupExclusion.Support
                }
                out.emit(encodable: Listing(content: contents, backupExclusion: support))
                return
            }
            if contents.isEmpty {
                out.line("No delivered content.")
            } else {
                var table = [["CONTENT", "VERSION", "PLACEMENT", "SIZE", "PATH"]]
                for item in contents {
                    table.append([item.contentIdentifier, item.version, item.placement.rawValue, QueueFormat.bytes(item.size), item.path])
                }
                for line in QueueFormat.align(table) { out.line(line) }
            }
            out.info("backup exclusion of Documents: \(support)")
        }
    }
}

/// `courier content path PRODUCT`
struct ContentPathCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "path",
        abstract: "Print the folder of delivered content (exit 1 if it is not delivered)."
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The product (or content) identifier.")
    var product: String

    func run() async throws {
        try await global.run { out in
            let placer = try global.contentPlacer(existingStore: true, recover: false)
            guard let content = try placer.content(product) else {
                throw CourierError(.notFound, "no delivered content \(product.debugDescription)")
            }
            if out.json {
                out.emit(encodable: content)
            } else {
                out.line(content.path)
            }
        }
    }
}

/// `courier content delete PRODUCT`
struct ContentDeleteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "delete", abstract: "Remove delivered content.")

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The product (or content) identifier.")
    var product: String

    func run() async throws {
        try await global.run { out in
            let placer = try global.contentPlacer(existingStore: true, recover: true)
            try placer.delete(product)
            if out.json {
                out.emit(["event": "deleted", "contentIdentifier": product])
            } else {
                out.done("deleted \(product)")
            }
        }
    }
}
