import Courier
import Foundation
import Logging

/// The logger receipt commands hand to the library: quiet unless `COURIER_LOG` names a level.
enum ReceiptLogging {
    static let logger: Logger = {
        var logger = Logger(label: "courier.receipts")
        let level = ProcessInfo.processInfo.environment["COURIER_LOG"].flatMap { Logger.Level(rawValue: $0) }
        logger.logLevel = level ?? .critical
        return logger
    }()
}

/// The HTTP transport of the receipt commands (the verifyReceipt service, remote catalogs):
/// libcurl's, with the transfer settings (TLS always verified; plain http only to loopback
/// unless `transfer.allowInsecureHTTP`).
func makeReceiptTransport(_ configuration: CourierConfiguration) throws -> any HTTPTransport {
    try CurlHTTPTransport(configuration: configuration.transfer)
}
