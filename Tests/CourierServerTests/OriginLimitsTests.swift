import Courier
import CourierServer
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A raw TCP connection to the origin, for clients that misbehave (half a request head, then
/// silence). Blocking calls; run them off Swift's cooperative pool (`offPool`).
final class RawConnection: @unchecked Sendable {  // @unchecked: used by one test thread at a time.
    let descriptor: Int32

    /// - Parameter receiveBuffer: a small `SO_RCVBUF`, so a client that reads nothing fills its
    ///   window, and the server's buffers, quickly.
    init(port: Int, receiveBuffer: Int32? = nil) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw CourierError.posix("socket", path: "127.0.0.1:\(port)") }
        if var size = receiveBuffer {
            setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            let error = CourierError.posix("connect", path: "127.0.0.1:\(port)")
            Glibc.close(descriptor)
            throw error
        }
    }

    deinit { Glibc.close(descriptor) }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw CourierError.posix("send", path: "socket") }
            offset += n
        }
    }

    /// Reads until the server closes the connection (EOF or reset) or `timeout` seconds pass
    /// with nothing new; returns what arrived and whether the connection was closed.
    func readUntilClosed(timeout: Double) -> (bytes: Data, closed: Bool) {
        var received = Data()
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        while true {
            let ready = poll(&poller, 1, Int32(timeout * 1000))
            if ready < 0, errno == EINTR { continue }
            guard ready > 0 else { return (received, false) }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = recv(descriptor, &buffer, buffer.count, 0)
            if n > 0 {
                received.append(contentsOf: buffer[0..<n])
                continue
            }
            if n < 0, errno == EINTR { continue }
            return (received, true)  // 0: EOF; < 0: reset
        }
    }

    /// Whether anything (bytes or a close) is waiting to be read right now.
    var hasPendingInput: Bool {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        return poll(&poller, 1, 0) > 0
    }
}

@Suite("ContentOrigin limits: request-head deadline, idle timeout, connection cap")
struct OriginLimitsTests {
    static let pack = "com.example.levels.pack1"
    /// What a slowloris client sends: the start of a head that never ends.
    static let halfHead = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

    private func fixture() throws -> ContentFixture {
        var fixture = try ContentFixture()
        try fixture.addPackage(Self.pack, size: 10_000)
        try fixture.publishCatalog(products: [Self.pack])
        return fixture
    }

    @Test("200 connections that send half a head are closed by the head deadline; others are served meanwhile")
    func slowHeadsAreClosed() async throws {
        let fixture = try fixture()
        defer { fixture.folder.remove() }
        // No idle timeout nor whole-request limits: only the head deadline can close them.
        let origin = try await RunningOrigin.start(content: fixture.url, gate: PublicAccessGate()) {
            $0.requestHeadTimeout = 2
            $0.idleTimeout = nil
            $0.requestTimeout = nil
            $0.minRequestRate = nil
        }
        let port = origin.port
        let slow = try await offPool {
            try (0..<200).map { _ in
                let connection = try RawConnection(port: port)
                try connection.send(Self.halfHead)
                return connection
            }
        }
        // The origin answers a well-behaved client while they hang.
        let served = try await CurlExchange.run(origin.url(ContentFixture.path(Self.pack)))
        #expect(served.status == 200)
        #expect(served.body == fixture.packages[Self.pack])
        // Each is closed, without an answer, well within a generous bound.
        let results = try await offPool { slow.map { $0.readUntilClosed(timeout: 30) } }
        let stillOpen = results.filter { !$0.closed }.count
        #expect(stillOpen == 0, "\(stillOpen) of 200 still open")
        #expect(results.allSatisfy { $0.bytes.isEmpty })
        // A head that arrives in time is answered and its connection kept alive; the next head
        // is then due within the deadline too, so a kept-alive connection that sends nothing
        // more is closed (no idle timeout here).
        let kept = try await offPool { () -> (Data, Bool) in
            let connection = try RawConnection(port: port)
            try connection.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            let answer = connection.readUntilClosed(timeout: 30)
            return (answer.bytes, answer.closed)
        }
        #expect(String(decoding: kept.0, as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        #expect(kept.1)
        try await origin.stop()
    }

