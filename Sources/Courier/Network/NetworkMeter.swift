import Foundation
import Logging
import Synchronization

/// What NetworkManager says of the connection: its `Metered` property (NMMetered), or why there
/// is no answer.
public enum MeteredReading: Sendable, Equatable, CustomStringConvertible {
    /// NMMetered: 0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no (any other value: unknown).
    case networkManager(UInt32)
    /// No system bus, or no NetworkManager on it (or it answers no `Metered`): not metered.
    case unavailable(String)

    /// Whether background work waits: NetworkManager says yes or guess-yes.
    public var isMetered: Bool {
        if case .networkManager(let value) = self { return value == 1 || value == 3 }
        return false
    }

    public var description: String {
        switch self {
        case .networkManager(let value):
            let names = ["unknown", "yes", "no", "guess-yes", "guess-no"]
            return "metered: " + (Int(exactly: value).flatMap { $0 < names.count ? names[$0] : nil } ?? "unknown (\(value))")
        case .unavailable(let reason):
            return "not metered (\(reason))"
        }
    }
}

/// Follows NetworkManager's `Metered` property on the system bus (the address in
/// `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket), as BITS follows the cost of the
/// network: read at `start()` and then every `interval` seconds on an sd-bus connection that a
/// thread of its own drives (sd-bus objects belong to one thread). A poll, not the
/// PropertiesChanged signal: it also notices NetworkManager starting or stopping, and with the
/// default 2 s a change reaches the agent's next check well within its 10 s promise.
///
/// Without a system bus or without NetworkManager the connection counts as not metered, and
/// the log says so once (again only after NetworkManager answered in between).
public final class NetworkMeter: Sendable {
    private struct State {
        var reading: MeteredReading = .unavailable("not read yet")
        var running = false
        var stopped = false
        var unavailableSaid = false
    }

    private let state = Mutex(State())
    private let interval: Double
    private let logger: Logger
    /// The system bus's address; nil: `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket.
    private let address: String?

    public init(logger: Logger, interval: Double = 2, address: String? = nil) {
        self.logger = logger
        self.interval = max(interval, 0.1)
        self.address = address
    }

    /// The last reading (`.unavailable("not read yet")` before `start()`).
    public var reading: MeteredReading { state.withLock { $0.reading } }

    /// Whether the connection is metered now, as last read.
    public var isMetered: Bool { reading.isMetered }

    /// Reads the property once, on this thread, over a connection of its own (what a foreground
    /// `deliver` asks before it starts).
    public static func read(address: String? = nil) -> MeteredReading {
        let connection: BusConnection
        do {
            connection = try BusConnection(.system, address: address)
        } catch {
            return .unavailable(error.description)
        }
        return read(on: connection)
    }

    private static func read(on connection: BusConnection) -> MeteredReading {
        do {
            let value = try connection.uint32Property(
                service: "org.freedesktop.NetworkManager", object: "/org/freedesktop/NetworkManager",
                interface: "org.freedesktop.NetworkManager", name: "Metered")
            return .networkManager(value)
        } catch {
            return .unavailable(error.serviceMissing ? "no NetworkManager on the system bus" : error.description)
        }
    }

    /// Reads the property now (so `isMetered` holds once this returns), then follows it on its
    /// own thread until `stop()`. Calling it again does nothing.
    public func start() {
        let first = state.withLock { state -> Bool in
            defer { state.running = true }
            return !state.running
        }
        guard first else { return }
        // The first read on this thread (a connection of its own), the rest on the meter's.
        record(Self.read(address: address))
        let thread = Thread { [self] in
            var connection: BusConnection?
            while !self.sleepUnlessStopped() {
                if connection == nil { connection = try? BusConnection(.system, address: self.address) }
                let reading = connection.map(Self.read(on:)) ?? Self.read(address: self.address)
                // A broken connection (the bus restarted) is opened again at the next poll.
                if case .unavailable = reading { connection = nil }
                self.record(reading)
            }
        }
        thread.name = "courier.network-meter"
        thread.start()
    }

    /// Stops following (the thread ends within 0.1 s).
    public func stop() { state.withLock { $0.stopped = true } }

    /// Sleeps `interval` in steps of 0.1 s; true once stopped.
    private func sleepUnlessStopped() -> Bool {
        var slept = 0.0
        while slept < interval {
            if state.withLock({ $0.stopped }) { return true }
            usleep(100_000)
            slept += 0.1
        }
        return state.withLock { $0.stopped }
    }

    private func record(_ reading: MeteredReading) {
        let (previous, sayUnavailable) = state.withLock { state -> (MeteredReading, Bool) in
            let previous = state.reading
            state.reading = reading
            var say = false
            if case .unavailable = reading {
                say = !state.unavailableSaid
                state.unavailableSaid = true
            } else {
                state.unavailableSaid = false
            }
            return (previous, say)
        }
        if sayUnavailable {
            logger.info("the connection counts as not metered: \(reading)")
        } else if case .networkManager = reading, previous.isUnavailable || previous.isMetered != reading.isMetered {
            logger.info("NetworkManager says the connection is \(reading)")
        }
    }
}

extension MeteredReading {
    var isUnavailable: Bool {
        if case .unavailable = self { return true }
        return false
    }
}
