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
        var standard = ""
        standard.reserveCapacity(text.utf8.count + 3)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                standard.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "-"): standard.append("+")
            case UInt8(ascii: "_"): standard.append("/")
            default: return nil
            }
        }
        switch standard.utf8.count % 4 {
        case 0: break
        case 2: standard += "=="
        case 3: standard += "="
        default: return nil
        }
        return Data(base64Encoded: standard)
    }
}
