import Foundation
import Logging
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#endif

/// The client agent as a service: works the queue until shutdown, serves the control socket,
/// and retries what stopped for a retryable reason.
///
/// At start it picks up every unfinished transaction (`DeliveryPipeline.run`). Downloads that
/// failed for `network` are resumed on a backoff schedule (`retryDelays`, by attempt); those
/// paused for `insufficientSpace` are resumed once statvfs says the remaining bytes, the unpacked
/// size and the reserve fit. On graceful shutdown (SIGTERM, SIGINT through a `ServiceGroup`)
/// active transfers are checkpointed and paused as `interrupted`, and `run` returns.
public final class QueueAgent: Service, Sendable {
    public let pipeline: DeliveryPipeline
    /// Queues a receipt's purchases (the `enqueue` request); nil refuses enqueue requests.
    let enqueue: (@Sendable (Data, [String]) async throws -> [TransactionRecord])?
    let logger: Logger
    /// Seconds to wait before retrying a download that failed for the network, by attempt.
    let retryDelays: [Double]
    /// Bytes kept free beyond what a paused-for-space download needs.
    let diskReserve: Int64

    public init(
        pipeline: DeliveryPipeline,
        enqueue: (@Sendable (Data, [String]) async throws -> [TransactionRecord])?,
        retryDelays: [Double] = [2, 5, 15, 30, 60, 120],
        diskReserve: Int64 = 64 << 20,
        logger: Logger
    ) {
        self.pipeline = pipeline
        self.enqueue = enqueue
        self.retryDelays = retryDelays
        self.diskReserve = diskReserve
        self.logger = logger
    }

    public var queue: PaymentQueue { pipeline.queue }

