import ArgumentParser
import Courier
import Foundation

/// `courier content list | path | open | close | delete | verify`: StoreKit's contentURL and
/// deleteContent, On-Demand Resources' begin/endAccessingResources (open, close: pins), and a
/// check (and repair) of placed files, like Steam's "verify integrity of files".
struct ContentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "content",
        abstract: "Where delivered content is; open (fetch and pin) and close it; remove it; check and repair it.",
        subcommands: [
            ContentListCommand.self, ContentPathCommand.self, ContentOpenCommand.self, ContentCloseCommand.self,
            ContentDeleteCommand.self, ContentVerifyCommand.self,
        ]
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
            let pins = try contents.map { try placer.pins.state($0.contentIdentifier) }
            if out.json {
                /// A delivered content with its pin (docs/json.md).
                struct Entry: Encodable {
                    var content: DeliveredContent
                    var pin: ContentPins.State
                    enum Keys: String, CodingKey { case pin }
                    func encode(to encoder: any Encoder) throws {
                        try content.encode(to: encoder)
                        var container = encoder.container(keyedBy: Keys.self)
                        try container.encode(pin, forKey: .pin)
                    }
                }
                struct Listing: Encodable {
                    var content: [Entry]
                    var backupExclusion: BackupExclusion.Support
                }
                let entries = zip(contents, pins).map { Entry(content: $0, pin: $1) }
                out.emit(encodable: Listing(content: entries, backupExclusion: support))
                return
            }
            if contents.isEmpty {
                out.line("No delivered content.")
            } else {
                var table = [["CONTENT", "VERSION", "PLACEMENT", "CLASS", "PRESERVE", "PIN", "SIZE", "PATH"]]
                for (item, pin) in zip(contents, pins) {
                    table.append([
                        item.contentIdentifier, item.version, item.placement.rawValue, item.delivery.rawValue,
                        item.preservation.rawValue, pin.label, QueueFormat.bytes(item.size), item.path,
                    ])
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
        abstract: "Print the folder of delivered content, or of each item of a subscription (exit 1 if none is delivered)."
    )

    @OptionGroup var global: GlobalOptions

    @Argument(
        help: "The product (or content) identifier.",
        completion: IdCompletion.kind(.productsAndContent))
    var product: String

    func run() async throws {
        try await global.run { out in
            let placer = try global.contentPlacer(existingStore: true, recover: false)
            if let content = try placer.content(product) {
                if out.json {
                    out.emit(encodable: content)
                } else {
                    out.line(content.path)
                }
                return
            }
            // A subscription's product has no content of its own: its items' (`PRODUCT.ITEM`),
            // one path a line (with --json, one document listing them).
            let items = try placer.list().filter { $0.contentIdentifier.hasPrefix(product + ".") }
            guard !items.isEmpty else {
                throw CourierError(.notFound, "no delivered content \(product.debugDescription)")
            }
            if out.json {
                struct Items: Encodable { var content: [DeliveredContent] }
                out.emit(encodable: Items(content: items))
            } else {
                for item in items { out.line(item.path) }
            }
        }
    }
}

