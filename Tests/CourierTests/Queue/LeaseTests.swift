@testable import Courier
import CourierTestSupport
import Foundation
import GRDB
import Testing

@Suite("Download leases across connections and processes")
struct LeaseTests {
    /// A queue with one download, and a second connection (another "process") on the same file.
    private func setUp(_ directory: TemporaryDirectory) throws -> (PaymentQueue, StateStore, String) {
        let queue = try QueueFixtures.queue(directory)
        let t = QueueFixtures.transaction("9000")
        try queue.add([t], content: [QueueFixtures.content(for: t)])
        let id = try #require(try queue.downloads(transactionId: "9000").first).id
        return (queue, try StateStore(url: queue.layout.stateDatabase), id)
    }

    @Test("a live owner's lease refuses others; a released one can be taken")
    func liveOwnerRefuses() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (queue, other, id) = try setUp(directory)
        let mine = LeaseManager(duration: 30)
        let theirs = LeaseManager(duration: 30)
        try queue.store.pool.write { db in _ = try mine.acquire(db, downloadId: id) }
        #expect { try other.pool.write { db in try theirs.acquire(db, downloadId: id) } } throws: {
            ($0 as? CourierError)?.code == .leased
        }
        #expect(try queue.store.pool.write { db in try mine.heartbeat(db, downloadId: id) })
        #expect(try other.pool.write { db in try theirs.heartbeat(db, downloadId: id) } == false)
        try queue.store.pool.write { db in try mine.release(db, downloadId: id) }
        let lease = try other.pool.write { db in try theirs.acquire(db, downloadId: id) }
        #expect(lease.owner == theirs.owner)
        #expect(try queue.store.pool.write { db in try mine.heartbeat(db, downloadId: id) } == false)
    }

    @Test("an expired lease (heartbeat stopped) can be taken over")
    func expiredLease() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (queue, other, id) = try setUp(directory)
        let silent = LeaseManager(duration: 10)
        let past = Date().addingTimeInterval(-60)
        try queue.store.pool.write { db in _ = try silent.acquire(db, downloadId: id, now: past) }
        let lease = try other.pool.write { db in try LeaseManager(duration: 10).acquire(db, downloadId: id) }
        #expect(lease.owner.token != silent.owner.token)
        #expect(lease.expiresAt > Date())
    }

    @Test("a lease whose owner process is gone is stale at once, before it expires")
    func deadOwner() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (queue, other, id) = try setUp(directory)
        let child = try Shell.run("/bin/sh", ["-c", "echo $$"])
        let deadPid = try #require(Int32(child.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        let dead = LeaseManager(
            owner: LeaseOwner(pid: deadPid, startTime: 1, host: LeaseOwner.hostName(), token: "dead"), duration: 3600)
        try queue.store.pool.write { db in _ = try dead.acquire(db, downloadId: id) }
        let held = try #require(try queue.lease(id))
        #expect(held.isStale())
        _ = try other.pool.write { db in try LeaseManager(duration: 10).acquire(db, downloadId: id) }

        // Our own pid with another start time is a reused pid: its owner is gone too.
        let reused = LeaseOwner(pid: getpid(), startTime: (LeaseOwner.processStartTime(getpid()) ?? 0) + 1,
                                host: LeaseOwner.hostName(), token: "reused")
        #expect(!LeaseOwner.isAlive(pid: reused.pid, startTime: reused.startTime))
        #expect(LeaseOwner.isAlive(pid: getpid(), startTime: LeaseOwner.processStartTime(getpid())))
    }

    @Test("racing connections: exactly one takes each lease")
    func race() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let transactions = (0..<20).map { QueueFixtures.transaction("r\($0)") }
        try queue.add(transactions, content: transactions.map { QueueFixtures.content(for: $0) })
        let ids = try transactions.flatMap { try queue.downloads(transactionId: $0.transactionId) }.map(\.id)
        let stores = try (0..<4).map { _ in try StateStore(url: queue.layout.stateDatabase) }
        let wins = try await withThrowingTaskGroup(of: [String].self) { group in
            for store in stores {
                group.addTask {
                    let manager = LeaseManager(duration: 30)
                    var won: [String] = []
                    for id in ids {
                        do {
                            try store.pool.write { db in _ = try manager.acquire(db, downloadId: id) }
                            won.append(id)
                        } catch let error as CourierError where error.code == .leased {
                            continue
                        }
                    }
                    return won
                }
            }
            var all: [String] = []
            for try await won in group { all += won }
            return all
        }
        #expect(wins.count == ids.count)
        #expect(Set(wins) == Set(ids))
    }
}
