import Courier
import Foundation

/// Settings of the content origin behind `courier serve`.
public struct OriginConfiguration: Sendable {
    /// The folder `courier prestage` published: packages plus `catalog.json`.
    public var contentDirectory: URL
    /// The catalog to serve and gate with. Default `<contentDirectory>/catalog.json`; its
    /// relative package URLs are paths under `contentDirectory`.
    public var catalogFile: URL
    /// The address to listen on; loopback by default.
    public var host: String
    /// The port; 0 asks the kernel for a free one.
    public var port: Int
    /// Bytes read from disk per chunk while streaming a package. Default 1 MiB.
    public var chunkSize: Int
    /// Seconds graceful shutdown waits for responses in flight. Default 10.
    public var shutdownGracePeriod: Double
    /// Bytes per second each package response is held to (nginx's `limit_rate`), or nil for no
    /// limit (the default).
    public var rateLimit: Int64?

    public init(
        contentDirectory: URL,
        catalogFile: URL? = nil,
        host: String = "127.0.0.1",
        port: Int = 0,
        chunkSize: Int = 1 << 20,
        shutdownGracePeriod: Double = 10,
        rateLimit: Int64? = nil
    ) {
        self.contentDirectory = contentDirectory.standardizedFileURL
        self.catalogFile = catalogFile ?? contentDirectory.appendingPathComponent("catalog.json")
        self.host = host
        self.port = port
        self.chunkSize = chunkSize
        self.shutdownGracePeriod = shutdownGracePeriod
        self.rateLimit = rateLimit
    }
}
