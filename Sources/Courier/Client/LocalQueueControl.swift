import Foundation

/// Performs queue commands on the store, in this process. The agent answers its control socket
/// with one of these, so a command means the same with or without a running agent.
public struct LocalQueueControl: QueueControl {
    public let queue: PaymentQueue
    /// Validates and queues `enqueue` commands; without it they are refused.
    let client: CourierClient?

    /// Every command but `enqueue` (which needs the transfer engine and the catalog).
    public init(queue: PaymentQueue) {
        self.queue = queue
        client = nil
    }

    /// Every command, on `client`'s queue.
    public init(client: CourierClient) {
        queue = client.queue
        self.client = client
    }

    public func perform(_ command: QueueCommand) async throws -> QueueResult {
        switch command {
        case .list(let includeFinished, let stalledOnly):
            let entries = try queue.entries(includeFinished: includeFinished)
            return QueueResult(entries: stalledOnly ? entries.filter { $0.stalled != nil } : entries)
        case .status(let id):
            let downloads = try queue.resolve(id)
            let downloadIds = Set(downloads.map(\.id))
            let transactionIds = Set(downloads.map(\.transactionId))
            // A transaction without downloads has one entry, matched by its own id.
            let entries = try queue.entries(includeFinished: true).filter { entry in
                entry.download.map { downloadIds.contains($0.id) }
                    ?? (transactionIds.contains(entry.transactionId) || entry.transactionId == id)
            }
            return QueueResult(entries: entries)
        case .pause(let target):
            return try apply("pause", target, states: [.waiting, .active]) { try queue.pause([$0]) }
        case .resume(.stalled):
            return QueueResult(downloads: try queue.requeueStalled())
        case .resume(let target):
            return try apply("resume", target, states: [.paused, .failed]) { try queue.resume([$0]) }
        case .cancel(let target):
            return try apply("cancel", target, states: [.waiting, .active, .paused, .failed]) { try queue.cancel([$0]) }
        case .discard(let target):
            guard case .ids = target else { throw CourierError(.usage, "discard needs download or transaction ids") }
            return try apply("discard", target, states: []) { try queue.discard($0).map { [$0] } ?? [] }
        case .priority(let target, let priority):
            guard case .ids = target else { throw CourierError(.usage, "priority needs download or transaction ids") }
            let result = try apply("priority", target, states: []) { try queue.setPriority(priority, [$0]) }
            // Running here (the agent's own downloads): their share follows at once.
            if let client { for download in result.downloads { client.pipeline.downloader.reprioritize(download) } }
            return result
        case .enqueue(let purchase):
            guard let client else { throw CourierError(.internal, "this queue control cannot enqueue") }
            let enqueued = try await client.enqueue(purchase)
            let downloads = try enqueued.transactions.flatMap { try queue.downloads(transactionId: $0.id) }
            return QueueResult(
                downloads: downloads, transactions: enqueued.transactions, notInCatalog: enqueued.notInCatalog.map(\.productId))
        }
    }

    /// Applies `operation` to the downloads `target` names (with `all`, to every download in
    /// `states`) and answers those that changed. With one named download its refusal is the
    /// answer; otherwise downloads the operation does not apply to are skipped.
    private func apply(
        _ command: String,
        _ target: QueueTarget,
        states: Set<DownloadState>,
        _ operation: (String) throws -> [DownloadRecord]
    ) throws -> QueueResult {
        let targets: [DownloadRecord]
        switch target {
        case .all:
            targets = try queue.entries().compactMap(\.download).filter { states.contains($0.state) }
        case .ids(let ids) where !ids.isEmpty:
            targets = try ids.flatMap { try queue.resolve($0) }
        case .ids:
            throw CourierError(.usage, "\(command) needs ids or all")
        case .stalled:
            throw CourierError(.usage, "only resume takes the stalled downloads")
        }
        let single = target != .all && targets.count == 1
        var changed: [DownloadRecord] = []
        for download in targets {
            do {
                changed += try operation(download.id)
            } catch let error as CourierError where !single && error.code == .invalidState {
                continue
            }
        }
        return QueueResult(downloads: changed)
    }
}
