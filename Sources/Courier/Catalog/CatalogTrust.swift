import Crypto
import Foundation
import Logging

/// Whose signature a catalog needs (docs/trust.md). With a `trustedRoot`, the catalog is a TUF
/// target: obtained only through the TUF client workflow, its length and hashes taken from signed
/// targets metadata. Without one, a catalog from a host other than loopback is refused unless
/// `allowUnsigned`, and then every run says it is unsigned.
public struct CatalogTrustConfiguration: Sendable, Codable, Equatable {
    /// The publisher's root metadata (`root.json`) the user trusts, a path relative to the
    /// configuration's folder (`--catalog-root FILE`: relative to the current directory).
    public var trustedRoot: String?
    /// Where the metadata is; default: `metadata/` beside the catalog.
    public var metadataURL: String?
    /// Where the targets are; default: `targets/` beside the catalog.
    public var targetsURL: String?
    /// The catalog's target name; default: the catalog's file name (`catalog.json`).
    public var targetName: String?
    /// Accept a catalog nobody signed from a host that is not loopback.
    public var allowUnsigned: Bool

    public init(
        trustedRoot: String? = nil, metadataURL: String? = nil, targetsURL: String? = nil, targetName: String? = nil,
        allowUnsigned: Bool = false
    ) {
        self.trustedRoot = trustedRoot
        self.metadataURL = metadataURL
        self.targetsURL = targetsURL
        self.targetName = targetName
        self.allowUnsigned = allowUnsigned
    }
}

/// The `catalog` key of the configuration written as an object. Unknown keys are refused, so a
/// typo is reported rather than silently ignored.
struct CatalogSection: Codable {
    var url: String?
    var trust: CatalogTrustConfiguration

    enum CodingKeys: String, CodingKey, CaseIterable {
        case url, trustedRoot, metadataURL, targetsURL, targetName, allowUnsigned
    }

    struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    init(url: String?, trust: CatalogTrustConfiguration) {
        self.url = url
        self.trust = trust
    }

    init(from decoder: any Decoder) throws {
        let all = try decoder.container(keyedBy: AnyKey.self)
        let known = Set(CodingKeys.allCases.map(\.rawValue))
        if let unknown = all.allKeys.first(where: { !known.contains($0.stringValue) }) {
            throw DecodingError.dataCorruptedError(
                forKey: unknown, in: all, debugDescription: "unknown key \"\(unknown.stringValue)\" in \"catalog\"")
        }
        let container = try decoder.container(keyedBy: CodingKeys.self)
        url = try container.decodeIfPresent(String.self, forKey: .url)
        trust = CatalogTrustConfiguration(
            trustedRoot: try container.decodeIfPresent(String.self, forKey: .trustedRoot),
            metadataURL: try container.decodeIfPresent(String.self, forKey: .metadataURL),
            targetsURL: try container.decodeIfPresent(String.self, forKey: .targetsURL),
            targetName: try container.decodeIfPresent(String.self, forKey: .targetName),
            allowUnsigned: try container.decodeIfPresent(Bool.self, forKey: .allowUnsigned) ?? false)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(url, forKey: .url)
        try container.encodeIfPresent(trust.trustedRoot, forKey: .trustedRoot)
        try container.encodeIfPresent(trust.metadataURL, forKey: .metadataURL)
        try container.encodeIfPresent(trust.targetsURL, forKey: .targetsURL)
        try container.encodeIfPresent(trust.targetName, forKey: .targetName)
        try container.encode(trust.allowUnsigned, forKey: .allowUnsigned)
    }
}

/// The trust settings with paths resolved: what `CatalogLoader` needs.
public struct CatalogTrust: Sendable {
    /// The trusted root file, absolute.
    public var trustedRoot: URL?
    public var metadataURL: String?
    public var targetsURL: String?
    public var targetName: String?
    public var allowUnsigned: Bool

    public init(
        trustedRoot: URL? = nil, metadataURL: String? = nil, targetsURL: String? = nil, targetName: String? = nil,
        allowUnsigned: Bool = false
    ) {
        self.trustedRoot = trustedRoot
        self.metadataURL = metadataURL
        self.targetsURL = targetsURL
        self.targetName = targetName
        self.allowUnsigned = allowUnsigned
    }
}

extension CourierConfiguration {
    /// `catalogTrust` with its root resolved against the configuration's folder.
    public var resolvedCatalogTrust: CatalogTrust {
        CatalogTrust(
            trustedRoot: catalogTrust.trustedRoot.map(resolvePath), metadataURL: catalogTrust.metadataURL,
            targetsURL: catalogTrust.targetsURL, targetName: catalogTrust.targetName, allowUnsigned: catalogTrust.allowUnsigned)
    }

    /// Applies `--catalog-root FILE` (relative to the current directory).
    public mutating func trustCatalogRoot(_ path: String?) {
        guard let path else { return }
        catalogTrust.trustedRoot = URL(fileURLWithPath: path).standardizedFileURL.path
    }
}

/// Reads a TUF repository in a local folder through the same `HTTPTransport` interface: a
/// `file://` URL answers 200 with the file's bytes (no more than the request's limit) or 404.
public struct LocalFileTransport: HTTPTransport {
    public init() {}

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        guard request.url.isFileURL else { throw CourierError(.usage, "not a file URL: \(request.url.absoluteString)") }
        let path = request.url.path
        guard let handle = FileHandle(forReadingAtPath: path) else { return HTTPResponse(status: 404, headers: [:], body: Data()) }
        defer { try? handle.close() }
        let data = try handle.read(upToCount: request.maxResponseBytes + 1) ?? Data()
        guard data.count <= request.maxResponseBytes else {
            throw CourierError(.integrity, "\(path) is longer than \(request.maxResponseBytes) bytes")
        }
        return HTTPResponse(status: 200, headers: [:], body: data)
    }
}

/// Routes `file://` URLs to `LocalFileTransport` and the rest to the network transport.
struct RoutingTransport: HTTPTransport {
    let network: any HTTPTransport

    func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        if request.url.isFileURL { return try await LocalFileTransport().send(request) }
        return try await network.send(request)
    }
}

/// What the agent says when it stopped automatic updates because the catalog failed a TUF check
/// (its timestamp expired, say): a small owner-only file, `Storage/Trust/agent-notice.txt`,
/// written when the check fails and removed when one passes, which `list` and `status` print.
public enum CatalogTrustNotice {
    static func file(_ layout: StorageLayout) -> URL {
        layout.root.appendingPathComponent("Trust/agent-notice.txt")
    }

    /// The notice, if automatic updates are stopped.
    public static func read(_ layout: StorageLayout) -> String? {
        guard let data = try? Data(contentsOf: file(layout)), !data.isEmpty else { return nil }
        return String(decoding: data.prefix(4096), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func write(_ layout: StorageLayout, _ text: String) throws {
        let url = file(layout)
        try DurableFile.makeDirectory(url.deletingLastPathComponent())
        try DurableFile.replace(url, with: Data((text + "\n").utf8))
    }

    static func clear(_ layout: StorageLayout) {
        try? FileManager.default.removeItem(at: file(layout))
    }
}
