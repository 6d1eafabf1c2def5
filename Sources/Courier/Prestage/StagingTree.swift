import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where `courier prestage` publishes packages and the catalog that `courier serve` reads.
///
/// Publishing is atomic: a reader sees a package or catalog whole or not at all, and the catalog
/// is published last, so every package it lists is already there. The catalog is the durability
/// point: packages are published without a sync each, and `publishCatalog` makes them durable
/// together (`syncPublished`) before the catalog that names them. A package at its path that no
/// published catalog names may therefore be torn by a power cut: the plan checks its bytes
/// (`hasVerifiedPackage`) before trusting it. A local folder implements this with rename and one
/// `syncfs`; object storage would with a PUT per object (see docs/scaling.md). Package paths are relative to the catalog, e.g.
/// `packages/com.example.pack1/<sha256>.zip`; a path names its bytes, so a staged path is never
/// rewritten, only added or removed.
public protocol StagingTree: Sendable {
    /// The catalog published last, or nil when none has been published.
    func publishedCatalog() throws -> Catalog?
    /// Whether a complete package of `length` bytes is published at `path`.
    func hasPackage(at path: String, length: Int64) throws -> Bool
    /// Whether the file at `path` has exactly `length` bytes with SHA-256 `sha256` (lowercase
    /// hex): a package published by a run that ended before its catalog, which a power cut may
    /// have torn. The default trusts `hasPackage` (a tree whose every publish is durable).
    func hasVerifiedPackage(at path: String, length: Int64, sha256: String) throws -> Bool
    /// Publishes the verified local file `file` at `path` and consumes it (it is moved or removed).
    /// Durable once `syncPublished` (or `publishCatalog`) returns.
    func publishPackage(_ file: URL, at path: String) throws
    /// Publishes each verified local file at its path, in order, as `publishPackage` does.
    func publishPackages(_ files: [(file: URL, path: String)]) throws
    /// Makes every package published so far durable (a local tree: one `syncfs`). A job calls it
    /// before it records a package as staged where the record outlives this machine (a shared
    /// queue); `publishCatalog` calls it itself. The default does nothing (every publish durable).
    func syncPublished() throws
    /// Makes every published package durable, then publishes `catalog` atomically. Call only once
    /// every package it lists is published.
    func publishCatalog(_ catalog: Catalog) throws
    /// Removes published packages under `packages/` that `catalog` no longer lists, keeping those
    /// modified within `grace` seconds (a client may still be resuming one). Returns the paths removed.
    func removeUnlisted(by catalog: Catalog, grace: TimeInterval) throws -> [String]
    /// A local folder for partial downloads and their journals, kept between runs (resume).
    var workDirectory: URL { get }
    /// The bytes of a small published file (a package's manifest), or nil when there is none.
    func publishedFile(at path: String) throws -> Data?
    /// Makes what `catalog` lists, and the catalog, readable by a web server where an earlier
    /// run left them owner-only (`publishCatalog` does it for the catalog it publishes; a run
    /// that publishes nothing calls this). The default does nothing.
    func openToReaders(_ catalog: Catalog) throws
}

extension StagingTree {
    public func openToReaders(_ catalog: Catalog) throws {}
    public func publishedFile(at path: String) throws -> Data? { nil }
    public func syncPublished() throws {}
    public func hasVerifiedPackage(at path: String, length: Int64, sha256: String) throws -> Bool {
        try hasPackage(at: path, length: length)
    }
    public func publishPackages(_ files: [(file: URL, path: String)]) throws {
        for (file, path) in files { try publishPackage(file, at: path) }
    }
}

