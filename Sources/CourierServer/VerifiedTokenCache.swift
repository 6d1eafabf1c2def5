import Courier
import Crypto
import Foundation
import Synchronization

/// Bearer tokens whose signature and chain verified, so the many Range requests of one download
/// (and nginx's `auth_request` for each of them) verify a token's ES256 signature once.
///
/// - Keyed by the SHA-256 of the token: the token itself is never kept.
/// - Bounded: at most `capacity` entries (default 10,000); the least recently used goes first.
/// - Only verification is cached. Revocation (refunds), `maxTokenAge` and entitlements are decided
///   on every request by the gate, so a refund recorded after a token was cached is refused at
///   once. Failures are never cached (a token signed a little in the future verifies later).
/// - An entry expires at the earliest of: `lifetime` after it was stored (default 600 s), the
///   token's `expiresDate` (subscriptions) and, with a `maxTokenAge`, its `signedDate` plus that.
///   A token that has already expired is not stored; after expiry it is verified again.
public final class VerifiedTokenCache: Sendable {
    public static let defaultCapacity = 10_000
    public static let defaultLifetime: TimeInterval = 600

    public let capacity: Int
    public let lifetime: TimeInterval
    let metrics: OriginMetrics?
    private let state: Mutex<LeastRecentlyUsed>

    public init(capacity: Int = VerifiedTokenCache.defaultCapacity, lifetime: TimeInterval = VerifiedTokenCache.defaultLifetime, metrics: OriginMetrics? = nil) {
        self.capacity = max(1, capacity)
        self.lifetime = lifetime
        self.metrics = metrics
        self.state = Mutex(LeastRecentlyUsed(capacity: max(1, capacity)))
    }

    /// The key of a token: its SHA-256.
    static func key(_ token: String) -> TokenHash {
        TokenHash(SHA256.hash(data: Array(token.utf8)))
    }

    /// The transactions `token` proved when it was verified, if it is cached and not expired at
    /// `now` (an expired entry is dropped). Counts a hit or a miss.
    public func transactions(for token: String, now: Date) -> [VerifiedTransaction]? {
        let key = Self.key(token)
        let found = state.withLock { $0.lookup(key, now: now) }
        if found != nil { metrics?.tokenCacheHits.increment() } else { metrics?.tokenCacheMisses.increment() }
        return found
    }

    /// Remembers that `token` verified to `transactions` at `now`.
    public func store(_ transactions: [VerifiedTransaction], for token: String, now: Date, maxTokenAge: TimeInterval?) {
        var expiry = now.addingTimeInterval(lifetime)
        for transaction in transactions {
            if let expires = transaction.expiresDate { expiry = min(expiry, expires) }
            if let maxTokenAge { expiry = min(expiry, transaction.signedDate.addingTimeInterval(maxTokenAge)) }
        }
        guard expiry > now, !transactions.isEmpty else { return }
        let key = Self.key(token)
        state.withLock { $0.insert(key, transactions, expiry: expiry) }
    }

    /// Entries held now (expired ones not yet dropped included).
    public var count: Int {
        state.withLock { $0.count }
    }
}

/// The SHA-256 of a token, as four words (Crypto's digest type is not `Sendable`).
struct TokenHash: Hashable, Sendable {
    let words: SIMD4<UInt64>

    init(_ digest: SHA256.Digest) {
        var words = SIMD4<UInt64>()
        for (offset, byte) in digest.enumerated() {
            words[offset / 8] = words[offset / 8] << 8 | UInt64(byte)
        }
        self.words = words
    }
}

/// A least-recently-used map from token hash to verified transactions, with expiry dates:
/// a dictionary of slots threaded on a doubly linked list (most recent at `head`).
struct LeastRecentlyUsed: ~Copyable, Sendable {
    struct Slot {
        var key: TokenHash
        var transactions: [VerifiedTransaction]
        var expiry: Date
        var newer: Int?
        var older: Int?
    }

    let capacity: Int
    private var slots: [Slot] = []
    private var index: [TokenHash: Int] = [:]
    private var free: [Int] = []
    private var head: Int?
    private var tail: Int?

    init(capacity: Int) {
        self.capacity = capacity
    }

    var count: Int { index.count }

    mutating func lookup(_ key: TokenHash, now: Date) -> [VerifiedTransaction]? {
        guard let position = index[key] else { return nil }
        guard slots[position].expiry > now else {
            remove(position)
            return nil
        }
        unlink(position)
        pushFront(position)
        return slots[position].transactions
    }

    mutating func insert(_ key: TokenHash, _ transactions: [VerifiedTransaction], expiry: Date) {
        if let position = index[key] {
            slots[position].transactions = transactions
            slots[position].expiry = expiry
            unlink(position)
            pushFront(position)
            return
        }
        if index.count >= capacity, let oldest = tail {
            remove(oldest)
        }
        let slot = Slot(key: key, transactions: transactions, expiry: expiry, newer: nil, older: nil)
        let position: Int
        if let reused = free.popLast() {
            slots[reused] = slot
            position = reused
        } else {
            slots.append(slot)
            position = slots.count - 1
        }
        index[key] = position
        pushFront(position)
    }

    private mutating func remove(_ position: Int) {
        unlink(position)
        index[slots[position].key] = nil
        slots[position].transactions = []
        free.append(position)
    }

    private mutating func unlink(_ position: Int) {
        let newer = slots[position].newer
        let older = slots[position].older
        if let newer { slots[newer].older = older } else { head = older }
        if let older { slots[older].newer = newer } else { tail = newer }
        slots[position].newer = nil
        slots[position].older = nil
    }

    private mutating func pushFront(_ position: Int) {
        slots[position].older = head
        slots[position].newer = nil
        if let head { slots[head].newer = position }
        head = position
        if tail == nil { tail = position }
    }
}
