import Foundation

/// Settings of content placement (purging, backup exclusion, downgrades).
///
/// Every property has a documented default; a key missing from `Config/courier.json` keeps it.
public struct PlacementConfiguration: Sendable, Codable, Equatable {
    public init() {}

    public init(from decoder: any Decoder) throws {
        self.init()
    }

    public func encode(to encoder: any Encoder) throws {}
}