/// A staging tree in a local folder, the one `courier serve --content DIR` serves:
/// ```
/// DIR/catalog.json                              published last, by rename
/// DIR/packages/<contentIdentifier>/<sha256>.zip  published by rename, never rewritten
/// DIR/.prestage/                                partial downloads and journals (not served)
/// ```
/// Nothing is fsynced per file: `syncPublished` flushes the tree's filesystem (`syncfs`) once,
/// and `publishCatalog` does so before the catalog's own rename.
///
/// Modes (docs/origin.md, "File modes"): what is published is what a web server's worker (nginx's
/// `www-data`) must read, whatever the umask: the folders `DIR` (when this creates it) and
/// `packages/…` are `publishedFolderMode` (0755), the catalog, packages and manifests
/// `publishedFileMode` (0644), each given its mode before its name is published (a package is
/// renamed in from the owner-only work folder once its mode is set; the catalog's temporary file
/// gets its mode before its first byte). Who may have a package is the gate's decision (nginx's
/// `auth_request`), by path, not the file's mode. The work folder `.prestage/` (partial
/// downloads, journals) stays owner-only (0700, its files 0600). Parents of `DIR` this creates
/// are 0711: others may pass through, not list.
public struct LocalStagingTree: StagingTree {
    public let root: URL

    /// The mode of published folders (`DIR` when created here, `packages/`, `packages/<id>/`).
    public static let publishedFolderMode: mode_t = 0o755
    /// The mode of published files (catalog, packages, manifests).
    public static let publishedFileMode: mode_t = 0o644
    /// The mode of folders above `DIR` that this creates: traversable, not listable.
    public static let parentFolderMode: mode_t = 0o711

    public init(root: URL) throws {
        self.root = root.standardizedFileURL
        let packages = self.root.appendingPathComponent("packages", isDirectory: true)
        try Self.makeFolder(self.root.path, mode: Self.publishedFolderMode, parents: Self.parentFolderMode)
        try Self.makeFolder(workDirectory.path, mode: 0o700, parents: Self.parentFolderMode, enforce: true)
        try Self.makeFolder(packages.path, mode: Self.publishedFolderMode, parents: Self.parentFolderMode, enforce: true)
    }

    /// Creates the folder at `path` with exactly `mode` (not narrowed by the umask), and any
    /// missing parent with `parents`. An existing folder keeps its mode, unless `enforce` (a
    /// folder the tree owns: `packages/`, `.prestage/`, whose mode an older Courier or a umask
    /// set otherwise). The umask can only narrow `mkdir`'s mode, so a folder is never wider
    /// than `mode`, even before its `chmod`.
    static func makeFolder(_ path: String, mode: mode_t, parents: mode_t, enforce: Bool = false) throws {
        if mkdir(path, mode) == 0 {
            guard chmod(path, mode) == 0 else { throw CourierError.posix("chmod", path: path) }
            return
        }
        switch errno {
        case EEXIST:
            var status = stat()
            guard stat(path, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
                throw CourierError(.io, "cannot create \(path): something else is there")
            }
            if enforce, status.st_mode & 0o7777 != mode, chmod(path, mode) != 0 { throw CourierError.posix("chmod", path: path) }
        case ENOENT:
            let parent = (path as NSString).deletingLastPathComponent
            guard !parent.isEmpty, parent != path else { throw CourierError.posix("mkdir", path: path) }
            try makeFolder(parent, mode: parents, parents: parents)
            try makeFolder(path, mode: mode, parents: parents, enforce: enforce)
        default:
            throw CourierError.posix("mkdir", path: path)
        }
    }

    public var catalogFile: URL { root.appendingPathComponent("catalog.json") }
    public var workDirectory: URL { root.appendingPathComponent(".prestage", isDirectory: true) }

    public func publishedCatalog() throws -> Catalog? {
        guard FileManager.default.fileExists(atPath: catalogFile.path) else { return nil }
        let data: Data
        do {
            data = try Data(contentsOf: catalogFile)
        } catch {
            throw CourierError(.io, "cannot read the published catalog \(catalogFile.path)", cause: "\(error)")
        }
        return try Catalog.decode(data)
    }

