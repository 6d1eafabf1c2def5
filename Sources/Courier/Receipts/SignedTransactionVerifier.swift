import Crypto
import Foundation
import SwiftASN1
import Synchronization
@_spi(FixedExpiryValidationTime) import X509

/// Verifies App Store JWS signed transactions locally, as the App Store Server Library's
/// `SignedDataVerifier` does.
///
/// In order, each failure naming its `ReceiptCheck`:
/// 1. `format`: a compact JWS, `alg` ES256, an `x5c` array, a payload with the App Store fields.
/// 2. `chain`: `x5c` holds exactly three certificates (leaf, intermediate, root).
/// 3. `certificate`: leaf and intermediate are DER X.509, the leaf has a P-256 key, and both are
///    valid at the transaction's `signedDate` (receipts outlive their leaf certificates).
/// 4. `OID`: the leaf carries 1.2.840.113635.100.6.11.1, the intermediate 1.2.840.113635.100.6.2.1.
/// 5. `chain`: leaf → intermediate → one of `trustedRoots` verifies with swift-certificates
///    (RFC 5280 at `signedDate`). As in Apple's libraries, the token's third certificate is not
///    read: the chain ends at a configured root (a reissued root with the same name and key, as
///    Apple's own test tokens carry, is no reason to refuse), and a root inside the token is
///    never trusted by itself.
/// 6. `signature`: the ES256 signature (raw r‖s) verifies with the leaf's key.
/// 7. `bundle`, `environment`, `future-dated` (`signedDate` beyond `now + clockSkew`), and in
///    `verify`, `revoked` (`verifyAllowingRevocation` returns it with its `revocationDate`).
public struct SignedTransactionVerifier: Sendable {
    public let trustedRoots: [Certificate]
    public let bundleId: String
    public let environments: Set<String>
    public let clockSkew: TimeInterval
    /// Chains that passed, shared by copies of this verifier (its roots never change).
    let chainCache = VerifiedChainCache()

    public init(trustedRoots: [Certificate], bundleId: String, environments: Set<String>, clockSkew: TimeInterval) {
        self.trustedRoots = trustedRoots
        self.bundleId = bundleId
        self.environments = environments
        self.clockSkew = clockSkew
    }

    /// The verifier `configuration` describes: its trusted roots (loaded; a path relative to
    /// `baseDirectory`, the configuration file's folder; one that cannot be read is a `usage`
    /// error), bundle id, environments and clock skew. The one place a verifier is made from
    /// configuration (`CourierCore.transactionVerifier`, `ReceiptValidator`).
    public init(configuration: ReceiptConfiguration, baseDirectory: URL) throws {
        // As `CourierConfiguration.resolvePath`: a relative path is under `baseDirectory` whether
        // or not its URL ends in a slash.
        let roots = try TrustRoots.load(
            configuration.trustRoots.map { path in
                path.hasPrefix("/")
                    ? URL(fileURLWithPath: path) : baseDirectory.appendingPathComponent(path).standardizedFileURL
            })
        self.init(
            trustedRoots: roots, bundleId: configuration.bundleId, environments: configuration.environments,
            clockSkew: configuration.clockSkew)
    }

    /// Verifies one compact JWS signed transaction and returns what it proves.
    /// Throws `CourierError(.receiptInvalid)` naming the failing `ReceiptCheck`.
    public func verify(_ compactJWS: String, now: Date = Date()) async throws -> VerifiedTransaction {
        let transaction = try await verifyAllowingRevocation(compactJWS, now: now)
        if let revoked = transaction.revocationDate {
            throw Self.revokedFailure(transaction, at: revoked)
        }
        return transaction
    }

    /// Every check but `revoked`: a revoked transaction comes back with its `revocationDate`
    /// (it entitles to nothing). For a list of transactions where one refund must not hide the rest.
    public func verifyAllowingRevocation(_ compactJWS: String, now: Date = Date()) async throws -> VerifiedTransaction {
        let payload = try await verifiedPayload(compactJWS)
        try checkClaims(
            of: "the transaction", bundleId: payload.bundleId, environment: payload.environment, signedDate: payload.signedDate,
            now: now)
        var transaction = payload.verifiedTransaction
        transaction.signedTransaction = String(compactJWS.trimmingASCIIWhitespace())
        return transaction
    }

    /// The `revoked` rejection of `transaction`.
    public static func revokedFailure(_ transaction: VerifiedTransaction, at date: Date) -> CourierError {
        ReceiptCheck.revoked.failure(
            "transaction \(transaction.transactionId) (\(transaction.productId)) was revoked \(iso(date))"
        )
    }

    /// Checks signature and chain, then returns the payload without the claim checks
    /// (bundle, environment, dates, revocation).
    func verifiedPayload(_ compactJWS: String) async throws -> SignedTransactionPayload {
        let (jws, encodedChain) = try Self.decodeHeader(compactJWS, owner: "the")
        let payload = try SignedTransactionPayload(json: jws.payload)
        try await verifySignature(of: jws, chain: encodedChain, at: payload.signedDate, owner: "the")
        return payload
    }

