import Foundation
import Logging
import Testing

@testable import Courier
import CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Unchanged files of a delta update are hard links to the installed ones (no data copied),
/// with the copy as the fallback.
@Suite("DeltaUpdater links")
struct DeltaUpdaterLinkTests {
    typealias Fixture = DeltaUpdaterTests.Fixture

    static func status(_ url: URL) -> stat? {
        var status = stat()
        return lstat(url.path, &status) == 0 ? status : nil
    }

    static func contents(_ fixture: Fixture) -> URL {
        fixture.placer.contentURL(DeltaUpdaterTests.product, placement: .documents).appendingPathComponent("Contents")
    }

    /// Every record of the installed version matches its file's `lstat` now.
    static func recordsMatch(_ fixture: Fixture) throws -> Bool {
        let folder = fixture.placer.contentURL(DeltaUpdaterTests.product, placement: .documents)
        let records = try fixture.placer.installedFiles(DeltaUpdaterTests.product)
        return !records.isEmpty
            && records.allSatisfy { record in status(folder.appendingPathComponent(record.path)).map(record.isUnchanged) ?? false }
    }

    @Test("an unchanged file is linked: the same inode as before, link count 1 once the old version is gone; records valid")
    func unchangedFilesAreLinked() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let v1 = fixture.files(count: 8, size: 32 << 10)
        let v2 = fixture.files(count: 8, size: 32 << 10, changed: [2, 5], seed: 2)
        let v3 = fixture.files(count: 8, size: 32 << 10, changed: [2, 6], seed: 3)
        let old = try fixture.package("v1", version: "1.0", files: v1)
        let new = try fixture.package("v2", version: "2.0", files: v2)
        let newer = try fixture.package("v3", version: "3.0", files: v3)
        _ = try fixture.install(old.zip, version: "1.0")
        // A file the user touched (same bytes, new mtime and ctime) is not a source: fetched, a new inode.
        let touched = Self.contents(fixture).appendingPathComponent("data/f07.bin")
        let touchedBefore = try #require(Self.status(touched))
        var times = [timespec(tv_sec: 1_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, touched.path, &times, 0) == 0)
        let before = try Dictionary(uniqueKeysWithValues: v1.keys.map { path in
            (path, try #require(Self.status(Self.contents(fixture).appendingPathComponent(path))))
        })
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        let (updater, http) = try fixture.updater()
        defer { http.shutdown() }

        let outcome = try await updater.update(try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info))