    public func hasPackage(at path: String, length: Int64) throws -> Bool {
        // A plan asks once per catalog entry: the path as a string, no URL built.
        try Self.checkInside(path)
        var info = stat()
        guard stat(root.path + "/" + path, &info) == 0 else { return false }
        return (info.st_mode & S_IFMT) == S_IFREG && Int64(info.st_size) == length
    }

    public func publishPackage(_ file: URL, at path: String) throws {
        try publishPackages([(file, path)])
    }

    public func hasVerifiedPackage(at path: String, length: Int64, sha256: String) throws -> Bool {
        Durable.matches(try resolve(path), length: length, sha256: sha256)
    }

    /// Gives each file the published mode (0644; it is still in the owner-only work folder,
    /// or owner-only where it is), then renames it to its path (one `rename`, atomic for
    /// readers). Nothing is synced here.
    public func publishPackages(_ files: [(file: URL, path: String)]) throws {
        // Paths as strings, not URLs: two per package (a URL appended to, cut and turned back
        // into a path cost 1% of a prestage run).
        var folders = Set<Substring>()
        let rootPath = root.path
        for (file, path) in files {
            try Self.checkInside(path)
            let target = rootPath + "/" + path
            if let slash = target.utf8.lastIndex(of: UInt8(ascii: "/")) {
                let folder = target[..<slash]
                if folders.insert(folder).inserted { try Self.makePublishedFolder(String(folder)) }
            }
            guard chmod(file.path, Self.publishedFileMode) == 0 else { throw CourierError.posix("chmod", path: file.path) }
            try Durable.rename(file.path, to: target)
        }
    }

    /// Creates the published folder at `path` with mode 0755 (its parent exists in the common
    /// case: one `mkdir` and one `chmod`), and gives an existing one that mode (a folder an
    /// older Courier made owner-only).
    private static func makePublishedFolder(_ path: String) throws {
        try makeFolder(path, mode: publishedFolderMode, parents: publishedFolderMode, enforce: true)
    }

    /// One `syncfs` of the filesystem holding the tree (and of the one holding `packages/`, when
    /// another filesystem is mounted there): every file and rename under it is then durable.
    public func syncPublished() throws {
        let packages = root.appendingPathComponent("packages", isDirectory: true)
        try FilesystemSync.flush(containing: root)
        var rootInfo = stat()
        var packagesInfo = stat()
        if stat(root.path, &rootInfo) == 0, stat(packages.path, &packagesInfo) == 0, rootInfo.st_dev != packagesInfo.st_dev {
            try FilesystemSync.flush(containing: packages)
        }
    }

    public func publishCatalog(_ catalog: Catalog) throws {
        let data = try catalog.encoded()
        let temporary = root.appendingPathComponent(".catalog.json.\(getpid()).tmp")
        // The sync makes the packages, their folders and the new catalog's bytes durable at once;
        // only then does the name `catalog.json` point at it.
        try Durable.write(data, to: temporary, sync: false, mode: Self.publishedFileMode)
        try Self.carryValidators(to: temporary, from: catalogFile, changed: (try? Data(contentsOf: catalogFile)) != data)
        try openToReaders(catalog)
        try syncPublished()
        try Durable.rename(temporary, to: catalogFile)
        try Durable.fsyncDirectory(root)
    }

    /// nginx's validators have a resolution of one second (ETag `"mtime-size"`, Last-Modified):
    /// a new catalog as long as the one it replaces, published within the same second, would be
    /// answered 304 to a client that holds the old one, and that client would never see the
    /// update (seen in DeploymentTests: two prestage runs a second apart). A catalog that
    /// changed gets a modification time at least a second past the current one's; the same
    /// catalog published again keeps the current one's, so clients' validators stay good.
    static func carryValidators(to temporary: URL, from current: URL, changed: Bool) throws {
        var old = stat()
        var new = stat()
        guard stat(current.path, &old) == 0, stat(temporary.path, &new) == 0 else { return }
        let modified: timespec
        if !changed {
            modified = old.st_mtim
        } else if new.st_mtim.tv_sec <= old.st_mtim.tv_sec {
            modified = timespec(tv_sec: old.st_mtim.tv_sec + 1, tv_nsec: 0)
        } else {
            return
        }
        var times = [new.st_atim, modified]
        guard utimensat(AT_FDCWD, temporary.path, &times, 0) == 0 else {
            throw CourierError(.io, "cannot set the modification time of \(temporary.path)", cause: String(cString: strerror(errno)))
        }
    }