/// `courier content open PRODUCT [--hold]`: On-Demand Resources' `beginAccessingResources`.
struct ContentOpenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open",
        abstract: "Pin content and print its folder, fetching it first if it is not placed (on-demand or purged).",
        discussion: """
            Placed content is a lookup: no network. Content that is not placed (on-demand content \
            never fetched, content purged for space or deleted) is fetched for the stored purchase \
            that entitles it in the catalog (--catalog, else the configured one), through the \
            verified download and install of `deliver`, with its progress; then its folder is \
            printed and the command exits 0. Pinned content is never purged for space. Without \
            --hold the pin lasts until `courier content close PRODUCT` (or `content delete`). With \
            --hold the pin is a lock this process holds: the folder is printed, then the command \
            waits until SIGINT or SIGTERM and exits 0; if it is \
            killed, the kernel drops the lock and the pin is gone. Exit 3 when no stored purchase \
            entitles the content.
            """)

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The product (or content) identifier: PRODUCT, or PRODUCT.ITEM for a subscription item.")
    var product: String

    @Option(help: ArgumentHelp("The catalog to look the content up in when it must be fetched (a file or URL).", valueName: "file|url"))
    var catalog: String?

    @Option(
        name: .customLong("catalog-root"),
        help: ArgumentHelp(
            "The publisher's TUF root.json: the catalog is then accepted only through TUF (default: catalog.trustedRoot).",
            valueName: "file"))
    var catalogRoot: String?

    @Flag(name: .long, help: "Pin only while this process runs (until SIGINT or SIGTERM), not until `content close`.")
    var hold = false

    func run() async throws {
        try await global.run { output in
            // Pinned first (a purge from now on keeps it); placed content is then a lookup in the
            // store: no transfer engine, no catalog, no network.
            let placer = try global.contentPlacer(existingStore: true, recover: false)
            let held = hold ? try placer.pins.hold(product) : nil
            let pinnedNow = hold ? false : try placer.pins.pin(product)
            var content: DeliveredContent
            var fetched = false
            do {
                if let placed = try placer.content(product) {
                    content = placed
                } else {
                    let client = try global.client(existingStore: true, catalogRoot: catalogRoot, output: output)
                    defer { client.shutdown() }
                    switch try await client.contentRequest(productID: product, catalog: catalog) {
                    case .placed(let placed):
                        content = placed
                    case .download(let download):
                        fetched = true
                        let (summary, _, interrupted) = try await client.runInForeground(
                            scope: .downloads([download.id]), output: output, retryStopped: false)
                        if let error = summary.endError(interrupted: interrupted, checkpointed: "downloads") { throw error }
                        guard let placed = try placer.content(product) else {
                            throw CourierError(.internal, "\(product) was delivered but is not in place")
                        }
                        content = placed
                    }
                }
            } catch {
                held?.release()
                if pinnedNow { _ = try? placer.pins.unpin(product) }
                throw error
            }
            if output.json {
                output.emit(
                    ContentOpenResult(
                        contentIdentifier: content.contentIdentifier, contentPath: content.path, delivery: content.delivery.rawValue,
                        preservation: content.preservation.rawValue, pin: hold ? "held" : "open", fetched: fetched))
            } else {
                output.line(content.path)
            }
            if let held {
                // Until SIGINT or SIGTERM (which cancel the sleep); a kill drops the lock anyway.
                _ = try? await withSignalCancellation {
                    while !Task.isCancelled { try? await Task.sleep(nanoseconds: 3_600_000_000_000) }
                }
                held.release()
            }
        }
    }
}

/// `courier content close PRODUCT`: On-Demand Resources' `endAccessingResources`.
struct ContentCloseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "close",
        abstract: "End the pin `content open` left on content (it may be purged for space again).",
        discussion: "Pins held by a running `content open --hold` (or a library call) end with their process, not here. Exit 0 also when there was no pin."
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The product (or content) identifier.")
    var product: String

    func run() async throws {
        try await global.run { output in
            let client = try global.client(existingStore: true)
            defer { client.shutdown() }
            let closed = try client.closeContent(productID: product)
            if output.json {
                output.emit(ContentCloseResult(contentIdentifier: product, wasPinned: closed))
            } else {
                output.done(closed ? "closed \(product)" : "\(product) was not pinned by content open")
            }
        }
    }
}

/// `courier content delete PRODUCT`
struct ContentDeleteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "delete", abstract: "Remove delivered content.")

    @OptionGroup var global: GlobalOptions

    @Argument(
        help: "The product (or content) identifier.",
        completion: IdCompletion.kind(.productsAndContent))
    var product: String

    func run() async throws {
        try await global.run { out in
            let placer = try global.contentPlacer(existingStore: true, recover: true)
            try placer.delete(product)
            if out.json {
                out.emit(ContentDeleteResult(contentIdentifier: product))
            } else {
                out.done("deleted \(product)")
            }
        }
    }
}

