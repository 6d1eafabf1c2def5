import Courier
import CourierTestSupport
import Foundation
import Testing

@testable import Courier

/// Collects what a subscription delivered, from its own thread.
private final class EventLog: @unchecked Sendable {  // @unchecked: `events` is guarded by `lock`.
    private let lock = NSLock()
    private var events: [AgentResponse] = []
    let done = DispatchSemaphore(value: 0)

    func append(_ event: AgentResponse) { lock.withLock { events.append(event) } }
    var all: [AgentResponse] { lock.withLock { events } }
}

@Suite("courier agent (real processes, control socket, nginx origin)", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct CourierAgentTests {
    @Test("enqueue through the socket: validated, delivered, placed, finished; subscribers hear it; SIGTERM removes the socket")
    func enqueueThroughAgent() throws {
        let shop = try AgentShop()
        defer { shop.stop() }
        let storage = shop.storage()
        let agent = try shop.startAgent(storage: storage)
        defer { if agent.isRunning { _ = stopProcess(agent, signal: SIGKILL) } }
        let socket = StorageLayout(root: storage).agentSocket

        let attributes = try FileManager.default.attributesOfItem(atPath: socket.path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)

        let log = EventLog()
        let subscriber = try AgentClient(socketPath: socket.path, timeout: 120)
        Thread.detachNewThread {
            try? subscriber.subscribe { event in
                log.append(event)
                let removed = log.all.filter { $0.event == "removedTransactions" }.flatMap { $0.transactions ?? [] }
                return removed.count < AgentShop.products.count
            }
            log.done.signal()
        }

        let receipt = try shop.receipt(AgentShop.products)
        let enqueue = try shop.courier(["enqueue", "--receipt", receipt.path, "--json"], storage: storage)
        #expect(enqueue.status == 0, "\(enqueue.stderr) \(enqueue.stdout)")
        let answer = try #require(enqueue.events.last)
        #expect(answer["agent"] as? Bool == true)
        #expect((answer["transactions"] as? [[String: Any]])?.count == 3)

        #expect(waitUntil(120) { shop.allFinished(storage: storage, count: 3) })
        for product in AgentShop.products { #expect(shop.isPlaced(product, storage: storage), "\(product)") }
        #expect(log.done.wait(timeout: .now() + 60) == .success)
        let events = log.all
        #expect(events.contains { $0.event == "updatedDownloads" && ($0.downloads ?? []).contains { $0.state == .finished } })
        #expect(Set(events.filter { $0.event == "removedTransactions" }.flatMap { $0.transactions ?? [] }.map(\.productId)) == Set(AgentShop.products))

        // list and status answer through the agent.
        let list = try shop.courier(["list", "--all", "--json"], storage: storage)
        #expect(list.status == 0, "\(list.stderr)")
        #expect((list.events.first?["entries"] as? [[String: Any]])?.count == 3)
        let someId = try #require(try shop.entries(storage: storage).first?.transactionId)
        let status = try shop.courier(["status", someId, "--json"], storage: storage)
        #expect(status.status == 0, "\(status.stderr)")
        #expect((status.events.first?["entries"] as? [[String: Any]])?.first?["transactionId"] as? String == someId)

        #expect(stopProcess(agent))
        #expect(agent.exitStatus == 0)
        #expect(!FileManager.default.fileExists(atPath: socket.path))
    }

    @Test("pause and resume go through the agent; SIGTERM checkpoints and exits promptly; a restart finishes the work")
    func sigtermThenRestart() throws {
        let shop = try AgentShop(payloadSize: 8 << 20, rateLimit: "1m")
        defer { shop.stop() }
        let storage = shop.storage()
        var agent = try shop.startAgent(storage: storage)
        defer { if agent.isRunning { _ = stopProcess(agent, signal: SIGKILL) } }
        let product = AgentShop.products[0]
        let enqueue = try shop.courier(["enqueue", "--receipt", try shop.receipt([product]).path], storage: storage)
        #expect(enqueue.status == 0, "\(enqueue.stderr) \(enqueue.stdout)")
        #expect(enqueue.stdout.contains("with the agent"))
        func download() -> DownloadRecord? { (try? shop.entries(storage: storage))?.first?.download }
        #expect(waitUntil(60) { (download()?.bytesReceived ?? 0) > 256 * 1024 })

        let id = try #require(download()?.id)
        let pause = try shop.courier(["pause", id], storage: storage)
        #expect(pause.status == 0, "\(pause.stderr)")
        #expect(pause.stdout.contains("paused"))
        #expect(waitUntil(30) { download()?.state == .paused && (try? shop.entries(storage: storage).first?.lease) == nil })
        let resume = try shop.courier(["resume", id], storage: storage)
        #expect(resume.status == 0, "\(resume.stderr)")
        let before = download()?.bytesReceived ?? 0
        #expect(waitUntil(60) { download()?.state == .active && (download()?.bytesReceived ?? 0) > before + 128 * 1024 })

        let started = Date()
        #expect(stopProcess(agent, signal: SIGTERM, within: 30))
        let took = Date().timeIntervalSince(started)
        #expect(took < 20, "the agent took \(took) s to stop")  // generous: the contract is 5 s on an idle machine
        #expect(agent.exitStatus == 0)
        let stopped = try #require(download())
        #expect(stopped.state == .paused && stopped.pauseReason == .interrupted, "\(stopped)")
        #expect(stopped.durableOffset > 0)

        agent = try shop.startAgent(storage: storage)
        #expect(waitUntil(120) { shop.allFinished(storage: storage, count: 1) })
        #expect(shop.isPlaced(product, storage: storage))
        #expect(shop.nginx.accessLog().contains { $0.contains(".zip") && $0.contains("\" 206 ") })
        #expect(stopProcess(agent))
    }

    @Test("kill -9 of the agent at random points over 20 trials, then a restart: delivered, checksums right, finished once, webhook POSTed")
    func killAndRestart() throws {
        // 1 MiB packages on a rate-limited origin (~1.3 s each) so most kills land mid-flow.
        let shop = try AgentShop(payloadSize: 1 << 20, rateLimit: "768k")
        defer { shop.stop() }
        let hook = try LoopbackHTTPServer { _, response in response.send(204) }
        defer { hook.stop() }
        var landed = (beforeQueueing: 0, midFlow: 0, afterFinish: 0)
        var repeatedPosts = 0
        for trial in 0..<20 {
            let storage = shop.storage("Storage-\(trial)")
            let webhook = ["--webhook", hook.url("/trial-\(trial)").absoluteString]
            let agent = try shop.startAgent(storage: storage, extra: webhook)
            let enqueue = try shop.courier(
                ["enqueue", "--receipt", try shop.receipt(AgentShop.products, name: "receipt-\(trial).txt").path], storage: storage)
            #expect(enqueue.status == 0, "trial \(trial): \(enqueue.stderr) \(enqueue.stdout)")
            usleep(UInt32.random(in: 50_000...1_200_000))  // a random kill point, not a synchronization
            _ = stopProcess(agent, signal: SIGKILL)
            // The dead agent's socket file is still there: the next agent replaces it.
            #expect(FileManager.default.fileExists(atPath: StorageLayout(root: storage).agentSocket.path))
            let before = try shop.entries(storage: storage)
            if before.isEmpty {
                landed.beforeQueueing += 1
            } else if before.allSatisfy({ $0.transactionState == .finished }) {
                landed.afterFinish += 1
            } else {
                landed.midFlow += 1
            }

            let again = try shop.startAgent(storage: storage, extra: webhook)
            #expect(waitUntil(120) { shop.allFinished(storage: storage, count: 3) }, "trial \(trial)")
            for product in AgentShop.products { #expect(shop.isPlaced(product, storage: storage), "trial \(trial) \(product)") }
            // Finished exactly once: three transactions, one per product, each finished once
            // (finishedAt is set by the finish itself and never moves).
            let entries = try shop.entries(storage: storage)
            #expect(entries.count == 3 && Set(entries.map(\.productId)) == Set(AgentShop.products), "trial \(trial)")
            let queue = try PaymentQueue(layout: StorageLayout(root: storage), logger: .init(label: "test"))
            let finishedAt = try entries.map { try #require(try queue.transaction($0.transactionId)?.finishedAt) }
            // Every finished transaction is announced: the outbox row commits with the finish.
            let path = "/trial-\(trial)"
            #expect(waitUntil(30) { Set(hook.receivedRequests.filter { $0.path == path }.compactMap(Self.transactionId)).count == 3 }, "trial \(trial)")
            #expect(stopProcess(again))
            let posts = hook.receivedRequests.filter { $0.path == path }.compactMap(Self.transactionId)
            #expect(Set(posts) == Set(entries.map(\.transactionId)), "trial \(trial)")
            repeatedPosts += posts.count - Set(posts).count
            // A third agent finds nothing to do and finishes nothing again.
            let third = try shop.startAgent(storage: storage, extra: webhook)
            usleep(300_000)
            #expect(stopProcess(third))
            #expect(try shop.entries(storage: storage).map { try queue.transaction($0.transactionId)?.finishedAt } == finishedAt, "trial \(trial)")
            let downloads = try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("Downloads").path)
            #expect(!downloads.contains { $0.hasSuffix(".part") }, "trial \(trial): \(downloads)")
        }
        print(
            "kill -9 of the agent, 20 trials: \(landed.beforeQueueing) before queueing, \(landed.midFlow) mid-flow, "
                + "\(landed.afterFinish) after finishing; \(repeatedPosts) webhook POSTs repeated (at least once, by design)")
        #expect(landed.midFlow > 0, "no kill landed mid-flow")
    }

    private static func transactionId(_ request: LoopbackHTTPServer.Request) -> String? {
        (try? JSONSerialization.jsonObject(with: request.body) as? [String: Any])?["transactionId"] as? String
    }

    @Test("the finish webhook is POSTed, retried after a 503, and kept across a restart until a 2xx")
    func webhookRetried() throws {
        let shop = try AgentShop()
        defer { shop.stop() }
        let acknowledge = LockedFlag()
        let hook = try LoopbackHTTPServer { request, response in
            response.send(acknowledge.value ? 204 : 503)
        }
        defer { hook.stop() }
        let storage = shop.storage()
        let url = hook.url("/finished").absoluteString
        var agent = try shop.startAgent(storage: storage, extra: ["--webhook", url])
        defer { if agent.isRunning { _ = stopProcess(agent, signal: SIGKILL) } }
        let product = AgentShop.products[2]
        #expect(try shop.courier(["enqueue", "--receipt", try shop.receipt([product]).path], storage: storage).status == 0)
        #expect(waitUntil(120) { shop.allFinished(storage: storage, count: 1) })
        let transactionId = try #require(try shop.entries(storage: storage).first?.transactionId)
        // Refused twice (503, then retried with backoff) by the first agent.
        #expect(waitUntil(60) { hook.receivedRequests.count >= 2 })
        #expect(stopProcess(agent))
        let refused = hook.receivedRequests.count

        acknowledge.value = true
        agent = try shop.startAgent(storage: storage, extra: ["--webhook", url])
        #expect(waitUntil(60) { hook.receivedRequests.count > refused })
        let requests = hook.receivedRequests
        #expect(requests.allSatisfy { $0.method == "POST" && $0.path == "/finished" })
        let body = try #require(requests.last.flatMap { try? JSONSerialization.jsonObject(with: $0.body) as? [String: Any] })
        #expect(body["transactionId"] as? String == transactionId)
        #expect(body["productId"] as? String == product)
        // Acknowledged: no further POSTs.
        let store = try StateStore(layout: StorageLayout(root: storage))
        let webhook = FinishWebhook(url: hook.url("/finished"), store: store, transport: NoTransport(), logger: .init(label: "test"))
        #expect(waitUntil(30) { (try? webhook.outbox().first?.deliveredAt) != nil })
        let outbox = try webhook.outbox()
        #expect(outbox.count == 1 && outbox[0].transactionId == transactionId && outbox[0].attempts >= 2, "\(outbox)")
        #expect(stopProcess(agent))
        #expect(hook.receivedRequests.count == refused + 1)
    }

    @Test("the socket is 0600; another user can neither connect nor, past the file mode, be served (SO_PEERCRED)")
    func refusesOtherUsers() throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"),
            FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")
        else {
            print("skipped: needs root, setpriv and python3 to act as another user")
            return
        }
        let shop = try AgentShop()
        defer { shop.stop() }
        chmod(shop.directory.path, 0o755)
        let storage = shop.storage()
        let agent = try shop.startAgent(storage: storage)
        defer { _ = stopProcess(agent) }
        chmod(storage.path, 0o755)
        let socket = StorageLayout(root: storage).agentSocket.path
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sys.argv[1])
            except PermissionError:
                print("EACCES"); sys.exit(0)
            s.sendall(b'{"command":"list"}\\n')
            line = s.makefile().readline().strip()
            print(line if line else "EMPTY")
            """
        func asNobody() throws -> String {
            try Shell.run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, socket])
                .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        #expect(try asNobody() == "EACCES")
        // Past a mistaken file mode, the agent still refuses the peer by its uid.
        chmod(socket, 0o666)
        let answer = try asNobody()
        let response = try #require(try? JSONDecoder().decode(AgentResponse.self, from: Data(answer.utf8)), "answer: \(answer)")
        #expect(!response.ok && response.error?.code == CourierError.Code.notEntitled.rawValue, "\(answer)")
        #expect(response.entries == nil)
    }

    @Test("in process: 64 idle clients at once cost no thread each, and each is still answered")
    func noThreadPerClient() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-agent-threads")
        defer { directory.remove() }
        let queue = try PaymentQueue(layout: StorageLayout(root: directory.url), logger: .init(label: "test"))
        let path = directory.appending("a.sock").path
        let server = try AgentControlServer(path: path, queue: queue, logger: .init(label: "test")) { _ in AgentResponse() }
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        // The clients block while they wait for an answer: on a thread of their own, not on this
        // task's, which the server in this process may need (the cooperative pool has two here,
        // and other tests hold them while their processes run: the agent then did not answer).
        let blocking = BlockingWorkerPool(label: "agent-test-clients", width: 1)
        // The first answer proves the server (and its event loops) are up before counting.
        let first = try await blocking.run { try AgentClient(socketPath: path, timeout: 30) }
        #expect(try await blocking.run { try first.send(AgentRequest(.list)).ok })
        let before = threadCount()
        let clients = try await blocking.run { try (0..<64).map { _ in try AgentClient(socketPath: path, timeout: 30) } }
        for client in clients { #expect(try await blocking.run { try client.send(AgentRequest(.list)).ok }) }
        // A thread per client would add 64; the event loops and the cooperative pool add none.
        #expect(threadCount() - before < 16, "threads: \(before) -> \(threadCount())")
        // The server removes its socket as it stops: done before the folder goes (the removal
        // otherwise raced it: "a.sock doesn't exist", logged by TemporaryDirectory's retry).
        serving.cancel()
        _ = await serving.result
    }

    @Test("in process: a peer whose uid is not the allowed one is refused")
    func peerCredentialCheck() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-agent-peer")
        defer { directory.remove() }
        let layout = StorageLayout(root: directory.url)
        let queue = try PaymentQueue(layout: layout, logger: .init(label: "test"))
        let path = directory.appending("a.sock").path
        let server = try AgentControlServer(path: path, queue: queue, logger: .init(label: "test"), allowedUID: getuid() &+ 1) { _ in
            AgentResponse()
        }
        let serving = Task { try await server.run() }
        // Off this task's thread, as in `noThreadPerClient`.
        let blocking = BlockingWorkerPool(label: "agent-test-peer", width: 1)
        await #expect(throws: CourierError.self) {
            try await blocking.run { try AgentClient(socketPath: path, timeout: 30).send(AgentRequest(.list)) }
        }
        serving.cancel()
        _ = await serving.result
        #expect(!FileManager.default.fileExists(atPath: path))
    }
}

/// The threads of this process now (/proc/self/task).
private func threadCount() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 0
}

private final class LockedFlag: @unchecked Sendable {  // @unchecked: `stored` is guarded by `lock`.
    private let lock = NSLock()
    private var stored = false
    var value: Bool {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

private struct NoTransport: HTTPTransport {
    func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        throw CourierError(.network, "not used")
    }
}
