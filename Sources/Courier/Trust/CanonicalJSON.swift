import Foundation

/// A JSON value as TUF metadata needs it: integers kept exact (never through `Double`), objects
/// kept as their members in document order (no merging of keys that Swift's `String` would call
/// equal), and a canonical form, the OLPC canonical JSON that securesystemslib signs.
public indirect enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// An integer that fits in 64 bits.
    case integer(Int64)
    /// A number with a fraction or an exponent, kept as its text: canonical JSON has no such
    /// numbers, so a signed document that holds one cannot be verified.
    case fraction(String)
    case string(String)
    case array([JSONValue])
    /// The members in document order; `JSONParser` refuses a document that repeats a key.
    case object([(key: String, value: JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.integer(let a), .integer(let b)): return a == b
        case (.fraction(let a), .fraction(let b)): return a == b
        case (.string(let a), .string(let b)): return Array(a.utf8) == Array(b.utf8)
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)):
            return a.count == b.count
                && zip(a, b).allSatisfy { Array($0.key.utf8) == Array($1.key.utf8) && $0.value == $1.value }
        default: return false
        }
    }

    /// The member named `key` of an object (compared byte for byte), else nil.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        let wanted = Array(key.utf8)
        return members.first { $0.key.utf8.elementsEqual(wanted) }?.value
    }
}

/// A strict JSON parser (RFC 8259) for untrusted metadata: refuses duplicate keys, lone
/// surrogates, control characters in strings, integers beyond 64 bits, nesting deeper than
/// `maxDepth` and anything after the top-level value.
public struct JSONParser {
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public let offset: Int
        public let reason: String
        public var description: String { "invalid JSON at byte \(offset): \(reason)" }
    }

    public static let maxDepth = 64

    private let bytes: [UInt8]
    private var index = 0

    private init(_ data: Data) { bytes = [UInt8](data) }

    /// Parses one JSON document.
    public static func parse(_ data: Data) throws -> JSONValue {
        var parser = JSONParser(data)
        parser.skipSpace()
        let value = try parser.value(depth: 0)
        parser.skipSpace()
        guard parser.index == parser.bytes.count else { throw parser.failure("data after the document") }
        return value
    }

    private func failure(_ reason: String) -> Failure { Failure(offset: index, reason: reason) }

    private mutating func skipSpace() {
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
    }

    private mutating func value(depth: Int) throws -> JSONValue {
        guard depth < Self.maxDepth else { throw failure("nested deeper than \(Self.maxDepth)") }
        guard index < bytes.count else { throw failure("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object(depth: depth)
        case UInt8(ascii: "["): return try array(depth: depth)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw failure("unexpected character")
        }
    }

    private mutating func literal(_ word: String) throws {
        let expected = Array(word.utf8)
        guard index + expected.count <= bytes.count, Array(bytes[index..<index + expected.count]) == expected else {
            throw failure("unexpected literal")
        }
        index += expected.count
    }

    private mutating func object(depth: Int) throws -> JSONValue {
        index += 1
        var members: [(key: String, value: JSONValue)] = []
        var seen = Set<[UInt8]>()
        skipSpace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure("expected a key") }
            let key = try string()
            guard seen.insert(Array(key.utf8)).inserted else { throw failure("duplicate key \"\(key)\"") }
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure("expected ':'") }
            index += 1
            skipSpace()
            members.append((key, try value(depth: depth + 1)))
            skipSpace()
            guard index < bytes.count else { throw failure("unexpected end") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "}") else { throw failure("expected ',' or '}'") }
            index += 1
            return .object(members)
        }
    }

    private mutating func array(depth: Int) throws -> JSONValue {
        index += 1
        var elements: [JSONValue] = []
        skipSpace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipSpace()
            elements.append(try value(depth: depth + 1))
            skipSpace()
            guard index < bytes.count else { throw failure("unexpected end") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "]") else { throw failure("expected ',' or ']'") }
            index += 1
            return .array(elements)
        }
    }

    private mutating func hex4() throws -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure("short \\u escape") }
        var value: UInt32 = 0
        for byte in bytes[index..<index + 4] {
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw failure("bad \\u escape")
            }
            value = value << 4 | digit
        }
        index += 4
        return value
    }

    private mutating func string() throws -> String {
        index += 1
        var out: [UInt8] = []
        while true {
            guard index < bytes.count else { throw failure("unterminated string") }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let text = String(validating: out, as: UTF8.self) else { throw failure("string is not UTF-8") }
                return text
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw failure("unterminated escape") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard index + 2 <= bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw failure("lone surrogate")
                        }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw failure("lone surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw failure("lone surrogate")
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw failure("bad \\u escape") }
                    out.append(contentsOf: Array(String(Character(unicode)).utf8))
                default: throw failure("unknown escape")
                }
            case 0x00..<0x20:
                throw failure("control character in a string")
            default:
                out.append(byte)
                index += 1
            }
        }
    }

    private mutating func number() throws -> JSONValue {
        let start = index
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        func digits(_ parser: inout JSONParser) -> Int {
            let from = parser.index
            while parser.index < parser.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(parser.bytes[parser.index]) {
                parser.index += 1
            }
            return parser.index - from
        }
        let integerDigits = digits(&self)
        guard integerDigits > 0 else { throw failure("bad number") }
        if integerDigits > 1, bytes[index - integerDigits] == UInt8(ascii: "0") { throw failure("leading zero") }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            isInteger = false
            guard digits(&self) > 0 else { throw failure("bad fraction") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            isInteger = false
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits(&self) > 0 else { throw failure("bad exponent") }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if isInteger {
            guard let value = Int64(text) else { throw failure("integer out of range") }
            return .integer(value)
        }
        return .fraction(text)
    }
}

