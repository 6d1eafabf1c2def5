import Foundation

/// All of Courier's settings: one section per component, each with documented defaults.
///
/// Filled from `Config/courier.json` (or `--config FILE`, or `COURIER_CONFIG`), then from the
/// environment, then from command-line flags, which the CLI applies last. A key missing from the
/// file keeps its default, so a file only names what it changes.
public struct CourierConfiguration: Sendable, Codable, Equatable {
    /// The catalog: a file path or a URL. `nil` means none is configured.
    public var catalog: String?
    public var transfer: TransferConfiguration
    public var receipts: ReceiptConfiguration
    public var packages: PackageConfiguration
    public var placement: PlacementConfiguration
    public var queue: QueueConfiguration

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
    }

    enum CodingKeys: String, CodingKey {
        case catalog, transfer, receipts, packages, placement, queue
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = CourierConfiguration()
        catalog = try container.decodeIfPresent(String.self, forKey: .catalog)
        transfer = try container.decode(.transfer, or: defaults.transfer)
        receipts = try container.decode(.receipts, or: defaults.receipts)
        packages = try container.decode(.packages, or: defaults.packages)
        placement = try container.decode(.placement, or: defaults.placement)
        queue = try container.decode(.queue, or: defaults.queue)
    }

    /// The default configuration file: `COURIER_CONFIG`, else `./Config/courier.json`.
    public static func defaultFile(
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> URL {
        URL(fileURLWithPath: environment["COURIER_CONFIG"] ?? "Config/courier.json")
    }

    /// Loads `file`; a missing file gives the defaults unless `required` (an explicit `--config`).
    public static func load(file: URL, required: Bool) throws -> CourierConfiguration {
        let data: Data
        do {
            data = try Data(contentsOf: file)
        } catch {
            if !required && !FileManager.default.fileExists(atPath: file.path) {
                return CourierConfiguration()
            }
            throw CourierError(.usage, "cannot read the configuration \(file.path)", cause: "\(error)")
        }
        do {
            var configuration = try JSONDecoder().decode(CourierConfiguration.self, from: data)
            configuration.baseDirectory = file.deletingLastPathComponent().standardizedFileURL
            return configuration
        } catch {
            throw CourierError(.usage, "the configuration \(file.path) is not valid", cause: "\(error)")
        }
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
