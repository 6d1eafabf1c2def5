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
}
