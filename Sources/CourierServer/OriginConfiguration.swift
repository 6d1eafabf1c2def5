import Courier
import Foundation

/// Settings of the content origin behind `courier serve`.
public struct OriginConfiguration: Sendable {
    /// The folder `courier prestage` published: packages plus `catalog.json`.
    public var contentDirectory: URL
    /// The address to listen on; loopback by default.
    public var host: String
    /// The port; 0 asks the kernel for a free one.
    public var port: Int

    public init(contentDirectory: URL, host: String = "127.0.0.1", port: Int = 0) {
        self.contentDirectory = contentDirectory
        self.host = host
        self.port = port
    }
}
