import Courier
import CourierTestSupport
import Foundation
import GRDB
import Testing

/// The storage root holds signed transactions (bearer tokens): no other local user may read a
/// state file, not even in the moment between its creation and a chmod (issue 10, hole 4).
@Suite("Storage permissions")
struct StoragePermissionsTests {
    /// Runs `courier ARGS` through `sh -c 'umask 022; exec …'`, the umask most users have, so the
    /// files' modes come from Courier and not from the test runner's umask.
    private func runWithUmask022(_ arguments: [String]) throws -> CourierBinary.Result {
        let quoted = ([CourierBinary.url.path] + arguments).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        return try CourierBinary.runShell("umask 022; exec " + quoted.joined(separator: " "))
    }

    private func mode(_ path: String) -> mode_t? {
        var status = stat()
        guard lstat(path, &status) == 0 else { return nil }
        return status.st_mode & 0o7777
    }

    @Test("state files are owner-only from their first byte and a 0755 root is tightened with a note")
    func stateFilesOwnerOnlyFromCreation() throws {
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        let root = scratch.appending("Storage")
        // A git checkout leaves ./Storage 0755.
        #expect(mkdir(root.path, 0o755) == 0)
        #expect(chmod(root.path, 0o755) == 0)

        let payload = scratch.appending("payload")
        try PackageFixtures.writeTree(["Contents/a.txt": Data("hello".utf8)], in: payload)
        let package = scratch.appending("p.zip")
        let created = try CourierBinary.run([
            "package", "create", payload.path, "--product", "com.example.perm", "--version", "1.0",
            "-o", package.path,
        ])
        #expect(created.status == 0, "\(created.stderr)")

        // Watch the root for new files and read each one's mode the moment it appears: a file
        // created 0644 and chmodded later is caught in that window.
        let watcher = try CreationWatcher(folder: root.path)
        let installed = try runWithUmask022([
            "package", "install", package.path, "--placement", "cache", "--storage", root.path,
        ])
        let seen = watcher.stop()
        #expect(installed.status == 0, "\(installed.stderr)")

        #expect(mode(root.path) == 0o700)
        #expect(installed.stderr.contains("owner-only"), "no note about the tightened root: \(installed.stderr)")
        #expect(seen["state.sqlite"] != nil, "the watcher saw no state.sqlite: \(seen)")
        for (name, mode) in seen where mode != nil {
            #expect(mode! & 0o077 == 0, "\(name) appeared with mode \(String(mode!, radix: 8))")
        }
        // Every file and folder Courier left under the root is owner-only.
        let enumerator = FileManager.default.enumerator(atPath: root.path)
        while let relative = enumerator?.nextObject() as? String {
            let path = root.appendingPathComponent(relative).path
            guard let mode = mode(path) else { continue }
            #expect(mode & 0o077 == 0, "\(relative) has mode \(String(mode, radix: 8))")
        }

        // A second run says nothing more: the root is already owner-only.
        let again = try runWithUmask022(["content", "list", "--storage", root.path])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(!again.stderr.contains("owner-only"))
    }

    @Test("the library alone creates the database and its -wal and -shm 0600, whatever the umask")
    func libraryCreatesOwnerOnlyFiles() throws {
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        let previous = umask(0o022)
        defer { umask(previous) }
        let store = try StateStore(layout: StorageLayout(root: scratch.appending("Storage")))
        try store.write { db in try db.execute(sql: "CREATE TABLE IF NOT EXISTS probe (x)") }
        for suffix in ["", "-wal", "-shm"] {
            let path = store.url.path + suffix
            #expect(mode(path) == 0o600, "state.sqlite\(suffix) has mode \(mode(path).map { String($0, radix: 8) } ?? "none")")
        }
        #expect(mode(scratch.appending("Storage").path) == 0o700)
    }

    @Test("a new storage root and its missing parents are created 0700")
    func newRootIsOwnerOnly() throws {
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        let root = scratch.appending("a/b/Storage")
        // A command that writes creates the store (reading commands never do, issue 14).
        let payload = scratch.appending("payload")
        try PackageFixtures.writeTree(["Contents/a.txt": Data("hello".utf8)], in: payload)
        let package = scratch.appending("p.zip")
        let created = try CourierBinary.run([
            "package", "create", payload.path, "--product", "com.example.perm", "--version", "1.0", "-o", package.path,
        ])
        #expect(created.status == 0, "\(created.stderr)")
        let result = try runWithUmask022(["package", "install", package.path, "--placement", "cache", "--storage", root.path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(mode(root.path) == 0o700)
        #expect(mode(scratch.appending("a").path) == 0o700)
        #expect(!result.stderr.contains("owner-only"), "a root Courier created needs no note")
    }
}

/// Reports the mode each new entry of one folder had when it appeared (inotify `IN_CREATE`,
/// read on its own thread; the mode is read at once, before a later chmod could hide it).
private final class CreationWatcher: @unchecked Sendable {
    // `seen` is written by the reader thread and read only after `stop()` joined it.
    private var seen: [String: mode_t?] = [:]
    private let descriptor: Int32
    private let folder: String
    private var thread: Thread?
    private let done = DispatchSemaphore(value: 0)
    private var stopping = false
    private let lock = NSLock()

    init(folder: String) throws {
        self.folder = folder
        descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0, inotify_add_watch(descriptor, folder, UInt32(IN_CREATE)) >= 0 else {
            throw POSIXError(.EINVAL)
        }
        let thread = Thread { [self] in self.readLoop() }
        self.thread = thread
        thread.start()
    }

    private func readLoop() {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            _ = poll(&poller, 1, 20)
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count > 0 { record(buffer, count: count) }
            lock.lock()
            let stop = stopping
            lock.unlock()
            if stop && count <= 0 { break }
        }
        done.signal()
    }

    private func record(_ buffer: [UInt8], count: Int) {
        var offset = 0
        let header = MemoryLayout<inotify_event>.size
        while offset + header <= count {
            let length = buffer.withUnsafeBytes { Int($0.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self)) }
            let nameBytes = buffer[(offset + header)..<min(count, offset + header + length)].prefix { $0 != 0 }
            let name = String(decoding: nameBytes, as: UTF8.self)
            var status = stat()
            let mode: mode_t? = lstat(folder + "/" + name, &status) == 0 ? status.st_mode & 0o7777 : nil
            if seen[name] == nil { seen[name] = mode }
            offset += header + length
        }
    }

    /// Stops watching and returns each created name with the mode it had when first seen.
    func stop() -> [String: mode_t?] {
        lock.lock()
        stopping = true
        lock.unlock()
        done.wait()
        close(descriptor)
        return seen
    }
}
