import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A line-oriented client of the agent's control socket.
private struct ControlClient {
    let fd: Int32

    init(socket: URL) throws {
        fd = try ControlSocketServer.connect(socket)
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    func send(_ object: [String: Any]) throws {
        var data = try JSONSerialization.data(withJSONObject: object)
        data.append(0x0A)
        _ = data.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    func readLine() -> [String: Any]? {
        var line = Data()
        var byte: UInt8 = 0
        while recv(fd, &byte, 1, 0) == 1 {
            if byte == 0x0A { return (try? JSONSerialization.jsonObject(with: line)) as? [String: Any] }
            line.append(byte)
        }
        return nil
    }

    func close() { Glibc.close(fd) }
}

@Suite("courier agent", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct AgentTests {
    @Test("the agent delivers what is queued, answers on its 0600 socket and stops on SIGTERM")
    func agentWorksTheQueue() async throws {
        let shop = try Shop(payloadSize: 256 * 1024)
        defer { shop.stop() }
        // A purchase queued in the store before the agent runs is picked up at start.
        let first = try shop.receipt([Shop.products[0]], name: "first.txt")
        let queued = try shop.courier(["enqueue", "--receipt", first.path, "--catalog", shop.nginx.url("catalog.json").absoluteString,
                                       "--trust-root", shop.sandbox.rootCertificateDERFile.path])
        #expect(queued.status == 0, "\(queued.stderr)")
        #expect(!shop.isPlaced(Shop.products[0]))

        let agent = try shop.start([
            "agent", "--catalog", shop.nginx.url("catalog.json").absoluteString,
            "--trust-root", shop.sandbox.rootCertificateDERFile.path,
        ])
        defer { if agent.isRunning { kill(agent.processIdentifier, SIGKILL) } }
        let socket = shop.storage.appendingPathComponent("agent.sock")
        #expect(try await eventually { ControlSocketServer.isListening(socket) })
        var info = stat()
        #expect(stat(socket.path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(try await eventually { shop.isPlaced(Shop.products[0]) })

        // A purchase handed over the socket is delivered too; events arrive on a subscription.
        let subscriber = try ControlClient(socket: socket)
        defer { subscriber.close() }
        try subscriber.send(["op": "subscribe"])
        #expect(subscriber.readLine()?["subscribed"] as? Bool == true)
        let client = try ControlClient(socket: socket)
        defer { client.close() }
        let second = try String(contentsOf: try shop.receipt([Shop.products[1]], name: "second.txt"), encoding: .utf8)
        try client.send(["op": "enqueue", "receipt": second])
        let answer = try #require(client.readLine())
        #expect(answer["ok"] as? Bool == true, "\(answer)")
        #expect(try await eventually { shop.isPlaced(Shop.products[1]) })
        var sawRemoved = false
        while !sawRemoved, let event = subscriber.readLine() {
            sawRemoved = event["event"] as? String == "removedTransactions"
        }
        #expect(sawRemoved)

        try client.send(["op": "list", "all": true])
        let list = try #require(client.readLine())
        #expect((list["entries"] as? [[String: Any]])?.count == 2)
        try client.send(["op": "pause", "id": "does-not-exist"])
        #expect(client.readLine()?["code"] as? String == "notFound")

        // Another user cannot connect (the socket is 0600 in an owner-only folder; the agent
        // also checks the peer's uid). Checked when this test runs as root and can switch users.
        if getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"),
            FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")
        {
            let other = try Shell.run(
                "/usr/bin/setpriv",
                ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                 "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'{\"op\":\"list\"}\\n'); print(s.recv(4096))",
                 socket.path])
            #expect(other.status != 0, "\(other.stdout)")
            #expect(!other.stdout.contains("entries"))
        }

        // A second agent on the same storage is refused while the first runs.
        let rival = try shop.courier(["agent"])
        #expect(rival.status != 0)

        kill(agent.processIdentifier, SIGTERM)
        #expect(try await eventually(timeout: 10) { !agent.isRunning })
        #expect(!FileManager.default.fileExists(atPath: socket.path))
    }
}
