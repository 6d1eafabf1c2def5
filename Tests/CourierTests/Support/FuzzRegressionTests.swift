import CourierFuzzTargets
import Foundation
import Testing

/// Replays every input the fuzzers found (and the hand-made repro files of issue 10) through
/// the same entry points `scripts/fuzz` fuzzes: CI runs these inputs, not the fuzzers. An input
/// that traps here crashes the test process, which fails the run.
@Suite("Fuzz regressions")
struct FuzzRegressionTests {
    static let regressions = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/Regressions", isDirectory: true)

    @Test("every target has a regression folder and every folder names a target")
    func foldersMatchTargets() throws {
        let folders = try FileManager.default.contentsOfDirectory(atPath: Self.regressions.path)
            .filter { !$0.hasPrefix(".") }
        #expect(Set(folders) == Set(FuzzTargets.names), "Tests/Fuzz/Regressions holds \(folders.sorted())")
    }

    @Test("committed inputs replay without a crash", arguments: FuzzTargets.names)
    func replay(target: String) throws {
        let folder = Self.regressions.appendingPathComponent(target, isDirectory: true)
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }
        for name in names.sorted() {
            let data = try Data(contentsOf: folder.appendingPathComponent(name))
            #expect(FuzzTargets.run(target, data), "unknown target \(target)")
        }
    }
}
