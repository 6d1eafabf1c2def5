import Foundation

/// Settings of the transfer engine. Every property has a documented default.
public struct TransferConfiguration: Sendable, Codable, Equatable {
    /// Transfers running at once, over all hosts. Default 16.
    public var maxConcurrentTransfers: Int = 16
    /// Transfers running at once against one host. Default 8.
    public var maxTransfersPerHost: Int = 8
    /// Seconds allowed to establish a connection (`get --connect-timeout S`). Default 15.
    public var connectTimeout: Double = 15
    /// Seconds without a single received byte before the watchdog retries. Default 30.
    public var stallTimeout: Double = 30
    /// Retries of one transfer after a retryable failure before it fails (`get --retry N`).
    /// Bytes received reset the count. Default 5.
    public var maxRetries: Int = 5
    /// First backoff delay in seconds; doubles each retry, with jitter. Default 0.5.
    public var initialBackoff: Double = 0.5
    /// Longest backoff delay in seconds (also caps Retry-After). Default 30.
    public var maxBackoff: Double = 30
    /// Whether backoff delays are jittered (half fixed, half random). Default true.
    public var jitter: Bool = true
    /// Seconds one download may take in all, retries and their delays included (`get
    /// --max-time S`); 0: no limit. A download past it fails (`network`, exit 5) with its
    /// partial data kept, so running it again resumes. Default 0.
    public var maxTime: Double = 0
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
    /// The most socket receive buffer (SO_RCVBUF, the kernel's buffer) a `low` priority
    /// download gets, in bytes, on a connection of its own: what the origin can still push to it
    /// once a higher priority makes it wait, so a purchase gets the origin within 2 s. While it
    /// runs, the buffer is sized down to what the measured capacity needs (docs/transfer.md,
    /// "When the origin is the bottleneck"). It also bounds one low download to about this much
    /// per round trip (256 KiB at 50 ms: 5 MiB/s). 0: the kernel's autotuning, as for other
    /// downloads. Default 256 KiB.
    public var lowPriorityReceiveBuffer: Int = 256 << 10
    /// The proxy every request goes through (`--proxy URL`, curl's syntax: `http://host:port`,
    /// `socks5h://host`, credentials in the URL), except hosts that `no_proxy` lists. Nil (the
    /// default): the environment's `http_proxy`, `https_proxy`, `all_proxy` and `no_proxy` as
    /// libcurl reads them, loopback always direct. "": no proxy at all, whatever the environment.
    public var proxy: String?
    /// Bytes per second for every download of the process together, in curl's syntax (`"8M"`)
    /// or a number; nil (the default): no limit. Range fetches of delta updates count too.
    public var maxRate: ByteRate?
    /// Bytes per second for the background downloads of the process together (the agent and
    /// automatic updates), within `maxRate`; nil (the default): no limit of their own.
    public var backgroundMaxRate: ByteRate?
    /// Bytes per second for each transfer on its own (`get --limit-rate`, `deliver
    /// --limit-rate`, as curl's `--limit-rate`); nil (the default): no limit.
    public var limitRate: ByteRate?
    /// Time windows of the day with their own `maxRate` and `backgroundMaxRate` (`RateScheduleWindow`),
    /// e.g. 1 MiB/s from 09:00 to 17:00; checked each second, so a boundary applies to running
    /// transfers without restarting them. Default: none.
    public var rateSchedule: [RateScheduleWindow] = []
    /// Whether downloads go on while NetworkManager says the connection is metered
    /// (`NetworkMeter`): true answers `deliver`'s question in advance (as `--allow-metered`) and
    /// lets the agent's background downloads run. Default false: the agent's downloads pause as
    /// `waitingForUnmetered` and a foreground `deliver` asks first (docs/transfer.md, "Metered
    /// networks").
    public var allowMetered: Bool = false

    public init() {}

    /// The retry policy of transfers: `maxRetries`, `initialBackoff`, `maxBackoff`, `jitter`.
    public var retryPolicy: RetryPolicy {
        RetryPolicy(maxRetries: max(0, maxRetries), backoffBase: initialBackoff, backoffMax: maxBackoff, jitter: jitter)
    }
}
