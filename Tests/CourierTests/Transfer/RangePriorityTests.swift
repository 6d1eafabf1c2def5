import Courier
import CourierTestSupport
import Foundation
import Synchronization
import Testing

/// Range fetches that belong to a download (a delta update's) wait for a slot and share the rate
/// limits at that download's priority, and `setPriority` reaches them while they run, as it does
/// a whole-file download. The assertions are on state (who holds the slot, whom `setPriority`
/// finds) or on shares with wide margins (a 20:1 split checked against 1:3), never on speeds.
@Suite("Range fetches at their download's priority")
struct RangePriorityTests {
    /// Bytes counted from several threads.
    final class Tally: Sendable {
        private let state = Mutex<[String: Int64]>([:])

        func add(_ name: String, _ count: Int) { state.withLock { $0[name, default: 0] += Int64(count) } }
        func set(_ name: String, _ total: Int64) { state.withLock { $0[name] = total } }
        func bytes(_ name: String) -> Int64 { state.withLock { $0[name] ?? 0 } }
    }

    @Test("a range fetch waits for a slot at its download's priority, and at the one set since for its next request")
    func slotOrder() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(1 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.bytesPerSecond = 64 << 10
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        var configuration = TransferFixture.configuration()
        configuration.maxConcurrentTransfers = 1
        configuration.maxTransfersPerHost = 1
        configuration.stallTimeout = 30
        // A foreground engine: a transfer of no download would wait at `high`.
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        #expect(engine.defaultPriority == .high)
        let store = FileResumeJournalStore(directory: folder.url)
        let fetcher = engine.rangeFetcher(for: "update-1", priority: .low)
        let length = Int64(content.count)

        for round in 0..<2 {
            origin.setBehavior(behavior)
            // A slow download holds the only slot.
            let blocker = Task {
                try await engine.download(
                    TransferFixture.request(origin.url("/blocker\(round)"), in: folder, name: "blocker\(round).bin"), journal: store
                ) { _ in }
            }
            #expect(await TransferFixture.wait { engine.slotUse == (1, 0) })
            // The update's range fetch queues first, a purchase at normal after it.
            let fetch = Task {
                try await fetcher.fetch(origin.url("/update\(round)"), ranges: [0..<length], representationLength: length) { _, _ in }
            }
            #expect(await TransferFixture.wait { engine.slotUse == (1, 1) })
            let purchase = Task {
                var request = TransferFixture.request(
                    origin.url("/purchase\(round)"), in: folder, name: "purchase\(round).bin", length: length)
                request.priority = .normal
                return try await engine.download(request, journal: store) { _ in }
            }
            #expect(await TransferFixture.wait { engine.slotUse == (1, 2) })
            var fast = behavior
            fast.bytesPerSecond = 0
            origin.setBehavior(fast)
            blocker.cancel()
            await #expect(throws: CourierError.self) { _ = try await blocker.value }
            #expect(try await fetch.value == .parts([0...(length - 1)]))
            _ = try await purchase.value
            // One slot: the order the origin was asked in is the order they were admitted in.
            let order = origin.requests.map(\.path).filter { !$0.hasPrefix("/blocker") }.suffix(2)
            if round == 0 {
                // Low waits behind normal, though it came first.
                #expect(Array(order) == ["/purchase0", "/update0"])
                // `courier priority update-1 high` between two requests of the update.
                #expect(engine.setPriority(.high, downloadId: "update-1"))
            } else {
                // Its next request waits at high: ahead of the purchase that came after it.
                #expect(Array(order) == ["/update1", "/purchase1"])
            }
        }
        #expect(engine.slotUse == (0, 0))
    }

    @Test("setPriority finds a download's range fetch while it runs, and nothing once it is done")
    func setPriorityReachesARunningFetch() async throws {
        let content = TransferFixture.bytes(512 << 10)
        var behavior = FaultOrigin.Behavior()
        behavior.bytesPerSecond = 128 << 10
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let length = Int64(content.count)
        let tally = Tally()
        #expect(!engine.setPriority(.high, downloadId: "update-2"))
        let fetch = Task {
            try await engine.rangeFetcher(for: "update-2", priority: .low).fetch(
                origin.url(), ranges: [0..<length], representationLength: length
            ) { _, bytes in tally.add("update", bytes.count) }
        }
        #expect(await TransferFixture.wait { tally.bytes("update") > 0 })
        // Bytes are arriving (the origin sends 4 s of them): the fetch runs as update-2.
        #expect(engine.setPriority(.high, downloadId: "update-2"))
        #expect(!engine.setPriority(.high, downloadId: "another"))
        #expect(try await fetch.value == .parts([0...(length - 1)]))
        // Once the fetcher is gone (the loop may hold its last job a moment longer), nothing.
        #expect(await TransferFixture.wait { !engine.setPriority(.normal, downloadId: "update-2") })
    }

    @Test("under transfer.maxRate a low update's range fetch leaves a normal purchase its share; raised, it takes it",
          .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func sharesFollowThePriority() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let package = TransferFixture.bytes(2 << 20)
        try package.write(to: site.appending("pack.zip"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        var configuration = TransferFixture.configuration()
        configuration.maxRate = try ByteRate(parsing: "512k")
        configuration.stallTimeout = 60
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)
        let whole = Int64(package.count)
        let ranges = [0..<(whole / 2)]

        // A purchase (normal) and an update (low): 20 to 1 of the limit while both run; the
        // update raised to high: 400 to 20. Counted only while both run, from the update's first
        // bytes (or from the raise) to the end of the first of them to finish.
        for (round, raise) in [false, true].enumerated() {
            let tally = Tally()
            let purchase = Task {
                var request = TransferFixture.request(nginx.url("pack.zip"), in: folder, name: "purchase\(round).bin", length: whole)
                request.priority = .normal
                _ = try await engine.download(request, journal: store) { progress in tally.set("purchase", progress.bytesReceived) }
                tally.set("purchase-done", 1)
                return (purchase: whole, update: tally.bytes("update"))
            }
            #expect(await TransferFixture.wait { tally.bytes("purchase") > 0 })
            let update = Task {
                _ = try await engine.rangeFetcher(for: "update-\(round)", priority: .low).fetch(
                    nginx.url("pack.zip"), ranges: ranges, representationLength: whole
                ) { _, bytes in tally.add("update", bytes.count) }
                return (purchase: tally.bytes("purchase-done") == 0 ? tally.bytes("purchase") : whole, update: whole / 2)
            }
            #expect(await TransferFixture.wait { tally.bytes("update") > 0 })
            // `courier priority update-1 high` while its range fetch runs.
            if raise { #expect(engine.setPriority(.high, downloadId: "update-\(round)")) }
            let start = (purchase: tally.bytes("purchase"), update: tally.bytes("update"))
            if !raise {
                let end = try await purchase.value
                let (purchaseBytes, updateBytes) = (end.purchase - start.purchase, end.update - start.update)
                #expect(
                    updateBytes < purchaseBytes / 4,
                    "beside a normal purchase receiving \(purchaseBytes) bytes the low update received \(updateBytes)")
                _ = try await update.value
            } else {
                let end = try await update.value
                let (purchaseBytes, updateBytes) = (end.purchase - start.purchase, end.update - start.update)
                #expect(
                    purchaseBytes < updateBytes / 4,
                    "beside the raised update receiving \(updateBytes) bytes the normal purchase received \(purchaseBytes)")
                _ = try await purchase.value
            }
        }
    }
}