    /// Gives every file `catalog` lists under this tree (packages, manifests), their folders,
    /// `DIR` and `catalog.json` that are owner-only the published modes: a tree an earlier
    /// Courier published (folders 0700, files 0600, which nginx's workers cannot open) is served
    /// as documented after the next run, with no `chmod` by hand. Only regular files and folders
    /// this user owns with no bit for group or others are changed (never through a symbolic
    /// link): a mode someone chose (0750 with the web server's group) is left as it is. One
    /// `lstat` per listed file and folder.
    public func openToReaders(_ catalog: Catalog) throws {
        let rootPath = root.path
        try Self.widen(rootPath, to: Self.publishedFolderMode, kind: S_IFDIR)
        try Self.widen(catalogFile.path, to: Self.publishedFileMode, kind: S_IFREG)
        var folders = Set<String>()
        for entry in catalog.allContent {
            for path in [entry.content.url] + (entry.content.manifest.map { [$0.url] } ?? []) {
                guard !path.contains("://"), (try? Self.checkInside(path)) != nil else { continue }
                let file = rootPath + "/" + path
                try Self.widen(file, to: Self.publishedFileMode, kind: S_IFREG)
                let folder = (file as NSString).deletingLastPathComponent
                if folder.count > rootPath.count, folders.insert(folder).inserted {
                    try Self.widen(folder, to: Self.publishedFolderMode, kind: S_IFDIR)
                }
            }
        }
    }

    /// Sets `mode` on `path` when it is a `kind` (lstat: a symbolic link is never followed) this
    /// user owns with no permission bit for group or others.
    private static func widen(_ path: String, to mode: mode_t, kind: mode_t) throws {
        var status = stat()
        guard lstat(path, &status) == 0, status.st_mode & S_IFMT == kind, status.st_uid == geteuid(), status.st_mode & 0o077 == 0
        else { return }
        guard chmod(path, mode) == 0 else { throw CourierError.posix("chmod", path: path) }
    }

    public func publishedFile(at path: String) throws -> Data? {
        let file = try resolve(path)
        return FileManager.default.fileExists(atPath: file.path) ? try? Data(contentsOf: file) : nil
    }

    public func removeUnlisted(by catalog: Catalog, grace: TimeInterval) throws -> [String] {
        let listed = Set(catalog.allContent.flatMap { [$0.content.url] + ($0.content.manifest.map { [$0.url] } ?? []) })
        let packages = root.appendingPathComponent("packages", isDirectory: true)
        var removed: [String] = []
        let fileManager = FileManager.default
        let folders = Self.names(in: packages.path)
        let cutoff = Date().addingTimeInterval(-grace)
        for folder in folders {
            for name in Self.names(in: packages.path + "/" + folder) where !name.hasPrefix(".") {
                let path = "packages/\(folder)/\(name)"
                guard !listed.contains(path) else { continue }
                let url = root.appendingPathComponent(path)
                let modified = (try? url.resourceValues(forKeys: [.contentModificationDateKey]))?.contentModificationDate
                guard let modified, modified < cutoff else { continue }
                if (try? fileManager.removeItem(at: url)) != nil { removed.append(path) }
            }
        }
        return removed.sorted()
    }

