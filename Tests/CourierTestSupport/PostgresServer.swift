import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A real PostgreSQL (Debian's `postgresql` package, as `scripts/setup` installs it), started by a
/// test in a fresh data folder and stopped with `stop()`.
///
/// PostgreSQL refuses to run as root, so `initdb` and `postgres` run as the `postgres` user
/// (`runuser`) in a temporary folder made writable for it. The server listens on 127.0.0.1 on a
/// free port (and on `extraListenAddresses`, addresses the test created itself), with trust
/// authentication for those addresses only, no Unix socket, and fsync off (a test's data is
/// thrown away). `stop()` (also run by `deinit`) stops it and kills anything left, so no postgres
/// process outlives the test; a test should still `defer { server.stop() }`.
public final class PostgresServer: @unchecked Sendable {  // @unchecked: immutable after init, but for `process`, touched only by stop().
    public let port: Int
    public let directory: TemporaryDirectory
    private let process: Process
    private var stopped = false
    private let lock = NSLock()

    /// The folder of the PostgreSQL binaries: `POSTGRES_BIN`, else Debian's 15, 16 or 17.
    public static var binDirectory: String {
        if let path = ProcessInfo.processInfo.environment["POSTGRES_BIN"] { return path }
        for version in ["15", "16", "17"] where FileManager.default.isExecutableFile(atPath: "/usr/lib/postgresql/\(version)/bin/postgres") {
            return "/usr/lib/postgresql/\(version)/bin"
        }
        return "/usr/lib/postgresql/15/bin"
    }

    public static var isAvailable: Bool {
        FileManager.default.isExecutableFile(atPath: binDirectory + "/postgres")
            && FileManager.default.isExecutableFile(atPath: binDirectory + "/initdb")
            && FileManager.default.isExecutableFile(atPath: "/usr/sbin/runuser")
    }

    /// Why `isAvailable` is false, for a test's failure message.
    public static var unavailableReason: String {
        "PostgreSQL is not installed at \(binDirectory) (run scripts/setup, which installs Debian's postgresql; or set POSTGRES_BIN)"
    }

    /// `postgresql://postgres@127.0.0.1:PORT/postgres`.
    public var url: String { url(host: "127.0.0.1") }

    /// The URL through another of the addresses it listens on.
    public func url(host: String, parameters: String = "") -> String {
        "postgresql://postgres@\(host):\(port)/postgres\(parameters)"
    }

    /// Initialises a cluster and starts it. `trustedNetworks` (CIDR) are added to pg_hba.conf.
    public init(extraListenAddresses: [String] = [], trustedNetworks: [String] = []) throws {
        guard Self.isAvailable else { throw Failure(Self.unavailableReason) }
        let directory = try TemporaryDirectory(prefix: "courier-postgres")
        let data = directory.appending("data")
        do {
            // The postgres user must reach the folder and own its data folder (mode 0700).
            guard chmod(directory.path, 0o755) == 0 else { throw Failure("chmod \(directory.path): \(String(cString: strerror(errno)))") }
            try FileManager.default.createDirectory(at: data, withIntermediateDirectories: false)
            let chown = try Shell.run("/bin/chown", ["postgres:postgres", data.path])
            guard chown.status == 0 else { throw Failure("chown \(data.path): \(chown.stderr)") }
            guard chmod(data.path, 0o700) == 0 else { throw Failure("chmod \(data.path)") }
            try Self.runAsPostgres(
                Self.binDirectory + "/initdb",
                ["-D", data.path, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"])
            if !trustedNetworks.isEmpty {
                let hba = data.appendingPathComponent("pg_hba.conf")
                let lines = trustedNetworks.map { "host all all \($0) trust\n" }.joined()
                let handle = try FileHandle(forWritingTo: hba)
                try handle.seekToEnd()
                try handle.write(contentsOf: Data(lines.utf8))
                try handle.close()
            }
        } catch {
            directory.remove()
            throw error
        }
        var lastError = "postgres did not start"
        for _ in 0..<5 {
            let port = try Loopback.freePort()
            let log = directory.appending("postgres.log")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
            // Under a shell that stops the server once this test process is gone: a test run
            // that crashed (an assertion, a signal) left its servers running before.
            let watchdog = """
                "$0" "$@" & server=$!
                while [ -d /proc/\(getpid()) ] && kill -0 $server 2>/dev/null; do sleep 0.5; done
                kill -INT $server 2>/dev/null; wait $server
                """
            process.arguments = [
                "-u", "postgres", "--", "/bin/sh", "-c", watchdog, Self.binDirectory + "/postgres", "-D", data.path, "-p", "\(port)",
                "-c", "listen_addresses=" + (["127.0.0.1"] + extraListenAddresses).joined(separator: ","),
                "-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "shared_buffers=32MB",
            ]
            process.standardInput = FileHandle.nullDevice
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
            let handle = try FileHandle(forWritingTo: log)
            process.standardOutput = handle
            process.standardError = handle
            try process.run()
            if Self.waitUntilReady(port: port, process: process) {
                self.port = port
                self.directory = directory
                self.process = process
                return
            }
            lastError = (try? String(contentsOf: log, encoding: .utf8)) ?? lastError
            Self.kill(process: process, data: data)
        }
        directory.remove()
        throw Failure("postgres did not start: \(lastError)")
    }

    /// Runs SQL with `psql` as the postgres user; returns its output (unaligned, tuples only).
    @discardableResult
    public func psql(_ sql: String) throws -> String {
        let result = try Shell.run(
            "/usr/sbin/runuser",
            ["-u", "postgres", "--", Self.binDirectory + "/psql", "-h", "127.0.0.1", "-p", "\(port)", "-d", "postgres",
             "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        guard result.status == 0 else { throw Failure("psql failed: \(result.stderr)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    public func stop() {
        let shouldStop = lock.withLock {
            defer { stopped = true }
            return !stopped
        }
        guard shouldStop else { return }
        Self.kill(process: process, data: directory.appending("data"))
        directory.remove()
    }

    deinit { stop() }

    /// `pg_ctl stop -m immediate`, then SIGKILL to the postmaster (its children exit when it dies)
    /// and the `runuser` around it.
    private static func kill(process: Process, data: URL) {
        _ = try? runAsPostgres(binDirectory + "/pg_ctl", ["-D", data.path, "stop", "-m", "immediate", "-w", "-t", "10"])
        if let pidText = try? String(contentsOf: data.appendingPathComponent("postmaster.pid"), encoding: .utf8),
            let first = pidText.split(separator: "\n").first, let pid = pid_t(first), pid > 0
        {
            Glibc.kill(pid, SIGKILL)
        }
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        // Backends notice the postmaster's death at once; wait until none is left on this folder.
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, processesUsing(data) > 0 { usleep(20_000) }
    }

    /// How many processes run with `data` on their command line (the postmaster and backends).
    private static func processesUsing(_ data: URL) -> Int {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        var count = 0
        for entry in entries where entry.allSatisfy(\.isNumber) {
            guard let line = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(entry)/cmdline")) else { continue }
            if String(decoding: line, as: UTF8.self).contains(data.path) { count += 1 }
        }
        return count
    }

    /// Polls `pg_isready` until the server accepts connections, or gives up after 60 s or when
    /// the server exited (a port taken between `freePort` and its bind).
    private static func waitUntilReady(port: Int, process: Process) -> Bool {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, process.isRunning {
            if let result = try? Shell.run(binDirectory + "/pg_isready", ["-h", "127.0.0.1", "-p", "\(port)", "-q"]),
                result.status == 0
            {
                return true
            }
            usleep(50_000)
        }
        return false
    }

    private static func runAsPostgres(_ tool: String, _ arguments: [String]) throws {
        let result = try Shell.run("/usr/sbin/runuser", ["-u", "postgres", "--", tool] + arguments)
        guard result.status == 0 else {
            throw Failure("\(URL(fileURLWithPath: tool).lastPathComponent) failed (\(result.status)): \(result.stderr)\(result.stdout)")
        }
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }
}
