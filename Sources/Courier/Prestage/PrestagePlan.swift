import Foundation

/// One package to fetch, verify, inspect and stage.
public struct PrestageTask: Sendable, Codable, Equatable {
    /// The folder name a client places it under: the product id, or `<productId>.<itemId>`.
    public var contentIdentifier: String
    public var productId: String
    public var itemId: String?
    /// The absolute upstream URL (the catalog's `url` resolved against the catalog's location).
    public var source: URL
    /// The upstream catalog's entry: length, sha256 and version are verified against it.
    public var content: Catalog.Content
    /// Where it is published in the staging tree, relative to the catalog.
    public var stagedPath: String

    public init(contentIdentifier: String, productId: String, itemId: String?, source: URL, content: Catalog.Content, stagedPath: String) {
        self.contentIdentifier = contentIdentifier
        self.productId = productId
        self.itemId = itemId
        self.source = source
        self.content = content
        self.stagedPath = stagedPath
    }

    /// A stable id for the transfer journal: the same package resumes under the same id.
    public var downloadId: String { "prestage-\(contentIdentifier)-\(content.sha256.prefix(16))" }

    /// Refuses a task a plan could not hold: its identifier cannot name a folder
    /// (`PrestagePlan.isSafeIdentifier`) or is not its product's (or `<productId>.<itemId>`), its
    /// digest is not 64 hex digits, its staged path is not the one the digest names
    /// (`PrestagePlan.stagedPath`), its length is out of range or its source is not http(s) or a
    /// file. Its download id then names a file in the work folder, and its staged path a file
    /// under `packages/<identifier>/`. Checked wherever a task is read back from a store.
    public func check() throws {
        func refuse(_ reason: String) -> CourierError {
            CourierError(
                .integrity, "a recorded pre-staging task is not valid: \(reason)",
                hint: "tasks are read back from the shared queue; check who can write to its database")
        }
        guard PrestagePlan.isSafeIdentifier(contentIdentifier) else {
            let shown = String(String.UnicodeScalarView(contentIdentifier.unicodeScalars.prefix(80))).debugDescription
            throw refuse("its content identifier \(shown) cannot name a folder")
        }
        let own = itemId.map { "\(productId).\($0)" } ?? productId
        guard own == contentIdentifier else { throw refuse("\(contentIdentifier) is not the identifier of its product and item") }
        guard PrestagePlan.isHexDigest(content.sha256) else { throw refuse("the sha256 of \(contentIdentifier) is not 64 hex digits") }
        guard stagedPath == PrestagePlan.stagedPath(contentIdentifier: contentIdentifier, sha256: content.sha256) else {
            throw refuse("\(contentIdentifier) is staged at \(String(stagedPath.prefix(80)).debugDescription), not at its digest's path")
        }
        guard (0...Catalog.Content.maxLength).contains(content.length) else {
            throw refuse("the length of \(contentIdentifier) is out of range")
        }
        guard let scheme = source.scheme?.lowercased(), ["http", "https", "file"].contains(scheme) else {
            throw refuse("the source of \(contentIdentifier) is not an http(s) or file URL")
        }
    }
}

/// What a pre-staging run must do: the packages that are new or changed against what the staging
/// tree already holds, and the catalog to publish once they are staged.
///
/// A package is staged under a path derived from its identifier and SHA-256, so "already staged"
/// is "a file of the right length is published at that path, and the published catalog names
/// it" (publishing is atomic and the catalog is published only once its packages are durable).
/// A file at its path that the published catalog does not name was left by a run that ended
/// before its catalog (killed, or a power cut that may have torn it): its bytes are checked
/// against the catalog's length and SHA-256 first, and it is fetched again unless they match.
/// A second run with nothing new reads no package and fetches nothing.
public struct PrestagePlan: Sendable {
    /// The packages to fetch, in catalog order.
    public var tasks: [PrestageTask]
    /// Content identifiers already staged at the upstream version (nothing to fetch).
    public var unchanged: [String]
    /// Entries the upstream catalog lists that cannot be staged (bad identifier, unresolvable URL).
    public var refused: [(contentIdentifier: String, reason: String)]

