/// Whether bytes have the outer shape of an App Store legacy receipt, checked before the receipt
/// is sent to Apple's verifyReceipt service (issue 31, item 6): a PKCS#7 `ContentInfo`, an ASN.1
/// SEQUENCE (DER or BER; Apple's receipts use BER's indefinite lengths) whose content type is
/// signedData (1.2.840.113549.1.7.2) followed by its `[0]` content. The signature itself is
/// Apple's to check; this only keeps a file that is not a receipt at all (a base64 picture, a
/// stray token) from leaving the machine.
public enum LegacyReceiptShape {
    /// The DER bytes of the signedData object identifier, 1.2.840.113549.1.7.2.
    static let signedDataOID: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]

    /// Why `bytes` is not a PKCS#7 signedData receipt, or nil when it has that shape.
    public static func problem(_ bytes: [UInt8]) -> String? {
        var reader = Reader(bytes: bytes)
        guard let outer = reader.header(), outer.tag == 0x30 else { return "it is not an ASN.1 SEQUENCE" }
        switch outer.length {
        case .definite(let length):
            guard length == reader.remaining else {
                return "its SEQUENCE says \(length) bytes but \(reader.remaining) follow"
            }
        case .indefinite:
            guard reader.remaining >= 2, bytes[bytes.count - 2] == 0, bytes[bytes.count - 1] == 0 else {
                return "its SEQUENCE of indefinite length has no end"
            }
        }
        guard let type = reader.header(), type.tag == 0x06, case .definite(let length) = type.length, length <= reader.remaining,
            Array(bytes[reader.offset..<reader.offset + length]) == signedDataOID
        else { return "its content type is not PKCS#7 signedData (1.2.840.113549.1.7.2)" }
        reader.offset += length
        guard let content = reader.header(), content.tag == 0xA0 else { return "it has no signedData content" }
        if case .definite(let length) = content.length, length > reader.remaining { return "its signedData content is cut short" }
        return nil
    }

    private enum Length {
        case definite(Int)
        case indefinite
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        var remaining: Int { bytes.count - offset }

        /// One tag (single byte: every tag here is low-numbered) and its length.
        mutating func header() -> (tag: UInt8, length: Length)? {
            guard remaining >= 2 else { return nil }
            let tag = bytes[offset]
            let first = bytes[offset + 1]
            offset += 2
            if first < 0x80 { return (tag, .definite(Int(first))) }
            if first == 0x80 { return tag & 0x20 != 0 ? (tag, .indefinite) : nil }  // constructed only
            let count = Int(first & 0x7F)
            guard count <= 4, count <= remaining else { return nil }  // a receipt is at most a few MiB
            var length = 0
            for _ in 0..<count {
                length = length << 8 | Int(bytes[offset])
                offset += 1
            }
            return (tag, .definite(length))
        }
    }
}
