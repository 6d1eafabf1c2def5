import GRDB

/// The schema of the transaction queue: transactions, downloads (with their resume journal) and
/// leases. Documented in docs/schema.md.
enum QueueSchema {
    static let migrations: [(String, @Sendable (Database) throws -> Void)] = []
}