    let upstream: Catalog
    /// The catalog the tree had published when the plan was made. `PrestageJob.publish` lays
    /// the run over the catalog published at that moment instead (`keeping(published:)`).
    private(set) var published: Catalog?
    let selection: Set<String>?

    /// Where the package of `contentIdentifier` with digest `sha256` is staged.
    public static func stagedPath(contentIdentifier: String, sha256: String) -> String {
        "packages/\(contentIdentifier)/\(sha256.lowercased()).zip"
    }

    /// Plans a run.
    /// - Parameters:
    ///   - upstream: the catalog to stage, its URLs relative to `upstreamLocation`.
    ///   - products: only these product ids (`--product`), or nil for all; products not selected
    ///     keep what is published for them.
    public init(upstream: Catalog, upstreamLocation: URL?, tree: any StagingTree, products: Set<String>? = nil) throws {
        self.upstream = upstream
        self.published = try tree.publishedCatalog()
        self.selection = products
        var tasks: [PrestageTask] = []
        var unchanged: [String] = []
        var refused: [(String, String)] = []
        var seen = Set<String>()
        // Paths the published catalog names with their digest: durable, never rewritten.
        let durable = Set((published?.allContent ?? []).map { "\($0.content.url)\n\($0.content.sha256.lowercased())" })
        for entry in upstream.allContent {
            if let products, !products.contains(entry.productId) { continue }
            let identifier = entry.contentIdentifier
            guard seen.insert(identifier).inserted else {
                refused.append((identifier, "listed twice in the catalog"))
                continue
            }
            guard Self.isSafeIdentifier(identifier) else {
                refused.append((identifier, "the identifier cannot name a folder"))
                continue
            }
            guard Self.isHexDigest(entry.content.sha256) else {
                refused.append((identifier, "sha256 is not 64 hex digits"))
                continue
            }
            guard let source = Catalog.resolve(entry.content.url, relativeTo: upstreamLocation), source.scheme != nil else {
                refused.append((identifier, "the url \(entry.content.url) cannot be resolved"))
                continue
            }
            let path = Self.stagedPath(contentIdentifier: identifier, sha256: entry.content.sha256)
            if try tree.hasPackage(at: path, length: entry.content.length) {
                let sha256 = entry.content.sha256.lowercased()
                let named = durable.contains("\(path)\n\(sha256)")
                if try named || tree.hasVerifiedPackage(at: path, length: entry.content.length, sha256: sha256) {
                    unchanged.append(identifier)
                    continue
                }
            }
            tasks.append(
                PrestageTask(
                    contentIdentifier: identifier,
                    productId: entry.productId,
                    itemId: entry.itemId,
                    source: source,
                    content: entry.content,
                    stagedPath: path
                )
            )
        }
        self.tasks = tasks
        self.unchanged = unchanged
        self.refused = refused
    }

    /// Whether `tree` still has the catalog published that this plan was made against. Only a
    /// run's catalog vouches for its packages (a package without one may be torn), so the same
    /// catalog means the same packages already staged, and the same plan.
    public func isCurrent(in tree: any StagingTree) throws -> Bool {
        try tree.publishedCatalog() == published
    }

