import Foundation

/// Settings of package inspection and extraction (limits against hostile packages).
///
/// Every property has a documented default; a key missing from `Config/courier.json` keeps it.
public struct PackageConfiguration: Sendable, Codable, Equatable {
    public init() {}

    public init(from decoder: any Decoder) throws {
        self.init()
    }

    public func encode(to encoder: any Encoder) throws {}
}
