import Crypto
import Foundation
import Logging
import Testing

@testable import Courier
import CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Delta updates against real nginx (Range and multi-range) and the fault-injecting origin.
@Suite("DeltaUpdater")
struct DeltaUpdaterTests {
    static let product = "com.example.delta"

    /// A storage, a site folder served by nginx, and packages built by `PackageBuilder`.
    final class Fixture: @unchecked Sendable {  // @unchecked: used by one test at a time.
        let directory: TemporaryDirectory
        let layout: StorageLayout
        let store: StateStore
        let site: URL
        let placer: ContentPlacer

        init() throws {
            directory = try TemporaryDirectory(prefix: "courier-delta")
            layout = StorageLayout(root: directory.appending("Storage"))
            store = try StateStore(layout: layout)
            site = directory.appending("site")
            try FileManager.default.createDirectory(at: site, withIntermediateDirectories: true)
            placer = ContentPlacer(
                layout: layout, store: store, packages: PackageConfiguration(), placement: PlacementConfiguration(),
                logger: Logger(label: "test"))
            try placer.recover()
        }

        /// `count` files `Contents/data/fNN.bin` of `size` bytes; files in `changed` get other bytes.
        func files(count: Int, size: Int, changed: Set<Int> = [], seed: UInt8 = 1) -> [String: Data] {
            var files: [String: Data] = [:]
            for index in 0..<count {
                var generator = SplitMix(seed: UInt64(index) &* 7919 &+ (changed.contains(index) ? UInt64(seed) &* 104_729 : 0))
                var bytes = [UInt8](repeating: 0, count: size)
                for offset in stride(from: 0, to: size, by: 8) {
                    let value = generator.next()
                    for k in 0..<min(8, size - offset) { bytes[offset + k] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(k))) }
                }
                files[String(format: "data/f%02d.bin", index)] = Data(bytes)
            }
            return files
        }

        /// Builds version `version` of `files` as `site/<name>.zip` (and its manifest).
        @discardableResult
        func package(_ name: String, version: String, files: [String: Data]) throws -> (zip: URL, info: PackageInfo) {
            let source = directory.appending("source-\(name)")
            try? FileManager.default.removeItem(at: source)
            for (path, data) in files {
                let url = source.appendingPathComponent(path)
                try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
                try data.write(to: url)
            }
            let zip = site.appendingPathComponent("\(name).zip")
            let info = try PackageBuilder.create(from: source, productId: DeltaUpdaterTests.product, version: version, output: zip)
            return (zip, info)
        }

        func install(_ zip: URL, version: String) throws -> DeliveredContent {
            try placer.install(
                package: zip, contentIdentifier: DeltaUpdaterTests.product, productId: DeltaUpdaterTests.product,
                version: version, placement: .documents, force: false)
        }

        func target(base: (String) -> URL, name: String, version: String, info: PackageInfo) throws -> DeltaUpdater.Target {
            let manifestFile = PackageManifest.url(besidePackage: site.appendingPathComponent("\(name).zip"))
            let manifest = (try? Data(contentsOf: manifestFile)) ?? Data()
            return DeltaUpdater.Target(
                contentIdentifier: DeltaUpdaterTests.product, productId: DeltaUpdaterTests.product, version: version,
                placement: .documents, packageURL: base("\(name).zip"), packageSHA256: info.sha256,
                packageLength: info.packedSize, manifestURL: base(manifestFile.lastPathComponent),
                manifestSHA256: SHA256.hash(data: manifest).hex, manifestLength: Int64(manifest.count),
                workDirectory: DeltaUpdater.workDirectory(in: layout, contentIdentifier: DeltaUpdaterTests.product, packageSHA256: info.sha256))
        }

        func updater(allowReflink: Bool = true, configure: (inout DeltaUpdater.Configuration) -> Void = { _ in }) throws
            -> (DeltaUpdater, CurlHTTPTransport)
        {
            var transfer = TransferConfiguration()
            transfer.connectTimeout = 5
            transfer.stallTimeout = 5
            let engine = try TransferEngine(configuration: transfer, logger: Logger(label: "test"))
            let http = CurlHTTPTransport(engine: engine, owning: true)
            var configuration = DeltaUpdater.Configuration()
            configuration.allowReflink = allowReflink
            configure(&configuration)
            return (DeltaUpdater(placer: placer, engine: engine, configuration: configuration, logger: Logger(label: "test")), http)
        }

        /// The installed folder's files, by path below `Contents/`.
        func installed() -> [String: Data] {
            let folder = placer.contentURL(DeltaUpdaterTests.product, placement: .documents).appendingPathComponent("Contents")
            var result: [String: Data] = [:]
            for path in PackageFixtures.snapshot(folder) {
                let url = folder.appendingPathComponent(path)
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue {
                    result[path] = try? Data(contentsOf: url)
                }
            }
            return result
        }

        func remove() { directory.remove() }
    }

    /// Body bytes nginx sent for requests of `path` (the access log's `$body_bytes_sent`).
    static func bytesServed(_ log: [String], path: String) -> (bytes: Int, requests: Int, statuses: [Int]) {
        var bytes = 0
        var requests = 0
        var statuses: [Int] = []
        for line in log where line.contains("GET /\(path) ") {
            guard let quote = line.range(of: "HTTP/1.1\" ") else { continue }
            let fields = line[quote.upperBound...].split(separator: " ")
            guard fields.count >= 2, let status = Int(fields[0]), let sent = Int(fields[1]) else { continue }
            bytes += sent
            requests += 1
            statuses.append(status)
        }
        return (bytes, requests, statuses)
    }

    @Test("3 of 24 files changed: only their ranges are fetched, in one multi-range request, and the new version is placed")
    func threeChangedFetchesOnlyTheirRanges() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let v1 = fixture.files(count: 24, size: 64 << 10)
        let v2 = fixture.files(count: 24, size: 64 << 10, changed: [3, 11, 20], seed: 2)
        let old = try fixture.package("v1", version: "1.0", files: v1)
        let new = try fixture.package("v2", version: "2.0", files: v2)
        _ = try fixture.install(old.zip, version: "1.0")
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        let (updater, http) = try fixture.updater(allowReflink: false)
        defer { http.shutdown() }

        let outcome = try await updater.update(try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info))

        #expect(outcome.content.version == "2.0")
        // The three changed files and ContentInfo.plist (it names the new version).
        #expect(outcome.entriesFetched == 4)
        #expect(outcome.entriesReused == 21)
        #expect(fixture.installed() == v2)
        let manifest = try PackageManifest.decode(Data(contentsOf: PackageManifest.url(besidePackage: new.zip)))
        let changedBytes = ["Contents/data/f03.bin", "Contents/data/f11.bin", "Contents/data/f20.bin", "ContentInfo.plist"]
            .compactMap { manifest.files[$0]?.length }.reduce(0, +)
        let served = Self.bytesServed(nginx.accessLog(atLeast: 2), path: "v2.zip")
        #expect(served.requests == 1)
        #expect(served.statuses == [206])
        // The entries' bytes plus the multipart framing, far below the package.
        #expect(Int64(served.bytes) >= changedBytes)
        #expect(Int64(served.bytes) < changedBytes + 4096)
        #expect(Int64(served.bytes) * 5 < new.info.packedSize)
        // What the updater counts: the parts' data, without the multipart framing.
        #expect(outcome.bytesFetched >= changedBytes && outcome.bytesFetched <= Int64(served.bytes))
        // The records now describe the new version.
        let records = try fixture.placer.installedFiles(Self.product)
        #expect(records.count == 25)
        #expect(Set(records.compactMap(\.sha256)) == Set(manifest.files.values.compactMap(\.sha256)))
    }

    @Test("a tampered entry from the origin is refused: a fallback, the old version kept, nothing left")
    func tamperedEntryIsRefused() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let v1 = fixture.files(count: 6, size: 32 << 10)
        let v2 = fixture.files(count: 6, size: 32 << 10, changed: [2], seed: 3)
        let old = try fixture.package("v1", version: "1.0", files: v1)
        let new = try fixture.package("v2", version: "2.0", files: v2)
        _ = try fixture.install(old.zip, version: "1.0")
        // The origin serves a package whose changed entry differs from the manifest: same sizes,
        // one stored byte flipped inside the entry's compressed data.
        let manifest = try PackageManifest.decode(Data(contentsOf: PackageManifest.url(besidePackage: new.zip)))
        let entry = try #require(manifest.files["Contents/data/f02.bin"])
        var bytes = try Data(contentsOf: new.zip)
        let position = Int(entry.offset! + entry.length! - Int64(entry.compressedSize! / 2) - 20)
        bytes[position] ^= 0x55
        try bytes.write(to: new.zip)
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        let (updater, http) = try fixture.updater()
        defer { http.shutdown() }

        let error = await #expect(throws: DeltaUpdater.Fallback.self) {
            _ = try await updater.update(try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info))
        }
        #expect(error?.reason.contains("failed verification") == true)
        let content = try #require(try fixture.placer.content(Self.product))
        #expect(content.version == "1.0")
        #expect(fixture.installed() == v1)
        let staging = fixture.layout.documents.appendingPathComponent(".staging")
        #expect(PackageFixtures.snapshot(staging).allSatisfy { $0.hasSuffix(".lock") })
    }

    @Test("no manifest at the origin: a fallback naming it, nothing changed")
    func missingManifestFallsBack() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let old = try fixture.package("v1", version: "1.0", files: fixture.files(count: 4, size: 1000))
        let new = try fixture.package("v2", version: "2.0", files: fixture.files(count: 4, size: 1000, changed: [1]))
        _ = try fixture.install(old.zip, version: "1.0")
        let target = try fixture.target(base: { _ in URL(string: "http://127.0.0.1:1/none")! }, name: "v2", version: "2.0", info: new.info)
        try FileManager.default.removeItem(at: PackageManifest.url(besidePackage: new.zip))
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        var reachable = target
        reachable.packageURL = nginx.url("v2.zip")
        reachable.manifestURL = nginx.url("v2.manifest.json")
        let (updater, http) = try fixture.updater()
        defer { http.shutdown() }
        let error = await #expect(throws: DeltaUpdater.Fallback.self) { _ = try await updater.update(reachable) }
        #expect(error?.reason.contains("HTTP 404") == true)
        #expect(try fixture.placer.content(Self.product)?.version == "1.0")
        #expect(Self.bytesServed(nginx.accessLog(atLeast: 1), path: "v2.zip").requests == 0)
    }

    @Test("an origin without Range (200 to every range request): a fallback after one aborted answer")
    func originWithoutRangeFallsBack() async throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let old = try fixture.package("v1", version: "1.0", files: fixture.files(count: 8, size: 64 << 10))
        let new = try fixture.package("v2", version: "2.0", files: fixture.files(count: 8, size: 64 << 10, changed: [1, 6]))
        _ = try fixture.install(old.zip, version: "1.0")
        let manifestData = try Data(contentsOf: PackageManifest.url(besidePackage: new.zip))
        let packageOrigin = try FaultOrigin(content: try Data(contentsOf: new.zip))
        defer { packageOrigin.stop() }
        var behavior = FaultOrigin.Behavior()
        behavior.ignoreRanges = true
        behavior.faultyResponses = 1000
        behavior.bytesPerSecond = 4 << 20
        packageOrigin.setBehavior(behavior)
        let manifestOrigin = try FaultOrigin(content: manifestData)
        defer { manifestOrigin.stop() }
        var target = try fixture.target(base: packageOrigin.url, name: "v2", version: "2.0", info: new.info)
        target.manifestURL = manifestOrigin.url("/v2.manifest.json")
        let (updater, http) = try fixture.updater()
        defer { http.shutdown() }
        let error = await #expect(throws: DeltaUpdater.Fallback.self) { _ = try await updater.update(target) }
        #expect(error?.reason.contains("Range") == true)
        #expect(try fixture.placer.content(Self.product)?.version == "1.0")
        // The HEAD probe for several ranges answered 200 (one range per request, then), and one
        // single-range request answered 200, aborted at its first bytes, far from the whole package.
        #expect(packageOrigin.requests.count == 2)
        #expect(packageOrigin.bodyBytesSent < Int(new.info.packedSize) / 2)
    }

    @Test("a range request the network fails is asked again by the retry policy, `attempts` times in all, then falls back",
          arguments: [2, 3])
    func rangeRetriesFollowThePolicy(failures: Int) async throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let old = try fixture.package("v1", version: "1.0", files: fixture.files(count: 4, size: 8 << 10))
        let new = try fixture.package("v2", version: "2.0", files: fixture.files(count: 4, size: 8 << 10, changed: [2]))
        _ = try fixture.install(old.zip, version: "1.0")
        let manifestData = try Data(contentsOf: PackageManifest.url(besidePackage: new.zip))
        // The origin answers 503 to its first `failures` requests (a network failure that can heal).
        var behavior = FaultOrigin.Behavior()
        behavior.status = 503
        behavior.faultyResponses = failures
        let packageOrigin = try FaultOrigin(content: try Data(contentsOf: new.zip), behavior: behavior)
        defer { packageOrigin.stop() }
        let manifestOrigin = try FaultOrigin(content: manifestData)
        defer { manifestOrigin.stop() }
        var target = try fixture.target(base: packageOrigin.url, name: "v2", version: "2.0", info: new.info)
        target.manifestURL = manifestOrigin.url("/v2.manifest.json")
        let (updater, http) = try fixture.updater { $0.attempts = 3 }
        defer { http.shutdown() }
        // One changed entry and ContentInfo.plist, coalesced into one range: no HEAD probe.
        if failures < 3 {
            let outcome = try await updater.update(target)
            #expect(outcome.content.version == "2.0")
            #expect(outcome.requests == failures + 1)
            #expect(packageOrigin.requests.count == failures + 1)
        } else {
            let error = await #expect(throws: DeltaUpdater.Fallback.self) { _ = try await updater.update(target) }
            #expect(error?.cause?.code == .network)
            #expect(packageOrigin.requests.count == 3)
            #expect(try fixture.placer.content(Self.product)?.version == "1.0")
        }
    }

    @Test("an installed file changed on disk is not a source: its entry is fetched")
    func changedInstalledFileIsFetched() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let files = fixture.files(count: 5, size: 16 << 10)
        let old = try fixture.package("v1", version: "1.0", files: files)
        let new = try fixture.package("v2", version: "2.0", files: files)  // same files, new version
        let content = try fixture.install(old.zip, version: "1.0")
        // Same size, same bytes written back: only the change time (and mtime) tell.
        let victim = content.url.appendingPathComponent("Contents/data/f04.bin")
        try Data(contentsOf: victim).write(to: victim)
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        let (updater, http) = try fixture.updater()
        defer { http.shutdown() }
        let outcome = try await updater.update(try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info))
        // ContentInfo.plist (new version) and the touched file.
        #expect(outcome.entriesFetched == 2)
        #expect(outcome.entriesReused == 4)
        #expect(fixture.installed() == files)
    }

    @Test("a run that fails part way keeps verified entries: the next run fetches only the rest")
    func resumeFetchesNothingTwice() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let v1 = fixture.files(count: 10, size: 32 << 10)
        let v2 = fixture.files(count: 10, size: 32 << 10, changed: [0, 9], seed: 5)
        let old = try fixture.package("v1", version: "1.0", files: v1)
        let new = try fixture.package("v2", version: "2.0", files: v2)
        _ = try fixture.install(old.zip, version: "1.0")
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        let target = try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info)
        // A first run that fetched and verified the entries, then died before placing: simulated
        // by a version that refuses to be placed (a downgrade guard), leaving the work folder.
        let (updater, http) = try fixture.updater()
        defer { http.shutdown() }
        _ = try fixture.install(try fixture.package("v3", version: "3.0", files: v1).zip, version: "3.0")
        await #expect(throws: CourierError.self) { _ = try await updater.update(target) }
        let firstRequests = Self.bytesServed(nginx.accessLog(atLeast: 2), path: "v2.zip").requests
        #expect(firstRequests == 1)
        // Back to 1.0 installed: the second run reuses every fetched entry.
        _ = try fixture.placer.install(
            package: old.zip, contentIdentifier: Self.product, productId: Self.product, version: "1.0", placement: .documents,
            force: true)
        let outcome = try await updater.update(target)
        #expect(outcome.entriesFetched == 0)
        #expect(outcome.entriesResumed == 3)
        #expect(outcome.requests == 0)
        #expect(Self.bytesServed(nginx.accessLog(), path: "v2.zip").requests == firstRequests)
        #expect(fixture.installed() == v2)
        #expect(!FileManager.default.fileExists(atPath: target.workDirectory.path))
    }

    @Test("entries an earlier run left are checked again: a torn or rewritten one is fetched anew, the rest reused")
    func resumeRefetchesTornEntries() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let v1 = fixture.files(count: 10, size: 32 << 10)
        let v2 = fixture.files(count: 10, size: 32 << 10, changed: [0, 9], seed: 5)
        let old = try fixture.package("v1", version: "1.0", files: v1)
        let new = try fixture.package("v2", version: "2.0", files: v2)
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        let target = try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info)
        let (updater, http) = try fixture.updater()
        defer { http.shutdown() }
        // A first run that verified its entries and died before placing (a downgrade guard).
        _ = try fixture.install(try fixture.package("v3", version: "3.0", files: v1).zip, version: "3.0")
        await #expect(throws: CourierError.self) { _ = try await updater.update(target) }
        // Entries are written without an fsync: a power cut may leave one short and one holding
        // other bytes of its length. Neither may reach the new version.
        let entries = target.workDirectory.appendingPathComponent("entries")
        let names = try FileManager.default.contentsOfDirectory(atPath: entries.path).sorted()
        try #require(names.count == 3)
        let torn = entries.appendingPathComponent(names[0])
        let tornSize = try #require(try FileManager.default.attributesOfItem(atPath: torn.path)[.size] as? Int)
        #expect(truncate(torn.path, off_t(tornSize / 2)) == 0)
        let rewritten = entries.appendingPathComponent(names[1])
        let size = try #require(try FileManager.default.attributesOfItem(atPath: rewritten.path)[.size] as? Int)
        try Data(repeating: 0, count: size).write(to: rewritten)
        _ = try fixture.placer.install(
            package: old.zip, contentIdentifier: Self.product, productId: Self.product, version: "1.0", placement: .documents,
            force: true)
        let outcome = try await updater.update(target)
        #expect(outcome.entriesFetched == 2)
        #expect(outcome.entriesResumed == 1)
        #expect(fixture.installed() == v2)
        #expect(!FileManager.default.fileExists(atPath: target.workDirectory.path))
    }

    @Test("the token goes with the manifest only to the package's origin: none to another port, the origin's own it gets")
    func manifestTokenStaysWithItsOrigin() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let v1 = fixture.files(count: 4, size: 16 << 10)
        let v2 = fixture.files(count: 4, size: 16 << 10, changed: [1], seed: 4)
        let old = try fixture.package("v1", version: "1.0", files: v1)
        let new = try fixture.package("v2", version: "2.0", files: v2)
        _ = try fixture.install(old.zip, version: "1.0")
        let manifest = try Data(contentsOf: PackageManifest.url(besidePackage: new.zip))
        // A second server on loopback, another port: it serves the manifest (and nothing else)
        // and records every request's headers.
        let other = try LoopbackHTTPServer { request, response in
            if request.path == "/v2.manifest.json" {
                response.send(200, headers: [("Content-Type", "application/json")], body: manifest)
            } else {
                response.send(404)
            }
        }
        defer { other.stop() }
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        let (updater, http) = try fixture.updater()
        defer { http.shutdown() }
        let token = "Bearer header.payload.signature"

        // The package on nginx, its manifest on the other port: the manifest goes without the token.
        var target = try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info)
        target.manifestURL = other.url("v2.manifest.json")
        target.headers = [("Authorization", token)]
        let outcome = try await updater.update(target)
        #expect(outcome.content.version == "2.0")
        #expect(fixture.installed() == v2)
        let asked = other.receivedRequests
        #expect(asked.map(\.path) == ["/v2.manifest.json"])
        #expect(asked.allSatisfy { $0.headers["authorization"] == nil }, "\(asked.map(\.rawHead))")

        // The package and its manifest on the same origin (the other server, which has no
        // package: the update falls back): the manifest request carries the token.
        _ = try fixture.placer.install(
            package: old.zip, contentIdentifier: Self.product, productId: Self.product, version: "1.0", placement: .documents,
            force: true)
        var same = try fixture.target(base: other.url, name: "v2", version: "2.0", info: new.info)
        same.headers = [("Authorization", token)]
        await #expect(throws: DeltaUpdater.Fallback.self) { _ = try await updater.update(same) }
        let manifestRequests = other.receivedRequests.dropFirst(asked.count).filter { $0.path == "/v2.manifest.json" }
        #expect(manifestRequests.count == 1)
        #expect(manifestRequests.allSatisfy { $0.headers["authorization"] == token })
    }

    @Test("an update's range requests run as its download: setPriority finds them while it fetches, and not after")
    func rangesRunAsTheDownload() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let v1 = fixture.files(count: 6, size: 256 << 10)
        let v2 = fixture.files(count: 6, size: 256 << 10, changed: [1, 4], seed: 5)
        let old = try fixture.package("v1", version: "1.0", files: v1)
        let new = try fixture.package("v2", version: "2.0", files: v2)
        _ = try fixture.install(old.zip, version: "1.0")
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        let (updater, http) = try fixture.updater()
        defer { http.shutdown() }
        // Half a MiB of changed entries at 192 KiB/s: the ranges take a few seconds.
        updater.engine.updateRateLimits(RateLimits(maxRate: try ByteRate(parsing: "192k")))

        // The queue's way in: an update download whose catalog entry names the manifest.
        let target = try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info)
        let now = Date()
        let download = DownloadRecord(
            id: "0123456789abcdef", transactionId: "1000", contentIdentifier: Self.product, productId: Self.product,
            url: target.packageURL, sha256: target.packageSHA256, length: target.packageLength, version: "2.0",
            placement: .documents, unpackedLength: nil, state: .active, progress: 0, bytesReceived: 0, rate: 0,
            durableOffset: 0, partialPath: fixture.directory.appending("part").path, createdAt: now, updatedAt: now,
            updateFrom: "1.0", mirrors: [],
            manifest: ManifestReference(url: target.manifestURL, sha256: target.manifestSHA256, length: target.manifestLength))
        // Unset, an update in a foreground engine transfers at high, as its whole package would.
        #expect(download.transferPriority(in: .foreground) == .high)
        #expect(download.transferPriority(in: .background) == .low)
        let delta = DeltaContentUpdate(updater: updater, logger: Logger(label: "test"))
        #expect(!updater.engine.setPriority(.low, downloadId: download.id))
        let running = Task { try await delta.update(download) { _ in } }
        // `courier priority ID low` (what the pipeline's heartbeat hands the engine) reaches it.
        #expect(await Self.eventually { updater.engine.setPriority(.low, downloadId: download.id) })
        #expect(!updater.engine.setPriority(.low, downloadId: "another"))
        let placed = try #require(try await running.value)
        #expect(placed == fixture.placer.contentURL(Self.product, placement: .documents))
        #expect(fixture.installed() == v2)
        #expect(await Self.eventually { !updater.engine.setPriority(.high, downloadId: download.id) })
    }

    /// Whether `condition` holds within 30 s, asked every 5 ms (without blocking a thread).
    static func eventually(_ condition: () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(nanoseconds: 5_000_000)
        }
        return condition()
    }

    @Test("neighbouring ranges coalesce under the gap threshold; requests hold at most the limit")
    func coalescing() {
        let ranges: [Range<Int64>] = [0..<10, 15..<20, 100..<110, 111..<120, 1000..<1001]
        #expect(DeltaPlan.coalesce(ranges, gap: 10, maxRangesPerRequest: 8) == [[0..<20, 100..<120, 1000..<1001]])
        #expect(DeltaPlan.coalesce(ranges, gap: 0, maxRangesPerRequest: 2) == [[0..<10, 15..<20], [100..<110, 111..<120], [1000..<1001]])
        #expect(DeltaPlan.coalesce([], gap: 10, maxRangesPerRequest: 2).isEmpty)
    }
}

/// A small deterministic generator for incompressible test bytes.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
