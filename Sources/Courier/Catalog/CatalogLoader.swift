import Crypto
import Foundation
import Logging

/// A catalog and where it came from.
public struct LoadedCatalog: Sendable {
    /// How the catalog was obtained.
    public enum Source: String, Sendable {
        /// Read from a file.
        case file
        /// Fetched in full (HTTP 200) and cached.
        case network
        /// The origin answered 304 Not Modified: the cached copy is current.
        case notModified
        /// The origin could not be reached or failed: the cached copy was used (a warning is logged).
        case staleCache
    }

    public let catalog: Catalog
    /// The location relative package URLs resolve against: the file, or the catalog's URL.
    public let url: URL
    public let source: Source
    /// The version of the signed targets metadata that named the catalog, when it was obtained
    /// through TUF (a trusted root is configured); nil for an unsigned catalog.
    public var signedVersion: Int64? = nil
}

extension CourierConfiguration {
    /// The catalog a command uses and the folder a relative path in it is resolved against:
    /// `named` (a command-line option, relative to the current directory), else the configured
    /// one (relative to the configuration's folder). Without either, a usage error (exit 2)
    /// saying what the catalog was wanted `for` ("look the purchase up in").
    public func catalogLocation(_ named: String?, for purpose: String) throws -> (location: String, base: URL) {
        if let named {
            return (named, URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true))
        }
        if let catalog { return (catalog, baseDirectory) }
        throw CourierError(
            .usage, "no catalog to \(purpose)", hint: "name one with --catalog FILE|URL, or set \"catalog\" in the configuration")
    }
}

/// Loads a catalog from a file or an http(s) URL, the way every command does.
///
/// A fetched catalog is cached under `Storage/Catalogs/` (`<sha256 of the URL>.json` and its
/// validators in `<sha256>.validators.json`). The next load revalidates it with `If-None-Match` /
/// `If-Modified-Since`: a 304 answers with the cached copy; when the origin cannot be reached or
/// fails (5xx) and a cached copy exists, that copy is used and a warning logged. A catalog that
/// does not decode is never cached.
public struct CatalogLoader: Sendable {
    public let transport: any HTTPTransport
    /// Where fetched catalogs are cached; nil loads without a cache.
    public let cacheDirectory: URL?
    /// Where trusted TUF metadata is kept (`Storage/Trust/`); nil keeps it for one load only.
    public let trustDirectory: URL?
    /// Whose signature the catalog needs.
    public let trust: CatalogTrust
    public let logger: Logger

    public init(transport: any HTTPTransport, layout: StorageLayout?, trust: CatalogTrust = .init(), logger: Logger) {
        self.transport = transport
        self.cacheDirectory = layout?.catalogs
        self.trustDirectory = layout?.root.appendingPathComponent("Trust", isDirectory: true)
        self.trust = trust
        self.logger = logger
    }

    /// The catalog at `location`: an http(s) URL, a `file:` URL, an absolute path, or a path
    /// relative to `base` (the current directory for a command-line option, the configuration's
    /// folder for a configured catalog). A file catalog's relative package URLs resolve against
    /// its folder (`file:` URLs, which the transfer copies from).
    public func load(_ location: String, relativeTo base: URL) async throws -> LoadedCatalog {
        if trust.trustedRoot != nil {
            return try await loadSigned(location, relativeTo: base)
        }
        var path = location
        if let url = URL(string: location), let scheme = url.scheme?.lowercased() {
            if scheme == "http" || scheme == "https" {
                if !URLPolicy.isLoopback(host: url.host ?? "") {
                    guard trust.allowUnsigned else {
                        throw CourierError(
                            .integrity, "the catalog \(url.absoluteString) is unsigned: no trusted root is configured",
                            cause: "signature check: no trusted root",
                            hint: "name the publisher's root.json with --catalog-root FILE or catalog.trustedRoot, "
                                + "or set catalog.allowUnsigned to true (docs/trust.md)")
                    }
                    logger.warning(
                        "the catalog is unsigned (catalog.allowUnsigned): whoever can change it can change what is delivered",
                        metadata: ["url": "\(url.absoluteString)"])
                }
                return try await fetch(url)
            }
            if scheme == "file" {
                let host = url.host ?? ""
                guard host.isEmpty || host.lowercased() == "localhost", url.path.hasPrefix("/") else {
                    throw CourierError(
                        .usage, "the catalog \(location) is not a local file URL", hint: "use file:///absolute/path or a plain path")
                }
                path = url.path
            }
        }
        let file = URL(fileURLWithPath: path, relativeTo: base).standardizedFileURL
        let data = try CourierError.wrapping(.usage, "cannot read the catalog \(file.path)") { try Data(contentsOf: file) }
        return LoadedCatalog(catalog: try Catalog.decode(data, name: file.path), url: file, source: .file)
    }

