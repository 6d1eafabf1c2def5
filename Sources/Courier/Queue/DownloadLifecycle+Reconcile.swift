import Foundation

extension DownloadLifecycle {
    /// A field of a stored download that a catalog may change while naming the same package
    /// (same SHA-256 and length): where the bytes come from and how the content is placed.
    public enum CatalogField: String, Sendable, Hashable, CaseIterable {
        case url, mirrors, manifest, placement, unpackedLength, delivery, preservation
    }

    /// The input of `.reconcile` (and of `reconcileMissing`) besides the machine's own state:
    /// what the run's catalog says of the download's content, and what the shell
    /// (`PaymentQueue.reconcile`) found around it in the store, on disk and in `/proc`.
    public struct CatalogFacts: Sendable, Equatable {
        /// The download's lease (another live process's download is that process's business).
        public var lease: LeaseFact
        /// The state of the download's transaction (a failed one delivers nothing).
        public var transaction: TransactionState
        /// Whether the content is in place: recorded as delivered and its folder there.
        public var contentPlaced: Bool
        /// Whether the caller brings back content that is gone (a restore, the agent for a
        /// vanished folder).
        public var redeliverMissing: Bool
        /// Whether the catalog delivers the content on demand (`delivery: onDemand`)…
        public var onDemand: Bool
        /// …and whether the caller asked for it by name (`CourierClient.openContent`).
        public var requested: Bool
        /// Whether the catalog names the package the download holds: the same SHA-256 and length.
        public var samePackage: Bool
        /// Whether the download is a pending update (`courier update` chose its package, which
        /// the entitlement's catalog content need not be).
        public var pendingUpdate: Bool
        /// The fields in which the catalog's content differs from the stored download.
        public var changed: Set<CatalogField>
        /// Whether the validator (ETag, Last-Modified) the download's origin gave still applies at
        /// the catalog's URL (`TransferEngine.validatorApplies`: same scheme, host, port and path).
        public var validatorApplies: Bool

        public init(
            lease: LeaseFact = .none, transaction: TransactionState, contentPlaced: Bool = false, redeliverMissing: Bool = false,
            onDemand: Bool = false, requested: Bool = false, samePackage: Bool = true, pendingUpdate: Bool = false,
            changed: Set<CatalogField> = [], validatorApplies: Bool = true
        ) {
            self.lease = lease
            self.transaction = transaction
            self.contentPlaced = contentPlaced
            self.redeliverMissing = redeliverMissing
            self.onDemand = onDemand
            self.requested = requested
            self.samePackage = samePackage
            self.pendingUpdate = pendingUpdate
            self.changed = changed
            self.validatorApplies = validatorApplies
        }
    }

    /// `.reconcile` for content the store has no download of: with `redeliverMissing`, content
    /// that is not in place is added for the catalog's package (`add`), unless it is on-demand
    /// content nobody asked for (a restore does not fetch what nobody asked for). Nothing for a
    /// failed transaction.
    public static func reconcileMissing(_ facts: CatalogFacts) -> [Action] {
        guard facts.transaction != .failed, facts.redeliverMissing, !facts.onDemand || facts.requested, !facts.contentPlaced
        else { return [] }
        return [.add]
    }
}
