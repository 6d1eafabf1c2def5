import Crypto
import Foundation
import SwiftASN1
import X509

/// A signing chain made by the tests, shaped like the App Store's (root, intermediate with
/// 1.2.840.113635.100.6.2.1, leaf with 1.2.840.113635.100.6.11.1, P-256), with knobs to break
/// it, and a JWS encoder written independently of Courier's, so a shared bug cannot hide.
public struct TestSigningChain {
    /// How to build the chain; the defaults give a valid App Store-like chain.
    public struct Options: Sendable {
        public var leafHasOID = true
        public var intermediateHasOID = true
        public var leafNotBefore = Date().addingTimeInterval(-86_400 * 30)
        public var leafNotAfter = Date().addingTimeInterval(86_400 * 365)
        public var rootCommonName = "Test Root CA"
        public init() {}
    }

    public let rootKey: P256.Signing.PrivateKey
    public let intermediateKey: P256.Signing.PrivateKey
    public let leafKey: P256.Signing.PrivateKey
    public let root: Certificate
    public let intermediate: Certificate
    public let leaf: Certificate

    static let receiptSignerOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    static let intermediateOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]

    public init(_ options: Options = Options()) throws {
        rootKey = P256.Signing.PrivateKey()
        intermediateKey = P256.Signing.PrivateKey()
        leafKey = P256.Signing.PrivateKey()
        let year: TimeInterval = 365 * 86_400
        let start = Date().addingTimeInterval(-10 * year)
        let rootName = try DistinguishedName {
            CommonName(options.rootCommonName)
            OrganizationName("Courier Tests")
        }
        let intermediateName = try DistinguishedName {
            CommonName("Test WWDR Intermediate")
            OrganizationName("Courier Tests")
        }
        let leafName = try DistinguishedName {
            CommonName("Test Receipt Signer")
            OrganizationName("Courier Tests")
        }
        root = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(rootKey.publicKey),
            notValidBefore: start,
            notValidAfter: start.addingTimeInterval(30 * year),
            issuer: rootName,
            subject: rootName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(rootKey)
        )
        let intermediateHasOID = options.intermediateHasOID
        intermediate = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(intermediateKey.publicKey),
            notValidBefore: start,
            notValidAfter: start.addingTimeInterval(20 * year),
            issuer: rootName,
            subject: intermediateName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                if intermediateHasOID {
                    Certificate.Extension(oid: Self.intermediateOID, critical: false, value: [0x05, 0x00])
                }
            },
            issuerPrivateKey: .init(rootKey)
        )
        let leafHasOID = options.leafHasOID
        leaf = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(leafKey.publicKey),
            notValidBefore: options.leafNotBefore,
            notValidAfter: options.leafNotAfter,
            issuer: intermediateName,
            subject: leafName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                if leafHasOID {
                    Certificate.Extension(oid: Self.receiptSignerOID, critical: false, value: [0x05, 0x00])
                }
            },
            issuerPrivateKey: .init(intermediateKey)
        )
    }

    /// Another issue of this chain's root: the same name and key, a new serial number and
    /// validity (as Apple's test fixtures carry a reissued test root in `x5c[2]`).
    public func reissuedRoot() throws -> Certificate {
        let year: TimeInterval = 365 * 86_400
        let start = Date().addingTimeInterval(-5 * year)
        return try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: root.publicKey,
            notValidBefore: start,
            notValidAfter: start.addingTimeInterval(25 * year),
            issuer: root.subject,
            subject: root.subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(rootKey)
        )
    }

    /// A token whose `x5c` is `entries` as given (base64 text, not necessarily certificates),
    /// signed ES256 by the leaf.
    public func token(_ payload: [String: Any], x5c entries: [String]) throws -> String {
        let header = try JSONSerialization.data(withJSONObject: ["alg": "ES256", "x5c": entries] as [String: Any])
        let input = Self.base64url(header) + "." + Self.base64url(try JSONSerialization.data(withJSONObject: payload))
        return input + "." + Self.base64url(try leafKey.signature(for: Data(input.utf8)).rawRepresentation)
    }

    /// DER bytes of a certificate.
    public static func der(_ certificate: Certificate) throws -> Data {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return Data(serializer.serializedBytes)
    }

    /// Writes the root certificate to `url`, PEM or DER.
    public func writeRoot(to url: URL, pem: Bool = true) throws {
        if pem {
            try Data(try root.serializeAsPEM().pemString.utf8).write(to: url)
        } else {
            try Self.der(root).write(to: url)
        }
    }

    /// A JWSTransaction payload with Apple's field names (dates in milliseconds since 1970).
    public static func payload(
        productId: String = "com.example.levels.pack1",
        transactionId: String = "2000000123456789",
        originalTransactionId: String? = nil,
        bundleId: String = "com.example.app",
        type: String = "Non-Consumable",
        purchaseDate: Date = Date().addingTimeInterval(-3600),
        expiresDate: Date? = nil,
        revocationDate: Date? = nil,
        environment: String = "Sandbox",
        signedDate: Date = Date().addingTimeInterval(-60)
    ) -> [String: Any] {
        func ms(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970 * 1000) }
        var object: [String: Any] = [
            "transactionId": transactionId,
            "originalTransactionId": originalTransactionId ?? transactionId,
            "bundleId": bundleId,
            "productId": productId,
            "purchaseDate": ms(purchaseDate),
            "originalPurchaseDate": ms(purchaseDate),
            "quantity": 1,
            "type": type,
            "inAppOwnershipType": "PURCHASED",
            "signedDate": ms(signedDate),
            "environment": environment,
            "transactionReason": "PURCHASE",
            "storefront": "USA",
            "storefrontId": "143441",
            "price": 990,
            "currency": "USD",
        ]
        if let expiresDate { object["expiresDate"] = ms(expiresDate) }
        if let revocationDate {
            object["revocationDate"] = ms(revocationDate)
            object["revocationReason"] = 1
        }
        return object
    }

    /// A compact JWS over `payload`: header `{"alg", "x5c"}` with `chain` (default leaf,
    /// intermediate, root) as base64 DER, signed ES256 (raw r‖s) by `key` (default the leaf's).
    public func token(
        _ payload: [String: Any],
        alg: String = "ES256",
        chain: [Certificate]? = nil,
        key: P256.Signing.PrivateKey? = nil
    ) throws -> String {
        let x5c = try (chain ?? [leaf, intermediate, root]).map { try Self.der($0).base64EncodedString() }
        let header = try JSONSerialization.data(
            withJSONObject: ["alg": alg, "x5c": x5c, "typ": "JWT"] as [String: Any]
        )
        let body = try JSONSerialization.data(withJSONObject: payload)
        let input = Self.base64url(header) + "." + Self.base64url(body)
        let signature = try (key ?? leafKey).signature(for: Data(input.utf8))
        return input + "." + Self.base64url(signature.rawRepresentation)
    }

    /// An HS256 token (HMAC-SHA256 with `secret`) carrying the App Store chain in its header.
    public func hs256Token(_ payload: [String: Any], secret: Data) throws -> String {
        let x5c = try [leaf, intermediate, root].map { try Self.der($0).base64EncodedString() }
        let header = try JSONSerialization.data(withJSONObject: ["alg": "HS256", "x5c": x5c] as [String: Any])
        let input = Self.base64url(header) + "." + Self.base64url(try JSONSerialization.data(withJSONObject: payload))
        let mac = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: secret))
        return input + "." + Self.base64url(Data(mac))
    }

    /// An unsigned token (`alg` none, empty signature) carrying the App Store chain.
    public func noneToken(_ payload: [String: Any]) throws -> String {
        let x5c = try [leaf, intermediate, root].map { try Self.der($0).base64EncodedString() }
        let header = try JSONSerialization.data(withJSONObject: ["alg": "none", "x5c": x5c] as [String: Any])
        return Self.base64url(header) + "." + Self.base64url(try JSONSerialization.data(withJSONObject: payload)) + "."
    }

    public static func base64url(_ data: Data) -> String {
        var text = data.base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }
}
