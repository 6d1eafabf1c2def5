import Foundation
import Logging
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The client agent (`courier agent`): a long-running `Service` that, once run, picks up every
/// unfinished transaction of the store (as StoreKit's observer registered at launch does), works
/// the queue through the pipeline under leases, retries downloads that failed for `network` on
/// a backoff schedule and those paused for `insufficientSpace` once statvfs says they fit,
/// announces finished transactions to the finish webhook, and serves the control socket.
///
/// Graceful shutdown (SIGTERM or SIGINT through a `ServiceGroup`) cancels the pipeline: active
/// transfers are checkpointed and paused as `interrupted`, the socket file is removed, and the
/// next agent (or `courier resume --stalled`) continues them. Nothing starts before `run()`.
public final class CourierAgent: Service, Sendable {
    /// How the agent retries and polls.
    public struct Options: Sendable {
        /// First delay before retrying a download that failed for the network; doubles per
        /// attempt up to `maxRetryBackoff`. Default 2 s.
        public var retryBackoff: Double = 2
        public var maxRetryBackoff: Double = 300
        /// Seconds between checks for retryable downloads and due webhooks. Default 1.
        public var checkInterval: Double = 1
        /// Called once the control socket accepts connections (the CLI tells systemd it is ready).
        public var onReady: (@Sendable () -> Void)?

        public init() {}
    }

    public let queue: PaymentQueue
    let client: CourierClient
    let control: LocalQueueControl
    let options: Options
    let logger: Logger
    private let retries = RetryBook()

    /// The agent over `client` (`CourierClient.agent(options:)`); give the client
    /// `announcesFinishes` so finished transactions reach the webhook's outbox.
    init(client: CourierClient, options: Options) {
        self.client = client
        queue = client.queue
        control = client.control
        self.options = options
        logger = client.logger
    }

