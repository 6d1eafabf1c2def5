import Foundation

/// Where Courier keeps its data: the storage layout of DESIGN.md under one root folder.
///
/// The root is `./Storage` by default, `COURIER_STORAGE` when set, or `--storage DIR`.
/// `prepare()` creates the folders owner-only and the `CACHEDIR.TAG` at the root of `Caches/`.
public struct StorageLayout: Sendable, Hashable {
    public let root: URL

    public init(root: URL) {
        self.root = root.standardizedFileURL
    }

    /// The root named by `explicit`, else `COURIER_STORAGE`, else `./Storage`.
    public static func resolve(
        explicit: String?,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> StorageLayout {
        let path = explicit ?? environment["COURIER_STORAGE"] ?? "Storage"
        return StorageLayout(root: URL(fileURLWithPath: path, isDirectory: true))
    }

    /// The SQLite store: transactions, downloads with their resume journal, delivered content.
    public var stateDatabase: URL { root.appendingPathComponent("state.sqlite") }
    /// Partial files, one per download.
    public var downloads: URL { root.appendingPathComponent("Downloads", isDirectory: true) }
    /// Purgeable content, one folder per product.
    public var caches: URL { root.appendingPathComponent("Caches", isDirectory: true) }
    /// Kept content, one folder per product, excluded from backups.
    public var documents: URL { root.appendingPathComponent("Documents", isDirectory: true) }
    /// Fetched catalogs with their HTTP validators (ETag, Last-Modified), see `CatalogLoader`.
    public var catalogs: URL { root.appendingPathComponent("Catalogs", isDirectory: true) }
    /// The running agent's control socket.
    public var agentSocket: URL { root.appendingPathComponent("agent.sock") }

    /// Creates the root and its folders (mode 0700) and `Caches/CACHEDIR.TAG` if missing.
    public func prepare() throws {
        let fileManager = FileManager.default
        for folder in [root, downloads, caches, documents] {
            do {
                try fileManager.createDirectory(
                    at: folder,
                    withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700]
                )
            } catch {
                throw CourierError(.io, "cannot create \(folder.path)", cause: "\(error)")
            }
        }
        let tag = caches.appendingPathComponent("CACHEDIR.TAG")
        if !fileManager.fileExists(atPath: tag.path) {
            let text = """
                Signature: 8a477f597d28d172789f06886806bc55
                # This file is a cache directory tag created by Courier.
                # Content here can be downloaded again; backup tools may skip it.
                # For information about cache directory tags see https://bford.info/cachedir/

                """
            do {
                try Data(text.utf8).write(to: tag, options: .atomic)
            } catch {
                throw CourierError(.io, "cannot write \(tag.path)", cause: "\(error)")
            }
        }
    }
}
