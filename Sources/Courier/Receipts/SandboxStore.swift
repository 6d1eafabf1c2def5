import Crypto
import Foundation
import SwiftASN1
import X509

/// A local test store, what StoreKit Testing is in Xcode: a signing chain shaped like the App
/// Store's and the signed transactions it issues.
///
/// `create(at:)` writes, into one folder, a root CA, an intermediate carrying
/// 1.2.840.113635.100.6.2.1 and a leaf carrying 1.2.840.113635.100.6.11.1, all P-256, each as
/// `NAME.der`, `NAME.pem` and `NAME.key.pem` (PKCS#8, mode 0600). A verifier that trusts
/// `rootCertificateFile` accepts what `sign(_:)` and `purchase(…)` return.
/// Other sandbox contents (sample packages, a catalog) may be added beside these files.
public struct SandboxStore: Sendable {
    /// The folder holding the chain.
    public let directory: URL
    public let root: Certificate
    public let intermediate: Certificate
    public let leaf: Certificate
    /// The leaf's private key, raw (P256.Signing.PrivateKey is not Sendable).
    private let leafKeyBytes: Data

    /// The file to trust (`--trust-root`, `receipts.trustRoots`): the root certificate, PEM.
    public var rootCertificateFile: URL { Self.file(directory, "root", "pem") }
    /// The root certificate, DER.
    public var rootCertificateDERFile: URL { Self.file(directory, "root", "der") }

    /// Whether `directory` already holds a sandbox chain.
    public static func exists(at directory: URL) -> Bool {
        ["root", "intermediate", "leaf"].allSatisfy {
            FileManager.default.fileExists(atPath: file(directory, $0, "der").path)
                && FileManager.default.fileExists(atPath: file(directory, $0, "key.pem").path)
        }
    }

