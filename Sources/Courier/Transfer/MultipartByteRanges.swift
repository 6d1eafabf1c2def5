import Foundation

/// A streaming parser of a `multipart/byteranges` body (RFC 9110 §14.6), the answer of an
/// origin to a request for several ranges.
///
/// Fed the body in whatever pieces the network delivers (`feed`), it hands each part's bytes
/// to the sink with their offset in the representation, without buffering a part: memory stays
/// bounded by `maxLineLength` whatever the body's size. Each part's length comes from its
/// `Content-Range`, not from a search for the boundary, so the data may hold anything.
///
/// The body is untrusted: a part without a valid `Content-Range`, a range outside the
/// representation (`representationLength`), a complete length that differs from it, too many
/// parts, over-long lines or header blocks, a missing delimiter after a part, or a body that
/// ends before the closing delimiter are `CourierError(.integrity)`; no arithmetic on a received
/// number can overflow (`ContentRange` bounds them). `finish()` says whether the body was whole.
package struct MultipartByteRangesParser {
    /// The longest line (preamble, delimiter or header field) accepted.
    package static let maxLineLength = 1024
    /// The most header fields in one part.
    package static let maxHeaderFields = 16
    /// The most bytes of preamble before the first delimiter.
    package static let maxPreambleLength = 4096

    private enum State {
        case preamble
        case headers
        case body(offset: Int64, remaining: Int64)
        /// After a part's data: the CRLF that ends it, then a delimiter.
        case afterBody(sawBlankLine: Bool)
        case epilogue
    }

    private let delimiter: [UInt8]
    private let representationLength: Int64
    private let maxParts: Int
    private var state = State.preamble
    private var line: [UInt8] = []
    private var preambleBytes = 0
    private var headerFields = 0
    private var partRange: ContentRange?
    /// The ranges of the parts seen so far, in order (first...last, inclusive bounds as sent).
    package private(set) var parts: [ClosedRange<Int64>] = []

    /// A parser for the body of a response whose `Content-Type` was `contentType`; nil unless it
    /// is `multipart/byteranges` with a usable boundary (1 to 70 characters).
    package init?(contentType: String, representationLength: Int64, maxParts: Int = 10_000) {
        guard let boundary = Self.boundary(contentType: contentType), representationLength >= 0 else { return nil }
        delimiter = Array("--".utf8) + Array(boundary.utf8)
        self.representationLength = representationLength
        self.maxParts = max(maxParts, 1)
    }

    /// The boundary parameter of a `multipart/byteranges` media type, unquoted; nil otherwise.
    package static func boundary(contentType: String) -> String? {
        let parameters = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let type = parameters.first, type.lowercased() == "multipart/byteranges" else { return nil }
        for parameter in parameters.dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1).map(String.init)
            guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces).lowercased() == "boundary" else { continue }
            var value = pair[1].trimmingCharacters(in: .whitespaces)
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 {
                value = String(value.dropFirst().dropLast())
            }
            let allowed = value.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") }
            guard (1...70).contains(value.utf8.count), allowed, !value.hasSuffix(" ") else { return nil }
            return value
        }
        return nil
    }

    /// Whether the closing delimiter was seen.
    package var isComplete: Bool {
        if case .epilogue = state { return true }
        return false
    }

    /// Parses `bytes`, calling `sink(offset, data)` with each piece of part data and its offset in
    /// the representation. Throws `integrity` on a malformed body (and rethrows the sink's errors).
    package mutating func feed(
        _ bytes: UnsafeRawBufferPointer, sink: (Int64, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        var index = 0
        while index < bytes.count {
            switch state {
            case .body(let offset, let remaining):
                let take = Int(min(Int64(bytes.count - index), remaining))
                try sink(offset, UnsafeRawBufferPointer(rebasing: bytes[index..<(index + take)]))
                index += take
                state = remaining == Int64(take) ? .afterBody(sawBlankLine: false) : .body(offset: offset + Int64(take), remaining: remaining - Int64(take))
            case .epilogue:
                return  // anything after the closing delimiter is ignored
            default:
                let byte = bytes[index]
                index += 1
                if case .preamble = state {
                    preambleBytes += 1
                    guard preambleBytes <= Self.maxPreambleLength + Self.maxLineLength else {
                        throw Self.bad("no delimiter in the first \(Self.maxPreambleLength) bytes")
                    }
                }
                if byte == UInt8(ascii: "\n") {
                    if line.last == UInt8(ascii: "\r") { line.removeLast() }
                    let complete = line
                    line.removeAll(keepingCapacity: true)
                    try handle(line: complete)
                } else {
                    guard line.count < Self.maxLineLength else { throw Self.bad("a line is longer than \(Self.maxLineLength) bytes") }
                    line.append(byte)
                }
            }
        }
    }

    /// Ends the body: throws `integrity` unless the closing delimiter came.
    package func finish() throws {
        guard isComplete else {
            throw Self.bad("the body ended before its closing delimiter (\(parts.count) parts received)")
        }
    }

    private mutating func handle(line: [UInt8]) throws {
        switch state {
        case .preamble:
            if let closing = delimiterKind(line) {
                guard !closing else { throw Self.bad("the body holds no part") }
                state = .headers
                headerFields = 0
                partRange = nil
            }
        case .headers:
            if line.isEmpty {
                guard let range = partRange else { throw Self.bad("a part has no Content-Range") }
                guard range.total == representationLength else {
                    throw Self.bad("a part's Content-Range \(range.first)-\(range.last)/\(range.total.map { "\($0)" } ?? "*") is not of the \(representationLength)-byte representation")
                }
                guard parts.count < maxParts else { throw Self.bad("more than \(maxParts) parts") }
                parts.append(range.first...range.last)
                state = .body(offset: range.first, remaining: range.last - range.first + 1)
                return
            }
            headerFields += 1
            guard headerFields <= Self.maxHeaderFields else { throw Self.bad("a part has more than \(Self.maxHeaderFields) header fields") }
            let text = String(decoding: line, as: UTF8.self)
            guard let colon = text.firstIndex(of: ":") else { throw Self.bad("a part header is not a field") }
            let name = text[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
            if name == "content-range" {
                guard partRange == nil else { throw Self.bad("a part has two Content-Range fields") }
                guard let range = ContentRange(String(text[text.index(after: colon)...])) else {
                    throw Self.bad("a part's Content-Range is not bytes first-last/length")
                }
                partRange = range
            }
        case .afterBody(let sawBlankLine):
            if line.isEmpty && !sawBlankLine {
                state = .afterBody(sawBlankLine: true)
                return
            }
            guard sawBlankLine, let closing = delimiterKind(line) else {
                throw Self.bad("a part is not followed by a delimiter (its data is longer than its Content-Range)")
            }
            if closing {
                state = .epilogue
            } else {
                state = .headers
                headerFields = 0
                partRange = nil
            }
        case .body, .epilogue:
            break
        }
    }

    /// nil if `line` is not a delimiter; false for `--boundary`, true for `--boundary--`
    /// (trailing spaces and tabs allowed).
    private func delimiterKind(_ line: [UInt8]) -> Bool? {
        guard line.count >= delimiter.count, Array(line[0..<delimiter.count]) == delimiter else { return nil }
        var rest = line[delimiter.count...]
        var closing = false
        if rest.starts(with: [UInt8(ascii: "-"), UInt8(ascii: "-")]) {
            closing = true
            rest = rest.dropFirst(2)
        }
        guard rest.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) else { return nil }
        return closing
    }

    private static func bad(_ reason: String) -> CourierError {
        CourierError(.integrity, "the multipart/byteranges answer is malformed: \(reason)")
    }

    /// The parser as a pure function of a whole body (a test and fuzz entry point): the parts'
    /// ranges and the data bytes in order, or the error.
    package static func parse(
        body: [UInt8], contentType: String, representationLength: Int64
    ) throws -> (parts: [ClosedRange<Int64>], data: [(Int64, [UInt8])]) {
        guard var parser = MultipartByteRangesParser(contentType: contentType, representationLength: representationLength) else {
            throw CourierError(.integrity, "not a multipart/byteranges type with a boundary")
        }
        var data: [(Int64, [UInt8])] = []
        try body.withUnsafeBytes { raw in
            try parser.feed(raw) { offset, bytes in
                precondition(offset >= 0 && offset + Int64(bytes.count) <= representationLength, "data outside the representation")
                data.append((offset, Array(bytes)))
            }
        }
        try parser.finish()
        return (parser.parts, data)
    }
}

extension MultipartByteRangesParser {
    /// The fuzz target (`multipart`): the input's first line is the `Content-Type`, the rest the
    /// body, parsed against a few representation lengths; every byte handed over must lie inside
    /// the representation, and the parts must be whole ranges of it.
    package static func fuzz(_ data: Data) {
        let bytes = [UInt8](data)
        let split = bytes.firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
        let contentType = split < bytes.count ? String(decoding: bytes[..<split], as: UTF8.self) : "multipart/byteranges; boundary=00000000001"
        let body = split < bytes.count ? Array(bytes[(split + 1)...]) : bytes
        for length: Int64 in [0, 10, 1000, 1 << 40] {
            guard let result = try? parse(body: body, contentType: contentType, representationLength: length) else { continue }
            for part in result.parts {
                precondition(part.lowerBound >= 0 && part.upperBound < length, "a part outside the representation")
            }
        }
    }
}
