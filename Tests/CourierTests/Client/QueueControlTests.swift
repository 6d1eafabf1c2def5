import Courier
import CourierTestSupport
import Foundation
import Logging
import Testing

/// The two backends of the queue commands: the store in this process, and a real agent (in this
/// process, on its socket in a temporary storage) that the commands reach over the socket.
enum QueueBackend: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case local, agent

    var testDescription: String { rawValue }
}

/// A storage seeded with one purchase in each state the agent leaves alone (so both backends see
/// the same queue): q0 paused by the user, q1 failed for integrity, q2 failed for the network
/// (stalled), q3 finished; and the queue commands of `backend` over it.
final class QueueControlBench: Sendable {
    let directory: TemporaryDirectory
    let sandbox: SandboxStore
    let catalogFile: URL
    let queue: PaymentQueue
    let client: CourierClient
    let control: any QueueControl
    private let agentTask: Task<Void, any Error>?

    static let products = (0..<5).map { "com.example.p\($0)" }

    init(_ backend: QueueBackend) async throws {
        directory = try TemporaryDirectory(prefix: "courier-qc")
        sandbox = try SandboxStore.create(at: directory.appending("sandbox"))
        let queue = try QueueFixtures.queue(directory)
        self.queue = queue
        let transactions = (0..<4).map { QueueFixtures.transaction("q\($0)", product: Self.products[$0]) }
        try queue.add(transactions, content: transactions.map { QueueFixtures.content(for: $0) })
        try queue.pause(queue.resolve("q0").map(\.id))
        let downloader = MemoryDownloader()
        downloader.serve(Self.products[1], Data(), behaviour: .fail(CourierError(.integrity, "checksum mismatch")))
        downloader.serve(Self.products[2], Data(), behaviour: .fail(CourierError(.network, "connection refused")))
        downloader.serve(Self.products[3], Data("payload".utf8))
        let pipeline = DeliveryPipeline(
            queue: queue,
            downloader: downloader,
            installer: CopyInstaller(layout: queue.layout),
            logger: Logger(label: "test")
        )
        _ = try await pipeline.run(scope: .transactions(["q1", "q2", "q3"]))

        // A catalog listing p4 (its bytes are never fetched: nothing answers on port 9).
        catalogFile = directory.appending("catalog.json")
        let product = QueueFixtures.transaction("unused", product: Self.products[4])
        let content = QueueFixtures.content(for: product)
        try Catalog(
            bundleId: "com.example.app",
            products: [
                Catalog.Product(
                    productId: product.productId,
                    content: Catalog.Content(
                        url: content.url.absoluteString,
                        sha256: content.sha256,
                        length: content.length,
                        version: "1.0",
                        placement: .cache
                    )
                )
            ]
        ).encoded().write(to: catalogFile)

        var configuration = CourierConfiguration()
        configuration.queue = queue.configuration
        configuration.receipts.trustRoots = [sandbox.rootCertificateDERFile.path]
        configuration.receipts.environments = ["Sandbox"]
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let client = try CourierClient(configuration: configuration, layout: queue.layout, logger: logger)
        self.client = client
        switch backend {
        case .local:
            control = client.control
            agentTask = nil
        case .agent:
            var options = CourierAgent.Options()
            options.retryBackoff = 3600  // the failed downloads stay failed while the test runs
            let (ready, readiness) = AsyncStream<Void>.makeStream()
            options.onReady = { readiness.yield() }
            let agent = client.agent(options: options)
            agentTask = Task { try await agent.run() }
            for await _ in ready { break }
            control = AgentQueueControl(agent: try AgentClient(socketPath: queue.layout.agentSocket.path, timeout: 30))
        }
    }

    func download(_ transactionId: String) throws -> DownloadRecord {
        try #require(try queue.downloads(transactionId: transactionId).first)
    }

    func purchase(_ product: String) throws -> Purchase {
        Purchase(receipt: Data((try sandbox.purchase(productId: product) + "\n").utf8), catalog: catalogFile.path)
    }

    func stop() async {
        agentTask?.cancel()
        _ = try? await agentTask?.value
        client.shutdown()
        directory.remove()
    }
}

/// Runs `body` on a fresh bench of `backend`, stopping its agent and removing its folder after.
private func withBench(_ backend: QueueBackend, _ body: (QueueControlBench) async throws -> Void) async throws {
    let bench = try await QueueControlBench(backend)
    do {
        try await body(bench)
    } catch {
        await bench.stop()
        throw error
    }
    await bench.stop()
}

@Suite("Queue commands: the same answers from the store and from a running agent")
struct QueueControlTests {
    @Test("list: unfinished, with finished ones, only stalled ones", arguments: QueueBackend.allCases)
    func list(_ backend: QueueBackend) async throws {
        try await withBench(backend) { bench in
            let unfinished = try await bench.control.perform(.list()).entries
            #expect(unfinished.map(\.transactionId) == ["q0", "q1", "q2"])
            #expect(unfinished.map { $0.download?.state } == [.paused, .failed, .failed])
            #expect(unfinished[0].download?.pauseReason == .user)
            #expect(unfinished[1].download?.errorCode == .integrity)
            let all = try await bench.control.perform(.list(includeFinished: true)).entries
            #expect(all.map(\.transactionId) == ["q0", "q1", "q2", "q3"])
            #expect(all[3].transactionState == .finished && all[3].download?.state == .finished)
            let stalled = try await bench.control.perform(.list(stalledOnly: true)).entries
            #expect(stalled.map(\.transactionId) == ["q2"])
            #expect(stalled.first?.stalled != nil)
        }
    }

