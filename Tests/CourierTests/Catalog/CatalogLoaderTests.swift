import Courier
import CourierTestSupport
import Foundation
import Logging
import Testing

@Suite("CatalogLoader: files, URLs, HTTP caching", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct CatalogLoaderTests {
    /// A catalog with one product, served by nginx (which sends ETag and Last-Modified).
    static func serve(_ directory: TemporaryDirectory) throws -> NginxServer {
        let www = directory.appending("www")
        try FileManager.default.createDirectory(at: www, withIntermediateDirectories: true)
        let catalog = Catalog(
            bundleId: "com.example.app",
            products: [
                Catalog.Product(
                    productId: "com.example.levels",
                    content: Catalog.Content(
                        url: "levels.zip", sha256: String(repeating: "ab", count: 32), length: 10, version: "1.0", placement: .documents))
            ])
        try catalog.encoded().write(to: www.appendingPathComponent("catalog.json"))
        return try NginxServer(root: www)
    }

    /// (method path status) of each request nginx logged.
    static func requests(_ nginx: NginxServer, atLeast count: Int = 0) -> [(path: String, status: Int)] {
        nginx.accessLog(atLeast: count).compactMap { line in
            let fields = line.components(separatedBy: "\"")
            guard fields.count > 2 else { return nil }
            let request = fields[1].split(separator: " ")
            let status = fields[2].split(separator: " ").first.flatMap { Int($0) }
            guard request.count >= 2, let status else { return nil }
            return (String(request[1]), status)
        }
    }

    @Test("the second load revalidates with If-None-Match and gets 304; the cached copy answers")
    func revalidates() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-catalog")
        defer { directory.remove() }
        let nginx = try Self.serve(directory)
        defer { nginx.stop() }
        let loader = CatalogLoader(
            transport: try CurlHTTPTransport(), layout: StorageLayout(root: directory.appending("Storage")), logger: Logger(label: "test"))
        let url = nginx.url("catalog.json")

        let first = try await loader.load(url.absoluteString, relativeTo: directory.url)
        #expect(first.source == .network)
        #expect(first.url == url)
        let files = try #require(loader.cacheFiles(for: url))
        #expect(FileManager.default.fileExists(atPath: files.body.path))
        let validators = try String(contentsOf: files.validators, encoding: .utf8)
        #expect(validators.contains("etag"))

        let second = try await loader.load(url.absoluteString, relativeTo: directory.url)
        #expect(second.source == .notModified)
        #expect(second.catalog.products.map(\.productId) == ["com.example.levels"])
        #expect(Self.requests(nginx, atLeast: 2).map(\.status) == [200, 304])

        // A changed catalog is fetched in full again (its ETag changed).
        var changed = first.catalog
        changed.products.append(
            Catalog.Product(
                productId: "com.example.music",
                content: Catalog.Content(url: "music.zip", sha256: String(repeating: "cd", count: 32), length: 10, version: "1.0", placement: .cache)))
        try changed.encoded().write(to: nginx.root.appendingPathComponent("catalog.json"))
        let third = try await loader.load(url.absoluteString, relativeTo: directory.url)
        #expect(third.source == .network)
        #expect(third.catalog.products.count == 2)
    }

    @Test("origin unreachable with a cached copy: the cached copy; without one: a network error")
    func offlineFallsBackToCache() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-catalog")
        defer { directory.remove() }
        let nginx = try Self.serve(directory)
        let url = nginx.url("catalog.json")
        let transport = try CurlHTTPTransport()
        let cached = CatalogLoader(transport: transport, layout: StorageLayout(root: directory.appending("Storage")), logger: Logger(label: "test"))
        let uncached = CatalogLoader(transport: transport, layout: StorageLayout(root: directory.appending("Other")), logger: Logger(label: "test"))
        _ = try await cached.load(url.absoluteString, relativeTo: directory.url)
        nginx.stop()

        let offline = try await cached.load(url.absoluteString, relativeTo: directory.url)
        #expect(offline.source == .staleCache)
        #expect(offline.catalog.products.count == 1)
        await #expect(throws: CourierError.self) { try await uncached.load(url.absoluteString, relativeTo: directory.url) }
    }

    @Test("a relative path resolves against the base; a missing file is a usage error")
    func files() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-catalog")
        defer { directory.remove() }
        try Catalog(bundleId: "com.example.app", products: []).encoded().write(to: directory.appending("catalog.json"))
        let loader = CatalogLoader(transport: try CurlHTTPTransport(), layout: nil, logger: Logger(label: "test"))
        let loaded = try await loader.load("catalog.json", relativeTo: directory.url)
        #expect(loaded.source == .file)
        #expect(loaded.url.path == directory.appending("catalog.json").path)
        do {
            _ = try await loader.load("missing.json", relativeTo: directory.url)
            Issue.record("a missing catalog loaded")
        } catch let error as CourierError {
            #expect(error.code == .usage)
        }
    }
}
