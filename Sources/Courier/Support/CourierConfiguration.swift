import Foundation

/// All of Courier's settings: one section per component, each with documented defaults.
///
/// Filled from `Config/courier.json` (or `--config FILE`, or `COURIER_CONFIG`), then from the
/// environment, then from command-line flags, which the CLI applies last. A key missing from the
/// file keeps its default, so a file only names what it changes.
public struct CourierConfiguration: Sendable, Codable, Equatable {
    /// The catalog: a file path or a URL. `nil` means none is configured.
    public var catalog: String?
    /// Whose signature the catalog needs (TUF, docs/trust.md): the `catalog` key written as an
    /// object, `{"url": ..., "trustedRoot": ..., "allowUnsigned": ...}`.
    public var catalogTrust: CatalogTrustConfiguration = .init()
    /// Its `stallTimeout` and `diskReserve` are the only settings of their kind: `queue` and
    /// `placement` take theirs from it whenever it changes.
    public var transfer: TransferConfiguration { didSet { shareTransferSettings() } }
    public var receipts: ReceiptConfiguration
    public var packages: PackageConfiguration
    public var placement: PlacementConfiguration
    public var queue: QueueConfiguration
    /// `courier prestage`: jobs, the shared queue (`prestage.queue`), leases.
    public var prestage: PrestageConfiguration = .init()
    /// `courier serve`: the origin's content folder, listener, limits, gate and refunds.
    public var serve: ServeConfiguration = .init()
    /// `courier agent`: desktop notifications (`agent.notifications`).
    public var agent: AgentConfiguration = .init()