    /// Creates a new chain in `directory` (created 0700 if missing), replacing an existing one.
    /// The root is valid for 20 years, the intermediate for 10, the leaf for 2, all from a day ago.
    @discardableResult
    public static func create(at directory: URL, now: Date = Date()) throws -> SandboxStore {
        try CourierError.wrapping(.io, "cannot create \(directory.path)") {
            try FileManager.default.createDirectory(
                at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        let year: TimeInterval = 365 * 86_400
        let start = now.addingTimeInterval(-86_400)
        let rootKey = P256.Signing.PrivateKey()
        let intermediateKey = P256.Signing.PrivateKey()
        let leafKey = P256.Signing.PrivateKey()
        do {
            let rootName = try DistinguishedName {
                CommonName("Courier Sandbox Root CA")
                OrganizationalUnitName("Courier Sandbox Certification Authority")
                OrganizationName("Courier Sandbox")
                CountryName("US")
            }
            let intermediateName = try DistinguishedName {
                CommonName("Courier Sandbox Worldwide Developer Relations Certification Authority")
                OrganizationalUnitName("G6")
                OrganizationName("Courier Sandbox")
                CountryName("US")
            }
            let leafName = try DistinguishedName {
                CommonName("Courier Sandbox StoreKit Signing")
                OrganizationName("Courier Sandbox")
                CountryName("US")
            }
            let rootPublic = Certificate.PublicKey(rootKey.publicKey)
            let intermediatePublic = Certificate.PublicKey(intermediateKey.publicKey)
            let leafPublic = Certificate.PublicKey(leafKey.publicKey)
            /// A P-256 certificate valid for `years` from `start`, signed by `issuerKey`.
            func issue(
                _ subject: DistinguishedName, _ key: Certificate.PublicKey, by issuer: DistinguishedName,
                _ issuerKey: P256.Signing.PrivateKey, years: Double, _ extensions: Certificate.Extensions
            ) throws -> Certificate {
                try Certificate(
                    version: .v3, serialNumber: .init(), publicKey: key, notValidBefore: start,
                    notValidAfter: start.addingTimeInterval(years * year), issuer: issuer, subject: subject,
                    signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions, issuerPrivateKey: .init(issuerKey))
            }
            let root = try issue(
                rootName, rootPublic, by: rootName, rootKey, years: 20,
                try Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                    SubjectKeyIdentifier(hash: rootPublic)
                })
            let intermediate = try issue(
                intermediateName, intermediatePublic, by: rootName, rootKey, years: 10,
                try Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                    SubjectKeyIdentifier(hash: intermediatePublic)
                    AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: rootPublic).keyIdentifier)
                    Certificate.Extension(oid: AppStoreOIDs.wwdrIntermediate, critical: false, value: [0x05, 0x00])
                })
            let leaf = try issue(
                leafName, leafPublic, by: intermediateName, intermediateKey, years: 2,
                try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true))
                    SubjectKeyIdentifier(hash: leafPublic)
                    AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: intermediatePublic).keyIdentifier)
                    Certificate.Extension(oid: AppStoreOIDs.receiptSigner, critical: false, value: [0x05, 0x00])
                })
            for (name, certificate, key) in [
                ("root", root, rootKey), ("intermediate", intermediate, intermediateKey), ("leaf", leaf, leafKey),
            ] {
                try write(try der(certificate), to: file(directory, name, "der"), mode: 0o644)
                let pem = try certificate.serializeAsPEM().pemString + "\n"
                try write(Data(pem.utf8), to: file(directory, name, "pem"), mode: 0o644)
                try write(Data((key.pemRepresentation + "\n").utf8), to: file(directory, name, "key.pem"), mode: 0o600)
            }
            return SandboxStore(
                directory: directory,
                root: root,
                intermediate: intermediate,
                leaf: leaf,
                leafKey: leafKey
            )
        } catch let error as CourierError {
            throw error
        } catch {
            throw CourierError(.internal, "cannot create the sandbox signing chain", cause: "\(error)")
        }
    }

    /// Opens the chain `create(at:)` wrote in `directory`.
    public init(directory: URL) throws {
        guard Self.exists(at: directory) else {
            throw CourierError(
                .notFound,
                "no sandbox store in \(directory.path)",
                hint: "run `courier sandbox init --dir \(directory.path)` first"
            )
        }
        func certificate(_ name: String) throws -> Certificate {
            let url = Self.file(directory, name, "der")
            return try CourierError.wrapping(.io, "cannot read \(url.path)") {
                try Certificate(derEncoded: Array(try Data(contentsOf: url)))
            }
        }
        let keyFile = Self.file(directory, "leaf", "key.pem")
        let key = try CourierError.wrapping(.io, "cannot read the sandbox signing key \(keyFile.path)") {
            try P256.Signing.PrivateKey(pemRepresentation: try String(contentsOf: keyFile, encoding: .utf8))
        }
        self.init(
            directory: directory,
            root: try certificate("root"),
            intermediate: try certificate("intermediate"),
            leaf: try certificate("leaf"),
            leafKey: key
        )
    }

    private init(
        directory: URL,
        root: Certificate,
        intermediate: Certificate,
        leaf: Certificate,
        leafKey: P256.Signing.PrivateKey
    ) {
        self.directory = directory
        self.root = root
        self.intermediate = intermediate
        self.leaf = leaf
        self.leafKeyBytes = leafKey.rawRepresentation
    }

    /// Signs `payload` as the App Store does: a compact JWS with `alg` ES256, `x5c` holding the
    /// leaf, intermediate and root (base64 DER), and a raw r‖s signature.
    public func sign(_ payload: SignedTransactionPayload) throws -> String {
        try CourierError.wrapping(.internal, "cannot sign the sandbox transaction") {
            let chain = try [leaf, intermediate, root].map { try Self.der($0).base64EncodedString() }
            let header = try JSONSerialization.data(
                withJSONObject: ["alg": "ES256", "x5c": chain] as [String: Any],
                options: [.sortedKeys, .withoutEscapingSlashes]
            )
            let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(try payload.json())
            let leafKey = try P256.Signing.PrivateKey(rawRepresentation: leafKeyBytes)
            let signature = try leafKey.signature(for: Data(signingInput.utf8))
            return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
        }
    }

    /// Issues a signed transaction for `productId`, as a purchase in the sandbox would.
    /// Identifiers are fresh 16-digit numbers like the App Store's; `signedDate` is `now`.
    /// An auto-renewable subscription without `expiresDate` gets a month from `purchaseDate`.
    public func purchase(
        productId: String,
        type: Catalog.ProductType = .nonConsumable,
        bundleId: String = "com.example.app",
        environment: String = "Sandbox",
        purchaseDate: Date? = nil,
        expiresDate: Date? = nil,
        revocationDate: Date? = nil,
        transactionId: String? = nil,
        originalTransactionId: String? = nil,
        now: Date = Date()
    ) throws -> String {
        let purchased = purchaseDate ?? now
        var expires = expiresDate
        if type == .autoRenewable && expires == nil {
            expires = Calendar(identifier: .gregorian).date(byAdding: .month, value: 1, to: purchased)
        }
        let identifier = transactionId ?? Self.newTransactionId()
        return try sign(
            SignedTransactionPayload(
                transactionId: identifier,
                originalTransactionId: originalTransactionId ?? identifier,
                bundleId: bundleId,
                productId: productId,
                type: type,
                purchaseDate: purchased,
                expiresDate: expires,
                revocationDate: revocationDate,
                environment: environment,
                signedDate: now
            )
        )
    }

    /// A fresh App Store-like transaction identifier (16 decimal digits, starting with 2000).
    public static func newTransactionId() -> String {
        "2000" + String(format: "%012llu", UInt64.random(in: 0..<1_000_000_000_000))
    }

    private static func der(_ certificate: Certificate) throws -> Data {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return Data(serializer.serializedBytes)
    }

    static func file(_ directory: URL, _ name: String, _ suffix: String) -> URL {
        directory.appendingPathComponent("\(name).\(suffix)")
    }

    private static func write(_ data: Data, to url: URL, mode: Int) throws {
        let fileManager = FileManager.default
        try? fileManager.removeItem(at: url)
        guard fileManager.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: mode]) else {
            throw CourierError.posix("create", path: url.path)
        }
        try CourierError.wrapping(.io, "cannot write \(url.path)") {
            let handle = try FileHandle(forWritingTo: url)
            defer { try? handle.close() }
            try handle.write(contentsOf: data)
            try handle.synchronize()
        }
    }
}
