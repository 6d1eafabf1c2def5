import Foundation

/// A real `dbus-daemon` on a unix socket in a temporary folder, with python3-dbusmock services
/// on it (Debian's packages; scripts/setup installs them): the system bus of NetworkManager's
/// tests and the session bus of the notification tests, private to one test.
public final class PrivateBus: @unchecked Sendable {
    public let directory: TemporaryDirectory
    /// The D-Bus address (`unix:path=…`) to give as DBUS_SYSTEM_BUS_ADDRESS or DBUS_SESSION_BUS_ADDRESS.
    public let address: String
    private let daemon: Process
    private var mocks: [Process] = []

    /// Starts the daemon with a configuration that lets anyone own any name and send anything
    /// (a test bus; the type does not matter to clients that are given its address).
    public init() throws {
        directory = try TemporaryDirectory(prefix: "courier-bus")
        let socket = directory.appending("bus")
        let config = directory.appending("bus.conf")
        let text = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:path=\(socket.path)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """
        try Data(text.utf8).write(to: config)
        address = "unix:path=\(socket.path)"
        daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        daemon.arguments = ["--config-file=\(config.path)", "--nofork", "--nopidfile", "--nosyslog"]
        daemon.standardInput = FileHandle.nullDevice
        daemon.standardOutput = FileHandle.nullDevice
        daemon.standardError = FileHandle.nullDevice
        try daemon.run()
        // The socket file appears at bind(), before listen(): until then a client is refused
        // (ECONNREFUSED). Ready means a connection is accepted.
        guard Self.poll(30, { Loopback.acceptsUnixConnection(socket.path) || !self.daemon.isRunning }), daemon.isRunning else {
            stop()
            throw PrivateBusError("dbus-daemon did not start")
        }
    }

    /// Starts `python3 -m dbusmock --template NAME` on this bus as its system bus (`system`) or
    /// session bus, logging the calls it receives to `log`, and waits until it owns `name`.
    public func startTemplate(_ template: String, owning name: String, system: Bool, log: URL? = nil) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-m", "dbusmock", "--template", template] + (system ? ["--system"] : []) + (log.map { ["-l", $0.path] } ?? [])
        var environment = ProcessInfo.processInfo.environment
        environment[system ? "DBUS_SYSTEM_BUS_ADDRESS" : "DBUS_SESSION_BUS_ADDRESS"] = address
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        let errors = directory.appending("mock-\(template).err")
        _ = FileManager.default.createFile(atPath: errors.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: errors)
        try process.run()
        mocks.append(process)
        guard Self.poll(60, { self.hasOwner(name) || !process.isRunning }), process.isRunning else {
            throw PrivateBusError("dbusmock \(template) did not start: \((try? String(contentsOf: errors, encoding: .utf8)) ?? "")")
        }
    }

    /// Stops the dbusmock services (the daemon keeps running: the service is gone from the bus).
    public func stopTemplates() {
        // SIGKILL: a child of the test runner may inherit SIGTERM blocked.
        for mock in mocks where mock.isRunning {
            kill(mock.processIdentifier, SIGKILL)
            mock.waitUntilExit()
        }
        mocks = []
    }

    /// Whether `name` has an owner on the bus.
    public func hasOwner(_ name: String) -> Bool {
        let reply = try? send(
            destination: "org.freedesktop.DBus", object: "/org/freedesktop/DBus", method: "org.freedesktop.DBus.NameHasOwner",
            arguments: ["string:\(name)"])
        return reply?.contains("boolean true") ?? false
    }

    /// `dbus-send --print-reply` on this bus; throws when the call fails.
    @discardableResult
    public func send(destination: String, object: String, method: String, arguments: [String]) throws -> String {
        let result = try Shell.run(
            "/usr/bin/dbus-send",
            ["--bus=\(address)", "--print-reply", "--dest=\(destination)", object, method] + arguments)
        guard result.status == 0 else { throw PrivateBusError("dbus-send \(method): \(result.stderr)") }
        return result.stdout
    }

    /// Sets NetworkManager's `Metered` (NMMetered: 1 yes, 2 no, 3 guess-yes, 4 guess-no) on the
    /// mock, adding the property the template leaves out the first time; it emits PropertiesChanged.
    public func setMetered(_ value: UInt32) throws {
        let object = "/org/freedesktop/NetworkManager"
        let interface = "org.freedesktop.NetworkManager"
        do {
            try send(
                destination: interface, object: object, method: "org.freedesktop.DBus.Properties.Set",
                arguments: ["string:\(interface)", "string:Metered", "variant:uint32:\(value)"])
        } catch {
            try send(
                destination: interface, object: object, method: "org.freedesktop.DBus.Mock.AddProperty",
                arguments: ["string:\(interface)", "string:Metered", "variant:uint32:\(value)"])
        }
    }

    public func stop() {
        stopTemplates()
        if daemon.isRunning {
            kill(daemon.processIdentifier, SIGKILL)
            daemon.waitUntilExit()
        }
        directory.remove()
    }

    private static func poll(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(50_000)
        }
        return condition()
    }
}

public struct PrivateBusError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
