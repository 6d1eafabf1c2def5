import Foundation
import Synchronization

/// A connection to a running agent's control socket: send requests, read answers, or follow
/// the queue's events. Blocking; use it from a command's main flow or a dedicated thread. One
/// exchange at a time: the connection is held for the whole of a `send` or `subscribe`.
public final class AgentClient: Sendable {
    private let connection: Mutex<UnixSocketConnection>

    /// Connects to the agent of `layout` (`Storage/agent.sock`); nil when no agent runs there
    /// (no socket file, or a stale one nobody listens on).
    public static func connect(layout: StorageLayout, timeout: Double = 300) -> AgentClient? {
        let path = layout.agentSocket.path
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        return try? AgentClient(socketPath: path, timeout: timeout)
    }

    /// Connects to the socket at `path`, throwing `notFound` when nothing listens.
    public init(socketPath path: String, timeout: Double = 300) throws {
        connection = Mutex(try UnixSocketConnection.connect(to: path, timeout: timeout))
    }

    deinit {
        connection.withLock { $0.close() }
    }

    /// Sends `request` and returns the agent's answer; a refusal is thrown as its `CourierError`.
    @discardableResult
    public func send(_ request: AgentRequest) throws -> AgentResponse {
        let line = try connection.withLock { connection in
            try connection.write(AgentWire.encode(request))
            return try connection.readLine()
        }
        guard let line else { throw CourierError(.io, "the agent closed the control connection without an answer") }
        let response = try CourierError.wrapping(.io, "the agent's answer is not a control response") {
            try AgentWire.decode(AgentResponse.self, from: line)
        }
        if !response.ok, let failure = response.error { throw failure.error }
        return response
    }

    /// Subscribes to the queue's events and hands each to `onEvent` until it returns false or the
    /// agent closes the connection.
    public func subscribe(_ onEvent: (AgentResponse) -> Bool) throws {
        try send(AgentRequest(.subscribe))
        while true {
            guard let line = try connection.withLock({ try $0.readLine() }) else { return }
            let event = try AgentWire.decode(AgentResponse.self, from: line)
            if !onEvent(event) { return }
        }
    }
}
