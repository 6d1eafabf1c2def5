import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// "Never fetch a byte twice" (issue 13), against real nginx: a killed `courier get` resumes
/// from what its partial file holds, a torn tail is fetched again from the last durable
/// checkpoint, and another URL serving the same content resumes the journal.
@Suite("Never fetch a byte twice (nginx, the built courier binary)",
       .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct NeverFetchTwiceTests {
    /// One line of nginx's default (combined) access log: the path, status and body bytes sent.
    struct Served {
        var path: String
        var status: Int
        var bodyBytes: Int64
    }

    static func served(_ nginx: NginxServer) -> [Served] {
        nginx.accessLog().compactMap { line in
            let parts = line.split(separator: "\"", omittingEmptySubsequences: false)
            guard parts.count >= 3 else { return nil }
            let request = parts[1].split(separator: " ")
            let numbers = parts[2].split(separator: " ")
            guard request.count >= 2, numbers.count >= 2, let status = Int(numbers[0]), let bytes = Int64(numbers[1]) else {
                return nil
            }
            return Served(path: String(request[1]), status: status, bodyBytes: bytes)
        }
    }

    /// The transfer settings of the issue's measurement: the default checkpoints (every second
    /// or 64 MiB), so a resume from the durable checkpoint alone would refetch up to a second.
    static func writeConfig(in folder: TemporaryDirectory) throws -> URL {
        let file = folder.appending("courier.json")
        try Data(
            #"{ "transfer": { "connectTimeout": 5, "stallTimeout": 5, "maxRetries": 4, "initialBackoff": 0.05, "diskReserve": 0 } }"#
                .utf8
        ).write(to: file)
        return file
    }

    /// The `resume-from=N` of the engine's "download starting" debug line, if the run got there.
    static func resumeOffset(inLog file: URL) -> Int64? {
        guard let text = try? String(contentsOf: file, encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.contains("download starting") {
            for field in line.split(separator: " ") where field.hasPrefix("resume-from=") {
                return Int64(field.dropFirst("resume-from=".count))
            }
        }
        return nil
    }

    @Test("kill -9 of courier get at 20 random moments: 0 bytes of the partial file fetched twice; the file verifies")
    func twentyKills() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(48 << 20, seed: 0x1313)
        let digest = TransferFixture.sha256(content)
        try content.write(to: site.appending("pack.zip"))
        let nginx = try NginxServer(root: site.url, extraLocations: "location /slow/ { alias \(site.path)/; limit_rate 6m; }")
        defer { nginx.stop() }
        let config = try Self.writeConfig(in: folder)
        let file = folder.appending("pack.zip")
        let partial = URL(fileURLWithPath: file.path + ".courier-part")
        let arguments = [
            "get", nginx.url("slow/pack.zip").absoluteString, "-o", file.path, "--sha256", digest,
            "--length", "\(content.count)", "--config", config.path, "--json",
        ]
        var fetchedTwice: Int64 = 0
        var kills = 0
        var landedMidBody = 0
        for trial in 0..<20 {
            let before = max(0, TransferFixture.fileSize(partial))
            let log = folder.appending("stderr-\(trial).txt")
            let process = try CourierBinary.start(arguments, environment: ["COURIER_LOG": "debug"], stderr: log)
            let running = TransferFixture.UncheckedProcess(process: process)
            let killed: (held: Bool, running: Bool)
            if trial % 2 == 0 {
                // A random moment in time: before the request, in the head, in the body...
                let moment = Date().addingTimeInterval(Double.random(in: 0...0.3))
                killed = await TransferFixture.signal(SIGKILL, to: process) { Date() >= moment }
            } else {
                // ...or a random byte of the body.
                let target = before + Int64.random(in: 1...(2 << 20))
                killed = await TransferFixture.signal(SIGKILL, to: process) {
                    TransferFixture.fileSize(partial) >= target || !running.process.isRunning
                }
            }
            #expect(killed.running, "trial \(trial): the download ended before the kill")
            process.waitUntilExit()
            kills += 1
            let after = max(0, TransferFixture.fileSize(partial))
            if after > before { landedMidBody += 1 }
            if let resumedAt = Self.resumeOffset(inLog: log) {
                // What the partial file held before this run and was asked for again.
                fetchedTwice += max(0, before - resumedAt)
            }
        }
        let before = max(0, TransferFixture.fileSize(partial))
        let final = try CourierBinary.run(arguments)
        #expect(final.status == 0, "\(final.stderr)")
        #expect(try Data(contentsOf: file) == content)
        let result = try #require(final.events.last)
        #expect(result["sha256"] as? String == digest)
        let resumedFrom = (result["resumedFrom"] as? NSNumber)?.int64Value ?? -1
        fetchedTwice += max(0, before - resumedFrom)

        let served = Self.served(nginx).filter { $0.path == "/slow/pack.zip" }
        let totalServed = served.reduce(Int64(0)) { $0 + $1.bodyBytes }
        print(
            "never-fetch-twice: \(kills) kills (\(landedMidBody) mid-body): \(fetchedTwice) bytes of the partial file fetched twice; "
                + "nginx served \(totalServed) bytes for \(content.count) (\(totalServed - Int64(content.count) - fetchedTwice) in flight at the kills: "
                + "socket buffers and unwritten chunks)")
        #expect(kills == 20)
        #expect(landedMidBody >= 5)
        #expect(fetchedTwice == 0)
        // Whatever nginx served more than once was lost in flight, never read back from the file.
        #expect(totalServed >= Int64(content.count))
    }

    @Test("a torn tail (bytes past the durable checkpoint that are wrong) is fetched again from the checkpoint")
    func tornTailFallsBackToTheDurableCheckpoint() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(1 << 20, seed: 77)
        let digest = TransferFixture.sha256(content)
        try content.write(to: site.appending("pack.zip"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        let config = try Self.writeConfig(in: folder)
        let file = folder.appending("pack.zip")
        let durable: Int64 = 300_000
        let torn: Int64 = 800_000
        // What a power cut can leave: the durable prefix, then a tail of zeros.
        var part = content.prefix(Int(durable))
        part.append(Data(count: Int(torn - durable)))
        try part.write(to: URL(fileURLWithPath: file.path + ".courier-part"))
        var journal = ResumeJournal(
            downloadId: "pack.zip", url: nginx.url("pack.zip"), totalLength: Int64(content.count), durableOffset: durable)
        journal.contentSHA256 = digest
        try FileResumeJournalStore(directory: folder.url).save(journal)

        let run = try CourierBinary.run([
            "get", nginx.url("pack.zip").absoluteString, "-o", file.path, "--sha256", digest, "--length", "\(content.count)",
            "--config", config.path, "--json",
        ])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Data(contentsOf: file) == content)
        let result = try #require(run.events.last)
        #expect((result["resumedFrom"] as? NSNumber)?.int64Value == torn)
        #expect((result["bytesFetched"] as? NSNumber)?.int64Value == (Int64(content.count) - torn) + (Int64(content.count) - durable))
        let served = Self.served(nginx)
        #expect(served.map(\.status) == [206, 206])
        #expect(served.map(\.bodyBytes) == [Int64(content.count) - torn, Int64(content.count) - durable])
    }

    @Test("another URL serving the same content (another port, a new token) resumes the journal; the digest decides")
    func changedURLResumes() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(12 << 20, seed: 99)
        let digest = TransferFixture.sha256(content)
        try content.write(to: site.appending("pack.zip"))
        let throttle = "location / { if ($arg_slow) { set $limit_rate 4m; } }"
        let first = try NginxServer(root: site.url, extraLocations: throttle)
        defer { first.stop() }
        let second = try NginxServer(root: site.url, extraLocations: throttle)
        defer { second.stop() }
        let config = try Self.writeConfig(in: folder)
        let file = folder.appending("pack.zip")
        let partial = URL(fileURLWithPath: file.path + ".courier-part")
        func arguments(_ url: URL) -> [String] {
            [
                "get", url.absoluteString, "-o", file.path, "--sha256", digest, "--length", "\(content.count)",
                "--config", config.path, "--json",
            ]
        }
        func runUntilKilled(_ url: URL, past bytes: Int64) async throws -> Int64 {
            let process = try CourierBinary.start(arguments(url))
            let running = TransferFixture.UncheckedProcess(process: process)
            let killed = await TransferFixture.signal(SIGKILL, to: process) {
                TransferFixture.fileSize(partial) >= bytes || !running.process.isRunning
            }
            #expect(killed.running)
            process.waitUntilExit()
            return TransferFixture.fileSize(partial)
        }
        // 1. From the first server, killed part-way.
        let afterFirst = try await runUntilKilled(URL(string: first.url("pack.zip").absoluteString + "?slow=1&token=a")!, past: 2 << 20)
        // 2. Another port: the first server's validator does not apply there; a plain Range.
        let afterSecond = try await runUntilKilled(
            URL(string: second.url("pack.zip").absoluteString + "?slow=1&token=b")!, past: afterFirst + (2 << 20))
        // 3. The same server with a new token (a signed URL): its validator applies (If-Range).
        let final = try CourierBinary.run(arguments(URL(string: second.url("pack.zip").absoluteString + "?token=c")!))
        #expect(final.status == 0, "\(final.stderr)")
        #expect(try Data(contentsOf: file) == content)
        let result = try #require(final.events.last)
        #expect((result["resumedFrom"] as? NSNumber)?.int64Value == afterSecond)
        #expect((result["bytesFetched"] as? NSNumber)?.int64Value == Int64(content.count) - afterSecond)

        let fromFirst = Self.served(first)
        let fromSecond = Self.served(second)
        #expect(fromFirst.count == 1)
        #expect(fromSecond.map(\.status) == [206, 206])
        // The second server served only what the first had not, and the final run the rest.
        let total = fromFirst.reduce(Int64(0)) { $0 + $1.bodyBytes } + fromSecond.reduce(Int64(0)) { $0 + $1.bodyBytes }
        #expect(fromSecond.last?.bodyBytes == Int64(content.count) - afterSecond)
        #expect(afterSecond > afterFirst)
        print("changed URL: \(total) bytes served by the two servers for \(content.count)")
    }

    @Test("a changed URL without the expected SHA-256 and length starts over (the URL is then the identity)")
    func changedURLWithoutIdentityStartsOver() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let site = try TemporaryDirectory()
        defer { site.remove() }
        let content = TransferFixture.bytes(1 << 20, seed: 5)
        try content.write(to: site.appending("pack.zip"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        let config = try Self.writeConfig(in: folder)
        let file = folder.appending("pack.zip")
        try content.prefix(400_000).write(to: URL(fileURLWithPath: file.path + ".courier-part"))
        let old = URL(string: nginx.url("pack.zip").absoluteString + "?token=old")!
        try FileResumeJournalStore(directory: folder.url).save(
            ResumeJournal(downloadId: "pack.zip", url: old, totalLength: Int64(content.count), durableOffset: 400_000))
        let run = try CourierBinary.run([
            "get", nginx.url("pack.zip").absoluteString, "-o", file.path, "--config", config.path, "--json",
        ])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Data(contentsOf: file) == content)
        #expect((run.events.last?["resumedFrom"] as? NSNumber)?.int64Value == 0)
    }
}
