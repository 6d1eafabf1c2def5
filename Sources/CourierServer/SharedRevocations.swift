import Courier
import Foundation
import GRDB
import Synchronization

/// The refunds in an origin's `origin.sqlite` that several gate processes on one machine share
/// (`courier serve --storage DIR` with the same DIR): a notification applied by one gate is
/// refused by every gate from its next request on.
///
/// `OriginStateStore` answers from the set it loaded when it was opened (and from the
/// notifications it applied itself). This source keeps a connection of its own to the state
/// file and asks SQLite's commit counter on each question (`PRAGMA data_version`, one statement,
/// no table read): the counter changes with every transaction another connection commits, in
/// the same commit, so two commits within one tick of the file's timestamps are both seen (file
/// sizes and times, which it watched before, can stay the same across two commits). When it
/// changed, the set is read again on the same connection. The counter is read before the set: a
/// commit in between is seen again next time, never lost. A state file that cannot be read
/// keeps the last set, and the next question tries again.
public final class SharedRevocations: RevocationSource, Sendable {
    public let directory: URL
    /// A connection of its own: `data_version` counts the commits of every other connection.
    private let reader: DatabaseQueue
    private let state: Mutex<(version: Int64?, revoked: RevokedSet)>

    /// Opens the state in `directory` (as `OriginStateStore(directory:)` does: created
    /// owner-only and migrated if needed), then a reading connection to it.
    public init(directory: URL) throws {
        self.directory = directory
        let store = try OriginStateStore(directory: directory)
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(1)
        do {
            reader = try DatabaseQueue(path: store.url.path, configuration: configuration)
        } catch {
            throw CourierError(.io, "cannot open the origin's state \(store.url.path)", cause: "\(error)")
        }
        state = Mutex((nil, RevokedSet([RevokedSet.Revocation]())))
        _ = current()
    }

    public func isRevoked(_ transactionId: String) -> Bool {
        current().contains(transactionId)
    }

    public func isPurchaseRevoked(originalTransactionId: String) -> Bool {
        current().containsPurchase(originalTransactionId)
    }

    /// One look at the commit counter for both questions.
    public func isRevoked(_ transactionId: String, orPurchase originalTransactionId: String?) -> Bool {
        let revoked = current()
        return revoked.contains(transactionId) || originalTransactionId.map { revoked.containsPurchase($0) } ?? false
    }

    /// The set as of the last commit: read again when the commit counter moved.
    private func current() -> RevokedSet {
        state.withLock { state in
            do {
                try reader.inDatabase { db in
                    let version = try Int64.fetchOne(db.cachedStatement(sql: "PRAGMA data_version"))
                    if let known = state.version, known == version { return }
                    let revocations = try OriginStateStore.revocations(db)
                    state.revoked.replace(with: revocations)
                    state.version = version
                }
            } catch {
                // Keeps the last set; the next question reads again.
            }
            return state.revoked
        }
    }
}
