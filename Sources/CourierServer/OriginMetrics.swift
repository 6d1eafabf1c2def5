import Foundation
import CoreMetrics
import Metrics
import Prometheus
import Synchronization

/// The origin's metrics (docs/origin.md, "Metrics"), made through swift-metrics with the factory
/// given (the process's bootstrapped one by default; tests pass a `PrometheusMetricsFactory` over
/// their own registry):
///
/// - `courier_requests_total{status}`: responses by HTTP status, counted when the body was sent.
/// - `courier_response_bytes_total`: body bytes written.
/// - `courier_gate_decisions_total{decision,reason}`: gate answers (`allowed`, `unauthorized`,
///   `forbidden`) by `GateReason`.
/// - `courier_gate_decision_seconds`: a histogram of the time each gate decision took.
/// - `courier_token_cache_hits_total`, `courier_token_cache_misses_total`: `VerifiedTokenCache`.
public final class OriginMetrics: Sendable {
    let responseBytes: CoreMetrics.Counter
    let tokenCacheHits: CoreMetrics.Counter
    let tokenCacheMisses: CoreMetrics.Counter
    let decisionTime: CoreMetrics.Timer
    private let decisions: [String: CoreMetrics.Counter]
    private let statuses: Mutex<[Int: CoreMetrics.Counter]>
    private let factory: any MetricsFactory

    /// Buckets of `courier_gate_decision_seconds`: 25 µs to 1 s (a cached decision takes tens
    /// of microseconds, a first ES256 verification about a millisecond).
    public static let decisionBuckets: [Duration] = [
        .microseconds(25), .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500),
        .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1),
    ]

    /// A Prometheus factory over `registry` with the origin's histogram buckets.
    public static func prometheusFactory(registry: PrometheusCollectorRegistry) -> PrometheusMetricsFactory {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets["courier_gate_decision_seconds"] = decisionBuckets
        return factory
    }

    /// Metrics over a registry of their own, without the process-wide bootstrap (tests, or an
    /// origin embedded in a process that counts other things elsewhere).
    public static func standalone() -> (OriginMetrics, PrometheusCollectorRegistry) {
        let registry = PrometheusCollectorRegistry()
        return (OriginMetrics(factory: prometheusFactory(registry: registry)), registry)
    }

    public init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
        responseBytes = CoreMetrics.Counter(label: "courier_response_bytes_total", factory: factory)
        tokenCacheHits = CoreMetrics.Counter(label: "courier_token_cache_hits_total", factory: factory)
        tokenCacheMisses = CoreMetrics.Counter(label: "courier_token_cache_misses_total", factory: factory)
        decisionTime = CoreMetrics.Timer(label: "courier_gate_decision_seconds", factory: factory)
        var decisions: [String: CoreMetrics.Counter] = [:]
        for (decision, reasons) in [
            ("allowed", GateReason.allowing), ("unauthorized", GateReason.unauthorizing), ("forbidden", GateReason.forbidding),
        ] {
            for reason in reasons {
                decisions["\(decision)|\(reason.rawValue)"] = CoreMetrics.Counter(
                    label: "courier_gate_decisions_total",
                    dimensions: [("decision", decision), ("reason", reason.rawValue)],
                    factory: factory
                )
            }
        }
        self.decisions = decisions
        statuses = Mutex([:])
    }

    /// Counts one response with `status` and `bytes` of body.
    func recordResponse(status: Int, bytes: Int64) {
        let counter = statuses.withLock { counters in
            if let counter = counters[status] { return counter }
            let counter = CoreMetrics.Counter(label: "courier_requests_total", dimensions: [("status", "\(status)")], factory: factory)
            counters[status] = counter
            return counter
        }
        counter.increment()
        if bytes > 0 { responseBytes.increment(by: bytes) }
    }

    /// Counts one gate decision and the time it took.
    func recordDecision(_ decision: GateDecision, duration: Duration) {
        let label: String
        switch decision {
        case .allowed(_, let reason): label = "allowed|\(reason.rawValue)"
        case .unauthorized(_, let reason): label = "unauthorized|\(reason.rawValue)"
        case .forbidden(_, let reason): label = "forbidden|\(reason.rawValue)"
        }
        decisions[label]?.increment()
        let (seconds, attoseconds) = duration.components
        decisionTime.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