    /// The names in the folder at `path` (without `.` and `..`); none when it cannot be read or
    /// is not a folder. `readdir` itself: a run's end lists every product folder, and
    /// `FileManager.contentsOfDirectory` cost about 15 µs a folder.
    static func names(in path: String) -> [String] {
        guard let folder = opendir(path) else { return [] }
        defer { closedir(folder) }
        var names: [String] = []
        while let entry = readdir(folder) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: entry.pointee.d_name)) {
                    String(cString: $0)
                }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// The file of a relative path, refusing anything that would leave the tree.
    private func resolve(_ path: String) throws -> URL {
        try Self.checkInside(path)
        return root.appendingPathComponent(path, isDirectory: false)
    }

    /// Refuses a path that is absolute or empty, or has an empty, `.` or `..` component.
    static func checkInside(_ path: String) throws {
        var component = 0  // bytes of the current component; 3 stands for "more than two"
        var dots = 0
        var inside = !path.isEmpty
        for byte in path.utf8 where inside {
            if byte == UInt8(ascii: "/") {
                inside = component > 0 && !(component == dots && dots <= 2)
                component = 0
                dots = 0
            } else {
                component = min(component + 1, 3)
                if byte == UInt8(ascii: ".") { dots = min(dots + 1, 3) }
            }
        }
        guard inside, component > 0, !(component == dots && dots <= 2) else {
            throw CourierError(.usage, "\(path) is not a path inside the staging tree")
        }
    }
}

extension Catalog {
    /// Every package the catalog lists, with the identifier a client places it under.
    public var allContent: [(contentIdentifier: String, productId: String, itemId: String?, content: Content)] {
        var result: [(String, String, String?, Content)] = []
        for product in products {
            if let content = product.content { result.append((product.productId, product.productId, nil, content)) }
            for item in product.items ?? [] {
                result.append(("\(product.productId).\(item.itemId)", product.productId, item.itemId, item.content))
            }
        }
        return result
    }
}

/// Small durable-write helpers: data is fsynced before the name that points at it exists.
enum Durable {
    /// Whether `file` has exactly `length` bytes whose SHA-256 is `sha256` (hex, any case).
    static func matches(_ file: URL, length: Int64, sha256: String) -> Bool {
        var status = stat()
        guard stat(file.path, &status) == 0, status.st_mode & S_IFMT == S_IFREG, Int64(status.st_size) == length else { return false }
        return (try? PackageHasher.hash(file, blockSize: 1 << 20).get()) == sha256.lowercased()
    }

    static func fsync(_ file: URL) throws {
        let fd = open(file.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CourierError.posix("open", path: file.path) }
        defer { close(fd) }
        guard Glibc.fsync(fd) == 0 else { throw CourierError.posix("fsync", path: file.path) }
    }

    static func fsyncDirectory(_ folder: URL) throws {
        let fd = open(folder.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw CourierError.posix("open", path: folder.path) }
        defer { close(fd) }
        guard Glibc.fsync(fd) == 0 else { throw CourierError.posix("fsync", path: folder.path) }
    }

    static func rename(_ source: URL, to target: URL) throws {
        try rename(source.path, to: target.path)
    }

    static func rename(_ source: String, to target: String) throws {
        guard Glibc.rename(source, target) == 0 else {
            throw CourierError.posix("rename", path: "\(source) to \(target)")
        }
    }

    /// Writes `data` to `file` (created or truncated, mode 0644 narrowed by the umask) and fsyncs
    /// it, unless `sync` is false (the caller syncs it later, e.g. by publishing it). With `mode`,
    /// the file has exactly that mode, whatever the umask, before its first byte.
    static func write(_ data: Data, to file: URL, sync: Bool = true, mode: mode_t? = nil) throws {
        let fd = open(file.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode ?? 0o644)
        guard fd >= 0 else { throw CourierError.posix("open", path: file.path) }
        defer { close(fd) }
        if let mode, fchmod(fd, mode) != 0 { throw CourierError.posix("fchmod", path: file.path) }
        try data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(fd, raw.baseAddress.map { $0 + offset }, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw CourierError.posix("write", path: file.path)
                }
                offset += n
            }
        }
        guard !sync || Glibc.fsync(fd) == 0 else { throw CourierError.posix("fsync", path: file.path) }
    }
}