    /// The catalog as a TUF target: refresh root, timestamp, snapshot and targets from the
    /// repository beside the catalog (or where `trust` says), then fetch the target the catalog
    /// names and check its signed length and hashes. Trusted metadata is kept per repository in
    /// `Storage/Trust/<sha256 of the metadata URL>/`, so rollback and freeze are caught across
    /// runs. Any failed check is `integrity` (exit 6) naming the check; a repository that cannot
    /// be reached is `network` (exit 5). A stale copy is never used: an unreachable repository
    /// could be hiding a revocation.
    private func loadSigned(_ location: String, relativeTo base: URL) async throws -> LoadedCatalog {
        guard let rootFile = trust.trustedRoot else { throw CourierError(.internal, "no trusted root") }
        let catalogURL: URL
        if let url = URL(string: location), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" {
            catalogURL = url
        } else {
            catalogURL = URL(fileURLWithPath: location, relativeTo: base).standardizedFileURL
        }
        let folder = catalogURL.deletingLastPathComponent()
        func url(_ configured: String?, default name: String) throws -> URL {
            guard let configured else { return folder.appendingPathComponent(name, isDirectory: true) }
            if let url = URL(string: configured), url.scheme != nil { return url }
            return URL(fileURLWithPath: configured, relativeTo: base).standardizedFileURL
        }
        let metadataURL = try url(trust.metadataURL, default: "metadata")
        let targetsURL = try url(trust.targetsURL, default: "targets")
        let targetName = trust.targetName ?? catalogURL.lastPathComponent
        let rootData = try CourierError.wrapping(.usage, "cannot read the trusted root \(rootFile.path)") { try Data(contentsOf: rootFile) }

