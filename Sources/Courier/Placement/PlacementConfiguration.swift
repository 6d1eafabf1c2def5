import Foundation

/// Settings of content placement (purging, backup exclusion, downgrades).
///
/// Every property has a documented default; a key missing from `Config/courier.json` keeps it.
public struct PlacementConfiguration: Sendable, Codable, Equatable {
    /// Whether cache-placed content may be purged, least recently used first, to make room for a
    /// delivery. Documents are never purged. Default true.
    public var purgeCaches: Bool = true
    /// Bytes kept free on the storage filesystem beyond what a delivery needs: not a setting of
    /// its own but `transfer.diskReserve` (one reserve for the one filesystem), set by
    /// `CourierConfiguration`. Default 64 MiB.
    public var diskReserve: Int64 = 64 << 20
    /// When neither the package nor the catalog says how large content unpacks, the space check
    /// assumes this multiple of the package's length. Default 2.
    public var unpackedSizeFactor: Double = 2
    /// Whether the staged content is flushed to disk (`syncfs`) before it is renamed into place,
    /// so a power loss cannot leave an empty file in delivered content. Default true.
    public var syncBeforeRename: Bool = true
    /// How many installs of one package in a row may be interrupted (the process crashed or was
    /// killed while unpacking it) before the next is refused with `integrity` instead of being
    /// tried again. 0 never refuses. Default 2.
    public var maxInterruptedInstalls: Int = 2

    public init() {}

    enum CodingKeys: String, CodingKey {
        case purgeCaches, unpackedSizeFactor, syncBeforeRename, maxInterruptedInstalls
    }
}