        #expect(outcome.content.version == "2.0")
        #expect(fixture.installed() == v2)
        // f02, f05, f07 and ContentInfo.plist fetched; the other 5 linked.
        #expect(outcome.entriesFetched == 4)
        #expect(outcome.entriesReused == 5)
        #expect(outcome.entriesLinked == 5)
        for (path, old) in before {
            let now = try #require(Self.status(Self.contents(fixture).appendingPathComponent(path)))
            let unchanged = !["data/f02.bin", "data/f05.bin", "data/f07.bin"].contains(path)
            #expect((now.st_ino == old.st_ino) == unchanged, "\(path)")
            #expect(now.st_nlink == 1, "\(path)")
            // Permission bits as the install gave them.
            #expect(now.st_mode == old.st_mode, "\(path)")
        }
        #expect(Self.status(touched)?.st_ino != touchedBefore.st_ino)
        // The records were taken after the links (their ctime): the next update reuses them.
        #expect(try Self.recordsMatch(fixture))
        let next = try await updater.update(try fixture.target(base: nginx.url, name: "v3", version: "3.0", info: newer.info))
        #expect(fixture.installed() == v3)
        // f02, f05 (back to v1's bytes) and f06 differ from v2: the other 5 linked again.
        #expect(next.entriesReused == 5)
        #expect(next.entriesLinked == 5)
        #expect(try Self.recordsMatch(fixture))
    }

    @Test("a fetched entry is linked, not copied: the new file is the work folder's inode; one file per digest; records valid")
    func fetchedEntriesAreLinked() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let v1 = fixture.files(count: 6, size: 32 << 10)
        var v2 = fixture.files(count: 6, size: 32 << 10, changed: [1, 4], seed: 2)
        // A second path with f04's new bytes: the same digest, fetched once, its own file.
        v2["data/copy-of-f04.bin"] = v2["data/f04.bin"]
        let v3 = fixture.files(count: 6, size: 32 << 10, changed: [1, 4, 5], seed: 2)
        let old = try fixture.package("v1", version: "1.0", files: v1)
        let new = try fixture.package("v2", version: "2.0", files: v2)
        let newer = try fixture.package("v3", version: "3.0", files: v3)
        _ = try fixture.install(old.zip, version: "1.0")
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        let target = try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info)
        let entries = target.workDirectory.appendingPathComponent("entries").path + "/"
        // The inode of each fetched entry linked, by the new name it was linked as.
        let linkedEntries = Locked<[String: ino_t]>([:])
        let (updater, http) = try fixture.updater { configuration in
            configuration.linker = { path, directory, name in
                if path.hasPrefix(entries), let status = Self.status(URL(fileURLWithPath: path)) {
                    linkedEntries.value[name] = status.st_ino
                }
                return linkat(AT_FDCWD, path, directory, name, 0)
            }
        }
        defer { http.shutdown() }

        let outcome = try await updater.update(target)

        #expect(fixture.installed() == v2)
        // f01, f04, copy-of-f04 and ContentInfo.plist: three digests fetched, three files linked.
        #expect(outcome.entriesFetched == 3)
        #expect(outcome.fetchedLinked == 3)
        let linked = linkedEntries.value
        #expect(Set(linked.keys) == ["f01.bin", "ContentInfo.plist", "f04.bin"] || Set(linked.keys) == ["f01.bin", "ContentInfo.plist", "copy-of-f04.bin"])
        let folder = fixture.placer.contentURL(DeltaUpdaterTests.product, placement: .documents)
        for path in ["Contents/data/f01.bin", "Contents/data/f04.bin", "Contents/data/copy-of-f04.bin", "ContentInfo.plist"] {
            let status = try #require(Self.status(folder.appendingPathComponent(path)))
            let name = String(path.split(separator: "/").last ?? "")
            if let inode = linked[name] { #expect(status.st_ino == inode, "\(path)") }
            // The work folder is gone: each file is its inode's only name, with an extracted file's mode.
            #expect(status.st_nlink == 1, "\(path)")
            #expect(status.st_mode & 0o777 == 0o644 & ~Self.umask(), "\(path)")
        }
        #expect(Self.status(folder.appendingPathComponent("Contents/data/f04.bin"))?.st_ino
            != Self.status(folder.appendingPathComponent("Contents/data/copy-of-f04.bin"))?.st_ino)
        #expect(Self.status(target.workDirectory) == nil)
        // The records show the ctime the work folder's removal gave the linked files: the next
        // update reuses them (f01 and f04 as v2 has them; f05 and the plist change).
        #expect(try Self.recordsMatch(fixture))
        let next = try await updater.update(try fixture.target(base: nginx.url, name: "v3", version: "3.0", info: newer.info))
        #expect(fixture.installed() == v3)
        #expect(next.entriesFetched == 2)
        #expect(next.entriesReused == 5)
        #expect(try Self.recordsMatch(fixture))
    }

    /// The process's file-mode creation mask.
    static func umask() -> mode_t {
        let mask = Glibc.umask(0o022)
        Glibc.umask(mask)
        return mask
    }

    @Test("links refused (EXDEV, EPERM): the unchanged files are copied, the update is the same")
    func refusedLinksFallBackToCopies() async throws {
        try #require(NginxServer.isAvailable)
        for refusal in [EXDEV, EPERM] {
            let fixture = try Fixture()
            defer { fixture.remove() }
            let v1 = fixture.files(count: 6, size: 32 << 10)
            let v2 = fixture.files(count: 6, size: 32 << 10, changed: [1], seed: 2)
            let old = try fixture.package("v1", version: "1.0", files: v1)
            let new = try fixture.package("v2", version: "2.0", files: v2)
            _ = try fixture.install(old.zip, version: "1.0")
            let inode = try #require(Self.status(Self.contents(fixture).appendingPathComponent("data/f00.bin"))).st_ino
            let nginx = try NginxServer(root: fixture.site)
            defer { nginx.stop() }
            let calls = Counter()
            let (updater, http) = try fixture.updater(allowReflink: false) { configuration in
                configuration.linker = { _, _, _ in
                    calls.increment()
                    errno = refusal
                    return -1
                }
            }
            defer { http.shutdown() }

            let outcome = try await updater.update(try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info))

            #expect(fixture.installed() == v2)
            #expect(outcome.entriesReused == 5)
            #expect(outcome.entriesLinked == 0)
            #expect(outcome.fetchedLinked == 0)
            // 5 unchanged files, then the 2 fetched entries (f01, ContentInfo.plist): all copied.
            #expect(calls.value == 7)
            #expect(Self.status(Self.contents(fixture).appendingPathComponent("data/f00.bin"))?.st_ino != inode)
            #expect(try Self.recordsMatch(fixture))
        }
    }

    @Test("a linked file written before the new version is recorded: a fallback, nothing placed, the old version whole")
    func linkedFileWrittenDuringTheBuildFallsBack() async throws {
        try #require(NginxServer.isAvailable)
        let fixture = try Fixture()
        defer { fixture.remove() }
        let v1 = fixture.files(count: 6, size: 32 << 10)
        let v2 = fixture.files(count: 6, size: 32 << 10, changed: [4], seed: 2)
        let old = try fixture.package("v1", version: "1.0", files: v1)
        let new = try fixture.package("v2", version: "2.0", files: v2)
        _ = try fixture.install(old.zip, version: "1.0")
        let nginx = try NginxServer(root: fixture.site)
        defer { nginx.stop() }
        // The second link "is" the user writing into the file linked first (the same inode as
        // the installed file), after that link passed its own checks.
        let first = Locked<String?>(nil)
        let (updater, http) = try fixture.updater { configuration in
            configuration.linker = { path, directory, name in
                if let linked = first.value {
                    let fd = open(linked, O_WRONLY | O_CLOEXEC)
                    if fd >= 0 {
                        _ = pwrite(fd, "user", 4, 0)
                        close(fd)
                    }
                } else {
                    first.value = path
                }
                return linkat(AT_FDCWD, path, directory, name, 0)
            }
        }
        defer { http.shutdown() }

        let error = await #expect(throws: DeltaUpdater.Fallback.self) {
            _ = try await updater.update(try fixture.target(base: nginx.url, name: "v2", version: "2.0", info: new.info))
        }
        #expect(error?.reason.contains("changed during the update") == true)
        #expect(try fixture.placer.content(DeltaUpdaterTests.product)?.version == "1.0")
        // The old version as it was, but for the user's own write; no staging left, no extra links.
        let changedPath = try #require(first.value)
        var expected = v1
        for (path, data) in v1 where changedPath.hasSuffix("/Contents/" + path) {
            var bytes = data
            bytes.replaceSubrange(0..<4, with: Data("user".utf8))
            expected[path] = bytes
        }
        #expect(expected != v1)
        #expect(fixture.installed() == expected)
        for path in v1.keys {
            #expect(Self.status(Self.contents(fixture).appendingPathComponent(path))?.st_nlink == 1, "\(path)")
        }
        let staging = fixture.layout.documents.appendingPathComponent(".staging")
        #expect(PackageFixtures.snapshot(staging).allSatisfy { $0.hasSuffix(".lock") })
    }

    @Test("FileClone.link: linked when it can, false and no name left when refused or when the path is another file")
    func fileCloneLink() throws {
        let directory = try TemporaryDirectory(prefix: "courier-link")
        defer { directory.remove() }
        let source = directory.appending("source")
        try Data("bytes".utf8).write(to: source)
        let folder = open(directory.url.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        #expect(folder >= 0)
        defer { close(folder) }
        let status = try #require(Self.status(source))

        #expect(FileClone.link(source.path, matching: status, into: folder, name: "linked"))
        #expect(Self.status(directory.appending("linked"))?.st_ino == status.st_ino)

        // Refused: EXDEV (another filesystem), EPERM (no hard links there).
        for refusal in [EXDEV, EPERM] {
            #expect(!FileClone.link(source.path, matching: status, into: folder, name: "refused") { _, _, _ in
                errno = refusal
                return -1
            })
            #expect(Self.status(directory.appending("refused")) == nil)
        }
        // The path now names another file than the one checked: unlinked again.
        let other = directory.appending("other")
        try Data("other".utf8).write(to: other)
        #expect(!FileClone.link(other.path, matching: status, into: folder, name: "wrong"))
        #expect(Self.status(directory.appending("wrong")) == nil)

        // A real second filesystem when /dev/shm is one: EXDEV from the kernel, then a copy.
        if let shm = Self.status(URL(fileURLWithPath: "/dev/shm")), shm.st_dev != status.st_dev,
            access("/dev/shm", W_OK) == 0
        {
            let remote = URL(fileURLWithPath: "/dev/shm/courier-link-\(UUID().uuidString)", isDirectory: true)
            try FileManager.default.createDirectory(at: remote, withIntermediateDirectories: false)
            defer { try? FileManager.default.removeItem(at: remote) }
            let remoteFolder = open(remote.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            #expect(remoteFolder >= 0)
            defer { close(remoteFolder) }
            #expect(!FileClone.link(source.path, matching: status, into: remoteFolder, name: "copy"))
            let input = open(source.path, O_RDONLY | O_CLOEXEC)
            defer { close(input) }
            let output = openat(remoteFolder, "copy", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            defer { close(output) }
            #expect(try FileClone.clone(from: input, to: output, size: 5) == .copy)
            #expect(try Data(contentsOf: remote.appendingPathComponent("copy")) == Data("bytes".utf8))
        }
    }
}

/// A counter and a box the injected linkers share with the test.
private final class Counter: @unchecked Sendable {  // @unchecked: `lock` guards `count`.
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

private final class Locked<Value>: @unchecked Sendable {  // @unchecked: `lock` guards `stored`.
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
