import Courier
import Foundation

/// Whether a request may have a package, and if not, why.
public enum GateDecision: Sendable, Equatable {
    /// Serve it. `subject` names who was let in (a transaction id) for the access log.
    case allowed(subject: String, reason: GateReason)
    /// No credentials, or credentials that do not verify: 401.
    case unauthorized(reason: String, code: GateReason)
    /// Valid credentials that do not entitle to this package: 403.
    case forbidden(reason: String, code: GateReason)

    /// The reason as a short, fixed code (the `reason` label of `courier_gate_decisions_total`).
    public var code: GateReason {
        switch self {
        case .allowed(_, let reason), .unauthorized(_, let reason), .forbidden(_, let reason): reason
        }
    }
}

/// Why the gate decided as it did: a small fixed set, fit for a metric label.
public enum GateReason: String, Sendable, CaseIterable {
    /// The purchase entitles to the package.
    case entitled
    /// `PublicAccessGate`, or a public path (`/catalog.json`) asked at `/authorize`.
    case publicContent = "public"
    /// 401: no `Authorization: Bearer` token.
    case missingToken
    /// 401: the token does not verify or proves no purchase.
    case invalidToken
    /// 401: the token is older than `maxTokenAge`.
    case staleToken
    /// 403: a valid purchase that does not entitle to the package.
    case notEntitled
    /// 403: the purchase was refunded or revoked (App Store Server Notification).
    case revoked
    /// 403 at `/authorize` (404 on a direct GET): the path is not a package the catalog lists.
    case notInCatalog
    /// 403 at `/authorize`: no `X-Original-URI`, or one that is not a canonical path.
    case badTarget
    /// 403 at `/authorize` (503 on a direct GET): no catalog is published.
    case noCatalog

    static let allowing: [GateReason] = [.entitled, .publicContent]
    static let unauthorizing: [GateReason] = [.missingToken, .invalidToken, .staleToken]
    static let forbidding: [GateReason] = [.notEntitled, .revoked, .notInCatalog, .badTarget, .noCatalog]
}

/// Decides whether the bearer of a request may download a package the catalog lists.
///
/// The origin asks only for packages: `/catalog.json` and `/health` are public, and unlisted
/// paths are 404 before any gate is asked. `bearer` is the token of `Authorization: Bearer …`,
/// nil when the header is absent or uses another scheme. A gate must never log the token.
public protocol AccessGate: Sendable {
    func authorize(bearer: String?, content: ServedContent, catalog: Catalog) async -> GateDecision

    /// The decision with the last moment it is known to hold (`GateAnswer.validUntil`), for a
    /// cache of decisions (nginx's, at `/authorize`). The default: `authorize`, with no known end.
    func answer(bearer: String?, content: ServedContent, catalog: Catalog) async -> GateAnswer
}

extension AccessGate {
    public func answer(bearer: String?, content: ServedContent, catalog: Catalog) async -> GateAnswer {
        GateAnswer(decision: await authorize(bearer: bearer, content: content, catalog: catalog), validUntil: nil)
    }
}

/// A gate's decision and how long it may be reused.
public struct GateAnswer: Sendable, Equatable {
    public var decision: GateDecision
    /// When the decision stops holding for sure, whatever else happens (an allow ends with the
    /// token: a subscription's `expiresDate`, or `signedDate` plus the gate's `maxTokenAge`);
    /// nil when no such end is known. A cache must not reuse the decision past it. A refund can
    /// end an allow earlier: that is the cache's window, not this date.
    public var validUntil: Date?

    public init(decision: GateDecision, validUntil: Date?) {
        self.decision = decision
        self.validUntil = validUntil
    }

    /// `decision`, valid until `validUntil` (nil: no known end).
    init(_ decision: GateDecision, validUntil: Date? = nil) {
        self.init(decision: decision, validUntil: validUntil)
    }

    /// The longest window a gate lets a cache reuse a decision for, whatever it asks.
    public static let maximumCacheWindow = 3600

    /// The whole seconds a cache (nginx's) that asked for `window` may reuse this answer from
    /// `now`: nil when it asked for none (`window` nil or negative), else `window` (at most
    /// `maximumCacheWindow`), and, when the decision ends at `validUntil`, two seconds less than
    /// is left until then, down to 0 (do not cache): nginx counts whole seconds from when it
    /// stores the answer, a little after `now`, and keeps an entry through the last one.
    public func cacheSeconds(window: Int?, now: Date) -> Int? {
        guard let window, window >= 0 else { return nil }
        var seconds = min(window, Self.maximumCacheWindow)
        if let validUntil {
            let left = validUntil.timeIntervalSince(now).rounded(.down) - 2
            if left < Double(seconds) { seconds = max(0, Int(left)) }
        }
        return seconds
    }
}

/// Lets everyone in: for public content and benchmarks, chosen explicitly (`serve --public`).
public struct PublicAccessGate: AccessGate {
    public init() {}

    public func authorize(bearer: String?, content: ServedContent, catalog: Catalog) async -> GateDecision {
        .allowed(subject: "public", reason: .publicContent)
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
    /// Whether a notification revoked transaction `transactionId` itself.
    func isRevoked(_ transactionId: String) -> Bool
    /// Whether a notification revoked any copy of the purchase `originalTransactionId`: the
    /// original, or any restored copy of it (a refund names one copy and takes the purchase
    /// back). The default asks `isRevoked(originalTransactionId)`, which sees only a refund that
    /// named the original itself; the stores answer for every copy.
    func isPurchaseRevoked(originalTransactionId: String) -> Bool
    /// The gate's one question per transaction: `isRevoked(transactionId)`, or, when
    /// `originalTransactionId` is given (a one-time purchase), `isPurchaseRevoked` of it. A
    /// source whose answers cost a look at a store looks once (`SharedRevocations`).
    func isRevoked(_ transactionId: String, orPurchase originalTransactionId: String?) -> Bool
}

extension RevocationSource {
    public func isPurchaseRevoked(originalTransactionId: String) -> Bool {
        isRevoked(originalTransactionId)
    }

