import Foundation
import Logging
import Synchronization

/// Desktop notifications through `org.freedesktop.Notifications` on the session bus
/// (`DBUS_SESSION_BUS_ADDRESS`): what the agent says when a delivery finishes or fails, with
/// `agent.notifications` set. Each notification opens its own short connection on a thread of
/// its own, so a slow or missing notification daemon never holds the agent up; a failure is
/// logged, once per kind of failure.
public final class DesktopNotifier: Sendable {
    private let logger: Logger
    private let failures = FailureBook()
    /// What sending does after each notification (tests wait on it): the daemon's id, or the failure.
    private let sent: (@Sendable (Result<UInt32, any Error>) -> Void)?

    /// The session bus's address; nil: `DBUS_SESSION_BUS_ADDRESS`.
    private let address: String?

    public init(logger: Logger, address: String? = nil, sent: (@Sendable (Result<UInt32, any Error>) -> Void)? = nil) {
        self.logger = logger
        self.address = address
        self.sent = sent
    }

    /// Sends one notification (app name "Courier") on a thread of its own.
    public func notify(summary: String, body: String) {
        let thread = Thread { [self] in
            let result = Result<UInt32, any Error> { try Self.send(summary: summary, body: body, address: address) }
            if case .failure(let error) = result, failures.firstTime("\(error)".prefix(60)) {
                logger.warning("cannot send a desktop notification", metadata: ["error": "\(error)"])
            }
            sent?(result)
        }
        thread.name = "courier.notify"
        thread.start()
    }

    /// Notify(app_name s, replaces_id u, app_icon s, summary s, body s, actions as, hints a{sv},
    /// expire_timeout i), per the Desktop Notifications Specification; returns the daemon's id.
    static func send(summary: String, body: String, address: String?) throws -> UInt32 {
        let connection = try BusConnection(.session, address: address)
        return try connection.call(
            service: "org.freedesktop.Notifications", object: "/org/freedesktop/Notifications",
            interface: "org.freedesktop.Notifications", method: "Notify", timeout: 5
        ) { message in
            for code in [
                BusArguments.string(message, "Courier"), BusArguments.uint32(message, 0), BusArguments.string(message, ""),
                BusArguments.string(message, summary), BusArguments.string(message, body),
                BusArguments.emptyArray(message, of: "s"), BusArguments.emptyArray(message, of: "{sv}"),
                BusArguments.int32(message, -1),
            ] where code < 0 {
                return code
            }
            return 0
        } ?? 0
    }
}

/// Failures said once each (by their text's start).
private final class FailureBook: Sendable {
    private let said = Mutex<Set<String>>([])

    func firstTime(_ key: Substring) -> Bool { said.withLock { $0.insert(String(key)).inserted } }
}
