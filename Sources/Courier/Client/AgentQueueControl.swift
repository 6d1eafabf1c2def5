import Foundation

/// Performs queue commands through a running agent's control socket (`Storage/agent.sock`):
/// each command travels as an `AgentRequest` line and the agent performs it with its
/// `LocalQueueControl`. An agent's refusal is thrown as its `CourierError`. The exchange is
/// blocking socket I/O, so it runs on a Dispatch queue of its own while the caller waits
/// suspended: it never holds a thread of Swift's cooperative pool.
public struct AgentQueueControl: QueueControl {
    public let agent: AgentClient
    private static let socketIO = DispatchQueue(label: "courier.agent-client", attributes: .concurrent)

    public init(agent: AgentClient) {
        self.agent = agent
    }

    /// The agent of `layout`, or nil when none answers there.
    public static func connect(layout: StorageLayout) -> AgentQueueControl? {
        AgentClient.connect(layout: layout).map(AgentQueueControl.init)
    }

    public func perform(_ command: QueueCommand) async throws -> QueueResult {
        let (agent, request) = (self.agent, AgentRequest(command))
        let response = try await withCheckedThrowingContinuation { continuation in
            Self.socketIO.async { continuation.resume(with: Result { try agent.send(request) }) }
        }
        return QueueResult(
            entries: response.entries ?? [],
            downloads: response.downloads ?? [],
            transactions: response.transactions ?? [],
            notInCatalog: response.notInCatalog ?? []
        )
    }
}

extension AgentRequest {
    /// The request line that carries `command` (docs/agent.md). A relative catalog path is made
    /// absolute: the agent runs in another folder.
    public init(_ command: QueueCommand) {
        func target(_ command: Command, _ target: QueueTarget) -> AgentRequest {
            switch target {
            case .ids(let ids): AgentRequest(command, ids: ids)
            case .all: AgentRequest(command, all: true)
            case .stalled: AgentRequest(command, stalled: true)
            }
        }
        switch command {
        case .list(let includeFinished, let stalledOnly):
            self.init(.list, all: includeFinished ? true : nil, stalled: stalledOnly ? true : nil)
        case .status(let id): self.init(.status, ids: [id])
        case .pause(let t): self = target(.pause, t)
        case .resume(let t): self = target(.resume, t)
        case .cancel(let t): self = target(.cancel, t)
        case .discard(let t): self = target(.discard, t)
        case .priority(let t, let priority):
            self = target(.priority, t)
            self.priority = priority.rawValue
        case .enqueue(let purchase):
            self.init(
                .enqueue,
                receipt: purchase.receipt,
                catalog: purchase.catalog.map(Self.absoluteCatalog),
                products: purchase.products.isEmpty ? nil : purchase.products,
                restore: purchase.restore ? true : nil
            )
        }
    }

    /// The queue command this request carries; `usage` when it lacks what the command needs.
    public func queueCommand() throws -> QueueCommand {
        var target: QueueTarget {
            if command == .resume && stalled == true { return .stalled }
            return all == true ? .all : .ids(ids ?? [])
        }
        switch command {
        case .list: return .list(includeFinished: all ?? false, stalledOnly: stalled ?? false)
        case .status:
            guard let id = ids?.first else { throw CourierError(.usage, "status needs an id") }
            return .status(id)
        case .pause: return .pause(target)
        case .resume: return .resume(target)
        case .cancel: return .cancel(target)
        case .discard: return .discard(target)
        case .priority:
            guard let priority else { throw CourierError(.usage, "priority needs a priority (high, normal or low)") }
            return .priority(target, try DownloadPriority(parsing: priority))
        case .enqueue:
            guard let receipt = receiptData, !receipt.isEmpty else {
                throw CourierError(.usage, "enqueue needs the receipt's bytes (base64)")
            }
            return .enqueue(
                Purchase(receipt: receipt, catalog: catalog, products: products ?? [], restore: restore ?? false)
            )
        case .subscribe:
            throw CourierError(.usage, "subscribe is served by the connection itself")
        }
    }

    /// A catalog argument as a process in another folder must see it: URLs and absolute paths
    /// as they are, a relative path resolved against the current folder.
    public static func absoluteCatalog(_ catalog: String) -> String {
        if catalog.hasPrefix("/") || catalog.contains("://") { return catalog }
        return URL(fileURLWithPath: catalog).standardizedFileURL.path
    }
}

extension AgentResponse {
    /// The answer line for `result` of `command`: the fields docs/agent.md lists for it.
    init(_ result: QueueResult, of command: QueueCommand) {
        self.init()
        switch command {
        case .list, .status: entries = result.entries
        case .pause, .resume, .cancel, .discard, .priority: downloads = result.downloads
        case .enqueue:
            transactions = result.transactions
            downloads = result.downloads
            notInCatalog = result.notInCatalog.isEmpty ? nil : result.notInCatalog
        }
    }
}