    /// The folder relative paths in this configuration are resolved against: the folder of the
    /// file it was loaded from, or the current directory.
    public var baseDirectory: URL = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)

    public init(
        catalog: String? = nil,
        transfer: TransferConfiguration = .init(),
        receipts: ReceiptConfiguration = .init(),
        packages: PackageConfiguration = .init(),
        placement: PlacementConfiguration = .init(),
        queue: QueueConfiguration = .init()
    ) {
        self.catalog = catalog
        self.transfer = transfer
        self.receipts = receipts
        self.packages = packages
        self.placement = placement
        self.queue = queue
        shareTransferSettings()
    }

    /// Gives `queue` and `placement` the transfer's stall timeout (doubled: a download counts as
    /// stalled once the transfer's own watchdog has had its turn) and disk reserve.
    private mutating func shareTransferSettings() {
        queue.stallTimeout = transfer.stallTimeout * 2
        placement.diskReserve = transfer.diskReserve
    }

    /// The rules of the download lifecycle (`DownloadLifecycle.Policy`) these settings make: the
    /// queue's stall timeout, and the one space formula with `transfer.diskReserve` and
    /// `placement.unpackedSizeFactor`. Retries keep the policy's defaults (the agent's
    /// `--retry-backoff` changes its first delay).
    public var lifecycle: DownloadLifecycle.Policy {
        DownloadLifecycle.Policy(
            stallTimeout: queue.stallTimeout,
            space: DownloadLifecycle.SpaceRule(reserve: transfer.diskReserve, unpackedSizeFactor: placement.unpackedSizeFactor))
    }

    enum CodingKeys: String, CodingKey {
        case catalog, transfer, receipts, packages, placement, queue, prestage, serve, agent
    }

    /// `catalog` is a string (the location) or an object (the location and its trust).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if let location = try? container.decodeIfPresent(String.self, forKey: .catalog) {
            catalog = location
        } else if let section = try container.decodeIfPresent(CatalogSection.self, forKey: .catalog) {
            catalog = section.url
            catalogTrust = section.trust
        }
        transfer = try container.decode(TransferConfiguration.self, forKey: .transfer)
        receipts = try container.decode(ReceiptConfiguration.self, forKey: .receipts)
        packages = try container.decode(PackageConfiguration.self, forKey: .packages)
        placement = try container.decode(PlacementConfiguration.self, forKey: .placement)
        queue = try container.decode(QueueConfiguration.self, forKey: .queue)
        prestage = try container.decode(.prestage, or: PrestageConfiguration())
        serve = try container.decode(.serve, or: ServeConfiguration())
        agent = try container.decode(.agent, or: AgentConfiguration())
        shareTransferSettings()
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        if catalogTrust == CatalogTrustConfiguration() {
            try container.encodeIfPresent(catalog, forKey: .catalog)
        } else {
            try container.encode(CatalogSection(url: catalog, trust: catalogTrust), forKey: .catalog)
        }
        try container.encode(transfer, forKey: .transfer)
        try container.encode(receipts, forKey: .receipts)
        try container.encode(packages, forKey: .packages)
        try container.encode(placement, forKey: .placement)
        try container.encode(queue, forKey: .queue)
        try container.encode(prestage, forKey: .prestage)
        try container.encode(serve, forKey: .serve)
        try container.encode(agent, forKey: .agent)
    }

    /// Decodes a configuration file's JSON, the one way a configuration is read (the sections'
    /// `Decodable` wants every key): the file is laid over the defaults written out, so a key it
    /// leaves out (or sets to null) keeps its default; then `queue` and `placement` take the
    /// transfer's settings and the queue's and the origin's are checked.
    public static func decode(_ data: Data) throws -> CourierConfiguration {
        guard let file = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            _ = try JSONDecoder().decode(CourierConfiguration.self, from: data)  // says what is wrong
            throw CourierError(.usage, "a configuration is a JSON object")
        }
        let defaults = try JSONSerialization.jsonObject(with: JSONEncoder().encode(CourierConfiguration())) as? [String: Any]
        let layered = try JSONSerialization.data(withJSONObject: layer(file, over: defaults ?? [:]))
        var configuration = try JSONDecoder().decode(CourierConfiguration.self, from: layered)
        configuration.shareTransferSettings()
        try configuration.queue.validate()
        try configuration.serve.validate()
        return configuration
    }

    /// `file` over `defaults`, object by object; a null in the file leaves the default.
    private static func layer(_ file: [String: Any], over defaults: [String: Any]) -> [String: Any] {
        file.reduce(into: defaults) { result, entry in
            if entry.value is NSNull { return }
            if let object = entry.value as? [String: Any], let base = defaults[entry.key] as? [String: Any] {
                result[entry.key] = layer(object, over: base)
            } else {
                result[entry.key] = entry.value
            }
        }
    }

    /// The default configuration file: `COURIER_CONFIG`, else `./Config/courier.json` when it
    /// exists (the project's demo configuration), else `$XDG_CONFIG_HOME/courier/courier.json`
    /// (by default `~/.config/courier/courier.json`). See docs/cli.md.
    public static func defaultFile(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        currentDirectory: String = FileManager.default.currentDirectoryPath
    ) -> URL {
        if let path = environment["COURIER_CONFIG"], !path.isEmpty { return URL(fileURLWithPath: path) }
        let local = URL(fileURLWithPath: currentDirectory, isDirectory: true).appendingPathComponent("Config/courier.json")
        if FileManager.default.fileExists(atPath: local.path) { return local }
        if let folder = StorageLayout.xdgFolder("XDG_CONFIG_HOME", fallback: ".config", environment: environment) {
            return folder.appendingPathComponent("courier/courier.json")
        }
        return local
    }

    /// Loads `file`; a missing file gives the defaults unless `required` (an explicit `--config`).
    public static func load(file: URL, required: Bool) throws -> CourierConfiguration {
        let data: Data
        do {
            data = try Data(contentsOf: file)
        } catch {
            let missing = !FileManager.default.fileExists(atPath: file.path)
            if !required && missing {
                return CourierConfiguration()
            }
            throw CourierError.unreadable("the configuration", path: file.path, error: error)
        }
        var configuration: CourierConfiguration
        do {
            configuration = try decode(data)
        } catch {
            throw CourierError(.usage, "the configuration \(file.path) is not valid", cause: Self.describe(error))
        }
        if let unknown = unknownKeys(in: data, decoded: true).first {
            let section = unknown.section.isEmpty ? "at the top level" : "in section \"\(unknown.section)\""
            let hint = unknown.suggestion.map { "did you mean \"\($0)\"?" }
            throw CourierError(
                .usage, "the configuration \(file.path) has an unknown key \"\(unknown.key)\" \(section)", hint: hint)
        }
        configuration.baseDirectory = file.deletingLastPathComponent().standardizedFileURL
        return configuration
    }

    /// A key of a configuration file that no setting reads.
    public struct UnknownKey: Sendable, Equatable {
        /// The dotted path of the object holding it ("" for the top level, "receipts.verifyReceipt").
        public var section: String
        public var key: String
        /// A known key of that section it is probably a typo of.
        public var suggestion: String?

        public init(section: String, key: String, suggestion: String?) {
            self.section = section
            self.key = key
            self.suggestion = suggestion
        }
    }

    /// The keys of the configuration file `data` that no setting reads, in file order by section
    /// (empty when `data` is not a valid configuration). Pure: no I/O, safe on hostile bytes.
    ///
    /// A key the defaults write out is read. Any other key is probed: its value is replaced by
    /// an object holding a marker, then by a string; if the file still decodes both times,
    /// nothing read the key.
    package static func unknownKeys(in data: Data) -> [UnknownKey] {
        unknownKeys(in: data, decoded: false)
    }

    /// `unknownKeys(in:)`; `decoded`: the caller decoded `data` already (`load`), so it is not
    /// decoded once more to see that it is a configuration.
    private static func unknownKeys(in data: Data, decoded: Bool) -> [UnknownKey] {
        guard let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            decoded || decodes(root)
        else { return [] }
        let known = knownKeys()
        var unknown: [UnknownKey] = []
        func visit(_ object: [String: Any], path: [String]) {
            for key in object.keys.sorted() {
                let keyPath = path + [key]
                let section = path.joined(separator: ".")
                // A key the defaults write is read. Any other (a typo, an alias a decoder also
                // accepts, a key of a free-form map) is probed twice, as a setting may accept an
                // object (a section) or a string. Probing every key decoded the whole file twice
                // per key, ~40 M instructions at every command's start for a dozen keys.
                let read =
                    known[section]?.contains(key) == true
                    || isRead(keyPath, in: root)
                if read {
                    if let nested = object[key] as? [String: Any] { visit(nested, path: keyPath) }
                    continue
                }
                let suggestion = Spelling.suggestion(for: key, among: (known[section] ?? []).subtracting(object.keys))
                unknown.append(UnknownKey(section: section, key: key, suggestion: suggestion))
            }
        }
        visit(root, path: [])
        return unknown
    }

    /// Whether a setting reads the key at `keyPath` of the configuration object `root` (which
    /// decodes): its value is replaced by an object holding a marker, then by a string, and
    /// the file no longer decodes at least once.
    package static func isRead(_ keyPath: [String], in root: [String: Any]) -> Bool {
        [["\u{0}courier-probe": true] as Any, "\u{0}courier-probe" as Any].contains { probe in
            !decodes(replacing(keyPath, in: root, with: probe))
        }
    }

    private static func decodes(_ object: [String: Any]) -> Bool {
        guard let data = try? JSONSerialization.data(withJSONObject: object) else { return false }
        return (try? decode(data)) != nil
    }

    private static func replacing(_ path: [String], in object: [String: Any], with value: Any) -> [String: Any] {
        guard let first = path.first else { return object }
        var copy = object
        if path.count == 1 {
            copy[first] = value
        } else if let nested = object[first] as? [String: Any] {
            copy[first] = replacing(Array(path.dropFirst()), in: nested, with: value)
        }
        return copy
    }

    /// The keys of each section, by dotted path, from the defaults written out: read without a
    /// probe, and the suggestions for a typo.
    package static func knownKeys() -> [String: Set<String>] {
        var sections: [String: Set<String>] = [:]
        func visit(_ object: [String: Any], path: String) {
            sections[path, default: []].formUnion(object.keys)
            for (key, value) in object {
                if let nested = value as? [String: Any] { visit(nested, path: path.isEmpty ? key : path + "." + key) }
            }
        }
        visit(writtenDefaults(), path: "")
        sections["receipts.verifyReceipt", default: []].insert("sharedSecret")
        return sections
    }

    /// The defaults written out as a configuration file's object, every optional setting given
    /// a value so that its key appears.
    package static func writtenDefaults() -> [String: Any] {
        // Values that decode, so the object is a configuration too (a test probes each key).
        var defaults = CourierConfiguration()
        defaults.catalog = "catalog.json"
        defaults.catalogTrust = CatalogTrustConfiguration(
            trustedRoot: "root.der", metadataURL: "https://127.0.0.1/metadata/", targetsURL: "https://127.0.0.1/targets/",
            targetName: "catalog.json", allowUnsigned: true)
        defaults.transfer.proxy = "http://127.0.0.1:3128"
        defaults.transfer.maxRate = try? ByteRate(bytesPerSecond: 1024)
        defaults.transfer.backgroundMaxRate = try? ByteRate(bytesPerSecond: 1024)
        defaults.transfer.limitRate = try? ByteRate(bytesPerSecond: 1024)
        defaults.queue.finishWebhook = "https://127.0.0.1/finished"
        defaults.serve.state = "state"
        defaults.serve.content = "content"
        defaults.serve.catalog = "catalog.json"
        defaults.serve.limitRate = 1024
        defaults.serve.metricsPort = 9100
        defaults.serve.maxTokenAge = 60
        guard let data = try? JSONEncoder().encode(defaults), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return [:] }
        return object
    }

    /// A decoding error in one line: what is wrong and where (`transfer.maxRetries`), not
    /// Foundation's dump.
    private static func describe(_ error: any Error) -> String {
        if let error = error as? CourierError { return error.message }
        return CourierError.plainDescription(of: error)
    }

    /// Resolves a path from this configuration against `baseDirectory`.
    public func resolvePath(_ path: String) -> URL {
        if path.hasPrefix("/") { return URL(fileURLWithPath: path) }
        return baseDirectory.appendingPathComponent(path).standardizedFileURL
    }
}

extension KeyedDecodingContainer {
    /// Decodes the value for `key`, or returns `fallback` when the key is absent or null.
    public func decode<T: Decodable>(_ key: Key, or fallback: @autoclosure () -> T) throws -> T {
        try decodeIfPresent(T.self, forKey: key) ?? fallback()
    }
}