    @Test("a request and half of the next head in one packet: the answer, then the deadline closes it")
    func halfHeadBehindARequest() async throws {
        let fixture = try fixture()
        defer { fixture.folder.remove() }
        let origin = try await RunningOrigin.start(content: fixture.url, gate: PublicAccessGate()) {
            $0.requestHeadTimeout = 1
            $0.idleTimeout = nil
        }
        let port = origin.port
        // The half head reaches the server with the request before it (one send, one read): no
        // later byte marks its start, and it arrives before the first response has ended.
        let (answer, closed) = try await offPool { () -> (Data, Bool) in
            let connection = try RawConnection(port: port)
            try connection.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + Self.halfHead)
            let rest = connection.readUntilClosed(timeout: 30)
            return (rest.bytes, rest.closed)
        }
        let text = String(decoding: answer, as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 200"))
        #expect(text.components(separatedBy: "HTTP/1.1 ").count == 2, "one answer, none for the half head")
        #expect(closed, "the half head behind a request must be closed by the head deadline")
        try await origin.stop()
    }

    @Test("a head sent while the previous response is still streaming is served; the deadline never cuts a response")
    func headDuringResponse() async throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        try fixture.addPackage(Self.pack, size: 3_000_000)
        try fixture.publishCatalog(products: [Self.pack])
        // 1 MB/s: the first response takes about 3 s, three times the head deadline.
        let origin = try await RunningOrigin.start(content: fixture.url, gate: PublicAccessGate(), chunkSize: 64 * 1024) {
            $0.requestHeadTimeout = 1
            $0.idleTimeout = nil
            $0.rateLimit = 1_000_000
        }
        let port = origin.port
        let path = "/" + ContentFixture.path(Self.pack)
        let received = try await offPool { () -> Data in
            let connection = try RawConnection(port: port)
            // Both heads at once (pipelined): the second waits for the first response.
            try connection.send(
                "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            )
            return connection.readUntilClosed(timeout: 30).bytes
        }
        let text = String(decoding: received, as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 200"))
        #expect(received.count > 3_000_000, "the whole package, then the second answer")
        #expect(text.contains(#"{"catalog":"published","status":"ok"}"#))
        try await origin.stop()
    }

    @Test("a kept-alive connection that starts a second head and stalls is closed by the deadline")
    func slowSecondHead() async throws {
        let fixture = try fixture()
        defer { fixture.folder.remove() }
        let origin = try await RunningOrigin.start(content: fixture.url, gate: PublicAccessGate()) {
            $0.requestHeadTimeout = 1
            $0.idleTimeout = nil
        }
        let port = origin.port
        let (first, closed) = try await offPool { () -> (Data, Bool) in
            let connection = try RawConnection(port: port)
            try connection.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            // The answer arrives; then half of a second head.
            var poller = pollfd(fd: connection.descriptor, events: Int16(POLLIN), revents: 0)
            _ = poll(&poller, 1, 30_000)
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = recv(connection.descriptor, &buffer, buffer.count, 0)
            try connection.send(Self.halfHead)
            let rest = connection.readUntilClosed(timeout: 30)
            return (Data(buffer[0..<max(0, n)]), rest.closed)
        }
        #expect(String(decoding: first, as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        #expect(closed)
        try await origin.stop()
    }

    @Test("the idle timeout closes a connection that sends nothing, and one idle after its answer")
    func idleConnectionsAreClosed() async throws {
        let fixture = try fixture()
        defer { fixture.folder.remove() }
        let origin = try await RunningOrigin.start(content: fixture.url, gate: PublicAccessGate()) {
            $0.requestHeadTimeout = nil
            $0.idleTimeout = 1
        }
        let port = origin.port
        let (silent, idle) = try await offPool { () -> (Bool, (Data, Bool)) in
            let silent = try RawConnection(port: port)
            let idle = try RawConnection(port: port)
            try idle.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            let answered = idle.readUntilClosed(timeout: 30)
            return (silent.readUntilClosed(timeout: 30).closed, (answered.bytes, answered.closed))
        }
        #expect(silent)
        #expect(String(decoding: idle.0, as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        #expect(idle.1)
        try await origin.stop()
    }

    @Test("a client that stops reading its response is cut after the send timeout, and frees its slot")
    func stalledReader() async throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        // Far more than the socket buffers hold, so the server's writes stall.
        try fixture.addPackage(Self.pack, size: 32 << 20)
        try fixture.publishCatalog(products: [Self.pack])
        // One slot: while the stalled reader holds it, everyone else gets 503.
        let origin = try await RunningOrigin.start(content: fixture.url, gate: PublicAccessGate(), chunkSize: 64 * 1024) {
            $0.requestHeadTimeout = nil
            $0.idleTimeout = nil
            $0.maxConnections = 1
            $0.sendTimeout = 1
        }
        let port = origin.port
        let path = "/" + ContentFixture.path(Self.pack)
        let stalled = try await offPool { () -> RawConnection in
            let connection = try RawConnection(port: port, receiveBuffer: 16 * 1024)
            try connection.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return connection
        }
        // It reads nothing: the slot comes free once the send timeout cut it.
        let served = try await offPool { () -> Int in
            let deadline = Date().addingTimeInterval(60)
            var status = 0
            while Date() < deadline {
                status = (try? CurlExchange.runBlocking("http://127.0.0.1:\(port)/health", []))?.status ?? 0
                if status == 200 { break }
                usleep(100_000)
            }
            return status
        }
        #expect(served == 200, "the stalled reader still holds the only slot")
        // What it reads now ends early: the response was cut, not finished.
        let received = try await offPool { stalled.readUntilClosed(timeout: 30) }
        #expect(received.closed)
        #expect(received.bytes.count < 32 << 20)
        try await origin.stop()
    }

