import Foundation

/// `courier serve`: settings the configuration file may hold for the origin (`serve` in
/// `Config/courier.json`); the command's flags override them.
public struct ServeConfiguration: Sendable, Codable, Equatable {
    /// Where refunds (App Store Server Notifications) are kept, shared by every gate:
    /// `postgresql://USER@HOST:PORT/DB` (`--state`); nil keeps them in `<storage>/origin.sqlite`.
    public var state: String?

    public init(state: String? = nil) {
        self.state = state
    }
}
