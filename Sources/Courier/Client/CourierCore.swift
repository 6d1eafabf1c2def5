import Foundation
import Logging

/// The client core's parts for a command that needs no `CourierClient`: the queue of an
/// existing store and its commands (`list`, `status`, `pause`…), the content placer (`content`,
/// `package install`), the receipt validator and signed-transaction verifier (`receipt`, `serve`),
/// the catalog loader and a transfer engine (`get`). Each is assembled here from one
/// configuration, one layout and one logger, and `CourierClient` is built over the same parts:
/// the front ends (the CLI, the agent, the origin) take them from here and never assemble one
/// themselves.
public struct CourierCore: Sendable {
    public let configuration: CourierConfiguration
    public let layout: StorageLayout
    public let logger: Logger

    public init(configuration: CourierConfiguration, layout: StorageLayout, logger: Logger) {
        self.configuration = configuration
        self.layout = layout
        self.logger = logger
    }

    /// The same parts, logging through `logger`.
    public func logging(to logger: Logger) -> CourierCore {
        CourierCore(configuration: configuration, layout: layout, logger: logger)
    }

    /// The payment queue of the store, with the lifecycle's rules of this configuration.
    public func paymentQueue() throws -> PaymentQueue {
        paymentQueue(store: try StateStore(layout: layout))
    }

    func paymentQueue(store: StateStore) -> PaymentQueue {
        PaymentQueue(
            store: store, layout: layout, configuration: configuration.queue, lifecycle: configuration.lifecycle, logger: logger)
    }

    /// Every queue command but `enqueue` (which needs the transfer engine: `CourierClient.control`),
    /// performed on the store in this process.
    public func queueControl() throws -> LocalQueueControl {
        LocalQueueControl(queue: try paymentQueue())
    }

    /// The content placer of the store; with `recover`, interrupted installs are recovered first
    /// (what must happen before anything else reads or changes content).
    public func contentPlacer(recover: Bool = true) throws -> ContentPlacer {
        try contentPlacer(store: StateStore(layout: layout), recover: recover)
    }

    func contentPlacer(store: StateStore, recover: Bool) throws -> ContentPlacer {
        let placer = ContentPlacer(
            layout: layout, store: store, packages: configuration.packages, placement: configuration.placement, logger: logger)
        if recover { try placer.recover() }
        return placer
    }

    /// The verifier of JWS signed transactions: the configured trusted roots (paths relative to
    /// the configuration's folder), bundle id, environments and clock skew. The one place a
    /// verifier is made from configuration (the receipt validator and the origin's gate use it).
    public func transactionVerifier() throws -> SignedTransactionVerifier {
        try SignedTransactionVerifier(configuration: configuration.receipts, baseDirectory: configuration.baseDirectory)
    }

    /// A receipt validator (signed transactions here, legacy receipts through the verifyReceipt
    /// service over `transport`, else a transport of its own).
    public func receiptValidator(transport: (any HTTPTransport)? = nil) throws -> ReceiptValidator {
        ReceiptValidator(
            configuration: configuration.receipts,
            verifier: try transactionVerifier(),
            transport: try transport ?? httpTransport(),
            logger: logger
        )
    }

    /// The catalog loader (ETag cache under the store) over `transport`, else one of its own.
    public func catalogLoader(transport: (any HTTPTransport)? = nil) throws -> CatalogLoader {
        CatalogLoader(transport: try transport ?? httpTransport(), layout: layout, trust: configuration.resolvedCatalogTrust, logger: logger)
    }

    /// An HTTP transport for one-shot requests (legacy receipts, catalogs) with the transfer settings.
    public func httpTransport() throws -> any HTTPTransport {
        try Self.httpTransport(transfer: configuration.transfer)
    }

    /// An HTTP transport for one-shot requests with the transfer settings `transfer` (proxy,
    /// timeouts, plain http): the one place a front end gets one, for a command that has a
    /// configuration but no store (`courier tuf-client`) as for the core's own parts.
    public static func httpTransport(transfer: TransferConfiguration) throws -> any HTTPTransport {
        try CurlHTTPTransport(configuration: transfer)
    }

    /// A transfer engine with the transfer settings (a command's own adjustments, such as
    /// `get --limit-rate`, made to `configuration.transfer` first), for `trafficClass`;
    /// `onRetry` hears every retry it schedules. `CourierClient` runs its downloads on one;
    /// `courier get`, which needs no store, on one of its own. Call `shutdown()` when done.
    public func transferEngine(
        trafficClass: TrafficClass = .foreground, onRetry: (@Sendable (TransferRetry) -> Void)? = nil
    ) throws -> TransferEngine {
        try TransferEngine(configuration: configuration.transfer, logger: logger, trafficClass: trafficClass, onRetry: onRetry)
    }
}