    @Test("graceful shutdown waits for a slow download at most shutdownGracePeriod, then closes it")
    func shutdownGraceBound() async throws {
        var fixture = try ContentFixture()
        defer { fixture.folder.remove() }
        try fixture.addPackage(Self.pack, size: 3_000_000)
        try fixture.publishCatalog(products: [Self.pack])
        // 200 kB/s: the response would take 15 s.
        let origin = try await RunningOrigin.start(content: fixture.url, gate: PublicAccessGate(), chunkSize: 64 * 1024) {
            $0.rateLimit = 200_000
            $0.shutdownGracePeriod = 1
        }
        let file = fixture.url.appendingPathComponent("slow.bin")
        let curl = Process()
        curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        curl.arguments = ["-s", "-o", file.path, origin.url(ContentFixture.path(Self.pack))]
        try curl.run()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, ((try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int) ?? 0) == 0 {
            try await Task.sleep(for: .milliseconds(20))
        }
        let started = ContinuousClock.now
        try await origin.stop()
        let stopped = ContinuousClock.now - started
        let status = try await offPool {
            curl.waitUntilExit()
            return curl.terminationStatus
        }
        #expect(status == 18, "curl: partial file")
        let size = (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int) ?? 0
        #expect(size > 0 && size < 3_000_000)
        #expect(stopped < .seconds(14), "the stop waited \(stopped), as long as the download")
    }

