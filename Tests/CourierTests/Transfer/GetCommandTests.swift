import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("courier get, run as a user would")
struct GetCommandTests {
    @Test("downloads and verifies a file from nginx; --json prints a result document",
          .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func fullDownload() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(2 << 20 + 17)
        try content.write(to: site.appending("pack.zip"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let file = folder.appending("out/pack.zip")
        try FileManager.default.createDirectory(at: folder.appending("out"), withIntermediateDirectories: true)
        let run = try CourierBinary.run([
            "get", nginx.url("pack.zip").absoluteString, "-o", file.path, "--sha256", TransferFixture.sha256(content),
            "--length", "\(content.count)", "--json", "--config", config.path,
        ])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Data(contentsOf: file) == content)
        let result = try #require(run.events.last)
        #expect(result["event"] as? String == "result")
        #expect(result["sha256"] as? String == TransferFixture.sha256(content))
        #expect((result["length"] as? NSNumber)?.intValue == content.count)
        #expect(!FileManager.default.fileExists(atPath: file.path + ".courier-part"))
        #expect(!FileManager.default.fileExists(atPath: file.path + ".courier-journal"))
    }

    @Test("404 exits 8 (the server refused); a checksum mismatch exits 6 and leaves nothing at FILE")
    func failures() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        var behavior = FaultOrigin.Behavior()
        behavior.status = 404
        let origin = try FaultOrigin(content: TransferFixture.bytes(10_000), behavior: behavior)
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let file = folder.appending("file.bin")
        let missing = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path])
        #expect(missing.status == 8, "\(missing.stderr)")
        #expect(missing.stderr.contains("404"))
        let bad = try CourierBinary.run([
            "get", origin.url().absoluteString, "-o", file.path, "--sha256", String(repeating: "ab", count: 32),
            "--config", config.path, "--json",
        ])
        #expect(bad.status == 6)
        #expect(bad.events.last?["code"] as? String == "integrity")
        #expect(!FileManager.default.fileExists(atPath: file.path))
        let usage = try CourierBinary.run(["get"])
        #expect(usage.status == 64 || usage.status == 2)
    }

    @Test("kill -9 at random points: every run resumes at the partial file's length; the result matches")
    func killNineResumes() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(6 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.bytesPerSecond = 3 << 20
        behavior.faultyResponses = 0
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let file = folder.appending("big.bin")
        let partial = URL(fileURLWithPath: file.path + ".courier-part")
        let store = FileResumeJournalStore(directory: folder.url)
        let arguments = ["get", origin.url().absoluteString, "-o", file.path, "--config", config.path, "--json"]
        var partAtKill: [Int64] = []
        var durableAtKill: [Int64] = []
        var requestsBefore: [Int] = []
        for _ in 0..<3 {
            let before = max(0, TransferFixture.fileSize(partial))
            let target = before + Int64.random(in: 150_000...1_200_000)
            requestsBefore.append(origin.requests.count)
            let process = try CourierBinary.start(arguments)
            let running = TransferFixture.UncheckedProcess(process: process)
            let killed = await TransferFixture.signal(SIGKILL, to: process) {
                TransferFixture.fileSize(partial) >= target || !running.process.isRunning
            }
            #expect(killed.held)
            process.waitUntilExit()
            partAtKill.append(TransferFixture.fileSize(partial))
            durableAtKill.append(try store.load(downloadId: "big.bin")?.durableOffset ?? 0)
        }
        origin.setBehavior(FaultOrigin.Behavior())
        requestsBefore.append(origin.requests.count)
        let final = try CourierBinary.run(arguments)
        #expect(final.status == 0, "\(final.stderr)")
        #expect(try Data(contentsOf: file) == content)
        // Each run after a kill asked for the bytes past what the partial file held: the bytes a
        // killed process wrote are good while the OS lives, durable or not.
        let offsets = origin.requestedOffsets
        for (run, part) in partAtKill.enumerated() {
            #expect(offsets[requestsBefore[run + 1]] == Int(part))
            #expect(part >= durableAtKill[run])
        }
        #expect(partAtKill.last.map { $0 > 0 } == true)
        let result = try #require(final.events.last)
        #expect((result["resumedFrom"] as? NSNumber)?.int64Value == partAtKill.last)
        #expect((result["bytesFetched"] as? NSNumber)?.int64Value == Int64(content.count) - (partAtKill.last ?? 0))
    }

    @Test("SIGINT pauses with exit 7 and says where; running it again completes")
    func sigintPauses() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(4 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.bytesPerSecond = 2 << 20
        behavior.faultyResponses = 0
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let file = folder.appending("movie.bin")
        let partial = URL(fileURLWithPath: file.path + ".courier-part")
        let stderr = folder.appending("stderr.txt")
        let process = try CourierBinary.start(
            ["get", origin.url().absoluteString, "-o", file.path, "--config", config.path, "--sha256", TransferFixture.sha256(content)],
            stderr: stderr
        )
        let running = TransferFixture.UncheckedProcess(process: process)
        let interrupted = await TransferFixture.signal(SIGINT, to: process) {
            TransferFixture.fileSize(partial) > 400_000 || !running.process.isRunning
        }
        #expect(interrupted.held && interrupted.running)
        process.waitUntilExit()
        #expect(process.exitStatus == 7)
        let message = try String(contentsOf: stderr, encoding: .utf8)
        #expect(message.contains("paused at byte"))
        #expect(!FileManager.default.fileExists(atPath: file.path))
        origin.setBehavior(FaultOrigin.Behavior())
        let resumed = try CourierBinary.run(
            ["get", origin.url().absoluteString, "-o", file.path, "--config", config.path, "--sha256", TransferFixture.sha256(content), "--json"]
        )
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(((resumed.events.last?["resumedFrom"] as? NSNumber)?.intValue ?? 0) > 0)
        #expect(try Data(contentsOf: file) == content)
    }

    @Test("--input-file downloads a list into a folder, several at a time",
          .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func inputFile() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        var list = ""
        var contents: [String: Data] = [:]
        for index in 0..<30 {
            let data = TransferFixture.bytes(10_000 + index * 1_111, seed: UInt64(index + 7))
            try data.write(to: site.appending("item\(index).dat"))
            contents["item\(index).dat"] = data
            list += nginx.url("item\(index).dat").absoluteString + "\n"
        }
        try Data(list.utf8).write(to: folder.appending("list.txt"))
        let config = try TransferFixture.writeConfigFile(in: folder)
        let run = try CourierBinary.run([
            "get", "--input-file", folder.appending("list.txt").path, "-d", folder.appending("out").path, "-j", "4",
            "--config", config.path,
        ])
        #expect(run.status == 0, "\(run.stderr)")
        for (name, data) in contents {
            #expect(try Data(contentsOf: folder.appending("out/\(name)")) == data)
        }
    }

    @Test("disk full on a small tmpfs: exit 4 with the partial data kept, then resume once space is free")
    func diskFull() throws {
        guard getuid() == 0 else {
            print("diskFull skipped: mounting a tmpfs needs root")
            return
        }
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let mountPoint = folder.appending("small")
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        let mounted = try Shell.run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mountPoint.path])
        guard mounted.status == 0 else {
            print("diskFull skipped: cannot mount a tmpfs here (\(mounted.stderr.trimmingCharacters(in: .whitespacesAndNewlines)))")
            return
        }
        defer { _ = try? Shell.run("/bin/umount", [mountPoint.path]) }
        let content = TransferFixture.bytes(2 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.omitLength = true
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let file = mountPoint.appendingPathComponent("pack.zip")
        let arguments = ["get", origin.url().absoluteString, "-o", file.path, "--config", config.path]

        // Known length that cannot fit: refused before a byte is requested.
        let preflight = try CourierBinary.run(arguments + ["--length", "\(content.count)"])
        #expect(preflight.status == 4, "\(preflight.stderr)")
        #expect(origin.requests.isEmpty)

        // Unknown length: ENOSPC mid-way pauses with the partial data kept.
        let full = try CourierBinary.run(arguments)
        #expect(full.status == 4, "\(full.stderr)")
        let partial = URL(fileURLWithPath: file.path + ".courier-part")
        let journal = try FileResumeJournalStore(directory: mountPoint).load(downloadId: "pack.zip")
        #expect((journal?.durableOffset ?? 0) > 0)
        #expect(TransferFixture.fileSize(partial) >= journal?.durableOffset ?? 0)

        let grown = try Shell.run("/bin/mount", ["-o", "remount,size=8m", mountPoint.path])
        #expect(grown.status == 0)
        // Every byte that reached the partial file is kept: the resume starts at its length.
        let partLength = TransferFixture.fileSize(partial)
        let resumed = try CourierBinary.run(arguments + ["--json"])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(try Data(contentsOf: file) == content)
        #expect((resumed.events.last?["resumedFrom"] as? NSNumber)?.int64Value == partLength)
    }
}