    public func run() async throws {
        try queue.layout.prepare()
        let server = try AgentControlServer(
            path: queue.layout.agentSocket.path, queue: queue, logger: logger
        ) { [self] request in await handle(request) }
        options.onReady?()
        logger.info(
            "agent started",
            metadata: ["socket": "\(queue.layout.agentSocket.path)", "unfinished": "\((try? queue.unfinished().count) ?? 0)"])
        let pipeline = client.pipeline
        let logger = self.logger
        // One task group: the control socket, the pipeline and the maintenance loop. Graceful
        // shutdown cancels it, and every child (each client, each download) with it.
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    do {
                        try await server.run()
                    } catch where !Task.isCancelled {
                        logger.error("the control socket stopped", metadata: ["error": "\(error)"])
                    } catch {}
                }
                group.addTask {
                    do {
                        try await pipeline.run(scope: .all, untilIdle: false)
                    } catch {
                        logger.error("the pipeline stopped", metadata: ["error": "\(error)"])
                    }
                }
                group.addTask { await self.maintenanceLoop() }
                await group.waitForAll()
            }
        }
        logger.info("agent stopped; active downloads are checkpointed")
    }

    /// Retries what may succeed now and sends due webhooks, every `checkInterval`; checks the
    /// configured catalog for updates at start and every `queue.catalogCheckInterval`.
    private func maintenanceLoop() async {
        var catalog: Catalog?
        var nextCatalogCheck = Date.distantPast
        while !Task.isCancelled {
            retryStopped()
            if let webhook = client.webhook { await webhook.deliverDue() }
            if Date() >= nextCatalogCheck {
                nextCatalogCheck = Date().addingTimeInterval(client.configuration.queue.catalogCheckInterval)
                catalog = await updateIfCatalogChanged(since: catalog) ?? catalog
            }
            try? await Task.sleep(nanoseconds: UInt64(options.checkInterval * 1e9))
        }
    }

    /// Automatic updates (`queue.autoUpdate`, with a configured catalog): revalidates the catalog
    /// and, when it changed since `previous` (always at start), queues the updates it brings; the
    /// pipeline then works them like any download. Returns the catalog, nil when not checked.
    func updateIfCatalogChanged(since previous: Catalog?) async -> Catalog? {
        guard client.configuration.queue.autoUpdate, client.configuration.catalog != nil else { return nil }
        do {
            return try await client.checkForUpdates(since: previous).catalog
        } catch {
            logger.warning("cannot check the catalog for updates", metadata: ["error": "\(error)"])
            return nil
        }
    }

    /// Resumes downloads that failed for `network` once their backoff has passed, and those
    /// paused or failed for `insufficientSpace` once the storage's file system has room.
    func retryStopped(now: Date = Date()) {
        let downloads: [DownloadRecord]
        do {
            downloads = try queue.entries(now: now).compactMap(\.download)
        } catch {
            logger.error("cannot read the queue", metadata: ["error": "\(error)"])
            return
        }
        retries.forget(except: Set(downloads.filter { $0.state != .finished }.map(\.id)))
        for download in downloads where download.state == .failed || download.state == .paused {
            var logger = self.logger
            logger[metadataKey: "download-id"] = "\(download.id)"
            logger[metadataKey: "transaction-id"] = "\(download.transactionId)"
            switch (download.state, download.errorCode, download.pauseReason) {
            case (.failed, .network?, _), (.failed, .leased?, _):
                // The network may be back; a process that held the partial file may be gone.
                let attempts = retries.attempts(download.id)
                let delay = RetryPolicy(maxRetries: nil, backoffBase: options.retryBackoff, backoffMax: options.maxRetryBackoff, jitter: false)
                    .delay(retry: attempts + 1)
                guard now.timeIntervalSince(download.updatedAt) >= delay else { continue }
                retries.record(download.id)
                logger.info(
                    "retrying download after \(download.errorCode?.rawValue ?? "a failure"); retry \(attempts + 1)",
                    metadata: ["reason": "\(download.errorCode?.rawValue ?? "")", "attempt": "\(attempts + 1)"])
                _ = try? queue.resume([download.id])
            case (.paused, _, .insufficientSpace?), (.failed, .insufficientSpace?, _):
                let needed = max(0, download.length - download.durableOffset) + (download.unpackedLength ?? download.length)
                guard let free = try? FreeSpaceProbe.statvfs.available(queue.layout.root), free >= needed else { continue }
                logger.info("space is free again; resuming", metadata: ["free": "\(free)", "needed": "\(needed)"])
                _ = try? queue.resume([download.id])
            default:
                continue
            }
        }
    }

    /// Answers one control request with the same `LocalQueueControl` the CLI uses without an
    /// agent.
    func handle(_ request: AgentRequest) async -> AgentResponse {
        do {
            let command = try request.queueCommand()
            return AgentResponse(try await control.perform(command), of: command)
        } catch let error as CourierError {
            return .failure(error)
        } catch {
            return .failure(CourierError(.internal, "the agent failed to serve \(request.command.rawValue)", cause: "\(error)"))
        }
    }
}

/// The network-retry attempts per download (in memory: a restarted agent starts over).
final class RetryBook: Sendable {
    private let attemptsById = Mutex<[String: Int]>([:])

    func attempts(_ id: String) -> Int { attemptsById.withLock { $0[id] ?? 0 } }
    func record(_ id: String) { attemptsById.withLock { $0[id, default: 0] += 1 } }
    func forget(except live: Set<String>) { attemptsById.withLock { $0 = $0.filter { live.contains($0.key) } } }
}

extension CourierClient {
    /// Runs the agent over this client (`agent(options:)`) in a service group until SIGTERM or
    /// SIGINT, which checkpoint and pause its downloads: it returns within 5 seconds of the
    /// signal (4 s of graceful shutdown, docs/agent.md).
    public func runAgent(options: CourierAgent.Options) async throws {
        var configuration = ServiceGroupConfiguration(
            services: [.init(service: agent(options: options))], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        configuration.maximumGracefulShutdownDuration = .seconds(4)
        try await ServiceGroup(configuration: configuration).run()
    }
}
