import Foundation

/// Runs the built `courier` executable as a child process, as a user would.
public enum CourierBinary {
    /// The `courier` binary next to the test bundle (`.build/<config>/courier`), or `COURIER_BIN`.
    public static var url: URL {
        if let path = ProcessInfo.processInfo.environment["COURIER_BIN"] {
            return URL(fileURLWithPath: path)
        }
        var directory = Bundle.main.bundleURL
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("courier")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory.deleteLastPathComponent()
        }
        return Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("courier")
    }

    /// The result of one run.
    public struct Result: Sendable {
        /// The exit status; a process killed by a signal answers 128 + the signal, as a shell
        /// does (132 for SIGILL, a Swift runtime trap), never a number an exit code could have.
        public var status: Int32
        public var stdout: String
        public var stderr: String
        /// The NDJSON lines of standard output, decoded.
        public var events: [[String: Any]] {
            stdout.split(separator: "\n").compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
            }
        }
    }

    /// The storage of commands a test runs without naming one: a folder under the system's
    /// temporary folder, one per test process (never the repository's ./Storage).
    static let defaultStorage: String = {
        let path = FileManager.default.temporaryDirectory
            .appendingPathComponent("courier-tests-storage-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString)").path
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return path
    }()

    /// Starts `courier ARGS` without waiting (for kill -9 tests). Output goes to the given files.
    public static func start(
        _ arguments: [String],
        environment: [String: String] = [:],
        directory: URL? = nil,
        stdout: URL? = nil,
        stderr: URL? = nil,
        executable: URL? = nil
    ) throws -> Process {
        let process = Process()
        process.executableURL = executable ?? url
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        // Hermetic: the host's system bus (a metered connection on a developer's laptop) never
        // pauses a test's downloads or asks; tests of metered networks give a private bus.
        env["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/nonexistent/courier-tests-no-system-bus"
        // A test run leaves the work tree as it found it: a command given no storage (no
        // --storage, no COURIER_STORAGE, no folder of its own) would use the repository's
        // ./Storage, which exists. It gets one scratch store for the whole test process instead
        // (shared, as ./Storage was, so a started process and a later run meet the same store).
        if directory == nil, environment["COURIER_STORAGE"] == nil, !arguments.contains(where: { $0.contains("--storage") }) {
            env["COURIER_STORAGE"] = defaultStorage
        }
        env.merge(environment) { $1 }
        process.environment = env
        if let directory { process.currentDirectoryURL = directory }
        process.standardInput = FileHandle.nullDevice
        if let stdout {
            _ = FileManager.default.createFile(atPath: stdout.path, contents: nil)
            process.standardOutput = try FileHandle(forWritingTo: stdout)
        } else {
            process.standardOutput = FileHandle.nullDevice
        }
        if let stderr {
            _ = FileManager.default.createFile(atPath: stderr.path, contents: nil)
            process.standardError = try FileHandle(forWritingTo: stderr)
        } else {
            process.standardError = FileHandle.nullDevice
        }
        try process.run()
        return process
    }

    /// An environment in which every default of Courier's points into `directory`: HOME, the
    /// XDG folders, and COURIER_STORAGE/COURIER_CONFIG/COURIER_LOG emptied (empty means unset);
    /// no agent is asked. `extra` is laid over it.
    public static func isolatedEnvironment(_ directory: TemporaryDirectory, _ extra: [String: String] = [:]) -> [String: String] {
        var environment = [
            "HOME": directory.appending("home").path,
            "XDG_DATA_HOME": directory.appending("data").path,
            "XDG_CONFIG_HOME": directory.appending("config").path,
            "COURIER_STORAGE": "", "COURIER_CONFIG": "", "COURIER_LOG": "", "COURIER_NO_AGENT": "1",
        ]
        environment.merge(extra) { $1 }
        return environment
    }

    /// Runs `courier ARGS` to completion and returns its exit status and output.
    public static func run(
        _ arguments: [String],
        environment: [String: String] = [:],
        directory: URL? = nil,
        timeout: Double = 120
    ) throws -> Result {
        try runToEnd(arguments, environment: environment, directory: directory, timeout: timeout, executable: nil)
    }

    /// Runs a shell command line (`/bin/sh -c LINE`) to completion, for the rare test that needs
    /// the shell (a umask, a pipe) around `courier`; quote the binary's path yourself.
    public static func runShell(_ line: String, timeout: Double = 120) throws -> Result {
        try runToEnd(["-c", line], environment: [:], directory: nil, timeout: timeout, executable: URL(fileURLWithPath: "/bin/sh"))
    }

    /// Starts the process, waits for it (SIGKILL after `timeout` seconds) and collects its output.
    private static func runToEnd(
        _ arguments: [String], environment: [String: String], directory: URL?, timeout: Double, executable: URL?
    ) throws -> Result {
        let scratch = try TemporaryDirectory(prefix: "courier-run")
        defer { scratch.remove() }
        let out = scratch.appending("stdout")
        let err = scratch.appending("stderr")
        let process = try start(
            arguments, environment: environment, directory: directory, stdout: out, stderr: err, executable: executable)
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return Result(
            status: process.exitStatus,
            stdout: (try? String(contentsOf: out, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        )
    }
}

extension Process {
    /// The exit status of a process that ended, as a shell reports it: 128 + the signal for one
    /// killed by a signal. `terminationStatus` alone answers the signal's number, so a runtime
    /// trap (SIGILL, 4) or an abort (SIGABRT, 6) would pass for exit 4 or 6 (disk space,
    /// integrity) in a test.
    public var exitStatus: Int32 {
        terminationReason == .uncaughtSignal ? 128 + terminationStatus : terminationStatus
    }
}