    public func isRevoked(_ transactionId: String, orPurchase originalTransactionId: String?) -> Bool {
        isRevoked(transactionId) || originalTransactionId.map { isPurchaseRevoked(originalTransactionId: $0) } ?? false
    }
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
    let cache: VerifiedTokenCache?

    /// - Parameters:
    ///   - verifier: proves the token's purchases.
    ///   - entitlements: the content identifiers the purchases unlock in the catalog at a time.
    ///   - revocations: transactions revoked after they were signed (403 even for a token signed
    ///     before the refund); nil when the origin receives no notifications. Asked on every
    ///     request, cached token or not.
    ///   - maxTokenAge: seconds after its `signedDate` a token is still taken (401 with a hint to
    ///     refresh after that); nil for no limit.
    ///   - cache: tokens already verified (only the verification is cached); nil verifies every
    ///     request's token.
    public init(
        verifier: any BearerTokenVerifier,
        entitlements: @escaping @Sendable ([VerifiedTransaction], Catalog, Date) -> Set<String>,
        revocations: (any RevocationSource)? = nil,
        maxTokenAge: TimeInterval? = nil,
        cache: VerifiedTokenCache? = nil,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.verifier = verifier
        self.entitlements = entitlements
        self.revocations = revocations
        self.maxTokenAge = maxTokenAge
        self.cache = cache
        self.clock = clock
    }

    public func authorize(bearer: String?, content: ServedContent, catalog: Catalog) async -> GateDecision {
        await answer(bearer: bearer, content: content, catalog: catalog).decision
    }

    /// The decision; an allow is valid until the earliest end of the token's transactions
    /// (`expiresDate`, `signedDate` + `maxTokenAge`), refusals have no known end.
    public func answer(bearer: String?, content: ServedContent, catalog: Catalog) async -> GateAnswer {
        guard let bearer, !bearer.isEmpty else {
            return GateAnswer(
                .unauthorized(reason: "a signed transaction is required (Authorization: Bearer <JWS>)", code: .missingToken))
        }
        let now = clock()
        var transactions: [VerifiedTransaction]
        if let cached = cache?.transactions(for: bearer, now: now) {
            transactions = cached
        } else {
            do {
                transactions = try await verifier.transactions(proving: bearer, now: now)
            } catch let error as CourierError {
                return GateAnswer(.unauthorized(reason: error.message, code: .invalidToken))
            } catch {
                return GateAnswer(.unauthorized(reason: "the signed transaction does not verify", code: .invalidToken))
            }
            cache?.store(transactions, for: bearer, now: now, maxTokenAge: maxTokenAge)
        }
        guard let first = transactions.first else {
            return GateAnswer(.unauthorized(reason: "the token proves no purchase", code: .invalidToken))
        }
        if let maxTokenAge, let oldest = transactions.map(\.signedDate).min(), now.timeIntervalSince(oldest) > maxTokenAge {
            return GateAnswer(
                .unauthorized(
                    reason: "the signed transaction is older than \(Int(maxTokenAge)) s; "
                        + "present a freshly signed one (StoreKit's Transaction.latest or currentEntitlements) and retry",
                    code: .staleToken))
        }
        var revokedIds: [String] = []
        if let revocations {
            transactions.removeAll { transaction in
                // A refund names one transaction. For a one-time purchase, the original and its
                // restored copies share an originalTransactionId, and a refund of any of them
                // takes the purchase back: every copy is refused. A subscription's renewals share
                // one too, but a refund there is one period's: only that transaction is refused.
                let revoked = revocations.isRevoked(
                    transaction.transactionId,
                    orPurchase: transaction.type == .autoRenewable ? nil : transaction.originalTransactionId)
                if revoked { revokedIds.append(transaction.transactionId) }
                return revoked
            }
        }
        if entitlements(transactions, catalog, now).contains(content.contentIdentifier) {
            // The allow ends with the first of the token's transactions to expire or go stale.
            var validUntil: Date?
            for transaction in transactions {
                for end in [transaction.expiresDate, maxTokenAge.map { transaction.signedDate.addingTimeInterval($0) }] {
                    if let end { validUntil = min(validUntil ?? end, end) }
                }
            }
            return GateAnswer(
                .allowed(subject: transactions.first?.transactionId ?? first.transactionId, reason: .entitled), validUntil: validUntil)
        }
        if !revokedIds.isEmpty {
            return GateAnswer(
                .forbidden(
                    reason: "transaction \(revokedIds.joined(separator: ", ")) was refunded or revoked (App Store Server Notification)",
                    code: .revoked))
        }
        return GateAnswer(
            .forbidden(
                reason: "the purchase of \(first.productId) does not entitle to \(content.contentIdentifier)", code: .notEntitled))
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
        cache: VerifiedTokenCache? = nil,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.init(
            verifier: verifier as any BearerTokenVerifier,
            entitlements: { transactions, catalog, now in
                Set(Entitlements.content(for: transactions, catalog: catalog, now: now).map(\.contentIdentifier))
            },
            revocations: revocations,
            maxTokenAge: maxTokenAge,
            cache: cache,
            clock: clock
        )
    }
}
