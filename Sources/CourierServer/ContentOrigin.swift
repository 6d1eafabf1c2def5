import Courier
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle

/// The content origin behind `courier serve`: a Hummingbird HTTP/1.1 server over a folder that
/// `courier prestage` published, gated by an `AccessGate`.
///
/// A `Service`: run it in a `ServiceGroup` (the CLI does, with SIGTERM/SIGINT as graceful
/// shutdown signals); on graceful shutdown it stops accepting connections and lets responses in
/// flight finish. `onListening` is called once with the port actually bound (useful with port 0).
public struct ContentOrigin: Service {
    public let configuration: OriginConfiguration
    let application: Application<OriginResponder>

    /// - Parameters:
    ///   - logger: the server's own log (start, stop, errors).
    ///   - accessLog: one `info` entry per request with `http.*` metadata, `content-id` and
    ///     `transaction-id`; never a token.
    ///   - notifications: answers `POST /notifications` (App Store Server Notifications V2); nil
    ///     leaves that path 404.
    ///   - metrics: where requests, bytes and gate decisions are counted; nil counts nothing.
    public init(
        configuration: OriginConfiguration,
        gate: any AccessGate,
        notifications: NotificationReceiver? = nil,
        metrics: OriginMetrics? = nil,
        logger: Logger,
        accessLog: Logger,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) {
        self.configuration = configuration
        let responder = OriginResponder(
            configuration: configuration, gate: gate, notifications: notifications, accessLog: accessLog, metrics: metrics
        )
        let headTimeout = configuration.requestHeadTimeout.map { TimeAmount.nanoseconds(Int64($0 * 1e9)) }
        let idleTimeout = configuration.idleTimeout.map { TimeAmount.nanoseconds(Int64($0 * 1e9)) }
        let limiter = configuration.maxConnections.map { ConnectionLimiter(maximum: $0) }
        let server = HTTPServerBuilder { responder in
            GuardedHTTP1Channel(
                inner: HTTP1Channel(responder: responder, configuration: .init(idleTimeout: idleTimeout)),
                headTimeout: headTimeout,
                requestTimeout: configuration.requestTimeout.map { TimeAmount.nanoseconds(Int64($0 * 1e9)) },
                minimumRequestRate: configuration.minRequestRate,
                limiter: limiter,
                drainTimeout: .nanoseconds(Int64(max(0, configuration.shutdownGracePeriod) * 1e9)),
                sendTimeout: configuration.sendTimeout.map { TimeAmount.nanoseconds(Int64($0 * 1e9)) }
            )
        }
        self.application = Application(
            responder: responder,
            server: server,
            configuration: ApplicationConfiguration(
                address: .hostname(configuration.host, port: configuration.port),
                serverName: "courier"
            ),
            onServerRunning: { channel in
                await onListening(channel.localAddress?.port ?? configuration.port)
            },
            logger: logger
        )
    }

    public func run() async throws {
        try await application.run()
    }
}