    @Test(
        "status: by transaction id, download id prefix; unknown and ambiguous ids refused",
        arguments: QueueBackend.allCases
    )
    func status(_ backend: QueueBackend) async throws {
        try await withBench(backend) { bench in
            let q1 = try bench.download("q1")
            let byTransaction = try await bench.control.perform(.status("q1")).entries
            #expect(byTransaction.map { $0.download?.id } == [q1.id])
            let byPrefix = try await bench.control.perform(.status(String(q1.id.prefix(10)))).entries
            #expect(byPrefix.map { $0.download?.id } == [q1.id])
            let finished = try await bench.control.perform(.status("q3")).entries
            #expect(finished.first?.download?.contentURL != nil)
            await #expect { try await bench.control.perform(.status("nope")) } throws: {
                ($0 as? CourierError)?.code == .notFound
            }
            await #expect { try await bench.control.perform(.status("q")) } throws: {
                ($0 as? CourierError)?.code == .usage
            }
        }
    }

    @Test(
        "pause, cancel and discard: one named download refuses, several skip; bad targets are usage",
        arguments: QueueBackend.allCases
    )
    func control(_ backend: QueueBackend) async throws {
        try await withBench(backend) { bench in
            let (q0, q1) = (try bench.download("q0"), try bench.download("q1"))
            // A failed download cannot be paused: named alone, that is the answer.
            await #expect { try await bench.control.perform(.pause(.id(q1.id))) } throws: {
                ($0 as? CourierError)?.code == .invalidState
            }
            // --all pauses waiting and active downloads only: none here.
            #expect(try await bench.control.perform(.pause(.all)).downloads.isEmpty)
            // Pausing a paused download changes nothing.
            #expect(try await bench.control.perform(.pause(.id("q0"))).downloads.isEmpty)
            #expect(try bench.queue.download(q0.id)?.state == .paused)
            let discarded = try await bench.control.perform(.discard(.id(q0.id))).downloads
            #expect(discarded.map(\.id) == [q0.id] && discarded.first?.state == .paused)
            await #expect { try await bench.control.perform(.discard(.all)) } throws: {
                ($0 as? CourierError)?.code == .usage
            }
            await #expect { try await bench.control.perform(.cancel(.stalled)) } throws: {
                ($0 as? CourierError)?.code == .usage
            }
            await #expect { try await bench.control.perform(.cancel(.ids([]))) } throws: {
                ($0 as? CourierError)?.code == .usage
            }
            let cancelled = try await bench.control.perform(.cancel(.id("q1"))).downloads
            #expect(cancelled.map(\.id) == [q1.id] && cancelled.first?.state == .cancelled)
            #expect(try bench.queue.download(q1.id)?.state == .cancelled)
            // The finished download is left alone by cancel --all; the others are cancelled.
            let rest = try await bench.control.perform(.cancel(.all)).downloads
            #expect(Set(rest.map(\.transactionId)) == ["q0", "q2"] && rest.allSatisfy { $0.state == .cancelled })
        }
    }

    @Test("resume: a named download, and every stalled one", arguments: QueueBackend.allCases)
    func resume(_ backend: QueueBackend) async throws {
        try await withBench(backend) { bench in
            let (q0, q2) = (try bench.download("q0"), try bench.download("q2"))
            let resumed = try await bench.control.perform(.resume(.id("q0"))).downloads
            #expect(resumed.map(\.id) == [q0.id] && resumed.first?.state == .waiting)
            let stalled = try await bench.control.perform(.resume(.stalled)).downloads
            #expect(stalled.map(\.id) == [q2.id] && stalled.first?.state == .waiting)
            await #expect { try await bench.control.perform(.resume(.id("q3"))) } throws: {
                ($0 as? CourierError)?.code == .invalidState
            }
        }
    }

    @Test(
        "enqueue: validated against the catalog and queued; bad purchases refused alike",
        arguments: QueueBackend.allCases
    )
    func enqueue(_ backend: QueueBackend) async throws {
        try await withBench(backend) { bench in
            let product = QueueControlBench.products[4]
            let result = try await bench.control.perform(.enqueue(bench.purchase(product)))
            #expect(result.transactions.map(\.productId) == [product])
            #expect(result.downloads.map(\.contentIdentifier) == [product])
            #expect(result.downloads.first?.transactionId == result.transactions.first?.id)
            #expect(try bench.queue.transaction(#require(result.transactions.first).id) != nil)
            // A product the catalog does not list proves no purchase of it.
            await #expect {
                try await bench.control.perform(.enqueue(bench.purchase("com.example.unlisted")))
            } throws: {
                ($0 as? CourierError)?.exitCode == 3
            }
            await #expect { try await bench.control.perform(.enqueue(Purchase(receipt: Data()))) } throws: {
                ($0 as? CourierError)?.code == .usage
            }
            var wrongRoot = try bench.purchase(product)
            wrongRoot.receipt = Data("not a receipt\n".utf8)
            await #expect { try await bench.control.perform(.enqueue(wrongRoot)) } throws: {
                ($0 as? CourierError)?.exitCode == 3
            }
        }
    }
}
