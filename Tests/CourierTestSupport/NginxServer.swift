import Foundation

/// A real nginx serving a folder on 127.0.0.1, started by a test and stopped with `stop()`.
///
/// nginx cannot bind port 0 and report it, so the port comes from `Loopback.freePort()` and a
/// clash is retried. Its configuration, logs and temp files live in a private folder.
public final class NginxServer: @unchecked Sendable {  // @unchecked: immutable after init, but for `process`, touched only by stop().
    public let root: URL
    public let port: Int
    private let workDirectory: TemporaryDirectory
    private let process: Process

    /// The nginx binary: `NGINX` from the environment, else /usr/sbin/nginx.
    public static var binary: String {
        ProcessInfo.processInfo.environment["NGINX"] ?? "/usr/sbin/nginx"
    }

    public static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: binary) }

    /// Starts nginx serving `root` (ETag, Last-Modified and byte ranges as nginx does by default).
    /// `extraLocations` is raw nginx configuration placed inside the server block.
    public convenience init(root: URL, extraLocations: String = "") throws {
        try self.init(root: root) { port in
            """
            sendfile on;
            server {
                listen 127.0.0.1:\(port);
                root \(root.path);
                \(extraLocations)
            }
            """
        }
    }

    /// Starts nginx with `httpConfiguration(port)` inside its `http { }` block (for instance what
    /// `courier origin nginx-config --listen 127.0.0.1:PORT` printed); it must listen on
    /// 127.0.0.1:`port`. The main context (pid, logs, temp paths, one worker, access log) is
    /// this server's; `root` is what `url(_:)` serves, for the record.
    ///
    /// `workerUser`: the `user` its workers run as when started by root. nil: `root` (the tests'
    /// trees are owner-only temporary folders); `"www-data"`: Debian's packaged default
    /// (`/etc/nginx/nginx.conf`), for a test of the deployment as documented. Then the private
    /// folder is 0711, so workers may reach the temp and cache folders nginx makes in it for them.
    public init(root: URL, workerUser: String? = nil, httpConfiguration: (Int) throws -> String) throws {
        self.root = root
        var lastError: (any Error)?
        for _ in 0..<5 {
            let work = try TemporaryDirectory(prefix: "courier-nginx")
            let port = try Loopback.freePort()
            let user = getuid() == 0 ? "user \(workerUser ?? "root");" : ""
            if workerUser != nil { chmod(work.path, 0o711) }
            let config = """
                \(user)
                worker_processes 1;
                daemon off;
                pid \(work.path)/nginx.pid;
                error_log \(work.path)/error.log warn;
                events { worker_connections 1024; }
                http {
                    access_log \(work.path)/access.log;
                    client_body_temp_path \(work.path)/client_body;
                    proxy_temp_path \(work.path)/proxy;
                    fastcgi_temp_path \(work.path)/fastcgi;
                    uwsgi_temp_path \(work.path)/uwsgi;
                    scgi_temp_path \(work.path)/scgi;
                    types { application/zip zip; application/json json; }
                    default_type application/octet-stream;
                    keepalive_requests 100000;
                    \(try httpConfiguration(port))
                }
                """
            let configFile = work.appending("nginx.conf")
            try Data(config.utf8).write(to: configFile)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Self.binary)
            process.arguments = ["-c", configFile.path, "-p", work.path, "-e", "\(work.path)/error.log"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            if Loopback.waitUntilListening(port: port, timeout: 5), process.isRunning {
                self.port = port
                self.workDirectory = work
                self.process = process
                return
            }
            process.terminate()
            process.waitUntilExit()
            let log = (try? String(contentsOf: work.appending("error.log"), encoding: .utf8)) ?? ""
            lastError = NSError(domain: "NginxServer", code: 1, userInfo: [NSLocalizedDescriptionKey: "nginx did not start: \(log)"])
            work.remove()
        }
        throw lastError ?? NSError(domain: "NginxServer", code: 1)
    }

    /// The users nginx's worker processes run as (`ps --ppid` of the master).
    public func workerUsers() -> [String] {
        let listing = (try? Shell.run("/bin/ps", ["--ppid", "\(process.processIdentifier)", "-o", "user="]).stdout) ?? ""
        return listing.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// nginx's error log so far (for a test's failure message).
    public func errorLog() -> String {
        (try? String(contentsOf: workDirectory.appending("error.log"), encoding: .utf8)) ?? ""
    }

    /// The URL of `path` on this server.
    public func url(_ path: String) -> URL {
        let trimmed = path.hasPrefix("/") ? String(path.dropFirst()) : path
        return URL(string: "http://127.0.0.1:\(port)/\(trimmed)")!
    }

    /// The access log's lines so far (one per request), for counting what a client fetched.
    public func accessLog() -> [String] {
        let text = (try? String(contentsOf: workDirectory.appending("access.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }

    /// The access log once it has at least `count` lines (nginx writes a request's line after
    /// it sent the response, so a client can be faster than the log), or as it is after `timeout`.
    public func accessLog(atLeast count: Int, timeout: Double = 10) -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        var lines = accessLog()
        while lines.count < count && Date() < deadline {
            usleep(10_000)
            lines = accessLog()
        }
        return lines
    }

    public func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        workDirectory.remove()
    }

    deinit { stop() }
}
