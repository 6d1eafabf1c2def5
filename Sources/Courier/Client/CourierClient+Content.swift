import Foundation

/// How `openContent` keeps content pinned (docs/delivery-classes.md).
public enum PinKind: Sendable, Equatable {
    /// Until the returned `OpenedContent`'s pin is released, or this process ends (a lock the
    /// kernel drops: a crashed app leaves no pin). ODR's `beginAccessingResources`.
    case held
    /// Until `closeContent` (`courier content close`), across processes and restarts.
    case untilClosed
}

/// Content `openContent` placed (or found placed) and pinned.
public struct OpenedContent: Sendable {
    public var content: DeliveredContent
    /// The held pin (`PinKind.held`), nil for `untilClosed`. Release it when done with the content.
    public var pin: HeldPin?
    /// Whether it had to be fetched (it was not placed: on-demand, or purged).
    public var fetched: Bool
}

/// What `contentRequest` found for content to open.
public enum ContentRequest: Sendable {
    /// Placed: a lookup, no network.
    case placed(DeliveredContent)
    /// Not placed: this download (queued now, or already waiting) fetches and places it.
    case download(DownloadRecord)
}

extension CourierClient {
    /// Opens content `productID` (a product's content, or a subscription item
    /// `PRODUCT.ITEM`): pins it (`pin`), then returns it if placed (a lookup, no network),
    /// else fetches it through the normal verified download and install (the stored purchases
    /// must entitle it in `catalog`, else the configured catalog), then returns it. `observer`
    /// hears the delivery's events. On-demand content is fetched only this way; content purged
    /// for space comes back this way too. Throws `notEntitled` when no stored purchase unlocks it.
    public func openContent(
        productID: String, catalog: String? = nil, pin: PinKind = .held, observer: (any PaymentQueueObserver)? = nil
    ) async throws -> OpenedContent {
        let (held, pinnedNow) = try pinContent(productID, pin)
        do {
            switch try await contentRequest(productID: productID, catalog: catalog) {
            case .placed(let content):
                return OpenedContent(content: content, pin: held, fetched: false)
            case .download(let download):
                let summary = try await deliver(scope: .downloads([download.id]), observer: observer)
                if let error = summary.endError(interrupted: false, checkpointed: "downloads") { throw error }
                guard let content = try contentPlacer().content(productID) else {
                    throw CourierError(.internal, "\(productID) was delivered but is not in place")
                }
                return OpenedContent(content: content, pin: held, fetched: true)
            }
        } catch {
            held?.release()
            if pinnedNow { _ = try? core.contentPlacer(store: queue.store, recover: false).pins.unpin(productID) }
            throw error
        }
    }

    /// Pins `identifier` as `kind` asks, before anything is looked up (a purge from then on
    /// keeps it). Returns the held pin, and whether an open pin was added now.
    public func pinContent(_ identifier: String, _ kind: PinKind) throws -> (HeldPin?, Bool) {
        let pins = contentPlacer().pins
        switch kind {
        case .held: return (try pins.hold(identifier), false)
        case .untilClosed: return (nil, try pins.pin(identifier))
        }
    }

    /// Ends the `content open` pin of `productID` (`courier content close`); held pins end with
    /// their holder. Returns whether there was one.
    @discardableResult
    public func closeContent(productID: String) throws -> Bool {
        try ContentPlacer.checkIdentifier(productID)
        return try contentPlacer().pins.unpin(productID)
    }

    /// Where content `productID` stands: placed (a lookup only), or the download that places it,
    /// queued now when needed (on-demand content never fetched, content purged or deleted) for
    /// the stored purchase that entitles it in `catalog` (else the configured catalog).
    public func contentRequest(productID: String, catalog: String? = nil) async throws -> ContentRequest {
        try ContentPlacer.checkIdentifier(productID)
        let placer = contentPlacer()
        if let content = try placer.content(productID) { return .placed(content) }
        let (location, base) = try configuration.catalogLocation(catalog, for: "open content from")
        let loaded = try await catalogLoader.load(location, relativeTo: base)
        let entitled = Entitlements.content(for: try queue.verifiedTransactions(), catalog: loaded.catalog, now: Date())
            .filter { $0.contentIdentifier.isIdentical(to: productID) }
        guard let first = entitled.first else {
            let items = loaded.catalog.product(productID)?.items ?? []
            throw CourierError(
                .notEntitled, "no stored purchase entitles \(productID) in the catalog",
                hint: items.isEmpty
                    ? "deliver or enqueue the purchase's receipt first"
                    : "name one item of the subscription: \(productID).ITEM (see `courier content list`)")
        }
        let content = try QueuedContent(first, catalogLocation: loaded.url)
        let reconciled = try queue.reconcile([content], redeliverMissing: true, requested: [productID])
        let id = DownloadRecord.makeId(transactionId: content.transactionId, contentIdentifier: content.contentIdentifier)
        if let queued = reconciled.redelivered.first(where: { $0.id == id }) ?? reconciled.retargeted.first(where: { $0.id == id }) {
            logger.info("content not in place: fetching it", metadata: ["content-identifier": "\(productID)", "download-id": "\(id)"])
            return .download(queued)
        }
        guard let download = try queue.download(id) else {
            throw CourierError(.internal, "no download of \(productID) could be queued")
        }
        // Already queued (a prefetch in flight, a paused one): worked now, resumed if stopped.
        if download.state == .paused || download.state == .failed { try queue.resume([id]) }
        return .download(try queue.download(id) ?? download)
    }
}
