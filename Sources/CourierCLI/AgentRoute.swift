import Courier
import Foundation

/// Sends queue commands to a running agent (through `Storage/agent.sock`) instead of the store.
enum AgentRoute {
    /// A connection to the agent of `global`'s storage, or nil when none runs (the command then
    /// works on the store directly).
    static func client(_ global: GlobalOptions) -> AgentClient? {
        if ProcessInfo.processInfo.environment["COURIER_NO_AGENT"] == "1" { return nil }
        return AgentClient.connect(layout: global.layout)
    }

    /// Applies `command` (pause, resume, cancel, discard) to the downloads `id` names, or to all,
    /// through the agent; returns the downloads that changed.
    static func control(
        _ agent: AgentClient, _ command: AgentRequest.Command, id: String?, all: Bool, stalled: Bool = false
    ) throws -> [DownloadRecord] {
        let request = AgentRequest(command, ids: id.map { [$0] }, all: all ? true : nil, stalled: stalled ? true : nil)
        return try agent.send(request).downloads ?? []
    }

    /// The catalog argument as the agent (another working directory) must see it.
    static func absoluteCatalog(_ catalog: String?) -> String? {
        guard let catalog else { return nil }
        if catalog.hasPrefix("/") || catalog.contains("://") { return catalog }
        return URL(fileURLWithPath: catalog).standardizedFileURL.path
    }
}
