import Foundation

/// Settings of the transfer engine. Every property has a documented default.
public struct TransferConfiguration: Sendable, Codable, Equatable {
    /// Transfers running at once, over all hosts. Default 16.
    public var maxConcurrentTransfers: Int = 16
    /// Transfers running at once against one host. Default 8.
    public var maxTransfersPerHost: Int = 8
    /// Seconds allowed to establish a connection. Default 15.
    public var connectTimeout: Double = 15
    /// Seconds without a single received byte before the watchdog retries. Default 30.
    public var stallTimeout: Double = 30
    /// Retries of one transfer after a retryable failure before it fails. Default 5.
    public var maxRetries: Int = 5
    /// First backoff delay in seconds; doubles each retry, with jitter. Default 0.5.
    public var initialBackoff: Double = 0.5
    /// Longest backoff delay in seconds (also caps Retry-After). Default 30.
    public var maxBackoff: Double = 30
    /// Redirects followed before failing. Default 5.
    public var maxRedirects: Int = 5
    /// Bytes kept free on the destination's filesystem beyond what a download needs. Default 64 MiB.
    public var diskReserve: Int64 = 64 << 20
    /// Allow plain `http://` to hosts other than loopback. Default false.
    public var allowInsecureHTTP: Bool = false
    /// Seconds between checkpoints (fsync, then journal) of a running download. Default 1.
    public var checkpointInterval: Double = 1
    /// Bytes received between checkpoints at most. Default 64 MiB.
    public var checkpointBytes: Int64 = 64 << 20
    /// libcurl's receive buffer (CURLOPT_BUFFERSIZE) in bytes. Default 512 KiB (its maximum).
    public var receiveBufferSize: Int = 512 << 10

    public init() {}

    enum CodingKeys: String, CodingKey {
        case maxConcurrentTransfers, maxTransfersPerHost, connectTimeout, stallTimeout, maxRetries
        case initialBackoff, maxBackoff, maxRedirects, diskReserve, allowInsecureHTTP
        case checkpointInterval, checkpointBytes, receiveBufferSize
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let d = TransferConfiguration()
        maxConcurrentTransfers = try c.decode(.maxConcurrentTransfers, or: d.maxConcurrentTransfers)
        maxTransfersPerHost = try c.decode(.maxTransfersPerHost, or: d.maxTransfersPerHost)
        connectTimeout = try c.decode(.connectTimeout, or: d.connectTimeout)
        stallTimeout = try c.decode(.stallTimeout, or: d.stallTimeout)
        maxRetries = try c.decode(.maxRetries, or: d.maxRetries)
        initialBackoff = try c.decode(.initialBackoff, or: d.initialBackoff)
        maxBackoff = try c.decode(.maxBackoff, or: d.maxBackoff)
        maxRedirects = try c.decode(.maxRedirects, or: d.maxRedirects)
        diskReserve = try c.decode(.diskReserve, or: d.diskReserve)
        allowInsecureHTTP = try c.decode(.allowInsecureHTTP, or: d.allowInsecureHTTP)
        checkpointInterval = try c.decode(.checkpointInterval, or: d.checkpointInterval)
        checkpointBytes = try c.decode(.checkpointBytes, or: d.checkpointBytes)
        receiveBufferSize = try c.decode(.receiveBufferSize, or: d.receiveBufferSize)
    }
}