        var scratch: URL?
        defer { if let scratch { try? FileManager.default.removeItem(at: scratch) } }
        let storeFolder: URL
        if let trustDirectory {
            storeFolder = trustDirectory.appendingPathComponent(SHA256.hash(data: Data(metadataURL.absoluteString.utf8)).hex)
        } else {
            storeFolder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-trust-\(UUID().uuidString)")
            scratch = storeFolder
        }
        do {
            let store = try TUFMetadataStore(directory: storeFolder)
            let lock = try await store.lock()
            defer { lock.release() }
            do {
                try store.initialize(trustedRoot: rootData)
            } catch let error as TUFError {
                throw CourierError(.usage, "the trusted root \(rootFile.path) is not usable: \(error)")
            }
            var updater = try TUFUpdater(
                store: store, metadataURL: metadataURL, targetsURL: targetsURL, transport: RoutingTransport(network: transport),
                logger: logger)
            try await updater.refresh()
            guard let target = try await updater.targetInfo(targetName) else {
                throw TUFError(.notFound, "the signed targets metadata names no \(targetName)")
            }
            // The last verified copy, when it is still the one signed: not fetched again.
            let cached = storeFolder.appendingPathComponent("targets", isDirectory: true)
                .appendingPathComponent(TUFMetadataStore.fileName(targetName))
            let data: Data
            if let existing = try? Data(contentsOf: cached), (try? target.verify(existing)) != nil {
                data = existing
            } else {
                data = try await updater.fetchTarget(target)
                try DurableFile.makeDirectory(cached.deletingLastPathComponent())
                try DurableFile.replace(cached, with: data)
            }
            let catalog = try Catalog.decode(data)
            var loaded = LoadedCatalog(catalog: catalog, url: catalogURL, source: .network)
            loaded.signedVersion = updater.trusted.targets("targets", delegator: "root")?.version
            logger.debug(
                "catalog verified through TUF",
                metadata: ["url": "\(catalogURL.absoluteString)", "snapshot": "\(updater.trusted.snapshot?.version ?? 0)"])
            return loaded
        } catch let error as TUFError {
            if error.check == .download, error.status == nil {
                throw CourierError(.network, "the catalog's signed metadata cannot be fetched: \(error.message)", cause: "\(error)")
            }
            throw CourierError(
                .integrity, "the catalog was refused: \(error.check.rawValue) check failed: \(error.message)", cause: "TUF",
                hint: error.check == .expired
                    ? "the publisher must sign new metadata; until then nothing from this catalog is trusted" : nil)
        }
    }

    /// The cache entry for `url`: the body file and the validators file.
    public func cacheFiles(for url: URL) -> (body: URL, validators: URL)? {
        guard let cacheDirectory else { return nil }
        let key = SHA256.hash(data: Data(url.absoluteString.utf8)).hex
        return (
            cacheDirectory.appendingPathComponent("\(key).json"),
            cacheDirectory.appendingPathComponent("\(key).validators.json")
        )
    }

    private struct Validators: Codable {
        var url: String
        var etag: String?
        var lastModified: String?
    }

    private func fetch(_ url: URL) async throws -> LoadedCatalog {
        let files = cacheFiles(for: url)
        let cached = files.flatMap(readCache)
        var headers: [(String, String)] = [("Accept", "application/json")]
        if let cached {
            if let etag = cached.validators.etag { headers.append(("If-None-Match", etag)) }
            if let lastModified = cached.validators.lastModified { headers.append(("If-Modified-Since", lastModified)) }
        }
        let response: HTTPResponse
        do {
            response = try await transport.send(HTTPRequest(url: url, headers: headers))
        } catch {
            guard let cached else { throw error }
            logger.warning(
                "catalog origin unreachable; using the cached copy",
                metadata: ["url": "\(url.absoluteString)", "error": "\(error)"])
            return LoadedCatalog(catalog: cached.catalog, url: url, source: .staleCache)
        }
        switch response.status {
        case 304:
            guard let cached else {
                throw CourierError(.network, "the catalog \(url.absoluteString) answered 304 to an unconditional request", cause: "HTTP 304")
            }
            return LoadedCatalog(catalog: cached.catalog, url: url, source: .notModified)
        case 200:
            let catalog = try Catalog.decode(response.body, name: url.absoluteString)
            if let files {
                store(response, for: url, in: files)
            }
            return LoadedCatalog(catalog: catalog, url: url, source: .network)
        default:
            if (500...599).contains(response.status), let cached {
                logger.warning(
                    "catalog origin failed; using the cached copy",
                    metadata: ["url": "\(url.absoluteString)", "status": "\(response.status)"])
                return LoadedCatalog(catalog: cached.catalog, url: url, source: .staleCache)
            }
            throw CourierError(.network, "the catalog \(url.absoluteString) answered HTTP \(response.status)", cause: "HTTP \(response.status)")
        }
    }

    private func readCache(_ files: (body: URL, validators: URL)) -> (catalog: Catalog, validators: Validators)? {
        guard let validatorData = try? Data(contentsOf: files.validators),
            let validators = try? JSONDecoder().decode(Validators.self, from: validatorData),
            let body = try? Data(contentsOf: files.body),
            let catalog = try? Catalog.decode(body)
        else { return nil }
        return (catalog, validators)
    }

    /// Caches a 200 answer; a failure to cache is logged, never fatal (the catalog was fetched).
    private func store(_ response: HTTPResponse, for url: URL, in files: (body: URL, validators: URL)) {
        let validators = Validators(url: url.absoluteString, etag: response.headers["etag"], lastModified: response.headers["last-modified"])
        do {
            try FileManager.default.createDirectory(
                at: files.body.deletingLastPathComponent(), withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            // Body first, validators second: validators never describe a body that is not there.
            try response.body.write(to: files.body, options: .atomic)
            try JSONEncoder().encode(validators).write(to: files.validators, options: .atomic)
        } catch {
            logger.warning("cannot cache the catalog", metadata: ["url": "\(url.absoluteString)", "error": "\(error)"])
        }
    }
}
