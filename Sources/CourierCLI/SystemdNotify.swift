import Courier
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The systemd readiness protocol (`sd_notify(3)`), without libsystemd: when systemd starts
/// `courier agent` as a `Type=notify` service it sets `NOTIFY_SOCKET`, and the agent sends one
/// `READY=1` datagram there once its control socket accepts connections.
enum SystemdNotify {
    /// Sends `state` (such as "READY=1") to `NOTIFY_SOCKET`; does nothing when it is not set.
    /// Returns whether a datagram was sent. A path starting with `@` is in the abstract namespace.
    @discardableResult
    static func send(_ state: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        guard let path = environment["NOTIFY_SOCKET"], path.hasPrefix("/") || path.hasPrefix("@"),
            var address = try? UnixSocketAddress(path: path)
        else { return false }
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        let message = Array(state.utf8)
        let sent = address.withSockaddr { socketAddress, length in
            message.withUnsafeBytes { sendto(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), socketAddress, length) }
        }
        return sent == message.count
    }
}