    @Test("the connection cap: connections beyond it get 503 and are closed; the origin serves again once slots free")
    func connectionCap() async throws {
        let fixture = try fixture()
        defer { fixture.folder.remove() }
        // No deadlines: the holders stay until they leave, so the count is exact.
        let origin = try await RunningOrigin.start(content: fixture.url, gate: PublicAccessGate()) {
            $0.requestHeadTimeout = nil
            $0.idleTimeout = nil
            $0.requestTimeout = nil
            $0.minRequestRate = nil
            $0.maxConnections = 5
        }
        let port = origin.port
        let connections = try await offPool {
            try (0..<8).map { _ in
                let connection = try RawConnection(port: port)
                try connection.send(Self.halfHead)
                return connection
            }
        }
        // Exactly three are turned away with 503 and closed; five are held, unanswered.
        let (answers, refusedIndices) = try await offPool { () -> ([(Data, Bool)], Set<Int>) in
            var answers: [(Data, Bool)] = []
            let deadline = Date().addingTimeInterval(30)
            var refused = 0
            var seen = Set<Int>()
            while refused < 3, Date() < deadline {
                for (index, connection) in connections.enumerated() where !seen.contains(index) && connection.hasPendingInput {
                    let answer = connection.readUntilClosed(timeout: 30)
                    answers.append((answer.bytes, answer.closed))
                    seen.insert(index)
                    refused += 1
                }
                usleep(10_000)
            }
            return (answers, seen)
        }
        #expect(answers.count == 3)
        for (bytes, closed) in answers {
            #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("HTTP/1.1 503"))
            #expect(closed)
        }
        let answeredHolders = connections.indices.filter { !refusedIndices.contains($0) && connections[$0].hasPendingInput }.count
        #expect(answeredHolders == 0, "the held connections get nothing")
        // While the five slots are held, a new client is turned away too.
        let busy = try await CurlExchange.run(origin.url("health"))
        #expect(busy.status == 503)
        #expect(busy.json?["error"] as? String == "busy")
        // The holders leave: the origin serves again (the server notices the closes shortly).
        withExtendedLifetime(connections) {}
        let freed = try await offPool { () -> Int in
            for connection in connections { shutdown(connection.descriptor, Int32(SHUT_RDWR)) }
            let deadline = Date().addingTimeInterval(30)
            var status = 0
            while Date() < deadline {
                status = (try? CurlExchange.runBlocking("http://127.0.0.1:\(port)/health", []))?.status ?? 0
                if status == 200 { break }
                usleep(50_000)
            }
            return status
        }
        #expect(freed == 200)
        try await origin.stop()
    }
}

/// Slow request bodies (issue 29, §6): the idle timeout restarts with each byte, so only the
/// whole-request deadline and the minimum rate can free the slots they hold.
@Suite("ContentOrigin limits: a whole request's deadline and minimum rate")
struct SlowBodyTests {
    /// Sends one byte every `interval` seconds on `connection` until the server closes it or
    /// `limit` bytes were sent; returns whether the server closed it.
    static func drip(_ connection: RawConnection, every interval: Double, limit: Int) -> Bool {
        for _ in 0..<limit {
            usleep(useconds_t(interval * 1_000_000))
            if (try? connection.send("x")) == nil { return true }
        }
        return false
    }

