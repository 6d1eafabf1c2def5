import Courier
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The refunds in an origin's `origin.sqlite` that several gate processes on one machine share
/// (`courier serve --storage DIR` with the same DIR): a notification applied by one gate is
/// refused by every gate from its next request on.
///
/// `OriginStateStore` answers `isRevoked` from the set it loaded when it was opened (and from the
/// notifications it applied itself). This source looks at the state file on each question (two
/// `stat` calls: the database and its WAL, no query) and, when another process committed since
/// it last looked, opens the store again to load the current set. A state file that cannot be
/// read again keeps the last set, and the next question tries again.
public final class SharedRevocations: RevocationSource, Sendable {
    public let directory: URL
    private let file: String
    private let state: Mutex<(identity: [Int64], store: OriginStateStore)>

    /// Opens the state in `directory` (as `OriginStateStore(directory:)` does).
    public init(directory: URL) throws {
        self.directory = directory
        let identity = Self.identity(of: directory.appendingPathComponent("origin.sqlite").path)
        let store = try OriginStateStore(directory: directory)
        self.file = store.url.path
        self.state = Mutex((identity, store))
    }

    public func isRevoked(_ transactionId: String) -> Bool {
        let now = Self.identity(of: file)
        let store = state.withLock { current -> OriginStateStore in
            if current.identity != now, let reopened = try? OriginStateStore(directory: directory) {
                // The identity was taken before the set was read: a commit in between is seen
                // again next time, never lost.
                current = (now, reopened)
            }
            return current.store
        }
        return store.isRevoked(transactionId)
    }

    /// Device, inode, size and change times of the database and of its WAL (absent: zeros).
    static func identity(of path: String) -> [Int64] {
        var values: [Int64] = []
        for name in [path, path + "-wal"] {
            var info = Glibc.stat()
            if stat(name, &info) == 0 {
                values += [
                    Int64(info.st_dev), Int64(info.st_ino), Int64(info.st_size), Int64(info.st_mtim.tv_sec),
                    Int64(info.st_mtim.tv_nsec), Int64(info.st_ctim.tv_sec), Int64(info.st_ctim.tv_nsec),
                ]
            } else {
                values += [0, 0, 0, 0, 0, 0, 0]
            }
        }
        return values
    }
}