/// `courier content verify [PRODUCT] [--repair]`
struct ContentVerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check placed files against their package; with --repair, fetch what is missing or damaged.",
        discussion: """
            Every file of delivered content is read and compared with what its install recorded \
            (size and SHA-256 of each file as unpacked from the verified package). Each content is \
            ok, missing (its folder is gone, or it was deleted or purged: named by PRODUCT), \
            damaged (files gone or changed) or unverifiable (placed before per-file records). \
            Exit 6 when something is missing or damaged (after --repair: still wrong). --repair \
            fetches only the missing and damaged entries by byte ranges where the package has a \
            manifest, else the whole package, and places the content with an atomic swap; its \
            purchase stays finished.
            """)

    @OptionGroup var global: GlobalOptions

    @Argument(
        help: "The product (or content) identifier; all delivered content when omitted.",
        completion: IdCompletion.kind(.productsAndContent))
    var product: String?

    @Flag(name: .long, help: "Fetch what is missing or damaged and place it again.")
    var repair = false

    func run() async throws {
        try await global.run { output in
            let client = try global.client(existingStore: true)
            defer { client.shutdown() }
            var checks = try await client.verifyContent(product)
            for check in checks { say(check, output) }
            if repair {
                let broken = checks.filter { $0.status != .ok }
                var queued: [String] = []
                for check in broken {
                    let mended = try await client.repair(check)
                    if let downloadId = mended.downloadId { queued.append(downloadId) }
                    if output.json {
                        output.emit(
                            RepairEvent(
                                contentIdentifier: mended.contentIdentifier, method: mended.method.rawValue, bytesFetched: mended.bytesFetched,
                                downloadId: mended.downloadId))
                    } else if mended.method == .entries {
                        output.line("\(mended.contentIdentifier): repaired by entries (\(QueueFormat.bytes(mended.bytesFetched ?? 0)) fetched)")
                    } else {
                        output.line("\(mended.contentIdentifier): fetching the whole package again")
                    }
                }
                if !queued.isEmpty {
                    let (summary, _, interrupted) = try await client.runInForeground(
                        scope: .downloads(Set(queued)), output: output, retryStopped: false)
                    if let error = summary.endError(interrupted: interrupted, checkpointed: "repairs") { throw error }
                }
                if !broken.isEmpty {
                    let again = try await client.verifyContent(product)
                    let repaired = Set(broken.map(\.contentIdentifier))
                    for check in again where repaired.contains(check.contentIdentifier) { say(check, output, after: true) }
                    checks = again
                }
            }
            let wrong = checks.filter(\.isWrong)
            guard wrong.isEmpty else {
                let names = wrong.map { "\($0.contentIdentifier) (\($0.status.rawValue))" }.joined(separator: ", ")
                let next = "fetch what is wrong with: courier content verify --repair" + (product.map { " " + $0 } ?? "")
                throw CourierError(
                    .integrity, "\(wrong.count == 1 ? "1 content is" : "\(wrong.count) contents are") not as delivered: \(names)",
                    hint: repair ? "run it again; if it stays so, its package may have changed since it was delivered" : next)
            }
            if output.json {
                output.emit(
                    ContentVerifyResult(
                        ok: checks.filter { $0.status == .ok }.map(\.contentIdentifier),
                        unverifiable: checks.filter { $0.status == .unverifiable }.map(\.contentIdentifier)))
            } else if checks.isEmpty {
                output.line("No delivered content.")
            }
        }
    }

    /// One content's verdict: a line, or a `verified` event (`after`: once repaired).
    private func say(_ check: ContentCheck, _ output: Output, after: Bool = false) {
        if output.json {
            output.emit(
                VerifiedContentEvent(
                    contentIdentifier: check.contentIdentifier, productId: check.productId, version: check.version,
                    placement: check.placement.rawValue, contentPath: check.path, status: check.status.rawValue,
                    missingFiles: check.missingFiles, damagedFiles: check.damagedFiles, filesChecked: check.filesChecked, repaired: after))
            return
        }
        var line = "\(check.contentIdentifier) \(check.version): \(check.status.rawValue)"
        switch check.status {
        case .ok: line += " (\(check.filesChecked) files)"
        case .missing: line += " (\(check.path) is gone)"
        case .unverifiable: line += " (placed before per-file records; --repair fetches its package again)"
        case .damaged:
            var parts: [String] = []
            if !check.missingFiles.isEmpty { parts.append("missing: " + check.missingFiles.joined(separator: ", ")) }
            if !check.damagedFiles.isEmpty { parts.append("changed: " + check.damagedFiles.joined(separator: ", ")) }
            line += " (" + parts.joined(separator: "; ") + ")"
        }
        output.line(after ? line + " after the repair" : line)
    }
}
