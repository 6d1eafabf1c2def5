@testable import Courier
import CourierTestSupport
import Foundation
import GRDB
import Testing

@Suite("Queue commands on the store (the built courier binary)")
struct QueueCommandTests {
    private func seed(_ directory: TemporaryDirectory, count: Int = 3) throws -> PaymentQueue {
        let queue = try QueueFixtures.queue(directory)
        let transactions = (0..<count).map { QueueFixtures.transaction("cli\($0)", product: "com.example.p\($0)") }
        try queue.add(transactions, content: transactions.map { QueueFixtures.content(for: $0) })
        return queue
    }

    private func courier(_ directory: TemporaryDirectory, _ arguments: [String]) throws -> CourierBinary.Result {
        let config = directory.appending("courier.json")
        if !FileManager.default.fileExists(atPath: config.path) {
            try Data(#"{"queue": {"heartbeatInterval": 0.2, "leaseDuration": 5}}"#.utf8).write(to: config)
        }
        return try CourierBinary.run(
            arguments + ["--storage", directory.appending("Storage").path],
            environment: ["COURIER_CONFIG": config.path], directory: directory.url)
    }

    @Test("list --json shows every transaction and download; the table has the documented columns")
    func list() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try seed(directory)
        let result = try courier(directory, ["list", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let document = try #require(result.events.first)
        let entries = try #require(document["entries"] as? [[String: Any]])
        #expect(entries.count == 3)
        #expect(entries.map { $0["transactionId"] as? String } == ["cli0", "cli1", "cli2"])
        #expect(entries.allSatisfy { $0["state"] as? String == "waiting" })
        let id = try #require(try queue.downloads(transactionId: "cli1").first).id
        #expect(entries[1]["downloadId"] as? String == id)

        let table = try courier(directory, ["list"])
        #expect(table.status == 0)
        let header = table.stdout.split(separator: "\n").first.map(String.init) ?? ""
        for column in ["TRANSACTION", "PRODUCT", "STATE", "PROGRESS", "RATE", "ETA", "ERROR", "OWNER"] {
            #expect(header.contains(column))
        }
    }

    @Test("pause, resume, cancel and discard change the store; bad input exits 2; unknown ids exit 1")
    func control() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try seed(directory)
        let id = try #require(try queue.downloads(transactionId: "cli0").first).id

        #expect(try courier(directory, ["pause", id]).status == 0)
        #expect(try queue.download(id)?.state == .paused)
        #expect(try courier(directory, ["resume", "cli0", "--queue-only"]).status == 0)
        #expect(try queue.download(id)?.state == .waiting)
        #expect(try courier(directory, ["pause", "--all"]).status == 0)
        #expect(try queue.entries().compactMap(\.download).allSatisfy { $0.state == .paused })

        let status = try courier(directory, ["status", id, "--json"])
        #expect(status.status == 0)
        let entries = status.events.first?["entries"] as? [[String: Any]]
        #expect(entries?.first?["state"] as? String == "paused")

        #expect(try courier(directory, ["cancel", "cli2"]).status == 0)
        #expect(try queue.downloads(transactionId: "cli2").first?.state == .cancelled)
        #expect(try courier(directory, ["pause"]).status == 2)
        let missing = try courier(directory, ["pause", "does-not-exist", "--json"])
        #expect(missing.status == 1)
        #expect(missing.events.first?["code"] as? String == "notFound")
    }

    @Test("discard is refused while a live process (this one) holds the lease, allowed once released")
    func discardHonoursLeases() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try seed(directory, count: 1)
        let download = try #require(try queue.downloads(transactionId: "cli0").first)
        try queue.pause([download.id])
        try Data("partial".utf8).write(to: URL(fileURLWithPath: download.partialPath))
        let holder = LeaseManager(duration: 60)
        try queue.store.pool.write { db in _ = try holder.acquire(db, downloadId: download.id) }

        let refused = try courier(directory, ["discard", download.id, "--json"])
        #expect(refused.status == 1)
        #expect(refused.events.first?["code"] as? String == "leased")
        #expect(FileManager.default.fileExists(atPath: download.partialPath))

        try queue.store.pool.write { db in try holder.release(db, downloadId: download.id) }
        #expect(try courier(directory, ["discard", download.id]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: download.partialPath))
    }

    @Test("list marks a dead owner's download stalled and resume --stalled requeues it")
    func stalled() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try seed(directory, count: 2)
        let id = try #require(try queue.downloads(transactionId: "cli1").first).id
        let child = try Shell.run("/bin/sh", ["-c", "echo $$"])
        let deadPid = try #require(Int32(child.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        let dead = LeaseManager(owner: LeaseOwner(pid: deadPid, startTime: 1, host: LeaseOwner.hostName(), token: "dead"), duration: 3600)
        try queue.store.pool.write { db in
            _ = try dead.acquire(db, downloadId: id)
            try db.execute(sql: "UPDATE downloads SET state = 'active' WHERE id = ?", arguments: [id])
        }
        let list = try courier(directory, ["list", "--stalled", "--json"])
        let entries = try #require(list.events.first?["entries"] as? [[String: Any]])
        #expect(entries.count == 1)
        #expect(entries.first?["stalled"] as? String == "ownerDied")
        #expect((entries.first?["owner"] as? [String: Any])?["alive"] as? Bool == false)

        #expect(try courier(directory, ["resume", "--stalled", "--queue-only"]).status == 0)
        #expect(try queue.download(id)?.state == .waiting)
    }
}
