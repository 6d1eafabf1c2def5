import Foundation

extension CourierClient {
    /// The agent's answer to content whose folder vanished (removed behind Courier's back: a
    /// cache cleaner, an `rm -r`) while the store still records it delivered: the content the
    /// stored purchases still entitle in the configured catalog is queued again
    /// (`PaymentQueue.reconcile`), its transaction left finished. Only `identifiers` are looked
    /// at. Returns the downloads queued. Content removed through Courier (`content delete`, a
    /// purge for space) is not recorded any more and is left alone: `deliver --restore` brings
    /// it back when the user asks.
    func redeliverVanished(_ identifiers: Set<String>) async throws -> [DownloadRecord] {
        guard !identifiers.isEmpty else { return [] }
        let (location, base) = try configuration.catalogLocation(nil, for: "deliver vanished content from")
        let loaded = try await catalogLoader.load(location, relativeTo: base)
        let entitled = Entitlements.content(for: try queue.verifiedTransactions(), catalog: loaded.catalog, now: Date())
            .filter { identifiers.contains($0.contentIdentifier) }
        let content = try entitled.map { try QueuedContent($0, catalogLocation: loaded.url) }
        let redelivered = try queue.reconcile(content, redeliverMissing: true).redelivered
        if !redelivered.isEmpty {
            logger.info(
                "content folder gone: delivering it again",
                metadata: ["content-identifiers": "\(redelivered.map(\.contentIdentifier).joined(separator: ", "))"])
        }
        return redelivered
    }
}
