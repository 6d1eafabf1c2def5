import Courier
import Dispatch
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// SIGHUP in `courier agent` and `courier deliver`: reads the configuration file again and
/// applies its rate limits (`transfer.maxRate`, `backgroundMaxRate`, `rateSchedule`) to the
/// running transfers from their next chunk on, without restarting them. A file that does not
/// load (bad JSON, a bad value) keeps the limits in force and says why. Other keys take effect
/// at the next start (docs/agent.md).
final class ConfigurationReloader: @unchecked Sendable {  // @unchecked: the signal source is only resumed and cancelled.
    private let source: any DispatchSourceSignal

    /// Watches SIGHUP until `stop`: `load` reads the file, `apply` sets the new limits, `report`
    /// says the outcome (true: applied; false: refused, with why).
    init(
        load: @escaping @Sendable () throws -> CourierConfiguration,
        apply: @escaping @Sendable (RateLimits) -> Void,
        report: @escaping @Sendable (_ applied: Bool, _ message: String, _ details: [String: String]) -> Void
    ) {
        signal(SIGHUP, SIG_IGN)
        source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: DispatchQueue(label: "courier.reload"))
        source.setEventHandler {
            let configuration: CourierConfiguration
            do {
                configuration = try load()
            } catch {
                let reason = (error as? CourierError).map { "\($0)" } ?? "\(error)"
                report(false, "cannot reload the configuration; keeping the one in force", ["error": reason])
                return
            }
            let limits = RateLimits(configuration.transfer)
            apply(limits)
            report(true, "configuration reloaded", Self.describe(limits))
        }
        source.resume()
    }

    func stop() {
        source.cancel()
    }

    /// The limits as a log says them: `max-rate`, `background-max-rate` ("none" when unset),
    /// `rate-schedule` (the windows, `HH:MM-HH:MM=rate/background`).
    static func describe(_ limits: RateLimits) -> [String: String] {
        func text(_ rate: ByteRate?) -> String { rate?.description ?? "none" }
        let windows = limits.schedule.map { window in
            "\(clock(window.from))-\(clock(window.to))=\(text(window.maxRate))/\(text(window.backgroundMaxRate))"
        }
        return [
            "max-rate": text(limits.maxRate), "background-max-rate": text(limits.backgroundMaxRate),
            "rate-schedule": windows.isEmpty ? "none" : windows.joined(separator: ","),
        ]
    }

    private static func clock(_ minute: Int) -> String {
        String(format: "%02d:%02d", minute / 60, minute % 60)
    }
}
