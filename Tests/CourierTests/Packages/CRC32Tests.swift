import CCRC32
import Foundation
import Testing

/// `courier_crc32` (carry-less multiplication where the CPU has it) against a bitwise CRC-32.
@Suite("CRC-32 of zip entries")
struct CRC32Tests {
    /// The CRC-32 of zip, bit by bit (reflected, 0xEDB88320), continuing from `crc`.
    static func reference(_ crc: UInt32, _ bytes: ArraySlice<UInt8>) -> UInt32 {
        var c = ~crc
        for byte in bytes {
            c ^= UInt32(byte)
            for _ in 0..<8 { c = (c >> 1) ^ (0xEDB8_8320 & (0 &- (c & 1))) }
        }
        return ~c
    }

    @Test("known values: the check value of \"123456789\", empty input, and a zip's stored entry")
    func knownValues() {
        let digits = Array("123456789".utf8)
        #expect(courier_crc32(0, digits, digits.count) == 0xCBF4_3926)
        #expect(courier_crc32(0, nil, 0) == 0)
        #expect(courier_crc32(0x1234_5678, nil, 0) == 0x1234_5678)
        // 1 MiB of zeros, as zlib's crc32 gives it.
        let zeros = [UInt8](repeating: 0, count: 1 << 20)
        #expect(courier_crc32(0, zeros, zeros.count) == Self.reference(0, zeros[...]))
    }

    @Test("every length, alignment and starting CRC: the fast path and the table agree with the reference")
    func matchesReference() {
        var generator = SystemRandomNumberGenerator()
        let data = (0..<70_000).map { _ in UInt8.random(in: 0 ... .max, using: &generator) }
        var cases: [(offset: Int, count: Int)] = (0..<200).map { (Int.random(in: 0..<64, using: &generator), $0) }
        cases += (0..<300).map { _ in (Int.random(in: 0..<64, using: &generator), Int.random(in: 0...69_000, using: &generator)) }
        data.withUnsafeBytes { raw in
            for (offset, count) in cases {
                let seed = Bool.random(using: &generator) ? 0 : UInt32.random(in: 0 ... .max, using: &generator)
                let expected = Self.reference(seed, data[offset..<offset + count])
                let start = raw.baseAddress! + offset
                #expect(courier_crc32(seed, start, count) == expected, "offset \(offset), \(count) bytes")
                #expect(courier_crc32_portable(seed, start, count) == expected, "offset \(offset), \(count) bytes")
                // In two calls, split anywhere: the same CRC.
                let split = Int.random(in: 0...count, using: &generator)
                #expect(courier_crc32(courier_crc32(seed, start, split), start + split, count - split) == expected)
            }
        }
    }
}
