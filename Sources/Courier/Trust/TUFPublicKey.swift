import Crypto
import Foundation
import _CryptoExtras

/// A public key as TUF metadata lists it (`keytype`, `scheme`, `keyval.public`).
///
/// Schemes: `ed25519` (hex public key), `ecdsa-sha2-nistp256` (PEM public key, DER signature),
/// `rsassa-pss-sha256` and `rsa-pkcs1v15-sha256` (PEM public key). A key of another scheme is
/// kept (root may list it) but no signature by it is ever valid. Key ids are not recomputed from
/// the key (TUF 1.0.x lets a repository choose them); a signature counts only when its key id is
/// one the role names and the key under that id verifies it.
public struct TUFPublicKey: Sendable {
    public let keyID: String
    public let keyType: String
    public let scheme: String
    public let publicValue: String
    /// The whole key object as metadata gave it (unrecognized fields kept, for re-publishing).
    public let json: JSONValue

    init(keyID: String, _ value: JSONValue) throws {
        let context = "key \(keyID)"
        let fields = try TUFFields(value, context)
        self.keyID = keyID
        keyType = try fields.string("keytype")
        scheme = try fields.string("scheme")
        let keyval = try TUFFields(try fields.required("keyval"), "\(context).keyval")
        publicValue = try keyval.string("public")
        json = value
    }

    /// A key object for `keytype`/`scheme`/`public`, with its id the SHA-256 of its canonical
    /// JSON (how securesystemslib names keys).
    public init(keyType: String, scheme: String, publicValue: String) throws {
        let json = JSONValue.object([
            ("keytype", .string(keyType)), ("scheme", .string(scheme)),
            ("keyval", .object([("public", .string(publicValue))])),
        ])
        self.keyType = keyType
        self.scheme = scheme
        self.publicValue = publicValue
        self.json = json
        keyID = TUFHex.encode(SHA256.hash(data: try CanonicalJSON.encode(json)))
    }

    /// Whether `hex` is a valid signature by this key over `message`.
    public func isValidSignature(hex: String, for message: Data) -> Bool {
        guard let signature = TUFHex.decode(hex) else { return false }
        switch (keyType, scheme) {
        case ("ed25519", "ed25519"):
            guard let raw = TUFHex.decode(publicValue), raw.count == 32,
                let key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw)
            else { return false }
            return key.isValidSignature(signature, for: message)
        case ("ecdsa", "ecdsa-sha2-nistp256"), ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256"):
            guard let key = try? P256.Signing.PublicKey(pemRepresentation: publicValue),
                let parsed = try? P256.Signing.ECDSASignature(derRepresentation: signature)
            else { return false }
            return key.isValidSignature(parsed, for: message)
        case ("rsa", "rsassa-pss-sha256"), ("rsa", "rsa-pkcs1v15-sha256"):
            guard let key = try? _RSA.Signing.PublicKey(pemRepresentation: publicValue) else { return false }
            let padding: _RSA.Signing.Padding = scheme == "rsassa-pss-sha256" ? .PSS : .insecurePKCS1v1_5
            return key.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: message, padding: padding)
        default:
            return false
        }
    }
}

/// An ed25519 signing key of a publisher (Courier's own repositories sign with ed25519).
public struct TUFSigner: Sendable {
    /// The private key's 32 raw bytes (swift-crypto's key type is not `Sendable`).
    let privateKeyBytes: Data
    public let publicKey: TUFPublicKey

    public var privateKey: Curve25519.Signing.PrivateKey {
        get throws { try Curve25519.Signing.PrivateKey(rawRepresentation: privateKeyBytes) }
    }

    public init(_ privateKey: Curve25519.Signing.PrivateKey) throws {
        self.privateKeyBytes = privateKey.rawRepresentation
        publicKey = try TUFPublicKey(
            keyType: "ed25519", scheme: "ed25519", publicValue: TUFHex.encode(privateKey.publicKey.rawRepresentation))
    }

    /// The signature over `message`, hex.
    public func sign(_ message: Data) throws -> String {
        TUFHex.encode(try privateKey.signature(for: message))
    }
}

/// Lowercase hex, both ways.
public enum TUFHex {
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    public static func decode(_ text: String) -> Data? {
        let bytes = Array(text.utf8)
        guard bytes.count % 2 == 0 else { return nil }
        func nibble(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var out = Data(capacity: bytes.count / 2)
        var index = 0
        while index < bytes.count {
            guard let high = nibble(bytes[index]), let low = nibble(bytes[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }
}
