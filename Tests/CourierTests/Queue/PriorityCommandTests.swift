@testable import Courier
import CourierTestSupport
import Foundation
import Testing

@Suite("courier priority on the store (the built courier binary)")
struct PriorityCommandTests {
    private func seed(_ directory: TemporaryDirectory) throws -> PaymentQueue {
        let queue = try QueueFixtures.queue(directory)
        let transactions = (0..<3).map { QueueFixtures.transaction("prio\($0)", product: "com.example.p\($0)") }
        try queue.add(transactions, content: transactions.map { QueueFixtures.content(for: $0) })
        return queue
    }

    private func courier(_ directory: TemporaryDirectory, _ arguments: [String]) throws -> CourierBinary.Result {
        try CourierBinary.run(
            arguments + ["--storage", directory.appending("Storage").path],
            environment: ["COURIER_NO_AGENT": "1"], directory: directory.url)
    }

    @Test("set by download or transaction id, stored, shown by list, status and --json; claims take high first")
    func setAndShow() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try seed(directory)
        let last = try #require(try queue.downloads(transactionId: "prio2").first).id

        let set = try courier(directory, ["priority", last, "high", "--json"])
        #expect(set.status == 0, "\(set.stderr)")
        let event = try #require(set.events.last)
        // The last line is the result (docs/json.md).
        #expect(event["event"] as? String == "result" && event["priority"] as? String == "high")
        #expect((event["downloads"] as? [[String: Any]])?.first?["priority"] as? String == "high")
        #expect((event["downloads"] as? [[String: Any]])?.first?["downloadId"] as? String == last)
        #expect(try queue.download(last)?.priority == .high)
        #expect(try courier(directory, ["priority", "prio1", "LOW"]).status == 0)
        #expect(try queue.downloads(transactionId: "prio1").allSatisfy { $0.priority == .low })

        let list = try courier(directory, ["list", "--json"])
        let entries = try #require(list.events.first?["entries"] as? [[String: Any]])
        #expect(entries.map { $0["priority"] as? String } == ["normal", "low", "high"])
        let table = try courier(directory, ["list"]).stdout
        #expect(table.contains("waiting [high]") && table.contains("waiting [low]"), "\(table)")
        #expect(try courier(directory, ["status", last]).stdout.contains("priority high"))

        // Again: nothing changes.
        let again = try courier(directory, ["priority", last, "high"])
        #expect(again.status == 0 && again.stdout.contains("Nothing to do"), "\(again.stdout)")

        // The queue claims high first, then normal, then low (oldest first within one).
        let claimed = try queue.claim(scope: .all, limit: 3)
        #expect(claimed.map(\.transactionId) == ["prio2", "prio0", "prio1"])
    }

    @Test("a bad priority exits 2, an unknown id 1 (notFound), a cancelled download 1 (invalidState)")
    func refusals() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try seed(directory)
        let id = try #require(try queue.downloads(transactionId: "prio0").first).id
        let bad = try courier(directory, ["priority", id, "urgent"])
        #expect(bad.status == 2 && bad.stderr.contains("high, normal or low"), "\(bad.stderr)")
        let missing = try courier(directory, ["priority", "nope", "high", "--json"])
        #expect(missing.status == 1 && missing.events.last?["code"] as? String == "notFound")
        try queue.cancel([id])
        let cancelled = try courier(directory, ["priority", id, "high", "--json"])
        #expect(cancelled.status == 1 && cancelled.events.last?["code"] as? String == "invalidState", "\(cancelled.stdout)")
        #expect(try queue.download(id)?.priority == nil)
    }

    @Test("the control socket's request carries the priority both ways; a bad one is a usage error")
    func agentRequest() throws {
        let command = QueueCommand.priority(.ids(["abc"]), .low)
        let request = AgentRequest(command)
        #expect(request.command == .priority && request.priority == "low")
        let line = try AgentWire.encode(request)
        #expect(try AgentWire.decode(AgentRequest.self, from: line).queueCommand() == command)
        var bad = request
        bad.priority = "urgent"
        #expect(throws: CourierError.self) { try bad.queueCommand() }
        bad.priority = nil
        #expect(throws: CourierError.self) { try bad.queueCommand() }
    }

    @Test("the claim's SQL order agrees with effectivePriority: prefetch and set priorities included")
    func claimOrderMatchesEffectivePriority() throws {
        let directory = try TemporaryDirectory(prefix: "courier-priority")
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        // Oldest first: an essential purchase, an essential one set low, a prefetch content (low
        // by default, younger than the one set low: an SQL order that forgot prefetch would put
        // it first), a prefetch one set high.
        let transactions = (0..<4).map { QueueFixtures.transaction("order\($0)", product: "com.example.o\($0)") }
        var contents = transactions.map { QueueFixtures.content(for: $0) }
        contents[2].delivery = .prefetch
        contents[3].delivery = .prefetch
        for (transaction, content) in zip(transactions, contents) {
            try queue.add([transaction], content: [content])
            usleep(2_000)  // distinct creation times: the order within one priority is the age
        }
        let ids = try transactions.map { try #require(try queue.downloads(transactionId: $0.transactionId).first).id }
        _ = try queue.setPriority(.low, [ids[1]])
        _ = try queue.setPriority(.high, [ids[3]])
        let records = try ids.map { try #require(try queue.download($0)) }
        #expect(records.map(\.effectivePriority) == [.normal, .low, .low, .high])
        let expected = records.enumerated().sorted {
            ($0.element.effectivePriority.rank, $0.offset) < ($1.element.effectivePriority.rank, $1.offset)
        }.map(\.element.id)
        let claimed = try queue.claim(scope: .all, limit: 4)
        #expect(claimed.map(\.id) == expected)
    }
}
