@testable import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 10, transfer side: each test replays an attack that worked on 1dcba96.
@Suite("Transfer hardening: hostile lists, bodies, journals and planted symlinks")
struct TransferHardeningTests {
    // MARK: --input-file names

    @Test("--input-file: a URL whose decoded name leaves DIR is refused; the victim is untouched, good lines download")
    func inputFileTraversal() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(40_000)
        let origin = try FaultOrigin(content: content)
        defer { origin.stop() }
        let victim = folder.appending("victim")
        try Data("precious".utf8).write(to: victim)
        let port = origin.url().port ?? 0
        let list = [
            origin.url("/p/good1.bin").absoluteString,
            "http://127.0.0.1:\(port)/x/..%2F..%2Fvictim",
            "# a comment",
            "http://127.0.0.1:\(port)/x/bad%0Aname",
            origin.url("/q/good2.bin").absoluteString,
            "http://127.0.0.1:\(port)/x/%2E%2E",
        ].joined(separator: "\n")
        let listFile = folder.appending("list.txt")
        try Data(list.utf8).write(to: listFile)
        let config = try TransferFixture.writeConfigFile(in: folder)
        let directory = folder.appending("a/b")
        let run = try CourierBinary.run([
            "get", "--input-file", listFile.path, "-d", directory.path, "--config", config.path,
        ])
        #expect(run.status == 2, "\(run.stderr)")
        #expect(try Data(contentsOf: victim) == Data("precious".utf8))
        #expect(!FileManager.default.fileExists(atPath: victim.path + ".courier-part"))
        #expect(run.stderr.contains("list.txt:2: refused http://127.0.0.1:\(port)/x/..%2F..%2Fvictim"), "\(run.stderr)")
        #expect(run.stderr.contains("list.txt:4: refused"), "\(run.stderr)")
        #expect(run.stderr.contains("list.txt:6: refused"), "\(run.stderr)")
        #expect(try Data(contentsOf: directory.appendingPathComponent("good1.bin")) == content)
        #expect(try Data(contentsOf: directory.appendingPathComponent("good2.bin")) == content)
        // Only the good lines reached the network; nothing but them is in DIR or beside it.
        #expect(origin.requests.count == 2)
        let saved = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(saved == ["good1.bin", "good2.bin"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted() == ["a", "courier.json", "list.txt", "victim"])
    }

