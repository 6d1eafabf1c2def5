import Courier
import CourierServer
import CourierTestSupport
import Foundation
import Logging
import ServiceLifecycle

/// A content folder like the one `courier prestage` publishes, for origin tests.
struct ContentFixture {
    let folder: TemporaryDirectory
    /// Content identifier to its bytes.
    var packages: [String: Data] = [:]

    init() throws {
        folder = try TemporaryDirectory(prefix: "courier-origin")
    }

    var url: URL { folder.url }

    static let digest = String(repeating: "ab", count: 32)

    /// The staged path of a product's package.
    static func path(_ identifier: String) -> String {
        "packages/\(identifier)/\(digest).zip"
    }

    /// Writes a package of `size` deterministic bytes for `identifier`.
    mutating func addPackage(_ identifier: String, size: Int) throws {
        var bytes = Data(count: size)
        for index in 0..<size { bytes[index] = UInt8(truncatingIfNeeded: index &* 31 &+ index / 251) }
        let file = url.appendingPathComponent(Self.path(identifier))
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try bytes.write(to: file)
        packages[identifier] = bytes
    }

    /// Publishes a catalog listing `products` (each a non-consumable with its package) and
    /// `subscriptions` (product id to item ids).
    func publishCatalog(products: [String], subscriptions: [String: [String]] = [:]) throws {
        var entries: [Catalog.Product] = products.map { id in
            Catalog.Product(
                productId: id,
                content: Catalog.Content(
                    url: Self.path(id), sha256: Self.digest, length: Int64(packages[id]?.count ?? 0),
                    version: "1.0", placement: .documents
                )
            )
        }
        for (id, items) in subscriptions.sorted(by: { $0.key < $1.key }) {
            entries.append(
                Catalog.Product(
                    productId: id,
                    type: .autoRenewable,
                    items: items.map { item in
                        Catalog.Item(
                            itemId: item,
                            publishedAt: Date(timeIntervalSince1970: 1_700_000_000),
                            content: Catalog.Content(
                                url: Self.path("\(id).\(item)"), sha256: Self.digest,
                                length: Int64(packages["\(id).\(item)"]?.count ?? 0), version: "1.0", placement: .cache
                            )
                        )
                    }
                )
            )
        }
        let catalog = Catalog(bundleId: "com.example.app", products: entries)
        let temporary = url.appendingPathComponent(".catalog.tmp")
        try catalog.encoded().write(to: temporary)
        guard rename(temporary.path, url.appendingPathComponent("catalog.json").path) == 0 else {
            throw CourierError.posix("rename", path: temporary.path)
        }
    }
}

/// A `ContentOrigin` running in a `ServiceGroup` inside the test process, on 127.0.0.1:0.
final class RunningOrigin: Sendable {
    let port: Int
    let group: ServiceGroup
    let task: Task<Void, any Error>

    static func start(
        content: URL,
        gate: any AccessGate,
        chunkSize: Int = 1 << 20,
        notifications: NotificationReceiver? = nil,
        metrics: OriginMetrics? = nil,
        configure: (inout OriginConfiguration) -> Void = { _ in }
    ) async throws -> RunningOrigin {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        var logger = Logger(label: "test.origin")
        logger.logLevel = .critical
        var configuration = OriginConfiguration(contentDirectory: content, port: 0, chunkSize: chunkSize)
        configure(&configuration)
        let origin = ContentOrigin(
            configuration: configuration,
            gate: gate,
            notifications: notifications,
            metrics: metrics,
            logger: logger,
            accessLog: logger
        ) { port in
            continuation.yield(port)
        }
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [origin], logger: logger))
        let task = Task {
            defer { continuation.finish() }
            try await group.run()
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            try await task.value
            throw CourierError(.internal, "the origin stopped before it listened")
        }
        return RunningOrigin(port: port, group: group, task: task)
    }

    private init(port: Int, group: ServiceGroup, task: Task<Void, any Error>) {
        self.port = port
        self.group = group
        self.task = task
    }

    func url(_ path: String) -> String { "http://127.0.0.1:\(port)/\(path)" }

    /// Graceful shutdown, then waits for the group to end.
    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await task.value
    }
}

/// curl's view of one exchange: status, headers (lowercased names) and body.
struct CurlExchange {
    var status: Int
    var headers: [String: String]
    var body: Data

    /// Runs curl with `arguments` against `url` on a Dispatch thread (never blocking Swift's
    /// cooperative pool, which the in-process origin needs); the headers come from `-D`.
    static func run(_ url: String, _ arguments: [String] = []) async throws -> CurlExchange {
        try await offPool { try runBlocking(url, arguments) }
    }

    static func runBlocking(_ url: String, _ arguments: [String]) throws -> CurlExchange {
        let scratch = try TemporaryDirectory(prefix: "courier-curl")
        defer { scratch.remove() }
        let headerFile = scratch.appending("headers")
        let bodyFile = scratch.appending("body")
        let result = try Shell.run(
            "/usr/bin/curl",
            ["-s", "--max-time", "60", "-D", headerFile.path, "-o", bodyFile.path] + arguments + [url]
        )
        guard result.status == 0 else {
            throw CourierError(.network, "curl failed", cause: "exit \(result.status): \(result.stderr)")
        }
        let text = (try? String(contentsOf: headerFile, encoding: .utf8)) ?? ""
        var status = 0
        var headers: [String: String] = [:]
        for line in text.components(separatedBy: "\r\n") {
            if line.hasPrefix("HTTP/") {
                status = Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
                headers = [:]
            } else if let colon = line.firstIndex(of: ":") {
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return CurlExchange(status: status, headers: headers, body: (try? Data(contentsOf: bodyFile)) ?? Data())
    }

    var json: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: body)) as? [String: Any]
    }
}

/// A gate for the plumbing tests: tokens from a table, each proving purchases of products; a
/// purchase unlocks its own product's package and, for a subscription, the items listed for it.
struct TableVerifier: BearerTokenVerifier {
    var purchases: [String: [String]]

    func transactions(proving token: String, now: Date) async throws -> [VerifiedTransaction] {
        guard let products = purchases[token] else {
            throw CourierError(.receiptInvalid, "the signed transaction does not verify (signature)")
        }
        return products.enumerated().map { index, product in
            VerifiedTransaction(
                transactionId: "\(token)-\(index)", originalTransactionId: "\(token)-\(index)", productId: product,
                bundleId: "com.example.app", type: .nonConsumable, purchaseDate: now, environment: "Sandbox", signedDate: now
            )
        }
    }
}

/// Runs blocking work (a child process, file polling) on a Dispatch thread.
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
    }
}
