import Courier
import CourierTestSupport
import Foundation

/// A sandbox store, Info-ZIP packages, a catalog and an nginx origin on loopback, plus helpers
/// to run `courier agent` on a storage and watch its queue.
struct AgentShop {
    /// The sandbox store, packages, catalog and nginx origin the deliver tests use too.
    let shop: Shop

    var directory: TemporaryDirectory { shop.directory }
    var sandbox: SandboxStore { shop.sandbox }
    var nginx: NginxServer { shop.nginx }
    var payloads: [String: Data] { shop.payloads }
    var placements: [String: Catalog.Placement] { shop.placements }

    static let products = Shop.products

    init(payloadSize: Int = 64 * 1024, rateLimit: String? = nil) throws {
        shop = try Shop(payloadSize: payloadSize, rateLimit: rateLimit)
        let config = #"{"queue": {"heartbeatInterval": 0.5, "leaseDuration": 4}, "transfer": {"maxRetries": 2, "initialBackoff": 0.1}}"#
        try Data(config.utf8).write(to: configFile)
    }

    var configFile: URL { directory.appending("courier.json") }
    var environment: [String: String] { ["COURIER_CONFIG": configFile.path] }

    func storage(_ name: String = "Storage") -> URL { directory.appending(name) }

    /// A receipt file proving purchases of `products`.
    func receipt(_ products: [String], name: String = "receipt.txt") throws -> URL {
        let lines = try products.map { try sandbox.purchase(productId: $0) }
        let file = directory.appending(name)
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: file)
        return file
    }

    /// Starts `courier agent` on `storage` (stderr kept in `agent-N.log`) and waits for its socket.
    func startAgent(storage: URL, extra: [String] = [], environment more: [String: String] = [:]) throws -> Process {
        let log = directory.appending("agent-\(UUID().uuidString.prefix(8)).log")
        let process = try CourierBinary.start(
            [
                "agent", "--storage", storage.path, "--catalog", nginx.url("catalog.json").absoluteString,
                "--trust-root", sandbox.rootCertificateDERFile.path, "--environment", "Sandbox", "--log-level", "debug",
                "--retry-backoff", "0.2", "--check-interval", "0.2",
            ] + extra,
            environment: environment.merging(more) { $1 }, directory: directory.url, stderr: log)
        let layout = StorageLayout(root: storage)
        let up = waitUntil(120) { AgentClient.connect(layout: layout, timeout: 10) != nil || !process.isRunning }
        guard up, process.isRunning else {
            throw CourierError(.internal, "the agent did not start: \((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
        }
        return process
    }

    /// What every agent started here wrote to its log (`agent-*.log`), one after another.
    func agentLogs() -> String {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.url.path)) ?? []
        return files.filter { $0.hasPrefix("agent-") && $0.hasSuffix(".log") }.sorted().compactMap {
            try? String(contentsOf: directory.appending($0), encoding: .utf8)
        }.joined(separator: "\n")
    }

    func courier(_ arguments: [String], storage: URL) throws -> CourierBinary.Result {
        try CourierBinary.run(arguments + ["--storage", storage.path], environment: environment, directory: directory.url)
    }

    /// The queue's entries read from the store directly (finished ones too).
    func entries(storage: URL) throws -> [QueueEntry] {
        let queue = try PaymentQueue(layout: StorageLayout(root: storage), logger: .init(label: "test"))
        return try queue.entries(includeFinished: true)
    }

    /// Whether every purchase of the store is finished.
    func allFinished(storage: URL, count: Int) -> Bool {
        guard let entries = try? entries(storage: storage), entries.count == count else { return false }
        return entries.allSatisfy { $0.transactionState == .finished && $0.download?.state == .finished }
    }

    /// Whether `product`'s content is placed with the right bytes under `storage`.
    func isPlaced(_ product: String, storage: URL) -> Bool {
        let base = storage.appendingPathComponent(placements[product] == .cache ? "Caches" : "Documents")
        let file = base.appendingPathComponent(product).appendingPathComponent("Contents/data.bin")
        return (try? Data(contentsOf: file)) == payloads[product]
    }

    func stop() {
        nginx.stop()
        directory.remove()
    }
}

/// Polls `condition` every 50 ms until it holds or `seconds` pass; returns whether it held.
@discardableResult
func waitUntil(_ seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        usleep(50_000)
    }
    return try condition()
}

/// Sends `signal` to `process` and waits (up to `seconds`) for it to exit; returns whether it did.
func stopProcess(_ process: Process, signal: Int32 = SIGTERM, within seconds: Double = 30) -> Bool {
    kill(process.processIdentifier, signal)
    let exited = waitUntil(seconds) { !process.isRunning }
    if !exited {
        kill(process.processIdentifier, SIGKILL)
    }
    process.waitUntilExit()
    return exited
}
