import Foundation
import Testing

@testable import Courier
import CourierTestSupport

/// The multipart/byteranges parser (untrusted bytes) and range requests against nginx and the
/// fault-injecting origin.
@Suite("MultipartByteRanges")
struct MultipartByteRangesTests {
    static let type = "multipart/byteranges; boundary=00000000001"

    /// A body as nginx frames it.
    static func body(_ parts: [(Int64, [UInt8])], total: Int64, boundary: String = "00000000001", closing: Bool = true) -> [UInt8] {
        var text: [UInt8] = []
        for (offset, data) in parts {
            text += Array("\r\n--\(boundary)\r\nContent-Type: application/zip\r\nContent-Range: bytes \(offset)-\(offset + Int64(data.count) - 1)/\(total)\r\n\r\n".utf8)
            text += data
        }
        if closing { text += Array("\r\n--\(boundary)--\r\n".utf8) }
        return text
    }

    @Test("parts reach the sink at their offsets, whatever the data holds and however the body is split")
    func parsesParts() throws {
        // The data holds a delimiter-like line: lengths come from Content-Range, not a search.
        let first = Array("ab\r\n--00000000001\r\ncd".utf8)
        let second: [UInt8] = [0, 1, 2, 13, 10]
        let body = Self.body([(10, first), (100, second)], total: 200)
        let whole = try MultipartByteRangesParser.parse(body: body, contentType: Self.type, representationLength: 200)
        #expect(whole.parts == [10...(10 + Int64(first.count) - 1), 100...104])
        #expect(whole.data.map(\.0) == [10, 100])
        #expect(whole.data.map(\.1) == [first, second])

        // One byte at a time.
        var parser = try #require(MultipartByteRangesParser(contentType: Self.type, representationLength: 200))
        var received: [Int64: UInt8] = [:]
        for byte in body {
            try [byte].withUnsafeBytes { raw in
                try parser.feed(raw) { offset, bytes in
                    for (index, value) in bytes.enumerated() { received[offset + Int64(index)] = value }
                }
            }
        }
        try parser.finish()
        #expect(received.count == first.count + second.count)
        #expect(received[100] == 0 && received[104] == 10)
    }

    @Test("quoted boundaries and parameters are read; other types are not multipart")
    func boundaries() {
        #expect(MultipartByteRangesParser.boundary(contentType: "multipart/byteranges; boundary=\"a b\"") == "a b")
        #expect(MultipartByteRangesParser.boundary(contentType: "Multipart/ByteRanges;charset=x; Boundary=xyz") == "xyz")
        #expect(MultipartByteRangesParser.boundary(contentType: "application/zip") == nil)
        #expect(MultipartByteRangesParser.boundary(contentType: "multipart/byteranges") == nil)
        #expect(MultipartByteRangesParser.boundary(contentType: "multipart/byteranges; boundary=" + String(repeating: "x", count: 71)) == nil)
    }

    static var malformedBodies: [(String, [UInt8])] {
        var cases: [(String, [UInt8])] = []
        cases.append(("truncated before the closing delimiter", body([(0, [1, 2, 3])], total: 10, closing: false)))
        cases.append(("a part longer than its Content-Range", Array("\r\n--00000000001\r\nContent-Range: bytes 0-1/10\r\n\r\nabc\r\n--00000000001--\r\n".utf8)))
        cases.append(("another representation's length", body([(0, [1, 2, 3])], total: 11)))
        cases.append(("a range past the representation", Array("--00000000001\r\nContent-Range: bytes 5-20/10\r\n\r\n".utf8)))
        cases.append(("no Content-Range", Array("--00000000001\r\nContent-Type: x\r\n\r\nabc".utf8)))
        cases.append(("an overflowing number", Array("--00000000001\r\nContent-Range: bytes 0-99999999999999999999999/10\r\n\r\n".utf8)))
        cases.append(("reversed bounds", Array("--00000000001\r\nContent-Range: bytes 5-1/10\r\n\r\n".utf8)))
        cases.append(("no delimiter at all", [UInt8](repeating: UInt8(ascii: "a"), count: 6000)))
        let header: [UInt8] = Array("--00000000001\r\n".utf8)
        cases.append(("an endless header line", header + [UInt8](repeating: UInt8(ascii: "h"), count: 5000)))
        cases.append(("no part", Array("--00000000001--\r\n".utf8)))
        return cases
    }

