import Courier
import Foundation

/// Whether a request may have a package, and if not, why.
public enum GateDecision: Sendable, Equatable {
    /// Serve it. `subject` names who was let in (a transaction id) for the access log.
    case allowed(subject: String)
    /// No credentials, or credentials that do not verify: 401.
    case unauthorized(reason: String)
    /// Valid credentials that do not entitle to this package: 403.
    case forbidden(reason: String)
}

/// Decides whether the bearer of a request may download a package the catalog lists.
///
/// The origin asks only for packages: `/catalog.json` and `/health` are public, and unlisted
/// paths are 404 before any gate is asked. `bearer` is the token of `Authorization: Bearer …`,
/// nil when the header is absent or uses another scheme. A gate must never log the token.
public protocol AccessGate: Sendable {
    func authorize(bearer: String?, content: ServedContent, catalog: Catalog) async -> GateDecision
}

/// Lets everyone in: for public content and benchmarks, chosen explicitly (`serve --public`).
public struct PublicAccessGate: AccessGate {
    public init() {}

    public func authorize(bearer: String?, content: ServedContent, catalog: Catalog) async -> GateDecision {
        .allowed(subject: "public")
    }
}

/// Turns a bearer token into the purchases it proves; throws when it does not verify.
/// The receipt gate's production verifier checks an App Store signed transaction (JWS).
public protocol BearerTokenVerifier: Sendable {
    func transactions(proving token: String, now: Date) async throws -> [VerifiedTransaction]
}

/// Transactions the App Store revoked after they were signed (refunds), learnt from App Store
/// Server Notifications: their signed form still verifies, so the gate asks this too.
public protocol RevocationSource: Sendable {
    func isRevoked(_ transactionId: String) -> Bool
}

extension OriginStateStore: RevocationSource {}

/// The receipt gate: the bearer token is a signed transaction; its purchase must entitle to the
/// requested package under the catalog's rules (a product's own package; for subscriptions only
/// the items its period covers), and must not have been revoked since (`revocations`).
public struct ReceiptAccessGate: AccessGate {
    let verifier: any BearerTokenVerifier
    let entitlements: @Sendable ([VerifiedTransaction], Catalog, Date) -> Set<String>
    let clock: @Sendable () -> Date
    let revocations: (any RevocationSource)?
    let maxTokenAge: TimeInterval?

    /// - Parameters:
    ///   - verifier: proves the token's purchases.
    ///   - entitlements: the content identifiers the purchases unlock in the catalog at a time.
    ///   - revocations: transactions revoked after they were signed (403 even for a token signed
    ///     before the refund); nil when the origin receives no notifications.
    ///   - maxTokenAge: seconds after its `signedDate` a token is still taken (401 with a hint to
    ///     refresh after that); nil for no limit.
    public init(
        verifier: any BearerTokenVerifier,
        entitlements: @escaping @Sendable ([VerifiedTransaction], Catalog, Date) -> Set<String>,
        revocations: (any RevocationSource)? = nil,
        maxTokenAge: TimeInterval? = nil,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.verifier = verifier
        self.entitlements = entitlements
        self.revocations = revocations
        self.maxTokenAge = maxTokenAge
        self.clock = clock
    }

    public func authorize(bearer: String?, content: ServedContent, catalog: Catalog) async -> GateDecision {
        guard let bearer, !bearer.isEmpty else {
            return .unauthorized(reason: "a signed transaction is required (Authorization: Bearer <JWS>)")
        }
        let now = clock()
        var transactions: [VerifiedTransaction]
        do {
            transactions = try await verifier.transactions(proving: bearer, now: now)
        } catch let error as CourierError {
            return .unauthorized(reason: error.message)
        } catch {
            return .unauthorized(reason: "the signed transaction does not verify")
        }
        guard let first = transactions.first else {
            return .unauthorized(reason: "the token proves no purchase")
        }
        if let maxTokenAge, let oldest = transactions.map(\.signedDate).min(), now.timeIntervalSince(oldest) > maxTokenAge {
            return .unauthorized(
                reason: "the signed transaction is older than \(Int(maxTokenAge)) s; "
                    + "present a freshly signed one (StoreKit's Transaction.latest or currentEntitlements) and retry"
            )
        }
        var revokedIds: [String] = []
        if let revocations {
            transactions.removeAll { transaction in
                // A refund names the purchase's transaction; for a one-time purchase a restored
                // copy shares its originalTransactionId, a renewal of a subscription does not.
                let revoked = revocations.isRevoked(transaction.transactionId)
                    || (transaction.type != .autoRenewable && revocations.isRevoked(transaction.originalTransactionId))
                if revoked { revokedIds.append(transaction.transactionId) }
                return revoked
            }
        }
        if entitlements(transactions, catalog, now).contains(content.contentIdentifier) {
            return .allowed(subject: transactions.first?.transactionId ?? first.transactionId)
        }
        if !revokedIds.isEmpty {
            return .forbidden(
                reason: "transaction \(revokedIds.joined(separator: ", ")) was refunded or revoked (App Store Server Notification)"
            )
        }
        return .forbidden(
            reason: "the purchase of \(first.productId) does not entitle to \(content.contentIdentifier)"
        )
    }
}

extension SignedTransactionVerifier: BearerTokenVerifier {
    /// The one purchase an App Store signed transaction proves. Every check applies but
    /// `revoked`: a refunded purchase verifies (with its revocation date) and then entitles to
    /// nothing, so it is 403 rather than 401.
    public func transactions(proving token: String, now: Date) async throws -> [VerifiedTransaction] {
        // A compact JWS is a few KiB; refuse anything absurd before parsing it.
        guard token.utf8.count <= 64 * 1024 else {
            throw CourierError(.receiptInvalid, "the bearer token is too large to be a signed transaction")
        }
        return [try await verifyAllowingRevocation(token, now: now)]
    }
}

extension ReceiptAccessGate {
    /// The production gate: App Store signed transactions verified by `verifier`, entitlements
    /// by the catalog's rules (`Entitlements`), refunds from `revocations`.
    public init(
        verifier: SignedTransactionVerifier,
        revocations: (any RevocationSource)? = nil,
        maxTokenAge: TimeInterval? = nil,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.init(
            verifier: verifier as any BearerTokenVerifier,
            entitlements: { transactions, catalog, now in
                Set(Entitlements.content(for: transactions, catalog: catalog, now: now).map(\.contentIdentifier))
            },
            revocations: revocations,
            maxTokenAge: maxTokenAge,
            clock: clock
        )
    }
}
