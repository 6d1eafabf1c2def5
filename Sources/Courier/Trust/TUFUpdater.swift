import Foundation
import Logging

/// Limits on what one update downloads (python-tuf's defaults): every metadata download is
/// bounded, so an endless-data attack ends at the limit.
public struct TUFLimits: Sendable {
    public var maxRootRotations = 256
    public var maxDelegations = 32
    public var rootMaxLength = 512_000
    public var timestampMaxLength = 16_384
    public var snapshotMaxLength = 2_000_000
    public var targetsMaxLength = 5_000_000
    /// The largest target downloaded, whatever metadata says.
    public var targetMaxLength = 512 << 20

    public init() {}
}

/// The TUF client workflow (specification 1.0.x section 5) over Courier's HTTP transport:
/// `refresh()` updates root (one version at a time), timestamp, snapshot and top-level targets;
/// `targetInfo(_:)` walks the delegations for a path; `fetchTarget(_:)` downloads a target and
/// checks its length and hashes.
///
/// Trusted metadata lives in `store` (owner-only files, replaced atomically); nothing fetched is
/// written there before it passed every check.
public struct TUFUpdater: Sendable {
    public let store: TUFMetadataStore
    public let metadataURL: URL
    public let targetsURL: URL?
    public let transport: any HTTPTransport
    public var limits: TUFLimits
    public let logger: Logger
    public private(set) var trusted: TUFTrustedSet

    /// An updater starting from the root in `store` (see `TUFMetadataStore.initialize`).
    public init(
        store: TUFMetadataStore, metadataURL: URL, targetsURL: URL?, transport: any HTTPTransport, limits: TUFLimits = .init(),
        referenceTime: Date = Date(), logger: Logger
    ) throws {
        guard let root = try store.read("root") else {
            throw TUFError(.notFound, "no trusted root in \(store.directory.path)")
        }
        self.trusted = try TUFTrustedSet(trustedRoot: root, referenceTime: referenceTime)
        self.store = store
        self.metadataURL = Self.directoryURL(metadataURL)
        self.targetsURL = targetsURL.map(Self.directoryURL)
        self.transport = transport
        self.limits = limits
        self.logger = logger
    }

    private static func directoryURL(_ url: URL) -> URL {
        url.absoluteString.hasSuffix("/") ? url : URL(string: url.absoluteString + "/") ?? url
    }

    /// Root, timestamp, snapshot and targets, each checked before the next is fetched.
    public mutating func refresh() async throws {
        try await loadRoot()
        try await loadTimestamp()
        try await loadSnapshot()
        _ = try await loadTargets("targets", delegator: "root")
    }

    private mutating func loadRoot() async throws {
        let first = trusted.root.version + 1
        for version in first..<(first + Int64(limits.maxRootRotations)) {
            let data: Data
            do {
                data = try await download("root", version: version, maxLength: limits.rootMaxLength)
            } catch let error as TUFError where error.status == 404 || error.status == 403 {
                break
            }
            try trusted.updateRoot(data)
            try store.write("root", data)
            logger.debug("trusted root updated", metadata: ["version": "\(version)"])
        }
    }

    private mutating func loadTimestamp() async throws {
        if let local = try? store.read("timestamp") {
            do {
                try trusted.updateTimestamp(local)
            } catch {
                logger.debug("local timestamp not used", metadata: ["reason": "\(error)"])
            }
        }
        let data = try await download("timestamp", version: nil, maxLength: limits.timestampMaxLength)
        do {
            try trusted.updateTimestamp(data)
        } catch is TUFEqualTimestampVersion {
            return
        }
        try store.write("timestamp", data)
    }

    private mutating func loadSnapshot() async throws {
        if let local = try? store.read("snapshot") {
            do {
                try trusted.updateSnapshot(local, trusted: true)
                return
            } catch {
                logger.debug("local snapshot not used", metadata: ["reason": "\(error)"])
            }
        }
        guard let meta = trusted.timestamp?.snapshotMeta else { throw TUFError(.notFound, "no trusted timestamp") }
        let data = try await download(
            "snapshot", version: trusted.root.consistentSnapshot ? meta.version : nil,
            maxLength: Self.limit(meta.length, limits.snapshotMaxLength))
        try trusted.updateSnapshot(data, trusted: false)
        try store.write("snapshot", data)
    }

    private static func limit(_ signed: Int64?, _ fallback: Int) -> Int {
        guard let signed else { return fallback }
        return signed > Int64(Int32.max) ? Int(Int32.max) : Int(signed)
    }

