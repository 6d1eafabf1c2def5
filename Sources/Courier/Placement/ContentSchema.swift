import GRDB

/// The schema of delivered content. Documented in docs/schema.md.
enum ContentSchema {
    static let migrations: [(String, @Sendable (Database) throws -> Void)] = []
}