    /// The catalog to publish once the run ends: every selected entry that is staged (unchanged
    /// or `staged` now) points at its staged path; a selected entry that failed keeps the version
    /// published before, if any, else is left out; products not selected stay as published.
    /// `unpackedLengths` fills `unpackedLength` where the upstream catalog did not give one.
    public func catalog(staged: Set<String>, unpackedLengths: [String: Int64] = [:]) -> Catalog {
        let unchanged = Set(self.unchanged)
        let publishedEntries = Dictionary(
            (published?.allContent ?? []).map { ($0.contentIdentifier, $0.content) },
            uniquingKeysWith: { first, _ in first }
        )
        func entry(_ identifier: String, _ content: Catalog.Content) -> Catalog.Content? {
            if staged.contains(identifier) || unchanged.contains(identifier) {
                var result = content
                result.url = Self.stagedPath(contentIdentifier: identifier, sha256: content.sha256)
                result.sha256 = content.sha256.lowercased()
                if result.unpackedLength == nil {
                    result.unpackedLength = unpackedLengths[identifier]
                        ?? publishedEntries[identifier].flatMap { $0.sha256 == result.sha256 ? $0.unpackedLength : nil }
                }
                return result
            }
            return publishedEntries[identifier]
        }
        var products: [Catalog.Product] = []
        var listed = Set<String>()
        for product in upstream.products {
            if let selection, !selection.contains(product.productId) { continue }
            listed.insert(product.productId)
            var result = product
            result.content = product.content.flatMap { entry(product.productId, $0) }
            if let items = product.items {
                var kept: [Catalog.Item] = []
                for item in items {
                    guard let content = entry("\(product.productId).\(item.itemId)", item.content) else { continue }
                    kept.append(Catalog.Item(itemId: item.itemId, publishedAt: item.publishedAt, content: content))
                }
                result.items = kept
            }
            if result.content == nil && (result.items ?? []).isEmpty { continue }
            products.append(result)
        }
        if selection != nil, let published {
            // Products outside the selection keep what was published for them, in their order.
            for product in published.products where !listed.contains(product.productId) {
                products.append(product)
            }
        }
        return Catalog(bundleId: upstream.bundleId, products: products)
    }

    /// The plan as it was made, for a coordinator that takes over a run another one planned
    /// (docs/scaling.md): the same tasks, and the same catalog once they are done.
    ///
    /// Written by hand (`JSONText`): what `JSONEncoder` writes for the plan's `Snapshot` but for
    /// the order of keys, read back by `decode` through `JSONDecoder` (dates as seconds since
    /// 2001, URLs as their absolute strings). The coordinator encodes it before the run's first
    /// download, on one core: `JSONEncoder` took 7-11 ms for 500 packages.
    public func encoded() throws -> Data {
        func date(_ date: Date, _ json: inout JSONText) { json.number(date.timeIntervalSinceReferenceDate) }
        var json = JSONText(pretty: false, capacity: 1024 + tasks.count * 512 + upstream.products.count * 256)
        json.openObject()
        json.key("tasks")
        json.openArray()
        for task in tasks {
            json.element()
            json.openObject()
            json.key("content")
            task.content.write(to: &json)
            json.key("contentIdentifier")
            json.string(task.contentIdentifier)
            if let itemId = task.itemId {
                json.key("itemId")
                json.string(itemId)
            }
            json.key("productId")
            json.string(task.productId)
            json.key("source")
            json.string(task.source.absoluteString)
            json.key("stagedPath")
            json.string(task.stagedPath)
            json.closeObject()
        }
        json.closeArray()
        json.key("unchanged")
        json.strings(unchanged)
        json.key("refused")
        json.openArray()
        for refusal in refused {
            json.element()
            json.openObject()
            json.key("contentIdentifier")
            json.string(refusal.contentIdentifier)
            json.key("reason")
            json.string(refusal.reason)
            json.closeObject()
        }
        json.closeArray()
        json.key("upstream")
        upstream.write(to: &json, date: date)
        if let published {
            json.key("published")
            published.write(to: &json, date: date)
        }
        if let selection {
            json.key("selection")
            json.strings(selection.sorted())
        }
        json.closeObject()
        return Data(json.bytes)
    }

    /// A plan `encoded()` before, checked as if it came from the network (`check()`): what a
    /// process reads back from a store others can write (a PostgreSQL row) is untrusted input.
    public static func decode(_ data: Data) throws -> PrestagePlan {
        let snapshot: Snapshot
        do {
            snapshot = try JSONDecoder().decode(Snapshot.self, from: data)
        } catch {
            throw CourierError(.integrity, "the recorded pre-staging plan cannot be read", cause: "\(error)")
        }
        let plan = PrestagePlan(snapshot: snapshot)
        try plan.check()
        return plan
    }

