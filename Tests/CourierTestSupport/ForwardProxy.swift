import Foundation

/// A real HTTP forward proxy on 127.0.0.1 (a few lines of Python's standard library, started
/// by a test and stopped with `stop()`): it forwards `GET http://host/path` requests (Range and
/// the other headers included) and records each request line it forwarded, so a test can see
/// that a client went through it.
public final class ForwardProxy: @unchecked Sendable {  // @unchecked: immutable after init, but for `process`, touched only by stop().
    public let port: Int
    private let work: TemporaryDirectory
    private let process: Process

    public static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") }

    /// The proxy's URL, as `--proxy` and `http_proxy` take it.
    public var url: String { "http://127.0.0.1:\(port)" }

    private static let script = #"""
        import http.server, signal, socketserver, sys, urllib.request, urllib.error, shutil

        # The test process may ignore or block SIGTERM, and both survive exec: without this,
        # a SIGTERM would not end the proxy (stop() sends SIGKILL anyway).
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])

        log_path = sys.argv[1]

        class Proxy(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                with open(log_path, "a") as log:
                    log.write(self.command + " " + self.path + "\n")
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("proxy-connection", "connection", "keep-alive", "host")}
                request = urllib.request.Request(self.path, headers=headers, method=self.command)
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                try:
                    response = opener.open(request, timeout=30)
                except urllib.error.HTTPError as error:
                    response = error
                except Exception as error:
                    self.send_error(502, str(error))
                    return
                body = response.read()
                self.send_response(response.status if hasattr(response, "status") else response.code)
                for key, value in response.headers.items():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Via", "1.1 courier-test-proxy")
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_GET

            def log_message(self, *args):
                pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        server = Server(("127.0.0.1", 0), Proxy)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        """#

    public init() throws {
        let work = try TemporaryDirectory(prefix: "courier-proxy")
        let scriptFile = work.appending("proxy.py")
        try Data(Self.script.utf8).write(to: scriptFile)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [scriptFile.path, work.appending("requests.log").path]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        // The first line is the port it bound (port 0: the kernel chose).
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = pipe.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            process.terminate()
            work.remove()
            throw NSError(domain: "ForwardProxy", code: 1, userInfo: [NSLocalizedDescriptionKey: "the proxy did not start"])
        }
        self.port = port
        self.work = work
        self.process = process
    }

    /// The request lines forwarded so far (`GET http://127.0.0.1:PORT/path`), one per request.
    public var requests: [String] {
        let text = (try? String(contentsOf: work.appending("requests.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }

    public func stop() {
        if process.isRunning {
            // SIGKILL: a SIGTERM may be ignored or blocked in a child of the test process.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        work.remove()
    }

    deinit { stop() }
}
