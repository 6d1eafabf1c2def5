import Courier
import CourierTestSupport
import Crypto
import Foundation
import Logging

/// Fixtures shared by the transfer tests.
enum TransferFixture {
    /// Deterministic pseudo-random bytes (xorshift), so a failure can be reproduced.
    static func bytes(_ count: Int, seed: UInt64 = 0x9E37_79B9_7F4A_7C15) -> Data {
        var state = seed | 1
        var data = Data(count: count)
        data.withUnsafeMutableBytes { raw in
            let bytes = raw.bindMemory(to: UInt8.self)
            var index = 0
            while index < count {
                state ^= state << 13
                state ^= state >> 7
                state ^= state << 17
                var word = state
                for _ in 0..<8 where index < count {
                    bytes[index] = UInt8(truncatingIfNeeded: word)
                    word >>= 8
                    index += 1
                }
            }
        }
        return data
    }

    static func sha256(_ data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    /// A configuration with short timeouts and frequent checkpoints, so the tests stay quick.
    static func configuration() -> TransferConfiguration {
        var configuration = TransferConfiguration()
        configuration.connectTimeout = 5
        configuration.stallTimeout = 2
        configuration.maxRetries = 4
        configuration.initialBackoff = 0.05
        configuration.maxBackoff = 1.5
        configuration.diskReserve = 0
        configuration.checkpointInterval = 0.1
        configuration.checkpointBytes = 256 << 10
        return configuration
    }

    /// The same settings as a `--config` file for the CLI.
    static func writeConfigFile(in folder: TemporaryDirectory, stallTimeout: Double = 2) throws -> URL {
        let text = """
            { "transfer": { "connectTimeout": 5, "stallTimeout": \(stallTimeout), "maxRetries": 4,
                            "initialBackoff": 0.05, "maxBackoff": 1.5, "diskReserve": 0,
                            "checkpointInterval": 0.1, "checkpointBytes": 262144 } }
            """
        let file = folder.appending("courier.json")
        try Data(text.utf8).write(to: file)
        return file
    }

    static func engine(_ configuration: TransferConfiguration = configuration()) throws -> TransferEngine {
        try TransferEngine(configuration: configuration, logger: Logger(label: "courier.test"))
    }

    static func request(_ url: URL, in folder: TemporaryDirectory, name: String = "file.bin", sha256: String? = nil, length: Int64? = nil) -> DownloadRequest {
        DownloadRequest(
            id: name,
            url: url,
            destination: folder.appending(name),
            expectedLength: length,
            expectedSHA256: sha256
        )
    }

    /// Waits until `condition` holds, up to `timeout` seconds; returns whether it did.
    /// Waits for `condition` without blocking a thread of Swift's cooperative pool (which has
    /// as many threads as cores: two here), so the work under test can make progress.
    static func wait(timeout: Double = 30, _ condition: () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(nanoseconds: 5_000_000)
        }
        return condition()
    }

    /// Sends `signal` to `process` as soon as `condition` holds, polled every 2 ms on a thread of
    /// its own for at most `timeout` seconds (then sent anyway). Returns whether the condition
    /// held and whether the process was still running when the signal went.
    ///
    /// For a test that must interrupt a process mid-transfer: polled by a task (`wait`), the
    /// moment came when the task next had a thread of the cooperative pool (two here), which
    /// other tests hold while their processes run. Beside the prestage suites it came after a
    /// throttled 4-6 MB download had completed, and there was nothing left to interrupt.
    static func signal(
        _ signal: Int32, to process: Process, timeout: Double = 60, when condition: @escaping @Sendable () -> Bool
    ) async -> (held: Bool, running: Bool) {
        let target = UncheckedProcess(process: process)
        return await withCheckedContinuation { continuation in
            let poller = Thread {
                let deadline = Date().addingTimeInterval(timeout)
                var held = condition()
                while !held && Date() < deadline {
                    usleep(2_000)
                    held = condition()
                }
                let running = target.process.isRunning
                kill(target.process.processIdentifier, signal)
                continuation.resume(returning: (held, running))
            }
            poller.name = "TransferFixture.signal"
            poller.start()
        }
    }

    /// A `Process` handed to the polling thread of `signal` (it reads `isRunning` and the pid).
    struct UncheckedProcess: @unchecked Sendable {
        let process: Process
    }

    static func fileSize(_ url: URL) -> Int64 {
        ((try? FileManager.default.attributesOfItem(atPath: url.path))?[.size] as? NSNumber)?.int64Value ?? -1
    }
}

/// Collects progress reports from any thread.
final class ProgressLog: @unchecked Sendable {  // @unchecked: guarded by `lock`.
    private let lock = NSLock()
    private var items: [TransferProgress] = []

    func record(_ progress: TransferProgress) {
        lock.lock()
        items.append(progress)
        lock.unlock()
    }

    var reports: [TransferProgress] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }
}