    @Test("four slow bodies (POST /notifications, GET with a body) on a server of four connections: /health is answered within the deadline")
    func slowBodiesAreCut() async throws {
        let stack = try NotificationTests.Stack()
        defer { stack.fixture.folder.remove() }
        let store = try OriginStateStore(directory: stack.stateFolder)
        // The defaults: a whole request within 30 s (requestTimeout), at 500 bytes/s at least
        // once 5 s have passed (minRequestRate); the idle timeout (30 s) restarts with each byte.
        let origin = try await RunningOrigin.start(
            content: stack.fixture.url, gate: ReceiptAccessGate(verifier: stack.verifier, revocations: store),
            notifications: NotificationReceiver(verifier: stack.verifier, store: store)
        ) { $0.maxConnections = 4 }
        #expect(OriginConfiguration.defaultRequestTimeout == 30 && OriginConfiguration.defaultMinRequestRate == 500)
        let port = origin.port
        let heads = [
            "POST /notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
            "POST /notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
            "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nx",
            "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nx",
        ]
        let connections = try await offPool {
            try heads.map { head in
                let connection = try RawConnection(port: port)
                try connection.send(head)
                return connection
            }
        }
        let started = Date()
        // One byte a second each (the issue's attack sent one every 5 s), for 45 s at most.
        let drips = connections.map { connection in
            Task.detached { Self.drip(connection, every: 1, limit: 45) }
        }
        // /health is refused while the four hold the server, then answered.
        let (statuses, answeredAfter) = try await offPool { () -> ([Int], Double) in
            var statuses: [Int] = []
            while Date().timeIntervalSince(started) < 40 {
                let status = (try? CurlExchange.runBlocking("http://127.0.0.1:\(port)/health", []))?.status ?? 0
                statuses.append(status)
                if status == 200 { break }
                usleep(250_000)
            }
            return (statuses, Date().timeIntervalSince(started))
        }
        // Each drip goes on until the server closes its connection (45 s at most).
        var closedByServer: [Bool] = []
        for drip in drips { closedByServer.append(await drip.value) }
        #expect(statuses.contains(503), "the four slow bodies never held the server: \(statuses)")
        #expect(statuses.last == 200, "/health was never answered in 40 s: \(statuses)")
        // Documented: a request slower than minRequestRate is closed 5 s after its first byte,
        // and any is closed requestTimeout (30 s) after it; the bound here is the latter.
        #expect(answeredAfter < OriginConfiguration.defaultRequestTimeout, "answered after \(answeredAfter) s")
        #expect(closedByServer == [true, true, true, true], "\(closedByServer)")
        // Nothing answered the slow POSTs: their connections were closed.
        let results = try await offPool { connections.map { $0.readUntilClosed(timeout: 30) } }
        #expect(results.allSatisfy { $0.closed })
        #expect(results[0].bytes.isEmpty && results[1].bytes.isEmpty)
        try await origin.stop()
    }

    @Test("a body that keeps the minimum rate is read whole; one past the whole-request deadline is cut even at a good rate")
    func deadlineAndRate() async throws {
        let stack = try NotificationTests.Stack()
        defer { stack.fixture.folder.remove() }
        let store = try OriginStateStore(directory: stack.stateFolder)
        let origin = try await RunningOrigin.start(
            content: stack.fixture.url, gate: ReceiptAccessGate(verifier: stack.verifier, revocations: store),
            notifications: NotificationReceiver(verifier: stack.verifier, store: store)
        ) {
            $0.requestTimeout = 8
            $0.minRequestRate = 100
        }
        let port = origin.port
        let head = "POST /notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        // 2,000 bytes of body in 20 writes over 2 s (1,000 bytes/s): read whole, then judged
        // (not a notification: 400).
        let answered = try await offPool { () -> String in
            let connection = try RawConnection(port: port)
            try connection.send(head + "Content-Length: 2000\r\nConnection: close\r\n\r\n")
            for _ in 0..<20 {
                usleep(100_000)
                try connection.send(String(repeating: "x", count: 100))
            }
            return String(decoding: connection.readUntilClosed(timeout: 30).bytes, as: UTF8.self)
        }
        #expect(answered.hasPrefix("HTTP/1.1 400"), "\(answered)")
        // About 300 bytes a second (above the rate) for longer than the 8 s deadline: closed at
        // it, not before (the bound is from before the request's first byte).
        let (closed, after) = try await offPool { () -> (Bool, Double) in
            let connection = try RawConnection(port: port)
            let start = Date()
            try connection.send(head + "Content-Length: 100000\r\n\r\n")
            while Date().timeIntervalSince(start) < 30 {
                usleep(200_000)
                if (try? connection.send(String(repeating: "x", count: 60))) == nil { return (true, Date().timeIntervalSince(start)) }
            }
            return (false, Date().timeIntervalSince(start))
        }
        #expect(closed, "the request outlived its deadline")
        #expect(after >= 8, "closed after \(after) s, before the 8 s deadline")
        try await origin.stop()
    }
}
