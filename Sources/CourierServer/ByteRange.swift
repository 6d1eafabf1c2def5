import Foundation

/// What a `Range` request header asks of a representation of `length` bytes (RFC 9110 §14).
///
/// Only single byte ranges are served. A header that is absent, malformed, names another unit or
/// asks for several ranges is ignored (`.whole`: the full representation with 200), as RFC 9110
/// allows; a well-formed single range that starts past the end is `.unsatisfiable` (416).
public enum ByteRangeRequest: Sendable, Equatable {
    /// Serve the whole representation (200).
    case whole
    /// Serve these bytes (206); the bounds are inclusive and within the representation.
    case partial(ClosedRange<Int64>)
    /// Nothing of the representation can be served (416 with `Content-Range: bytes */length`).
    case unsatisfiable

    /// Interprets `header` against a representation of `length` bytes (a negative length is
    /// taken as 0).
    public init(header: String?, length: Int64) {
        self = Self.parse(header, length: max(0, length))
    }

    private static func parse(_ header: String?, length: Int64) -> ByteRangeRequest {
        guard let trimmed = header?.trimmingCharacters(in: .whitespaces), trimmed.lowercased().hasPrefix("bytes=") else {
            return .whole
        }
        let spec = trimmed.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .whole }
        let first = spec[..<dash].trimmingCharacters(in: .whitespaces)
        let last = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        if first.isEmpty {
            // A suffix range: the last N bytes.
            guard let suffix = digits(last) else { return .whole }
            guard suffix > 0, length > 0 else { return .unsatisfiable }
            return .partial(max(0, length - suffix)...(length - 1))
        }
        guard let start = digits(first) else { return .whole }
        var end = length - 1
        if !last.isEmpty {
            guard let value = digits(last), value >= start else { return .whole }
            end = min(value, length - 1)
        }
        guard start < length else { return .unsatisfiable }
        return .partial(start...end)
    }

    /// Interprets a `Range` header value given as raw bytes (as it came off the wire; invalid
    /// UTF-8 is replaced, which no valid range contains).
    package init(headerBytes: [UInt8], length: Int64) {
        self.init(header: String(decoding: headerBytes, as: UTF8.self), length: length)
    }

    /// The fuzz entry point: the first 8 bytes of `input` (little-endian) are the representation's
    /// length, the rest the header value. Pure; never traps.
    package static func parse(fuzzInput input: [UInt8]) -> ByteRangeRequest {
        var length: Int64 = 0
        for (index, byte) in input.prefix(8).enumerated() { length |= Int64(byte) << (8 * Int64(index)) }
        return ByteRangeRequest(headerBytes: Array(input.dropFirst(8)), length: length)
    }

    /// A non-negative decimal integer, or nil (signs, spaces inside and overflow are refused).
    private static func digits(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(text)
    }
}