    /// The `chain` and `signature` checks every App Store JWS gets, whatever it carries: exactly
    /// three `x5c` certificates, leaf → intermediate → a trusted root with Apple's OIDs judged at
    /// `signedDate`, and the ES256 signature by the leaf's key. `owner` starts the messages
    /// ("the", "the notification's").
    func verifySignature(of jws: CompactJWS, chain encodedChain: [String], at signedDate: Date, owner: String) async throws {
        guard encodedChain.count == 3 else {
            throw ReceiptCheck.chain.failure(
                "x5c holds \(encodedChain.count) certificates; the App Store's format has exactly 3 (leaf, intermediate, root)"
            )
        }
        let leafKey = try await verifiedLeafKey(encodedChain, at: signedDate)
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try P256.Signing.ECDSASignature(rawRepresentation: jws.signature)
        } catch {
            throw ReceiptCheck.signature.failure("\(owner) signature is not a 64-byte ES256 r‖s value")
        }
        guard leafKey.isValidSignature(signature, for: jws.signingInput) else {
            throw ReceiptCheck.signature.failure("\(owner) ES256 signature does not verify with the leaf certificate's key")
        }
    }

    /// Decodes a signed transaction from the raw bytes of its token without verifying it: the
    /// `format` checks only (three base64url parts, JSON header and payload, `alg` ES256, an
    /// `x5c` array, the payload's App Store fields). Pure (no I/O, no clock): the fuzz entry for
    /// the token and payload decoders. Bytes that are not UTF-8 fail the `format` check.
    package static func decodeUnverified(_ token: Data) throws -> (jws: CompactJWS, payload: SignedTransactionPayload) {
        guard let text = String(data: token, encoding: .utf8) else {
            throw ReceiptCheck.format.failure("the token is not UTF-8 text")
        }
        let (jws, _) = try decodeHeader(text, owner: "the")
        return (jws, try SignedTransactionPayload(json: jws.payload))
    }

    /// The `format` checks of an App Store JWS's header: three base64url parts, `alg` ES256 and
    /// an `x5c` array. `owner` starts the messages ("the", "the notification's").
    static func decodeHeader(_ compactJWS: String, owner: String) throws -> (jws: CompactJWS, chain: [String]) {
        let jws = try CompactJWS(compactJWS)
        guard let algorithm = jws.algorithm else {
            throw ReceiptCheck.format.failure("\(owner) header has no alg")
        }
        guard algorithm == "ES256" else {
            throw ReceiptCheck.format.failure("\(owner) header's alg is \(algorithm); only ES256 is accepted")
        }
        guard let encodedChain = jws.certificateChain else {
            throw ReceiptCheck.format.failure("\(owner) header has no x5c certificate chain")
        }
        return (jws, encodedChain)
    }

    /// The leaf's key once the chain checks pass at `signedDate` (`certificate`, `OID`,
    /// `chain`). A chain verified before is not verified again while `signedDate` lies inside
    /// the validity of all three certificates, the only time-dependent part of the checks.
    func verifiedLeafKey(_ encodedChain: [String], at signedDate: Date) async throws -> P256.Signing.PublicKey {
        // x5c[2] is not read, as Apple's libraries do not read it: the chain is built from the
        // leaf and intermediate up to a configured root, which alone is trusted.
        let cacheKey = encodedChain.prefix(2).joined(separator: ".")
        if let cached = chainCache.entry(cacheKey), cached.validity.contains(signedDate),
            let key = try? P256.Signing.PublicKey(x963Representation: cached.leafKey)
        {
            return key
        }
        let certificates = try encodedChain.prefix(2).enumerated().map { index, text -> Certificate in
            let role = Self.roles[index]
            guard let der = Data(base64Encoded: text) else {
                throw ReceiptCheck.certificate.failure("the \(role) certificate in x5c is not base64")
            }
            do {
                return try Certificate(derEncoded: Array(der))
            } catch {
                throw ReceiptCheck.certificate.failure("the \(role) certificate in x5c is not DER X.509 (\(error))")
            }
        }
        let leaf = certificates[0]
        let intermediate = certificates[1]
        guard let leafKey = P256.Signing.PublicKey(leaf.publicKey) else {
            throw ReceiptCheck.certificate.failure("the leaf certificate's key is not P-256")
        }
        for (certificate, role) in [(leaf, "leaf"), (intermediate, "intermediate")] {
            if signedDate > certificate.notValidAfter {
                throw ReceiptCheck.certificate.failure(
                    "the \(role) certificate expired \(Self.iso(certificate.notValidAfter)), before signedDate \(Self.iso(signedDate))"
                )
            }
            if signedDate < certificate.notValidBefore {
                throw ReceiptCheck.certificate.failure(
                    "the \(role) certificate is valid only from \(Self.iso(certificate.notValidBefore)), after signedDate \(Self.iso(signedDate))"
                )
            }
        }
        guard leaf.extensions.contains(where: { $0.oid == AppStoreOIDs.receiptSigner }) else {
            throw ReceiptCheck.oid.failure(
                "the leaf certificate lacks the receipt-signing extension \(AppStoreOIDs.receiptSigner)"
            )
        }
        guard intermediate.extensions.contains(where: { $0.oid == AppStoreOIDs.wwdrIntermediate }) else {
            throw ReceiptCheck.oid.failure(
                "the intermediate certificate lacks the WWDR extension \(AppStoreOIDs.wwdrIntermediate)"
            )
        }
        guard !trustedRoots.isEmpty else {
            throw ReceiptCheck.chain.failure(
                "no trusted root is configured",
                hint: "pass --trust-root FILE (Apple Root CA - G3, or the sandbox root) or set receipts.trustRoots"
            )
        }
        var verifier = Verifier(rootCertificates: CertificateStore(trustedRoots)) {
            RFC5280Policy(fixedExpiryValidationTime: signedDate)
            AppStoreChainPolicy()
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate]))
        let chain: [Certificate]
        switch result {
        case .validCertificate(let validated):
            guard validated.count == 3, validated[0] == leaf, validated[1] == intermediate,
                trustedRoots.contains(validated[2])
            else {
                throw ReceiptCheck.chain.failure("the chain is not leaf, intermediate and a trusted root")
            }
            chain = Array(validated)
        case .couldNotValidate(let failures):
            let reasons = failures.map { "\($0.policyFailureReason)" }
            let detail = reasons.isEmpty ? "the chain does not lead to a trusted root" : reasons.joined(separator: "; ")
            throw ReceiptCheck.chain.failure(
                detail,
                hint: "check that the intermediate is issued by one of the trusted roots"
            )
        }
        let validity = chain.map(\.notValidBefore).max().map { start in
            start...max(start, chain.map(\.notValidAfter).min() ?? start)
        }
        if let validity { chainCache.store(cacheKey, .init(leafKey: leafKey.x963Representation, validity: validity)) }
        return leafKey
    }

    /// The checks on what a verified token claims: bundle, environment, and a `signedDate` not in
    /// the future (none is not checked). `owner` names it ("the transaction", "the notification").
    func checkClaims(of owner: String, bundleId claimed: String?, environment: String?, signedDate: Date?, now: Date) throws {
        guard claimed == bundleId else {
            throw ReceiptCheck.bundle.failure(
                "\(owner) is for bundle \(claimed ?? "(none)"), not \(bundleId)",
                hint: "pass --bundle-id or set receipts.bundleId"
            )
        }
        guard let environment, environments.contains(environment) else {
            throw ReceiptCheck.environment.failure(
                "\(owner)'s environment \(environment ?? "(none)") is not one of \(environments.sorted().joined(separator: ", "))",
                hint: "pass --environment \(environment ?? "Production") to accept it"
            )
        }
        if let signedDate, signedDate > now.addingTimeInterval(clockSkew) {
            throw ReceiptCheck.futureDated.failure(
                "\(owner) is signed \(Self.iso(signedDate)), later than now (\(Self.iso(now))) plus \(Int(clockSkew)) s of clock skew"
            )
        }
    }

    static let roles = ["leaf", "intermediate", "root"]

    static func iso(_ date: Date) -> String {
        ISO8601DateFormatter().string(from: date)
    }
}

/// Requires the App Store's chain shape: exactly leaf, intermediate, root. The marker OIDs are
/// checked before chain building (so their failure is named `OID`), which is why this policy
/// may declare them handled when a signer marks them critical.
struct AppStoreChainPolicy: VerifierPolicy {
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = [
        AppStoreOIDs.receiptSigner, AppStoreOIDs.wwdrIntermediate,
    ]

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        guard chain.count == 3 else {
            return .failsToMeetPolicy(
                reason: "the chain has \(chain.count) certificates, not leaf, intermediate and root"
            )
        }
        return .meetsPolicy
    }
}

/// Chains a verifier has already proven, by their `x5c` text: the leaf's key and the span in
/// which all three certificates are valid. Bounded; cleared when full.
final class VerifiedChainCache: Sendable {
    struct Entry {
        var leafKey: Data
        var validity: ClosedRange<Date>
    }

    private let entries = Mutex<[String: Entry]>([:])
    private let capacity = 64

    func entry(_ key: String) -> Entry? {
        entries.withLock { $0[key] }
    }

    func store(_ key: String, _ entry: Entry) {
        entries.withLock { entries in
            if entries.count >= capacity { entries.removeAll() }
            entries[key] = entry
        }
    }
}
