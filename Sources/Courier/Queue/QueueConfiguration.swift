import Foundation

/// Settings of the transaction queue and the agent (stage concurrency, leases, webhook).
///
/// Every property has a documented default; a key missing from `Config/courier.json` keeps it.
public struct QueueConfiguration: Sendable, Codable, Equatable {
    /// Downloads transferring at once in one process. Default 8 (the transfer engine applies its
    /// own overall and per-host limits below this).
    public var maxConcurrentDownloads: Int = 8
    /// Packages unpacked and placed at once (CPU and disk bound). Default 2.
    public var maxConcurrentInstalls: Int = 2
    /// Seconds a lease lasts without a heartbeat before another process may take it over. Default 15.
    public var leaseDuration: Double = 15
    /// Seconds between heartbeats of a held lease (also how fast an owner notices a pause or
    /// cancel written by another process). Default 2.
    public var heartbeatInterval: Double = 2
    /// Seconds without a received byte after which an active download counts as stalled: not a
    /// setting of its own but twice `transfer.stallTimeout` (the transfer's watchdog has retried
    /// by then), set by `CourierConfiguration`. Default 60.
    public var stallTimeout: Double = 60
    /// Seconds between progress writes to the store for one download. Default 0.5.
    public var progressInterval: Double = 0.5
    /// Finish a transaction as soon as all its downloads are finished and placed. Default true.
    public var autoFinish: Bool = true
    /// A URL that receives a POST of each finished transaction id (retried until acknowledged).
    public var finishWebhook: String?
    /// The agent updates delivered content on its own when the configured catalog it revalidates
    /// lists a newer version (as `courier update` does). Default true.
    public var autoUpdate: Bool = true
    /// Seconds between the agent's revalidations of the configured catalog (ETag, 304) for
    /// `autoUpdate`; it also checks once at start. Default 300.
    public var catalogCheckInterval: Double = 300

    public init() {}

    enum CodingKeys: String, CodingKey {
        case maxConcurrentDownloads, maxConcurrentInstalls, leaseDuration, heartbeatInterval
        case progressInterval, autoFinish, finishWebhook, autoUpdate, catalogCheckInterval
    }

    /// Refuses settings the queue cannot run with (`CourierConfiguration.decode` asks).
    func validate() throws {
        guard catalogCheckInterval > 0 else { throw CourierError(.usage, "queue: catalogCheckInterval must be positive") }
        guard maxConcurrentDownloads > 0, maxConcurrentInstalls > 0, leaseDuration > 0, heartbeatInterval > 0,
            heartbeatInterval < leaseDuration
        else {
            throw CourierError(
                .usage, "queue: concurrency must be positive and heartbeatInterval shorter than leaseDuration")
        }
    }
}
