import Courier
import CourierServer
import CourierTestSupport
import Foundation
import Testing

@Suite("serve section of the configuration")
struct ServeConfigurationTests {
    /// Writes `json` as a configuration file in a fresh folder and loads it.
    private static func load(_ json: String) throws -> (CourierConfiguration, TemporaryDirectory) {
        let directory = try TemporaryDirectory(prefix: "courier-serve-config")
        let file = directory.appending("courier.json")
        try Data(json.utf8).write(to: file)
        do {
            return (try CourierConfiguration.load(file: file, required: true), directory)
        } catch {
            directory.remove()
            throw error
        }
    }

    @Test("every key is read; relative paths resolve against the file's folder; the origin takes them")
    func decodesEveryKey() throws {
        let (configuration, directory) = try Self.load(
            #"""
            {"serve": {"content": "staged", "catalog": "staged/other.json", "host": "127.0.0.2", "port": 0,
              "public": true, "limitRate": 1048576, "headerTimeout": 2.5, "idleTimeout": 40, "sendTimeout": 50,
              "maxConnections": 16, "shutdownGracePeriod": 0, "metricsPort": 9100,
              "state": "postgresql://courier@127.0.0.1:5432/courier", "maxTokenAge": 3600,
              "tokenCacheSize": 0, "tokenCacheLifetime": 60, "notifications": false, "requestTimeout": 12,
              "minRequestRate": 2048}}
            """#)
        defer { directory.remove() }
        let serve = configuration.serve
        #expect(serve.content == "staged")
        #expect(serve.catalog == "staged/other.json")
        #expect(serve.host == "127.0.0.2")
        #expect(serve.port == 0)
        #expect(serve.public)
        #expect(serve.limitRate == 1_048_576)
        #expect(serve.headerTimeout == 2.5)
        #expect(serve.idleTimeout == 40)
        #expect(serve.sendTimeout == 50)
        #expect(serve.maxConnections == 16)
        #expect(serve.shutdownGracePeriod == 0)
        #expect(serve.metricsPort == 9100)
        #expect(serve.state == "postgresql://courier@127.0.0.1:5432/courier")
        #expect(serve.maxTokenAge == 3600)
        #expect(serve.tokenCacheSize == 0)
        #expect(serve.tokenCacheLifetime == 60)
        #expect(!serve.notifications)
        #expect(serve.requestTimeout == 12 && serve.minRequestRate == 2048)
        let content = configuration.resolvePath(try #require(serve.content))
        #expect(content.path == directory.url.appendingPathComponent("staged").standardizedFileURL.path)

        let origin = OriginConfiguration(serve, contentDirectory: content)
        #expect(origin.host == "127.0.0.2" && origin.port == 0)
        #expect(origin.rateLimit == 1_048_576)
        #expect(origin.requestHeadTimeout == 2.5 && origin.idleTimeout == 40 && origin.sendTimeout == 50)
        #expect(origin.requestTimeout == 12 && origin.minRequestRate == 2048)
        #expect(origin.maxConnections == 16 && origin.shutdownGracePeriod == 0 && origin.maxTokenAge == 3600)
        #expect(origin.catalogFile.path == content.appendingPathComponent("catalog.json").path)
    }

    @Test("a file without the section, or with some keys, keeps the defaults, which are the origin's")
    func defaults() throws {
        let (partial, directory) = try Self.load(#"{"serve": {"port": 0, "maxTokenAge": null}}"#)
        defer { directory.remove() }
        var expected = ServeConfiguration()
        expected.port = 0
        #expect(partial.serve == expected)

        let serve = ServeConfiguration()
        #expect(serve.content == nil && serve.catalog == nil && serve.state == nil && serve.metricsPort == nil)
        #expect(serve.limitRate == nil && serve.maxTokenAge == nil)
        #expect(serve.host == "127.0.0.1" && serve.port == 8080 && !serve.public && serve.notifications)
        #expect(serve.tokenCacheSize == VerifiedTokenCache.defaultCapacity)
        #expect(serve.tokenCacheLifetime == VerifiedTokenCache.defaultLifetime)
        let folder = URL(fileURLWithPath: "/srv/courier", isDirectory: true)
        let fromDefaults = OriginConfiguration(serve, contentDirectory: folder)
        let origin = OriginConfiguration(contentDirectory: folder)
        #expect(fromDefaults.host == origin.host)
        #expect(fromDefaults.requestHeadTimeout == origin.requestHeadTimeout)
        #expect(fromDefaults.idleTimeout == origin.idleTimeout)
        #expect(fromDefaults.sendTimeout == origin.sendTimeout)
        #expect(fromDefaults.requestTimeout == origin.requestTimeout && fromDefaults.minRequestRate == origin.minRequestRate)
        #expect(fromDefaults.maxConnections == origin.maxConnections)
        #expect(fromDefaults.shutdownGracePeriod == origin.shutdownGracePeriod)
        #expect(fromDefaults.rateLimit == origin.rateLimit && fromDefaults.maxTokenAge == origin.maxTokenAge)
    }

    @Test(
        "a bad value is a usage error (exit 2) that names the key",
        arguments: [
            (#"{"port": 65536}"#, "serve.port"), (#"{"port": -1}"#, "serve.port"), (#"{"metricsPort": 70000}"#, "serve.metricsPort"),
            (#"{"headerTimeout": 0}"#, "serve.headerTimeout"), (#"{"idleTimeout": -5}"#, "serve.idleTimeout"),
            (#"{"sendTimeout": 0}"#, "serve.sendTimeout"), (#"{"maxTokenAge": 0}"#, "serve.maxTokenAge"),
            (#"{"requestTimeout": 0}"#, "serve.requestTimeout"), (#"{"minRequestRate": 0}"#, "serve.minRequestRate"),
            (#"{"maxConnections": 0}"#, "serve.maxConnections"), (#"{"tokenCacheSize": -1}"#, "serve.tokenCacheSize"),
            (#"{"tokenCacheLifetime": 0}"#, "serve.tokenCacheLifetime"), (#"{"limitRate": 0}"#, "serve.limitRate"),
            (#"{"shutdownGracePeriod": -1}"#, "serve.shutdownGracePeriod"), (#"{"content": ""}"#, "serve.content"),
            (#"{"host": ""}"#, "serve.host"), (#"{"port": "8080"}"#, "serve.port"), (#"{"public": "yes"}"#, "serve.public"),
        ])
    func badValue(section: String, key: String) throws {
        let error = #expect(throws: CourierError.self) { try Self.load(#"{"serve": "# + section + "}") }
        #expect(error?.code == .usage)
        #expect(error?.exitCode == 2)
        #expect(error.map { "\($0.message) \($0.cause ?? "")" }?.contains(key) == true, "\(String(describing: error))")
    }

    @Test("a mistyped key is refused with the key it probably means")
    func mistypedKey() throws {
        let error = #expect(throws: CourierError.self) { try Self.load(#"{"serve": {"headerTimout": 5}}"#) }
        #expect(error?.code == .usage)
        #expect(error?.message.contains("\"headerTimout\" in section \"serve\"") == true, "\(String(describing: error))")
        #expect(error?.hint?.contains("headerTimeout") == true, "\(String(describing: error))")
        let optional = #expect(throws: CourierError.self) { try Self.load(#"{"serve": {"metricPort": 5}}"#) }
        #expect(optional?.hint?.contains("metricsPort") == true, "\(String(describing: optional))")
    }
}
