import Foundation
import Logging
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The client agent (`courier agent`): a long-running `Service` that, once run, picks up every
/// unfinished transaction of the store (as StoreKit's observer registered at launch does), works
/// the queue through the pipeline under leases, retries downloads that failed for `network` or
/// `serverRejected` on a backoff schedule and those paused for `insufficientSpace` once they fit
/// (the download lifecycle decides both: `DownloadLifecycle`, as for `courier resume --stalled`),
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
        /// Automatic retries of a download the server refused (`serverRejected`) before it
        /// stays failed until a user resumes it (`DownloadLifecycle.Policy`). Default 8.
        public var maxRejectedRetries: Int = 8
        /// Seconds between checks for retryable downloads and due webhooks. Default 1.
        public var checkInterval: Double = 1
        /// Where the agent reads the storage's free space (statvfs; tests give a fake).
        public var freeSpace: FreeSpaceProbe = .statvfs
        /// Seconds between reads of NetworkManager's `Metered` property (`NetworkMeter`). Default 2.
        public var meteredPollInterval: Double = 2
        /// The system bus NetworkManager is asked on; nil (the default): `DBUS_SYSTEM_BUS_ADDRESS`,
        /// else the standard socket.
        public var systemBusAddress: String?
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
    /// NetworkManager's `Metered`, followed while the agent runs (docs/transfer.md, "Metered networks").
    let meter: NetworkMeter
    /// Which of the agent's downloads wait while metered: all, unless `transfer.allowMetered`.
    let meteredPolicy: MeteredPolicy

    /// The agent over `client` (`CourierClient.agent(options:)`); give the client
    /// `announcesFinishes` so finished transactions reach the webhook's outbox.
    init(client: CourierClient, options: Options) {
        self.client = client
        queue = client.queue
        control = client.control
        self.options = options
        logger = client.logger
        meter = NetworkMeter(logger: client.logger, interval: options.meteredPollInterval, address: options.systemBusAddress)
        meteredPolicy = MeteredPolicy(backgroundProcess: true, allowMetered: client.configuration.transfer.allowMetered)
    }

    public func run() async throws {
        try queue.layout.prepare()
        // Read before the pipeline claims anything: background work never starts on a metered
        // connection. With `transfer.allowMetered` nothing waits and the bus is not asked.
        if !meteredPolicy.allowMetered {
            meter.start()
            queue.holdBackgroundWork(meteredPolicy) { [meter] in meter.isMetered }
        }
        defer { meter.stop() }
        let notifications = client.configuration.agent.notifications ? AgentNotifications(notifier: DesktopNotifier(logger: logger)) : nil
        if let notifications { queue.addObserver(notifications) }
        defer { if let notifications { queue.removeObserver(notifications) } }
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

    /// Retries what may succeed now, sends due webhooks and queues again content whose folder
    /// vanished, every `checkInterval`; checks the
    /// configured catalog for updates at start and every `queue.catalogCheckInterval`.
    private func maintenanceLoop() async {
        var catalog: Catalog?
        var nextCatalogCheck = Date.distantPast
        var vanished: Set<String> = []
        var wasMetered = false
        while !Task.isCancelled {
            let metered = applyConnection(wasMetered: wasMetered)
            wasMetered = metered
            retryStopped()
            if let webhook = client.webhook { await webhook.deliverDue() }
            vanished = await redeliverVanished(seen: vanished)
            // Automatic updates are background work: no catalog check while metered either.
            if Date() >= nextCatalogCheck && !metered {
                nextCatalogCheck = Date().addingTimeInterval(client.configuration.queue.catalogCheckInterval)
                catalog = await updateIfCatalogChanged(since: catalog) ?? catalog
            }
            try? await Task.sleep(nanoseconds: UInt64(options.checkInterval * 1e9))
        }
    }

    /// Tells the queue what the connection is (`PaymentQueue.applyConnection`): while metered,
    /// background downloads pause as `waitingForUnmetered` and their transfers stop; once not,
    /// they wait for the pipeline again (within `checkInterval` plus `meteredPollInterval`).
    /// Returns whether the connection is metered.
    func applyConnection(wasMetered: Bool) -> Bool {
        let metered = !meteredPolicy.allowMetered && meter.isMetered
        do {
            let moved = try queue.applyConnection(metered: metered, policy: meteredPolicy)
            if metered != wasMetered || !moved.isEmpty {
                logger.info(
                    metered
                        ? "the connection is metered; background downloads wait for an unmetered one"
                        : "the connection is not metered; downloads that waited for it continue",
                    metadata: ["downloads": "\(moved.map(\.id).joined(separator: ", "))"])
            }
        } catch {
            logger.error("cannot apply the connection's metered state", metadata: ["error": "\(error)"])
        }
        return metered
    }

    /// Queues again the entitled content whose folder vanished since the last check (`seen`:
    /// what was gone then, handled already), with a configured catalog; returns what is gone now.
    func redeliverVanished(seen: Set<String>) async -> Set<String> {
        guard client.configuration.catalog != nil else { return seen }
        let gone: Set<String>
        do {
            gone = try queue.vanishedContent()
        } catch {
            logger.warning("cannot read delivered content", metadata: ["error": "\(error)"])
            return seen
        }
        let new = gone.subtracting(seen)
        do {
            if !new.isEmpty { _ = try await client.redeliverVanished(new) }
        } catch {
            // Said once per disappearance (not every second); the next start tries again.
            logger.warning(
                "cannot deliver vanished content again",
                metadata: ["content-identifiers": "\(new.sorted().joined(separator: ", "))", "error": "\(error)"])
        }
        return gone
    }

    /// Automatic updates (`queue.autoUpdate`, with a configured catalog): revalidates the catalog
    /// and, when it changed since `previous` (always at start), queues the updates it brings; the
    /// pipeline then works them like any download. Returns the catalog, nil when not checked.
    func updateIfCatalogChanged(since previous: Catalog?) async -> Catalog? {
        guard client.configuration.queue.autoUpdate, client.configuration.catalog != nil else { return nil }
        do {
            let catalog = try await client.checkForUpdates(since: previous).catalog
            CatalogTrustNotice.clear(queue.layout)
            return catalog
        } catch let error as CourierError where error.code == .integrity && error.cause == "TUF" {
            // The catalog failed a TUF check (an expired timestamp: a frozen view): no update
            // from it until the publisher signs again; `list` and `status` say so.
            let notice = "automatic updates stopped: \(error.message)"
            logger.error("\(notice)")
            do {
                try CatalogTrustNotice.write(queue.layout, notice + " (since \(TUFDate.format(Date())))")
            } catch {
                logger.error("cannot record that automatic updates stopped", metadata: ["error": "\(error)"])
            }
            return nil
        } catch {
            logger.warning("cannot check the catalog for updates", metadata: ["error": "\(error)"])
            return nil
        }
    }

    /// The lifecycle's review of the stalled downloads (`PaymentQueue.reviewStalled`, as
    /// `courier resume --stalled` does, but `automatic`): a download that failed for the network
    /// (or a busy partial file) is retried once its backoff has passed; one the server refused
    /// (`serverRejected`) likewise, at most `maxRejectedRetries` times; one paused for space once
    /// the free space holds its remaining bytes, its unpacked size and the reserve.
    func retryStopped(now: Date = Date()) {
        var policy = queue.lifecycle
        policy.retryBackoff = RetryPolicy(maxRetries: nil, backoffBase: options.retryBackoff, backoffMax: options.maxRetryBackoff, jitter: false)
        policy.maxRejectedRetries = options.maxRejectedRetries
        let free = try? options.freeSpace.available(queue.layout.root)
        let review: StalledReview
        do {
            let before = try queue.entries(now: now).compactMap(\.download)
            retries.forget(except: Set(before.filter { $0.state != .finished }.map(\.id)))
            let failed = Dictionary(before.filter { $0.state == .failed }.map { ($0.id, $0) }) { first, _ in first }
            review = try queue.reviewStalled(
                trigger: .automatic, policy: policy, freeSpace: free, retries: retries.attempts, now: now)
            for download in review.resumed {
                var logger = self.logger
                logger[metadataKey: "download-id"] = "\(download.id)"
                logger[metadataKey: "transaction-id"] = "\(download.transactionId)"
                if let failure = failed[download.id], failure.errorCode != .insufficientSpace {
                    retries.record(download.id)
                    logger.info(
                        "retrying",
                        metadata: [
                            "reason": "\(failure.errorCode?.rawValue ?? "")", "attempt": "\(retries.attempts(download.id))",
                        ])
                } else {
                    logger.info(
                        "space is free again; resuming",
                        metadata: ["free": "\(free ?? -1)", "needed": "\(policy.space.needed(for: download))"])
                }
            }
        } catch {
            logger.error("cannot review the stalled downloads", metadata: ["error": "\(error)"])
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