    @Test("--input-file: a second line saving to the same name is refused on its own; --json reports it")
    func inputFileDuplicate() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(20_000)
        let origin = try FaultOrigin(content: content)
        defer { origin.stop() }
        let listFile = folder.appending("list.txt")
        try Data("\(origin.url("/a/same.bin"))\n\(origin.url("/b/same.bin"))\n".utf8).write(to: listFile)
        let config = try TransferFixture.writeConfigFile(in: folder)
        let directory = folder.appending("out")
        let run = try CourierBinary.run([
            "get", "--input-file", listFile.path, "-d", directory.path, "--config", config.path, "--json",
        ])
        #expect(run.status == 2, "\(run.stderr)")
        let refused = run.events.filter { $0["event"] as? String == "refused" }
        #expect(refused.count == 1)
        #expect((refused.first?["line"] as? NSNumber)?.intValue == 2)
        #expect(run.events.last?["code"] as? String == "usage")
        #expect(try Data(contentsOf: directory.appendingPathComponent("same.bin")) == content)
    }

    @Test("journal side files: one component, letters, digits and .-_ kept, anything else percent-encoded")
    func journalFileNames() {
        let store = FileResumeJournalStore(directory: URL(fileURLWithPath: "/j", isDirectory: true))
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: ".-_")
        for id in ["com.example.pack0001-ab12_CD", "../../etc/passwd", "a b/c%d", "caf\u{e9}-\u{1F600}", "", "..", "x\u{0}y"] {
            let name = store.journalFile(downloadId: id).lastPathComponent
            // The same names as Foundation's encoding with the same allowed set (journals of earlier runs).
            #expect(name == (id.addingPercentEncoding(withAllowedCharacters: allowed) ?? id) + ".courier-journal")
            #expect(!name.contains("/"))
            #expect(store.journalFile(downloadId: id).deletingLastPathComponent().path == "/j")
        }
    }

    @Test("file names derived from URLs are one safe component")
    func fileNames() throws {
        for bad in ["", ".", "..", "a/b", "../x", "a\u{0}b", "a\nb", "a\u{1B}[2Jb", "a\u{85}b", "x.courier-part",
            "x.courier-journal", String(repeating: "n", count: 256)]
        {
            #expect(throws: CourierError.self) { try DownloadFileName.check(bad) }
        }
        for good in ["pack.zip", ".hidden", "a b", "naïve.bin", "..x", "x.."] {
            #expect(try DownloadFileName.check(good) == good)
        }
        let folder = URL(fileURLWithPath: "/tmp/dir")
        #expect(throws: CourierError.self) {
            try DownloadFileName.destination(for: URL(string: "http://h/x/..%2F..%2Fetc%2Fpasswd")!, in: folder)
        }
        #expect(throws: CourierError.self) { try DownloadFileName.destination(for: URL(string: "http://h/")!, in: folder) }
        #expect(try DownloadFileName.destination(for: URL(string: "http://h/a/b%20c.zip?x=1")!, in: folder).path == "/tmp/dir/b c.zip")
        #expect(DownloadFileName.escaped("a\r\nb") == "a\\u{d}\\u{a}b")
    }

    // MARK: Bodies

    @Test("a chunked body longer than --length stops at once: exit 6, a bounded overrun, nothing kept")
    func chunkedBodyPastExpectedLength() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(1000)
        var behavior = FaultOrigin.Behavior()
        behavior.chunked = true
        behavior.extraBodyBytes = 8 << 20
        behavior.bytesPerSecond = 2 << 20
        behavior.faultyResponses = .max
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let file = folder.appending("pack.zip")
        let run = try CourierBinary.run([
            "get", origin.url().absoluteString, "-o", file.path, "--length", "1000", "--config", config.path, "--json",
        ])
        #expect(run.status == 6, "\(run.stderr)")
        #expect(run.events.last?["code"] as? String == "integrity")
        #expect(!run.events.contains { $0["event"] as? String == "result" })
        // Every response has ended (the client hung up), so the count is final.
        #expect(await TransferFixture.wait(timeout: 30) { origin.responsesCompleted == origin.requests.count })
        #expect(origin.requests.count == 1)
        #expect(origin.bodyBytesSent - 1000 < 1 << 20, "the origin sent \(origin.bodyBytesSent) bytes")
        #expect(!FileManager.default.fileExists(atPath: file.path))
        #expect(!FileManager.default.fileExists(atPath: file.path + ".courier-part"))
        #expect(!FileManager.default.fileExists(atPath: file.path + ".courier-journal"))
    }

    @Test("a chunked body longer than the Content-Length it announced stops at once (engine)")
    func chunkedBodyPastAnnouncedLength() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        var behavior = FaultOrigin.Behavior()
        behavior.chunked = true
        behavior.extraBodyBytes = 8 << 20
        behavior.bytesPerSecond = 2 << 20
        behavior.faultyResponses = .max
        // Both headers: libcurl follows the chunked framing; the length is what was announced.
        behavior.replaceHeaders = [("Content-Length", "1000")]
        let origin = try FaultOrigin(content: TransferFixture.bytes(1000), behavior: behavior)
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let request = TransferFixture.request(origin.url(), in: folder)
        await #expect {
            try await engine.download(request, journal: FileResumeJournalStore(directory: folder.url)) { _ in }
        } throws: { ($0 as? CourierError)?.code == .integrity }
        #expect(await TransferFixture.wait(timeout: 30) { origin.responsesCompleted == origin.requests.count })
        #expect(origin.bodyBytesSent - 1000 < 1 << 20, "the origin sent \(origin.bodyBytesSent) bytes")
        #expect(!FileManager.default.fileExists(atPath: request.destination.path))
        #expect(!FileManager.default.fileExists(atPath: request.partialFile.path))
    }

    @Test("Content-Length 2^63-1 is refused as integrity (exit 6), not an overflow trap in the space check")
    func hugeContentLength() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        var behavior = FaultOrigin.Behavior()
        behavior.replaceHeaders = [("Content-Length", "\(Int64.max)")]
        behavior.faultyResponses = .max
        let origin = try FaultOrigin(content: TransferFixture.bytes(1000), behavior: behavior)
        defer { origin.stop() }
        let config = folder.appending("courier.json")
        try Data(#"{ "transfer": { "connectTimeout": 5, "stallTimeout": 2, "maxRetries": 1, "diskReserve": 1048576 } }"#.utf8)
            .write(to: config)
        let file = folder.appending("pack.zip")
        let run = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path])
        #expect(run.status == 6, "\(run.stderr)")
        #expect(run.stderr.contains("impossible number"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: file.path))
    }

    @Test("numbers from the network: digits only, at most 2^62, overflow is integrity")
    func networkNumbers() {
        #expect(HTTPNumber.parse("0") == 0)
        #expect(HTTPNumber.parse("4611686018427387904") == 1 << 62)
        for bad in ["", "+5", "-5", " 5", "5 ", "1e3", "4611686018427387905", "9223372036854775807", "99999999999999999999999"] {
            #expect(HTTPNumber.parse(bad) == nil, "\(bad)")
        }
        #expect(ContentRange("bytes -5-10/100") == nil)
        #expect(ContentRange("bytes +5-10/100") == nil)
        #expect(ContentRange("bytes 5-10/") == nil)
        #expect(ContentRange("bytes 0-9223372036854775807/*") == nil)
        #expect(ContentRange.unsatisfiedTotal("bytes */+77") == nil)
        let url = URL(string: "https://cdn.example.com/pack.zip")!
        func isIntegrity(_ decision: ResponseDecision) -> Bool {
            if case .fail(let error) = decision { return error.code == .integrity }
            return false
        }
        for range in ["bytes 0-9223372036854775807/*", "bytes 500-9223372036854775806/9223372036854775807",
            "bytes 500-999/99999999999999999999999999"]
        {
            let head = DownloadResponseHead(status: 206, contentLength: 500, contentRange: range)
            #expect(isIntegrity(ResponseDecision.decide(head, requestedOffset: 500, knownTotal: nil, url: url)), "\(range)")
        }
        var head = DownloadResponseHead(status: 200)
        head.record(name: "content-length", value: "9223372036854775807")
        #expect(head.contentLength == nil)
        #expect(isIntegrity(ResponseDecision.decide(head, requestedOffset: 0, knownTotal: nil, url: url)))
        let unsatisfied = DownloadResponseHead(status: 416, contentRange: "bytes */18446744073709551616")
        #expect(isIntegrity(ResponseDecision.decide(unsatisfied, requestedOffset: 500, knownTotal: nil, url: url)))
        #expect(ResponseDecision.parseRetryAfter("nan", now: Date()) == nil)
        #expect(ResponseDecision.parseRetryAfter("-5", now: Date()) == nil)
        #expect(SpaceCheck.sum(.max, 1) == .max)
        #expect(SpaceCheck.sum(-4, 3) == 3)
    }

    @Test("no Content-Length on a small tmpfs: the reserve is enforced as the body grows (exit 4, partial kept)")
    func growingBodyKeepsTheReserve() throws {
        guard getuid() == 0 else {
            print("growingBodyKeepsTheReserve skipped: mounting a tmpfs needs root")
            return
        }
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let mountPoint = folder.appending("small")
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        let mounted = try Shell.run("/bin/mount", ["-t", "tmpfs", "-o", "size=8m", "tmpfs", mountPoint.path])
        guard mounted.status == 0 else {
            print("growingBodyKeepsTheReserve skipped: cannot mount a tmpfs here (\(mounted.stderr))")
            return
        }
        defer { _ = try? Shell.run("/bin/umount", [mountPoint.path]) }
        // 6 MiB fit on the 8 MiB filesystem, but not with a 5 MiB reserve kept free.
        let content = TransferFixture.bytes(6 << 20)
        var behavior = FaultOrigin.Behavior()
        behavior.chunked = true
        behavior.faultyResponses = .max
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        let config = folder.appending("courier.json")
        try Data(
            #"{ "transfer": { "connectTimeout": 5, "stallTimeout": 2, "maxRetries": 1, "diskReserve": 5242880, "checkpointInterval": 0.1, "checkpointBytes": 262144 } }"#
                .utf8
        ).write(to: config)
        let file = mountPoint.appendingPathComponent("pack.zip")
        let run = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path])
        #expect(run.status == 4, "\(run.stderr)")
        #expect(run.stderr.contains("not enough disk space"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: file.path))
        let partial = TransferFixture.fileSize(URL(fileURLWithPath: file.path + ".courier-part"))
        #expect(partial >= 0 && partial <= 3 << 20, "partial file of \(partial) bytes")
    }

    // MARK: Journals

    /// Writes FILE.courier-part with `prefix` and FILE.courier-journal with `journal`, as a
    /// tampering user or process could.
    private func plant(_ journal: ResumeJournal, prefix: Data, file: URL) throws {
        try prefix.write(to: URL(fileURLWithPath: file.path + ".courier-part"))
        let encoder = JSONEncoder()
        try encoder.encode(journal).write(to: URL(fileURLWithPath: file.path + ".courier-journal"))
    }

    @Test("a journal whose ETag holds CR LF injects no header: it is discarded and the download starts over")
    func journalHeaderInjection() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(300_000)
        let origin = try FaultOrigin(content: content)
        defer { origin.stop() }
        let file = folder.appending("pack.zip")
        try plant(
            ResumeJournal(
                downloadId: "pack.zip", url: origin.url(), etag: "\"v1\"\r\nX-Injected: yes", totalLength: Int64(content.count),
                durableOffset: 100_000),
            prefix: content.prefix(100_000), file: file)
        let config = try TransferFixture.writeConfigFile(in: folder)
        let run = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path, "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Data(contentsOf: file) == content)
        #expect(!origin.requests.isEmpty)
        for request in origin.requests {
            #expect(!request.rawHead.lowercased().contains("x-injected"), "\(request.rawHead)")
        }
        #expect(origin.requestedOffsets.first == 0)
        #expect((run.events.last?["resumedFrom"] as? NSNumber)?.intValue == 0)
    }

    @Test("a journal with a negative durable offset does not wedge the download: it completes")
    func journalNegativeOffset() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(200_000)
        let origin = try FaultOrigin(content: content)
        defer { origin.stop() }
        let file = folder.appending("pack.zip")
        try plant(
            ResumeJournal(downloadId: "pack.zip", url: origin.url(), etag: "\"v1\"", totalLength: Int64(content.count), durableOffset: -5),
            prefix: content.prefix(1000), file: file)
        let config = try TransferFixture.writeConfigFile(in: folder)
        let run = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Data(contentsOf: file) == content)
    }

    @Test("symlinks planted at the partial file, the journal and its temporary file are never written through")
    func plantedSymlinks() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(1 << 20)
        let origin = try FaultOrigin(content: content)
        defer { origin.stop() }
        let file = folder.appending("pack.zip")
        var targets: [URL: Data] = [:]
        for suffix in [".courier-part", ".courier-journal", ".courier-journal.tmp"] {
            let target = folder.appending("target\(suffix)")
            let precious = Data("precious \(suffix)".utf8)
            try precious.write(to: target)
            targets[target] = precious
            try FileManager.default.createSymbolicLink(atPath: file.path + suffix, withDestinationPath: target.path)
        }
        let config = try TransferFixture.writeConfigFile(in: folder)
        let run = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path])
        #expect(run.status == 0, "\(run.stderr)")
        for (target, precious) in targets {
            #expect(try Data(contentsOf: target) == precious, "\(target.lastPathComponent) was written through")
        }
        let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
        #expect(attributes[.type] as? FileAttributeType == .typeRegular)
        #expect(try Data(contentsOf: file) == content)
    }

    @Test("ResumeJournal validation: the file loader and the database loader both discard a tampered journal")
    func journalValidation() throws {
        let url = URL(string: "https://cdn.example.com/pack.zip")!
        let good = ResumeJournal(downloadId: "d", url: url, etag: "\"v1\"", lastModified: "Wed, 21 Oct 2026 07:28:00 GMT", totalLength: 10, durableOffset: 4)
        #expect(good.validated() == good)
        var bad: [ResumeJournal] = []
        for change in [
            { (j: inout ResumeJournal) in j.etag = "\"v1\"\r\nX: 1" }, { $0.lastModified = "x\ny" }, { $0.etag = "a\u{0}" },
            { $0.etag = "" }, { $0.durableOffset = -1 }, { $0.totalLength = -1 }, { $0.durableOffset = 11 },
            { $0.durableOffset = .max; $0.totalLength = nil }, { $0.url = URL(string: "file:///etc/passwd")! },
            { $0.url = URL(string: "ftp://h/x")! },
        ] as [(inout ResumeJournal) -> Void] {
            var journal = good
            change(&journal)
            bad.append(journal)
            #expect(journal.validated() == nil, "\(journal)")
        }
        let encoder = JSONEncoder()
        #expect(try ResumeJournal.decodeJournalFile(encoder.encode(good), downloadId: "d") == good)
        #expect(throws: CourierError.self) { try ResumeJournal.decodeJournalFile(encoder.encode(good), downloadId: "other") }
        #expect(throws: CourierError.self) { try ResumeJournal.decodeJournalFile(Data("{".utf8)) }
        for journal in bad {
            #expect(throws: CourierError.self) { try ResumeJournal.decodeJournalFile(encoder.encode(journal)) }
        }

        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let files = FileResumeJournalStore(directory: folder.url)
        try files.save(bad[0])
        #expect(try files.load(downloadId: "d") == nil)
        try files.save(good)
        #expect(try files.load(downloadId: "d") == good)

        let queue = try QueueFixtures.queue(folder)
        let transaction = QueueFixtures.transaction("7000")
        try queue.add([transaction], content: [QueueFixtures.content(for: transaction)])
        let download = try #require(try queue.downloads(transactionId: "7000").first)
        let rows = DatabaseJournalStore(store: queue.store)
        var stored = try #require(try rows.load(downloadId: download.id))
        stored.etag = "\"v1\"\r\nX-Injected: yes"
        try rows.save(stored)
        #expect(try rows.load(downloadId: download.id) == nil)
        stored.etag = "\"v1\""
        stored.durableOffset = -7
        try rows.save(stored)
        #expect(try rows.load(downloadId: download.id) == nil)
    }

    // MARK: libcurl options

    @Test("a security option libcurl refuses is an internal error (exit 1), not a silent default")
    func refusedCurlOption() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let origin = try FaultOrigin(content: TransferFixture.bytes(1000))
        defer { origin.stop() }
        let config = folder.appending("courier.json")
        // libcurl refuses CURLOPT_MAXREDIRS below -1 (CURLE_BAD_FUNCTION_ARGUMENT).
        try Data(#"{ "transfer": { "connectTimeout": 5, "maxRetries": 1, "diskReserve": 0, "maxRedirects": -2 } }"#.utf8)
            .write(to: config)
        let file = folder.appending("pack.zip")
        let run = try CourierBinary.run(["get", origin.url().absoluteString, "-o", file.path, "--config", config.path])
        #expect(run.status == 1, "\(run.stderr)")
        #expect(run.stderr.contains("CURLOPT_MAXREDIRS"), "\(run.stderr)")
        #expect(origin.requests.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: file.path))
    }
}
