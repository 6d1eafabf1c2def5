import Foundation
import Hummingbird
import Logging
import Metrics
import NIOCore
import Prometheus
import ServiceLifecycle

/// `GET /metrics` on a port of its own: the Prometheus text exposition of `registry` (every
/// metric the process made through swift-metrics once `MetricsSystem` was bootstrapped with a
/// `PrometheusMetricsFactory` over it). Anything else is 404. A `Service` like `ContentOrigin`;
/// `onListening` gets the port actually bound.
public struct MetricsEndpoint: Service {
    let application: Application<MetricsResponder>

    public init(
        registry: PrometheusCollectorRegistry,
        host: String = "127.0.0.1",
        port: Int,
        logger: Logger,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) {
        application = Application(
            responder: MetricsResponder(registry: registry),
            configuration: ApplicationConfiguration(address: .hostname(host, port: port), serverName: "courier"),
            onServerRunning: { channel in
                await onListening(channel.localAddress?.port ?? port)
            },
            logger: logger
        )
    }

    /// Bootstraps swift-metrics for this process with a Prometheus factory over a new registry
    /// (with the origin's histogram buckets) and returns the registry to serve. Call it once per
    /// process (swift-metrics refuses a second bootstrap).
    public static func bootstrapPrometheus() -> PrometheusCollectorRegistry {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(OriginMetrics.prometheusFactory(registry: registry))
        return registry
    }

    public func run() async throws {
        try await application.run()
    }
}

/// Answers `GET`/`HEAD /metrics` with the registry's text, 404 otherwise.
struct MetricsResponder: HTTPResponder {
    typealias Context = BasicRequestContext
    let registry: PrometheusCollectorRegistry

    func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
        guard request.uri.path == "/metrics", request.method == .get || request.method == .head else {
            return OriginResponder.error(.notFound, code: "notFound", "only GET /metrics is served here")
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        headers[.cacheControl] = "no-store"
        let bytes = registry.emitToBuffer()
        if request.method == .head {
            headers[.contentLength] = "\(bytes.count)"
            return Response(status: .ok, headers: headers)
        }
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}