    @Test("malformed bodies are integrity errors, never traps")
    func malformed() {
        for (name, body) in Self.malformedBodies {
            #expect(throws: CourierError.self, "\(name)") {
                _ = try MultipartByteRangesParser.parse(body: body, contentType: Self.type, representationLength: 10)
            }
        }
    }

    @Test("the fuzz target survives its seeds and random bytes")
    func fuzzTarget() {
        var generator = SplitMix(seed: 42)
        let seeds: [[UInt8]] = [[], Self.body([(0, [1, 2])], total: 10), Array("--00000000001\r\n".utf8)]
        for seed in seeds { MultipartByteRangesParser.fuzz(Data(seed)) }
        for _ in 0..<300 {
            var bytes = Self.body([(Int64(generator.next() % 5), [1, 2, 3])], total: 10)
            for _ in 0..<4 { bytes[Int(generator.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: generator.next()) }
            MultipartByteRangesParser.fuzz(Data(bytes))
        }
    }

    @Test("nginx answers several ranges in one multipart response; the fetcher hands each byte over once")
    func nginxMultiRange() async throws {
        try #require(NginxServer.isAvailable)
        let site = try TemporaryDirectory()
        defer { site.remove() }
        var generator = SplitMix(seed: 7)
        let content = (0..<300_000).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
        try Data(content).write(to: site.appending("p.bin"))
        let nginx = try NginxServer(root: site.url)
        defer { nginx.stop() }
        let fetcher = try RangeFetcher()
        defer { fetcher.shutdown() }
        let sink = Received()
        let ranges: [Range<Int64>] = [5..<100, 1000..<70_000, 299_990..<300_000]
        let answer = try await fetcher.fetch(nginx.url("p.bin"), ranges: ranges, representationLength: 300_000) { offset, bytes in
            sink.add(offset, bytes)
        }
        #expect(answer == .parts([5...99, 1000...69_999, 299_990...299_999]))
        #expect(sink.bytes.count == 95 + 69_000 + 10)
        #expect(sink.bytes.allSatisfy { content[Int($0.key)] == $0.value })

        let single = Received()
        let one = try await fetcher.fetch(nginx.url("p.bin"), ranges: [10..<20], representationLength: 300_000) { single.add($0, $1) }
        #expect(one == .parts([10...19]))
        #expect(single.bytes.count == 10)

        // Another length than the file's: refused.
        await #expect(throws: CourierError.self) {
            _ = try await fetcher.fetch(nginx.url("p.bin"), ranges: [10..<20], representationLength: 400_000) { _, _ in }
        }
    }

    @Test("an origin answering 200 to a range request is reported at its first byte, not read")
    func originIgnoringRanges() async throws {
        let content = Data(repeating: 7, count: 4 << 20)
        let origin = try FaultOrigin(content: content)
        defer { origin.stop() }
        var behavior = FaultOrigin.Behavior()
        behavior.ignoreRanges = true
        behavior.bytesPerSecond = 8 << 20
        origin.setBehavior(behavior)
        let fetcher = try RangeFetcher()
        defer { fetcher.shutdown() }
        let answer = try await fetcher.fetch(origin.url(), ranges: [0..<10, 100..<200], representationLength: Int64(content.count)) { _, _ in
            Issue.record("no byte of a 200 reaches the sink")
        }
        #expect(answer == .wholeRepresentation)
        #expect(origin.bodyBytesSent < content.count / 2)
    }
}

/// Bytes received by a sink, by offset (the sink runs on the network thread).
final class Received: @unchecked Sendable {  // @unchecked: `lock` guards `bytes`.
    private let lock = NSLock()
    private var storage: [Int64: UInt8] = [:]
    private var duplicates = 0

    func add(_ offset: Int64, _ data: UnsafeRawBufferPointer) {
        lock.lock()
        for (index, byte) in data.enumerated() {
            if storage.updateValue(byte, forKey: offset + Int64(index)) != nil { duplicates += 1 }
        }
        lock.unlock()
    }

    var bytes: [Int64: UInt8] {
        lock.lock()
        defer { lock.unlock() }
        precondition(duplicates == 0, "a byte was handed over twice")
        return storage
    }
}
