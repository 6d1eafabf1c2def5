import Foundation

/// A compact JWS (`header.payload.signature`, RFC 7515) taken apart, before any verification.
///
/// Only the shape is checked here: three base64url parts, a JSON object header and payload.
/// Whether it may be trusted is `SignedTransactionVerifier`'s job.
public struct CompactJWS: Sendable {
    /// The largest token accepted, in bytes. An App Store transaction with its three
    /// certificates is about 5 KB; anything this large is not one.
    public static let maximumLength = 256 * 1024

    /// The header's `alg`.
    public let algorithm: String?
    /// The header's `x5c`: base64 (not base64url) DER certificates, leaf first.
    public let certificateChain: [String]?
    /// The decoded payload bytes (JSON).
    public let payload: Data
    /// The decoded signature bytes.
    public let signature: Data
    /// `base64url(header) "." base64url(payload)`: the bytes the signature covers.
    public let signingInput: Data

    /// Splits and decodes `token`, failing with the `format` check.
    public init(_ token: String) throws {
        let trimmed = token.trimmingASCIIWhitespace().utf8
        guard trimmed.count <= Self.maximumLength else {
            throw ReceiptCheck.format.failure(
                "the token is \(trimmed.count) bytes; a signed transaction is at most \(Self.maximumLength)"
            )
        }
        let parts = trimmed.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw ReceiptCheck.format.failure("a compact JWS has 3 dot-separated parts, this has \(parts.count)")
        }
        guard let headerBytes = Base64URL.decode(bytes: parts[0]), let payloadBytes = Base64URL.decode(bytes: parts[1]) else {
            throw ReceiptCheck.format.failure("the header or payload is not base64url")
        }
        guard let signatureBytes = Base64URL.decode(bytes: parts[2]) else {
            throw ReceiptCheck.format.failure("the signature is not base64url")
        }
        guard let header = (try? JSONSerialization.jsonObject(with: headerBytes)) as? [String: Any] else {
            throw ReceiptCheck.format.failure("the header is not a JSON object")
        }
        guard (try? JSONSerialization.jsonObject(with: payloadBytes)) is [String: Any] else {
            throw ReceiptCheck.format.failure("the payload is not a JSON object")
        }
        self.algorithm = header["alg"] as? String
        self.certificateChain = header["x5c"] as? [String]
        self.payload = payloadBytes
        self.signature = signatureBytes
        self.signingInput = Data(trimmed[parts[0].startIndex..<parts[1].endIndex])
    }
}
