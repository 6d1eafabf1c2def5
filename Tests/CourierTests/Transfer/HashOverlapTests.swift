import Courier
import CourierTestSupport
import Foundation
import Testing

/// Hashing runs on a queue of its own, beside the writer (`ChunkHasher`): the digest must still
/// cover every byte once, in order, whatever the chunking, and a resume must hash the kept prefix
/// from the disk. The test configuration hands 256 KiB chunks to the writer (its high water is
/// 1 MiB), so the sizes below sit on and around both boundaries.
@Suite("Verified downloads with hashing beside writing")
struct HashOverlapTests {
    @Test(
        "every size around the chunk and high-water boundaries is verified, byte for byte",
        arguments: [0, 1, 65_536, 256 << 10, (256 << 10) + 1, (3 * (256 << 10)) - 1, 1 << 20, (1 << 20) + 1, (4 << 20) + 7])
    func sizes(size: Int) async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(size, seed: UInt64(size) + 3)
        let origin = try FaultOrigin(content: content)
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let request = TransferFixture.request(
            origin.url(), in: folder, sha256: TransferFixture.sha256(content), length: Int64(content.count))
        let result = try await engine.download(request, journal: FileResumeJournalStore(directory: folder.url)) { _ in }
        #expect(result.sha256 == TransferFixture.sha256(content))
        #expect(result.length == Int64(size))
        #expect(result.bytesFetched == Int64(size))
        #expect(try Data(contentsOf: request.destination) == content)
    }

    @Test(
        "one flipped byte anywhere (first, chunk edges, last) is refused with integrity and leaves nothing",
        arguments: [0, (256 << 10) - 1, 256 << 10, (1 << 20) + 5, (2 << 20) - 1])
    func flippedByte(at position: Int) async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(2 << 20, seed: 77)
        var served = content
        served[position] ^= 0x01
        let origin = try FaultOrigin(content: served)
        defer { origin.stop() }
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let request = TransferFixture.request(
            origin.url(), in: folder, sha256: TransferFixture.sha256(content), length: Int64(content.count))
        let error = await #expect(throws: CourierError.self) {
            try await engine.download(request, journal: FileResumeJournalStore(directory: folder.url)) { _ in }
        }
        #expect(error?.code == .integrity)
        #expect(error?.exitCode == 6)
        #expect(!FileManager.default.fileExists(atPath: request.destination.path))
        #expect(!FileManager.default.fileExists(atPath: request.partialFile.path))
    }

    @Test("a download stopped mid-chunk resumes in a new call: the kept prefix is hashed from the disk")
    func resumeHashesThePrefix() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(3 << 20, seed: 91)
        var behavior = FaultOrigin.Behavior()
        behavior.dropAfterBytes = 700_001
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        var configuration = TransferFixture.configuration()
        configuration.maxRetries = 0
        let store = FileResumeJournalStore(directory: folder.url)
        let request = TransferFixture.request(
            origin.url(), in: folder, sha256: TransferFixture.sha256(content), length: Int64(content.count))
        do {
            let engine = try TransferFixture.engine(configuration)
            defer { engine.shutdown() }
            let error = await #expect(throws: CourierError.self) {
                try await engine.download(request, journal: store) { _ in }
            }
            #expect(error?.code == .network)
        }
        #expect(TransferFixture.fileSize(request.partialFile) == 700_001)
        origin.setBehavior(FaultOrigin.Behavior())
        let engine = try TransferFixture.engine()
        defer { engine.shutdown() }
        let result = try await engine.download(request, journal: store) { _ in }
        #expect(result.resumedFrom == 700_001)
        #expect(result.bytesFetched == Int64(content.count - 700_001))
        #expect(result.sha256 == TransferFixture.sha256(content))
        #expect(try Data(contentsOf: request.destination) == content)
    }

    @Test("a kept prefix changed on disk while stopped fails the resumed download's SHA-256")
    func changedPrefixIsCaught() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let content = TransferFixture.bytes(2 << 20, seed: 92)
        var behavior = FaultOrigin.Behavior()
        behavior.dropAfterBytes = 600_000
        let origin = try FaultOrigin(content: content, behavior: behavior)
        defer { origin.stop() }
        var configuration = TransferFixture.configuration()
        configuration.maxRetries = 0
        let store = FileResumeJournalStore(directory: folder.url)
        let request = TransferFixture.request(
            origin.url(), in: folder, sha256: TransferFixture.sha256(content), length: Int64(content.count))
        let engine = try TransferFixture.engine(configuration)
        defer { engine.shutdown() }
        _ = await #expect(throws: CourierError.self) {
            try await engine.download(request, journal: store) { _ in }
        }
        // Flip one byte of the kept prefix, as a disk error would.
        let handle = try FileHandle(forUpdating: request.partialFile)
        try handle.seek(toOffset: 1234)
        let byte = try #require(try handle.read(upToCount: 1)).first ?? 0
        try handle.seek(toOffset: 1234)
        try handle.write(contentsOf: Data([byte ^ 0x80]))
        try handle.close()
        origin.setBehavior(FaultOrigin.Behavior())
        let error = await #expect(throws: CourierError.self) {
            try await engine.download(request, journal: store) { _ in }
        }
        #expect(error?.code == .integrity)
        #expect(!FileManager.default.fileExists(atPath: request.destination.path))
    }
}