    /// A plan another process recorded for the run of `products` over `tree` (`courier prestage
    /// --queue`): `decode`, and also what only the reader can know: the run is the one its
    /// command line names (the same product selection), it has tasks (a plan with none is never
    /// recorded), and its `published` catalog is either the one the tree has published or one
    /// every entry of which is staged at its own digest's path (`checkPublished`).
    public static func decodeStored(_ data: Data, tree: any StagingTree, products: Set<String>?) throws -> PrestagePlan {
        let plan = try decode(data)
        guard plan.selection == products else {
            throw invalid("its product selection is not this run's (\(products.map { $0.sorted().joined(separator: ",") } ?? "every product"))")
        }
        guard !plan.tasks.isEmpty else { throw invalid("it has no task (a plan with nothing to fetch is never recorded)") }
        try plan.checkPublished(against: tree)
        return plan
    }

    /// The upstream catalog the plan was made from.
    public var upstreamCatalog: Catalog { upstream }

    /// Refuses a recorded plan made from another upstream catalog than `upstream`, the one this
    /// process loaded itself (through TUF when it has a trusted root). `decodeStored` only shows
    /// that a plan is one `init` could have made from *some* catalog: a row that drops a product
    /// from its upstream copy, or gives one product another's package, passes it, and its catalog
    /// would then be published. A process that signs what it publishes (`PrestageSigner`) checks
    /// this too, so it signs only a catalog made from what it trusts (docs/trust.md).
    public func checkUpstream(_ upstream: Catalog) throws {
        guard self.upstream == upstream else {
            throw Self.invalid(
                "its upstream catalog is not the one this process loaded (the upstream catalog changed since the run was "
                    + "planned, or the row was altered); it is not published or signed")
        }
    }

    /// The same plan laid over `published`, the catalog the tree has published now: the entries
    /// the run keeps as they are (a failed task's previous version, products not selected) are
    /// taken from it, not from the plan's copy, which another run key may have replaced since and
    /// which a recorded plan could otherwise use to move one product's package under another.
    public func keeping(published: Catalog?) -> PrestagePlan {
        var plan = self
        plan.published = published
        return plan
    }

    /// The error of a plan that fails a check.
    private static func invalid(_ reason: String) -> CourierError {
        CourierError(
            .integrity, "the recorded pre-staging plan is not valid: \(reason)",
            hint: "a plan is read back from the shared queue; check who can write to its database")
    }

