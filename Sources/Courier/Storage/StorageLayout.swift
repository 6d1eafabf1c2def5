import Foundation

/// Where Courier keeps its data: the storage layout of DESIGN.md under one root folder.
///
/// The root is `--storage DIR`, else `COURIER_STORAGE`, else `./Storage` where it exists, else
/// `$XDG_DATA_HOME/courier` (`resolve`).
/// `prepare()` creates the folders owner-only and the `CACHEDIR.TAG` at the root of `Caches/`.
/// The root holds signed transactions (bearer tokens for the origin), so it is 0700: created so,
/// and tightened when an existing root lets others in (`secureRoot()`).
public struct StorageLayout: Sendable, Hashable {
    public let root: URL

    public init(root: URL) {
        self.root = root.standardizedFileURL
    }

    /// The root named by `explicit` (`--storage`), else `COURIER_STORAGE`, else `./Storage` when
    /// that folder exists (the project's demo store), else `$XDG_DATA_HOME/courier` (by default
    /// `~/.local/share/courier`). See docs/cli.md, "Where Courier keeps things".
    public static func resolve(
        explicit: String?,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        currentDirectory: String = FileManager.default.currentDirectoryPath
    ) -> StorageLayout {
        if let path = explicit ?? environment["COURIER_STORAGE"], !path.isEmpty {
            return StorageLayout(root: URL(fileURLWithPath: path, isDirectory: true))
        }
        let local = URL(fileURLWithPath: currentDirectory, isDirectory: true).appendingPathComponent("Storage", isDirectory: true)
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: local.path, isDirectory: &isFolder), isFolder.boolValue {
            return StorageLayout(root: local)
        }
        if let data = xdgFolder("XDG_DATA_HOME", fallback: ".local/share", environment: environment) {
            return StorageLayout(root: data.appendingPathComponent("courier", isDirectory: true))
        }
        return StorageLayout(root: local)
    }

    /// `$NAME` when it is an absolute path (the XDG Base Directory rule: a relative one is
    /// ignored), else `$HOME/fallback`; nil without either.
    public static func xdgFolder(_ name: String, fallback: String, environment: [String: String]) -> URL? {
        if let value = environment[name], value.hasPrefix("/") {
            return URL(fileURLWithPath: value, isDirectory: true)
        }
        guard let home = environment["HOME"], home.hasPrefix("/") else { return nil }
        return URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent(fallback, isDirectory: true)
    }

    /// Whether a store exists at this root (its state database does). Commands that only read
    /// never create one.
    public var storeExists: Bool {
        FileManager.default.fileExists(atPath: stateDatabase.path)
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
    /// Content pins held by live processes: `Pins/<contentIdentifier>/<uuid>.lock`, each under
    /// an `flock` of its holder (`ContentPins`).
    public var pins: URL { root.appendingPathComponent("Pins", isDirectory: true) }
    /// The running agent's control socket.
    public var agentSocket: URL { root.appendingPathComponent("agent.sock") }

    /// Makes an existing root owner-only (0700) when group or others may enter or list it (a
    /// git checkout leaves `./Storage` 0755). Returns the mode it had when it changed it, nil when
    /// there was nothing to do (no root yet, or already owner-only). A symlinked root is followed:
    /// naming a root is the user's choice.
    @discardableResult
    public func secureRoot() throws -> mode_t? {
        var status = stat()
        guard stat(root.path, &status) == 0 else { return nil }
        guard status.st_mode & S_IFMT == S_IFDIR else {
            throw CourierError(.io, "\(root.path) is not a folder")
        }
        let permissions = status.st_mode & 0o7777
        guard permissions & 0o077 != 0 else { return nil }
        guard chmod(root.path, permissions & 0o7700 | 0o700) == 0 else {
            throw CourierError(.io, "cannot make \(root.path) owner-only", cause: String(cString: strerror(errno)))
        }
        return permissions
    }

    /// Creates the root and its folders (mode 0700, whatever the umask) and `Caches/CACHEDIR.TAG`
    /// if missing, and makes an existing root owner-only (`secureRoot()`).
    public func prepare() throws {
        let fileManager = FileManager.default
        try Self.makeOwnerOnlyFolder(root)
        try secureRoot()
        for folder in [downloads, caches, documents] {
            try Self.makeOwnerOnlyFolder(folder)
        }
        let tag = caches.appendingPathComponent("CACHEDIR.TAG")
        if !fileManager.fileExists(atPath: tag.path) {
            let text = """
                Signature: 8a477f597d28d172789f06886806bc55
                # This file is a cache directory tag created by Courier.
                # Content here can be downloaded again; backup tools may skip it.
                # For information about cache directory tags see https://bford.info/cachedir/

                """
            try OwnerOnlyFile.write(Data(text.utf8), toNewFileAt: tag.path)
        }
    }

    /// Creates `folder` (and missing parents) with mode 0700 from the first moment: `mkdir` with
    /// 0700 can only lose bits to the umask, never gain them, so no one else can enter it between
    /// its creation and a later chmod.
    package static func makeOwnerOnlyFolder(_ folder: URL) throws {
        let path = folder.path
        if mkdir(path, 0o700) == 0 || errno == EEXIST { return }
        guard errno == ENOENT else {
            throw CourierError(.io, "cannot create \(path)", cause: String(cString: strerror(errno)))
        }
        let parent = folder.deletingLastPathComponent()
        guard parent.path != path else {
            throw CourierError(.io, "cannot create \(path)", cause: "no parent folder")
        }
        try makeOwnerOnlyFolder(parent)
        guard mkdir(path, 0o700) == 0 || errno == EEXIST else {
            throw CourierError(.io, "cannot create \(path)", cause: String(cString: strerror(errno)))
        }
    }
}
