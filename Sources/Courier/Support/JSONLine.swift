import Foundation

/// One JSON object as the bytes of one NDJSON line (no newline), written by hand: byte for byte
/// what `JSONSerialization` writes with `.sortedKeys` and `.withoutEscapingSlashes`, for the
/// objects the CLI's events are made of, at a fraction of its cost (docs/json.md, docs/scaling.md).
///
/// Covered: values that are `String`, `Bool`, `Int`, `Int64`, `Int32` or `UInt64`, under keys of
/// ASCII letters only, no two of them equal ignoring case (then JSONSerialization's key order,
/// numeric, case-insensitive, is the lowercase byte order). `encode` returns nil for anything
/// else (a Double, an array, a nested object, another key), and the caller uses
/// `JSONSerialization`.
public enum JSONLine {
    public static func encode(_ object: [String: Any]) -> [UInt8]? {
        var keys: [(lowercased: [UInt8], key: String)] = []
        keys.reserveCapacity(object.count)
        for key in object.keys {
            var lowercased: [UInt8] = []
            lowercased.reserveCapacity(key.utf8.count)
            for byte in key.utf8 {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"): lowercased.append(byte)
                case UInt8(ascii: "A")...UInt8(ascii: "Z"): lowercased.append(byte | 0x20)
                default: return nil
                }
            }
            if lowercased.isEmpty { return nil }
            keys.append((lowercased, key))
        }
        keys.sort { $0.lowercased.lexicographicallyPrecedes($1.lowercased) }
        var line: [UInt8] = [UInt8(ascii: "{")]
        line.reserveCapacity(256)
        for (index, entry) in keys.enumerated() {
            if index > 0 {
                // Two keys equal but for case: their order is JSONSerialization's business.
                if entry.lowercased == keys[index - 1].lowercased { return nil }
                line.append(UInt8(ascii: ","))
            }
            appendString(entry.key, to: &line)
            line.append(UInt8(ascii: ":"))
            guard let value = object[entry.key], appendScalar(value, to: &line) else { return nil }
        }
        line.append(UInt8(ascii: "}"))
        return line
    }

    /// Appends a string, integer or boolean; false (nothing appended) for any other value.
    private static func appendScalar(_ value: Any, to line: inout [UInt8]) -> Bool {
        // Exact types only: a bridged NSNumber (which JSONSerialization may print as a boolean
        // or a floating-point number) is left to JSONSerialization.
        let type = ObjectIdentifier(Swift.type(of: value))
        if type == ObjectIdentifier(String.self), let text = value as? String {
            appendString(text, to: &line)
        } else if type == ObjectIdentifier(Bool.self), let flag = value as? Bool {
            line.append(contentsOf: flag ? Array("true".utf8) : Array("false".utf8))
        } else if type == ObjectIdentifier(Int.self), let number = value as? Int {
            line.append(contentsOf: String(number).utf8)
        } else if type == ObjectIdentifier(Int64.self), let number = value as? Int64 {
            line.append(contentsOf: String(number).utf8)
        } else if type == ObjectIdentifier(Int32.self), let number = value as? Int32 {
            line.append(contentsOf: String(number).utf8)
        } else if type == ObjectIdentifier(UInt64.self), let number = value as? UInt64 {
            line.append(contentsOf: String(number).utf8)
        } else {
            return false
        }
        return true
    }

    /// A JSON string as JSONSerialization and JSONEncoder write it: `"` and `\` escaped,
    /// `\b \f \n \r \t` by name, the other control characters below U+0020 as `\u00xx`
    /// (lowercase), everything else (`/`, DEL, any non-ASCII character) as its UTF-8 bytes. The
    /// one string escaper of every hand-written JSON: these lines, package manifests, server logs.
    package static func appendString(_ text: String, to line: inout [UInt8]) {
        line.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { bytes in
            // Runs of bytes that need no escape go in whole (a byte-by-byte append cost 4 ms
            // of a 500-package catalog).
            var start = 0
            for index in bytes.indices {
                let byte = bytes[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                if start < index { line.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index])) }
                appendEscape(byte, to: &line)
                start = index + 1
            }
            if start < bytes.count { line.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...])) }
        }
        line.append(UInt8(ascii: "\""))
    }

    /// The escape of a byte below U+0020, `"` or `\`.
    private static func appendEscape(_ byte: UInt8, to line: inout [UInt8]) {
        let hex: StaticString = "0123456789abcdef"
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"):
            line.append(UInt8(ascii: "\\"))
            line.append(byte)
        case 0x08: line.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
        case 0x09: line.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
        case 0x0A: line.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
        case 0x0C: line.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
        case 0x0D: line.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
        default:
            line.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
            hex.withUTF8Buffer { digits in
                line.append(digits[Int(byte >> 4)])
                line.append(digits[Int(byte & 0x0F)])
            }
        }
    }
}