    /// An untrusted text for a message: at most 80 characters, escaped.
    private static func quoted(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.prefix(80))).debugDescription
    }

    /// Refuses a plan `init` could not have made from its own upstream catalog (docs/scaling.md,
    /// "A row is untrusted"): every task is the upstream entry of its identifier, that identifier
    /// can name a folder (`isSafeIdentifier`), its digest is 64 hex digits and its staged path is
    /// the one that digest names under that folder, its source is http(s) or a file; every
    /// unchanged entry is an upstream entry; each selected upstream entry is a task, unchanged or
    /// refused, and no identifier is both a task and unchanged or listed twice. So a worker never
    /// writes outside the staging tree's folders and the catalog published from the plan lists
    /// every entry it stages.
    func check() throws {
        var entries: [String: (productId: String, itemId: String?, content: Catalog.Content)] = [:]
        var selected = Set<String>()
        for entry in upstream.allContent {
            if let selection, !selection.contains(entry.productId) { continue }
            selected.insert(entry.contentIdentifier)
            if entries[entry.contentIdentifier] == nil {
                entries[entry.contentIdentifier] = (entry.productId, entry.itemId, entry.content)
            }
        }
        var planned = Set<String>()
        for task in tasks {
            try task.check()
            let identifier = task.contentIdentifier
            guard let entry = entries[identifier], entry.productId == task.productId, entry.itemId == task.itemId,
                entry.content == task.content
            else {
                throw Self.invalid("the task \(identifier) is not the upstream catalog's entry of that identifier")
            }
            guard planned.insert(identifier).inserted else { throw Self.invalid("the task \(identifier) is listed twice") }
        }
        for identifier in unchanged {
            guard Self.isSafeIdentifier(identifier), let entry = entries[identifier], Self.isHexDigest(entry.content.sha256) else {
                throw Self.invalid("the unchanged entry \(Self.quoted(identifier)) is not a stageable entry of the upstream catalog")
            }
            guard planned.insert(identifier).inserted else { throw Self.invalid("the entry \(identifier) is listed twice") }
        }
        var accounted = planned
        for refusal in refused {
            guard selected.contains(refusal.contentIdentifier) else {
                throw Self.invalid("the refused entry \(Self.quoted(refusal.contentIdentifier)) is not in the upstream catalog")
            }
            accounted.insert(refusal.contentIdentifier)
        }
        guard accounted == selected else {
            throw Self.invalid("it leaves out \(selected.subtracting(accounted).count) entries of its upstream catalog")
        }
    }

    /// Refuses a recorded `published` catalog that is not the tree's and has an entry that is not
    /// staged at its own digest's path (`packages/<its identifier>/<its sha256>.zip`, the
    /// manifest beside it), or a product listed twice: what `catalog(staged:)` makes has none.
    func checkPublished(against tree: any StagingTree) throws {
        guard let published else { return }
        if let reason = Self.unstagedEntry(in: published) {
            guard try tree.publishedCatalog() == published else {
                throw Self.invalid("its published catalog is not the staging tree's and \(reason)")
            }
        }
    }

    /// Why `catalog` is not one a pre-staging run publishes, or nil when it is.
    static func unstagedEntry(in catalog: Catalog) -> String? {
        var products = Set<String>()
        for product in catalog.products where !products.insert(product.productId).inserted {
            return "lists \(quoted(product.productId)) twice"
        }
        var identifiers = Set<String>()
        for entry in catalog.allContent {
            let identifier = entry.contentIdentifier
            guard isSafeIdentifier(identifier), identifiers.insert(identifier).inserted else {
                return "lists \(quoted(identifier)), which cannot name a folder or is listed twice"
            }
            let content = entry.content
            guard isLowercaseHexDigest(content.sha256), content.url == stagedPath(contentIdentifier: identifier, sha256: content.sha256)
            else {
                return "stages \(identifier) at \(quoted(content.url)), not at its own digest's path"
            }
            if let manifest = content.manifest {
                guard isLowercaseHexDigest(manifest.sha256), manifest.url == PrestageManifests.path(besidePackage: content.url) else {
                    return "names the manifest of \(identifier) at \(quoted(manifest.url)), not beside its package"
                }
            }
        }
        return nil
    }

    private init(snapshot: Snapshot) {
        tasks = snapshot.tasks
        unchanged = snapshot.unchanged
        refused = snapshot.refused.map { ($0.contentIdentifier, $0.reason) }
        upstream = snapshot.upstream
        published = snapshot.published
        selection = snapshot.selection.map(Set.init)
    }

    private struct Snapshot: Codable {
        struct Refusal: Codable {
            var contentIdentifier: String
            var reason: String
        }
        var tasks: [PrestageTask]
        var unchanged: [String]
        var refused: [Refusal]
        var upstream: Catalog
        var published: Catalog?
        var selection: [String]?
    }

    /// ASCII letters, digits, `.`, `-` and `_`, at most 200 bytes, not starting with `.`. (Byte
    /// by byte: a scalar-by-scalar check cost 2 ms of a 500-package plan.)
    static func isSafeIdentifier(_ identifier: String) -> Bool {
        let bytes = identifier.utf8
        guard !bytes.isEmpty, bytes.count <= 200, bytes.first != UInt8(ascii: ".") else { return false }
        return bytes.allSatisfy {
            switch $0 {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"):
                true
            default:
                false
            }
        }
    }

    /// 64 ASCII hex digits, lowercase (a digest Courier wrote).
    static func isLowercaseHexDigest(_ text: String) -> Bool {
        let bytes = text.utf8
        return bytes.count == 64
            && bytes.allSatisfy {
                switch $0 {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): true
                default: false
                }
            }
    }

    /// 64 ASCII hex digits, either case.
    static func isHexDigest(_ text: String) -> Bool {
        let bytes = text.utf8
        return bytes.count == 64
            && bytes.allSatisfy {
                switch $0 {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"): true
                default: false
                }
            }
    }
}