    /// Targets metadata of `role` verified through `delegator`: already trusted through it; else
    /// the bytes trusted through another delegator, verified again through this one; else the
    /// stored copy; else downloaded.
    private mutating func loadTargets(_ role: String, delegator: String) async throws -> TUFTargets {
        if let known = trusted.targets(role, delegator: delegator) { return known }
        if let bytes = trusted.trustedBytes(of: role) {
            return try trusted.updateTargets(bytes, role: role, delegator: delegator)
        }
        if let local = try? store.read(role) {
            do {
                return try trusted.updateTargets(local, role: role, delegator: delegator)
            } catch {
                logger.debug("local targets metadata not used", metadata: ["role": "\(role)", "reason": "\(error)"])
            }
        }
        guard let meta = trusted.snapshot?.meta["\(role).json"] else {
            throw TUFError(.notFound, "role \(role) is delegated but snapshot does not list it")
        }
        let data = try await download(
            role, version: trusted.root.consistentSnapshot ? meta.version : nil,
            maxLength: Self.limit(meta.length, limits.targetsMaxLength))
        let targets = try trusted.updateTargets(data, role: role, delegator: delegator)
        try store.write(role, data)
        return targets
    }

    /// The target at `path` as the first delegation that covers it (pre-order, depth first,
    /// terminating delegations end the search) says, or nil. `refresh()` first.
    public mutating func targetInfo(_ path: String) async throws -> TUFTargetFile? {
        var toVisit: [(role: String, delegator: String)] = [("targets", "root")]
        var visited = Set<String>()
        var remaining = limits.maxDelegations
        while remaining > 0, let next = toVisit.popLast() {
            let (role, delegator) = next
            if visited.contains(role) { continue }
            let targets = try await loadTargets(role, delegator: delegator)
            if let target = targets.targets[path] { return target }
            visited.insert(role)
            remaining -= 1
            let children = targets.delegations(covering: path)
            if children.terminating { toVisit.removeAll() }
            toVisit.append(contentsOf: children.roles.reversed().map { ($0.name, role) })
        }
        if !toVisit.isEmpty {
            logger.debug("delegation search stopped at the limit", metadata: ["limit": "\(limits.maxDelegations)"])
        }
        return nil
    }

    /// The URL of `target` (hash-prefixed under consistent snapshots).
    public func targetURL(_ target: TUFTargetFile) throws -> URL {
        guard let targetsURL else { throw TUFError(.notFound, "no targets URL") }
        var path = target.path
        if trusted.root.consistentSnapshot, let hash = target.hashes.digests.first?.hex {
            let parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            path = (parts.dropLast() + ["\(hash).\(parts.last ?? "")"]).joined(separator: "/")
        }
        let encoded = path.addingPercentEncoding(withAllowedCharacters: Self.pathCharacters) ?? path
        guard let url = URL(string: targetsURL.absoluteString + encoded) else {
            throw TUFError(.format, "target path \"\(target.path)\" makes no URL")
        }
        return url
    }

    private static var pathCharacters: CharacterSet { CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/") }

    /// Downloads `target` (no more than its signed length) and checks length and hashes.
    public func fetchTarget(_ target: TUFTargetFile) async throws -> Data {
        guard target.length <= Int64(limits.targetMaxLength) else {
            throw TUFError(.length, "target \"\(target.path)\" is \(target.length) bytes, over the \(limits.targetMaxLength)-byte limit")
        }
        let data = try await get(try targetURL(target), maxLength: Int(target.length), what: "target \"\(target.path)\"")
        try target.verify(data)
        return data
    }

    private func download(_ role: String, version: Int64?, maxLength: Int) async throws -> Data {
        let name = TUFMetadataStore.fileName(role)
        let file = version.map { "\($0).\(name)" } ?? name
        guard let url = URL(string: metadataURL.absoluteString + file) else { throw TUFError(.format, "role \(role) makes no URL") }
        return try await get(url, maxLength: maxLength, what: "\(role) metadata")
    }

    private func get(_ url: URL, maxLength: Int, what: String) async throws -> Data {
        let response: HTTPResponse
        do {
            response = try await transport.send(HTTPRequest(url: url, maxResponseBytes: maxLength))
        } catch let error as CourierError where error.code == .integrity {
            throw TUFError(.length, "\(what) from \(url.absoluteString) is longer than the \(maxLength)-byte limit")
        } catch let error as CourierError {
            throw TUFError(.download, "\(what) from \(url.absoluteString): \(error.message)")
        }
        guard response.status == 200 else {
            throw TUFError(.download, "\(what) from \(url.absoluteString) answered HTTP \(response.status)", status: response.status)
        }
        guard response.body.count <= maxLength else {
            throw TUFError(.length, "\(what) from \(url.absoluteString) is longer than the \(maxLength)-byte limit")
        }
        return response.body
    }
}
