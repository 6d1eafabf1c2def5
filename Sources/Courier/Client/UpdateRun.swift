import Foundation

/// What `courier update` works on (`CourierClient.prepareUpdates`): the plan, what of it is said,
/// the downloads to run and the error the run ends with after them, so that a front end only
/// says them and runs the scope.
public struct UpdateRun: Sendable {
    public var plan: UpdatePlan
    /// Skipped and said, left as they are: downgrades, refunds, content the catalog dropped
    /// (only when named).
    public var skipped: [UpdatePlan.Skipped]
    /// Named products that are not delivered in this store, sorted.
    public var missing: [String]
    /// The updates to run, by id: those queued now and those an earlier run left unfinished
    /// (interrupted, paused, failed), as stored.
    public var downloads: [DownloadRecord]

    public var scope: DeliveryScope { .downloads(Set(downloads.map(\.id))) }

    /// The error the run ends with after its updates: content a purchase no longer entitles
    /// (exit 3), else a named product that is not delivered here (exit 1); nil when neither.
    public var refusal: CourierError? {
        let refused = skipped.filter { $0.reason == .notEntitled }
        if !refused.isEmpty {
            return CourierError(
                .notEntitled, refused.map(\.message).joined(separator: "; "),
                hint: "the installed version is kept; a purchase that entitles it again lets the next update run")
        }
        if !missing.isEmpty {
            return CourierError(
                .notFound, "not delivered in this store: \(missing.joined(separator: ", "))",
                hint: "courier update updates delivered content; deliver a purchase first")
        }
        return nil
    }
}

extension CourierClient {
    /// Plans the updates `request` asks for (`planUpdates`), queues them (`queueUpdates`) and
    /// gathers the updates an earlier run left unfinished (of the named products, if any).
    public func prepareUpdates(_ request: UpdateRequest) async throws -> UpdateRun {
        let plan = try await planUpdates(request)
        let named = Set(request.products)
        let skipped = plan.skipped.filter { $0.reason != .notInCatalog || named.contains($0.productId) }
        let installed = Set(plan.upToDate.map(\.productId) + plan.updates.map(\.productId) + plan.skipped.map(\.productId))
        let queued = try queueUpdates(plan)
        var downloads: [String: DownloadRecord] = [:]
        for record in try queue.pendingUpdates() where named.isEmpty || named.contains(record.productId) {
            downloads[record.id] = record
        }
        for record in queued where downloads[record.id] == nil {
            downloads[record.id] = try queue.download(record.id)
        }
        return UpdateRun(
            plan: plan, skipped: skipped, missing: named.subtracting(installed).sorted(),
            downloads: downloads.values.sorted { $0.id < $1.id })
    }
}