/// Canonical JSON as securesystemslib's `encode_canonical` writes it: no whitespace, object keys
/// sorted by code point, strings with only `\` and `"` escaped (everything else as UTF-8), integers
/// in decimal, no other numbers.
public enum CanonicalJSON {
    public struct NotCanonicalizable: Error, CustomStringConvertible, Sendable {
        public var description: String { "metadata holds a number canonical JSON cannot encode" }
    }

    public static func encode(_ value: JSONValue) throws -> Data {
        var out: [UInt8] = []
        out.reserveCapacity(4096)
        try write(value, into: &out)
        return Data(out)
    }

    private static func write(_ value: JSONValue, into out: inout [UInt8]) throws {
        switch value {
        case .null: out.append(contentsOf: Array("null".utf8))
        case .bool(let flag): out.append(contentsOf: Array((flag ? "true" : "false").utf8))
        case .integer(let number): out.append(contentsOf: Array(String(number).utf8))
        case .fraction: throw NotCanonicalizable()
        case .string(let text): writeString(text, into: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                if position > 0 { out.append(UInt8(ascii: ",")) }
                try write(element, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            let sorted = members.sorted { a, b in a.key.unicodeScalars.lexicographicallyPrecedes(b.key.unicodeScalars) { x, y in x.value < y.value } }
            for (position, member) in sorted.enumerated() {
                if position > 0 { out.append(UInt8(ascii: ",")) }
                writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                try write(member.value, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func writeString(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
            out.append(byte)
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Pretty JSON for files people read (the publisher's metadata): the same values, sorted
    /// keys, two-space indentation; strings escaped as canonical JSON does plus control characters.
    public static func pretty(_ value: JSONValue) throws -> Data {
        var out: [UInt8] = []
        try writePretty(value, indent: 0, into: &out)
        out.append(0x0A)
        return Data(out)
    }

    private static func writePretty(_ value: JSONValue, indent: Int, into out: inout [UInt8]) throws {
        let pad = { (level: Int) in [UInt8](repeating: 0x20, count: level * 2) }
        switch value {
        case .array(let elements) where !elements.isEmpty:
            out.append(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                out.append(contentsOf: Array((position > 0 ? ",\n" : "\n").utf8))
                out.append(contentsOf: pad(indent + 1))
                try writePretty(element, indent: indent + 1, into: &out)
            }
            out.append(0x0A)
            out.append(contentsOf: pad(indent))
            out.append(UInt8(ascii: "]"))
        case .object(let members) where !members.isEmpty:
            out.append(UInt8(ascii: "{"))
            let sorted = members.sorted { a, b in a.key.unicodeScalars.lexicographicallyPrecedes(b.key.unicodeScalars) { x, y in x.value < y.value } }
            for (position, member) in sorted.enumerated() {
                out.append(contentsOf: Array((position > 0 ? ",\n" : "\n").utf8))
                out.append(contentsOf: pad(indent + 1))
                writeString(member.key, into: &out)
                out.append(contentsOf: Array(": ".utf8))
                try writePretty(member.value, indent: indent + 1, into: &out)
            }
            out.append(0x0A)
            out.append(contentsOf: pad(indent))
            out.append(UInt8(ascii: "}"))
        case .string(let text):
            // Control characters are not valid raw in JSON text.
            out.append(UInt8(ascii: "\""))
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                    out.append(UInt8(ascii: "\\"))
                    out.append(byte)
                case 0x00..<0x20:
                    let digits = Array("0123456789abcdef".utf8)
                    out.append(contentsOf: Array("\\u00".utf8) + [digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
                default: out.append(byte)
                }
            }
            out.append(UInt8(ascii: "\""))
        default:
            try write(value, into: &out)
        }
    }
}
