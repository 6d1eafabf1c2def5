import Foundation

/// The `agent` section of the configuration: what `courier agent` does besides delivering.
public struct AgentConfiguration: Sendable, Codable, Equatable {
    /// Desktop notifications through `org.freedesktop.Notifications` on the session bus when a
    /// delivery finishes or fails (docs/agent.md, "Notifications"). Default false.
    public var notifications: Bool = false

    public init() {}
}
