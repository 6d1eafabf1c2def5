import Foundation

/// Base64url without padding (RFC 7515 §2), as JWS uses for its three parts.
public enum Base64URL {
    /// Encodes `data` as unpadded base64url.
    public static func encode<D: DataProtocol>(_ data: D) -> String {
        Data(data).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Decodes unpadded base64url; nil on any character outside its alphabet (`+`, `/`, `=`
    /// included) or an impossible length.
    public static func decode<S: StringProtocol>(_ text: S) -> Data? {
        decode(bytes: text.utf8)
    }

    /// Decodes unpadded base64url given as UTF-8 bytes (see `decode(_:)`).
    public static func decode<C: Collection>(bytes text: C) -> Data? where C.Element == UInt8 {
        var standard: [UInt8] = []
        standard.reserveCapacity(text.count + 3)
        for byte in text {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                standard.append(byte)
            case UInt8(ascii: "-"): standard.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): standard.append(UInt8(ascii: "/"))
            default: return nil
            }
        }
        switch standard.count % 4 {
        case 0: break
        case 2: standard += [UInt8(ascii: "="), UInt8(ascii: "=")]
        case 3: standard.append(UInt8(ascii: "="))
        default: return nil
        }
        return Data(base64Encoded: Data(standard))
    }
}