    public func run() async throws {
        let server = try ControlSocketServer(path: queue.layout.agentSocket) { [self] request, reply in
            self.handle(request, reply: reply)
        }
        defer { server.stop() }
        logger.info("agent started", metadata: ["socket": "\(server.path.path)"])
        let pipeline = self.pipeline
        try await cancelWhenGracefulShutdown {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { _ = try await pipeline.run(scope: .all, untilIdle: false) }
                group.addTask { await self.retryLoop() }
                try await group.next()
                group.cancelAll()
                try await group.waitForAll()
            }
        }
        logger.info("agent stopped")
    }

    /// Resumes downloads that stopped for a retryable reason once their time or space has come.
    private func retryLoop() async {
        var attempts: [String: Int] = [:]
        while !Task.isCancelled {
            try? await Task.sleep(nanoseconds: 1_000_000_000)
            guard let entries = try? queue.entries() else { continue }
            let now = Date()
            for entry in entries {
                guard let download = entry.download else { continue }
                switch entry.stalled {
                case .network where download.state == .failed:
                    let attempt = attempts[download.id, default: 0]
                    let delay = retryDelays[min(attempt, retryDelays.count - 1)]
                    guard now.timeIntervalSince(download.updatedAt) >= delay else { continue }
                    attempts[download.id] = attempt + 1
                    logger.debug("retrying after a network failure", metadata: ["download-id": "\(download.id)", "attempt": "\(attempt + 1)"])
                    _ = try? queue.resume([download.id])
                case .insufficientSpace:
                    let needed = max(0, download.length - download.durableOffset) + (download.unpackedLength ?? download.length) + diskReserve
                    if let free = Self.freeBytes(queue.layout.root), free >= needed {
                        logger.debug("space is back; resuming", metadata: ["download-id": "\(download.id)"])
                        _ = try? queue.resume([download.id])
                    }
                default:
                    continue
                }
            }
        }
    }

    static func freeBytes(_ url: URL) -> Int64? {
        var stats = statvfs()
        guard statvfs(url.path, &stats) == 0 else { return nil }
        return Int64(stats.f_bavail) * Int64(stats.f_frsize)
    }

    // MARK: Control protocol

    private func handle(_ request: [String: Any], reply: @escaping ControlSocketServer.Reply) {
        let op = request["op"] as? String ?? ""
        let id = request["id"] as? String
        do {
            switch op {
            case "list":
                let entries = try queue.entries(includeFinished: request["all"] as? Bool ?? false)
                _ = reply(["ok": true, "entries": try Self.json(entries)])
            case "status":
                let downloads = try queue.resolve(try Self.require(id))
                let ids = Set(downloads.map(\.id))
                let entries = try queue.entries(includeFinished: true).filter { $0.download.map { ids.contains($0.id) } ?? false }
                _ = reply(["ok": true, "entries": try Self.json(entries)])
            case "pause", "resume", "cancel", "discard":
                let downloads = try queue.resolve(try Self.require(id))
                var changed: [DownloadRecord] = []
                for download in downloads {
                    switch op {
                    case "pause": changed += try queue.pause([download.id])
                    case "resume": changed += try queue.resume([download.id])
                    case "cancel": changed += try queue.cancel([download.id])
                    default: changed += try queue.discard(download.id).map { [$0] } ?? []
                    }
                }
                _ = reply(["ok": true, "downloads": try Self.json(changed)])
            case "enqueue":
                guard let enqueue else { throw CourierError(.usage, "this agent does not accept receipts") }
                guard let text = request["receipt"] as? String else { throw CourierError(.usage, "enqueue needs \"receipt\"") }
                let products = request["products"] as? [String] ?? []
                let semaphore = DispatchSemaphore(value: 0)
                let box = ResultBox()
                Task {
                    do { box.set(.success(try await enqueue(Data(text.utf8), products))) } catch { box.set(.failure(error)) }
                    semaphore.signal()
                }
                semaphore.wait()
                let records = try box.get()
                _ = reply(["ok": true, "transactions": try Self.json(records)])
            case "subscribe":
                let stream = queue.eventStream()
                _ = reply(["ok": true, "subscribed": true])
                let done = DispatchSemaphore(value: 0)
                Task {
                    for await event in stream {
                        guard let line = try? Self.json(event), reply(line) else { break }
                    }
                    done.signal()
                }
                done.wait()
            default:
                throw CourierError(.usage, "unknown op \(op.debugDescription)", hint: "list, status, pause, resume, cancel, discard, enqueue, subscribe")
            }
        } catch {
            let failure = error as? CourierError ?? CourierError(.internal, "\(error)")
            _ = reply(["ok": false, "code": failure.code.rawValue, "message": failure.message])
        }
    }

    private static func require(_ id: String?) throws -> String {
        guard let id, !id.isEmpty else { throw CourierError(.usage, "this request needs \"id\"") }
        return id
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    static func json<T: Encodable>(_ value: T) throws -> Any {
        try JSONSerialization.jsonObject(with: encoder.encode(value))
    }

    static func json(_ event: PaymentQueueEvent) throws -> [String: Any] {
        switch event {
        case .updatedTransactions(let t): return ["event": "updatedTransactions", "transactions": try json(t)]
        case .updatedDownloads(let d): return ["event": "updatedDownloads", "downloads": try json(d)]
        case .removedTransactions(let t): return ["event": "removedTransactions", "transactions": try json(t)]
        case .restoreCompleted(let products): return ["event": "restoreCompleted", "productIds": products]
        case .restoreFailed(let error): return ["event": "restoreFailed", "code": error.code.rawValue, "message": error.message]
        }
    }
}

/// Hands a result from a task to a waiting connection thread.
private final class ResultBox: @unchecked Sendable {  // @unchecked: written once before the semaphore signals, read after.
    private var result: Result<[TransactionRecord], any Error> = .failure(CourierError(.internal, "no result"))
    func set(_ value: Result<[TransactionRecord], any Error>) { result = value }
    func get() throws -> [TransactionRecord] { try result.get() }
}
