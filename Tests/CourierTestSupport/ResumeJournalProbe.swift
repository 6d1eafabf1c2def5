import Courier
import Foundation

/// Reads the transfer engine's side-file journals, so a kill -9 test kills only once some data
/// is durable (a journal says so), however slow the machine is.
public enum ResumeJournalProbe {
    /// The largest durable offset recorded by a `*.courier-journal` file in `folder` (0 if none).
    public static func durableOffset(in folder: URL) -> Int64 {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        var best: Int64 = 0
        for name in names where name.hasSuffix(".courier-journal") {
            guard let data = try? Data(contentsOf: folder.appendingPathComponent(name)),
                let journal = try? JSONDecoder().decode(ResumeJournal.self, from: data)
            else { continue }
            best = max(best, journal.durableOffset)
        }
        return best
    }

    /// Waits up to `timeout` seconds while `process` runs for a journal in `folder` to record at
    /// least `bytes` durable bytes; returns the offset seen.
    public static func waitForDurable(_ bytes: Int64, in folder: URL, while process: Process, timeout: Double = 120) -> Int64 {
        let deadline = Date().addingTimeInterval(timeout)
        var offset: Int64 = 0
        while Date() < deadline, process.isRunning {
            offset = durableOffset(in: folder)
            if offset >= bytes { return offset }
            usleep(20_000)
        }
        return offset
    }
}
