import Courier
import CourierTestSupport
import Foundation
import Testing

/// `file:` URLs (the packages of a catalog given as a file path) go through the transfer stage's
/// local copy: the same partial file, journal, SHA-256 and resume as a network download.
@Suite("local file downloads (the built courier binary)")
struct LocalFileTransferTests {
    @Test("a copy interrupted at a checkpoint resumes there, and a journal of an http URL for the same content is resumed too")
    func resumes() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(1 << 20, seed: 28)
        let digest = TransferFixture.sha256(content)
        let source = folder.appending("pack.zip")
        try content.write(to: source)
        for previous in [source, URL(string: "http://127.0.0.1:9/pack.zip")!] {
            let file = folder.appending("copy.zip")
            try? FileManager.default.removeItem(at: file)
            let durable: Int64 = 300_000
            try content.prefix(Int(durable)).write(to: URL(fileURLWithPath: file.path + ".courier-part"))
            var journal = ResumeJournal(
                downloadId: "copy.zip", url: previous, totalLength: Int64(content.count), durableOffset: durable)
            journal.contentSHA256 = digest
            try FileResumeJournalStore(directory: folder.url).save(journal)
            let run = try CourierBinary.run([
                "get", source.absoluteString, "-o", file.path, "--sha256", digest, "--length", "\(content.count)", "--json",
            ])
            #expect(run.status == 0, "\(previous): \(run.stdout)\(run.stderr)")
            #expect(try Data(contentsOf: file) == content)
            let result = try #require(run.events.last)
            #expect((result["resumedFrom"] as? NSNumber)?.int64Value == durable, "\(previous): \(result)")
            #expect((result["bytesFetched"] as? NSNumber)?.int64Value == Int64(content.count) - durable, "\(previous): \(result)")
        }
    }

    @Test("a local file of another length than the catalog names fails integrity (exit 6); a missing one says so")
    func refusesWrongFiles() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(10_000, seed: 3)
        let source = folder.appending("pack.zip")
        try content.write(to: source)
        let short = try CourierBinary.run([
            "get", source.absoluteString, "-o", folder.appending("a.zip").path, "--length", "9999",
        ])
        #expect(short.status == 6, "\(short.stderr)")
        let wrongDigest = try CourierBinary.run([
            "get", source.absoluteString, "-o", folder.appending("b.zip").path, "--sha256", String(repeating: "0", count: 64),
        ])
        #expect(wrongDigest.status == 6, "\(wrongDigest.stderr)")
        #expect(!FileManager.default.fileExists(atPath: folder.appending("b.zip").path))
        let missing = try CourierBinary.run(["get", folder.appending("none.zip").absoluteString, "-o", folder.appending("c.zip").path])
        #expect(missing.status != 0)
        #expect(missing.stderr.contains("none.zip"), "\(missing.stderr)")
    }
}
