@testable import Courier
import CourierTestSupport
import Foundation
import Synchronization
import Testing

/// The receive buffer of a low priority download's connection (`LowPriorityWindow`), seen as
/// the kernel keeps it (`ss`'s skmem rb) while the engine downloads from nginx on loopback.
/// The assertions wait for a state; none times anything.
@Suite("Low priority receive window on a real connection", .serialized)
struct LowPriorityWindowTests {
    /// The kernel's receive buffers of the established connections to 127.0.0.1:`port` (the
    /// client's sides).
    static func receiveBuffers(toPort port: Int) -> [Int] {
        guard let result = try? Shell.run("/usr/bin/ss", ["-tnmH", "state", "established", "dst", "127.0.0.1:\(port)"]),
            result.status == 0
        else { return [] }
        return result.stdout.split(separator: "\n").compactMap { line in
            guard let range = line.range(of: #"rb[0-9]+"#, options: .regularExpression) else { return nil }
            return Int(line[range].dropFirst(2))
        }
    }

    final class Received: Sendable {
        private let bytes = Mutex<Int64>(0)
        func set(_ value: Int64) { bytes.withLock { $0 = value } }
        var value: Int64 { bytes.withLock { $0 } }
    }

    @Test("a low download's connection starts at the ceiling, is sized down to what the measured capacity needs, and back up when raised; a normal one is left to the kernel")
    func sizedToTheCapacity() async throws {
        try #require(NginxServer.isAvailable)
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/ss"))
        let site = try TemporaryDirectory()
        defer { site.remove() }
        try TransferFixture.bytes(32 << 20).write(to: site.appending("big.bin"))
        // 512 KiB/s: the capacity the limiter measures, alone on loopback (a round trip of well
        // under a millisecond): the window needed is far under the 32 KiB floor.
        let nginx = try NginxServer(root: site.url, extraLocations: "limit_rate 512k;")
        defer { nginx.stop() }
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        var configuration = TransferFixture.configuration()
        configuration.stallTimeout = 30
        #expect(configuration.lowPriorityReceiveBuffer == 256 << 10)
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        let store = FileResumeJournalStore(directory: folder.url)

        var low = TransferFixture.request(nginx.url("big.bin"), in: folder, name: "low.bin")
        low.priority = .low
        let lowTask = Task { try await engine.download(low, journal: store) { _ in } }
        #expect(
            await TransferFixture.wait { Self.receiveBuffers(toPort: nginx.port) == [LowPriorityWindow.floor] },
            "\(Self.receiveBuffers(toPort: nginx.port))")
        // Raised while it runs: its connection gets the ceiling back (it was made with it).
        #expect(engine.setPriority(.normal, downloadId: low.id))
        #expect(
            await TransferFixture.wait { Self.receiveBuffers(toPort: nginx.port) == [256 << 10] },
            "\(Self.receiveBuffers(toPort: nginx.port))")
        lowTask.cancel()
        _ = try? await lowTask.value
        #expect(await TransferFixture.wait { Self.receiveBuffers(toPort: nginx.port).isEmpty })

        // A normal download: autotuning, which starts at tcp_rmem's default and only grows.
        var normal = TransferFixture.request(nginx.url("big.bin"), in: folder, name: "normal.bin")
        normal.priority = .normal
        let received = Received()
        let normalTask = Task { try await engine.download(normal, journal: store) { received.set($0.bytesReceived) } }
        #expect(await TransferFixture.wait { received.value >= 1 << 20 })
        let buffers = Self.receiveBuffers(toPort: nginx.port)
        #expect(buffers.count == 1 && buffers.allSatisfy { $0 > 64 << 10 }, "\(buffers)")
        normalTask.cancel()
        _ = try? await normalTask.value
    }
}
