import Courier
import CourierTestSupport
import Foundation
import Testing

/// The agent delivers again entitled content whose folder vanished (issue 28, section 5): removed
/// behind Courier's back while the store records it delivered, it is fetched and placed again;
/// its transaction stays finished (one finish, one `transaction finished` line).
@Suite("courier agent: content whose folder vanished comes back", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct AgentRedeliveryTests {
    @Test("the folder of delivered content is removed; the agent places it again, finishing nothing twice")
    func vanishedFolderComesBack() throws {
        let shop = try AgentShop()
        defer { shop.stop() }
        let storage = shop.storage()
        let product = "com.example.levels"
        let agent = try shop.startAgent(storage: storage)
        defer { _ = stopProcess(agent) }
        let enqueue = try shop.courier(["enqueue", "--receipt", try shop.receipt([product]).path], storage: storage)
        #expect(enqueue.status == 0, "\(enqueue.stderr)")
        #expect(waitUntil(60) { shop.allFinished(storage: storage, count: 1) && shop.isPlaced(product, storage: storage) })
        let queue = try PaymentQueue(layout: StorageLayout(root: storage), logger: .init(label: "test"))
        let transactionId = try #require(try shop.entries(storage: storage).first).transactionId
        let finishedAt = try #require(try queue.transaction(transactionId)?.finishedAt)

        let folder = storage.appendingPathComponent("Documents/\(product)")
        try FileManager.default.removeItem(at: folder)
        let back = waitUntil(60) { shop.isPlaced(product, storage: storage) && shop.allFinished(storage: storage, count: 1) }
        let entries = (try? shop.entries(storage: storage)).map { "\($0)" } ?? ""
        #expect(back, "the agent did not deliver the vanished content again: \(entries)\n\(Self.logs(shop))")
        let transaction = try #require(try queue.transaction(transactionId))
        #expect(transaction.state == .finished)
        #expect(transaction.finishedAt == finishedAt)
        _ = stopProcess(agent)
        let log = Self.logs(shop)
        #expect(log.components(separatedBy: "transaction finished").count - 1 == 1, "\(log)")
        #expect(log.contains("content folder gone: delivering it again"), "\(log)")
    }

    /// What the agents of `shop` logged so far.
    static func logs(_ shop: AgentShop) -> String {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: shop.directory.path)) ?? []).filter { $0.hasPrefix("agent-") }
        return names.compactMap { try? String(contentsOf: shop.directory.appending($0), encoding: .utf8) }.joined()
    }
}
