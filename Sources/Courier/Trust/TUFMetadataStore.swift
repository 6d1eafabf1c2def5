import Foundation

/// The client's trusted metadata: one file per role (`root.json`, `timestamp.json`, a delegated
/// role's percent-encoded name plus `.json`) in an owner-only folder.
///
/// Every write makes a new owner-only file (mode 0600 from its first byte), fsyncs it, renames it
/// over the old one and fsyncs the folder: a crash (kill -9, power loss) at any point leaves
/// either the old file or the new one, each complete and verified before it was written, never a
/// half-written root.
public struct TUFMetadataStore: Sendable {
    public let directory: URL

    public init(directory: URL) throws {
        self.directory = directory
        try DurableFile.makeDirectory(directory)
    }

    /// The file name of `role`: Python's `quote(role, safe="")`, so `../x` stays one name.
    public static func fileName(_ role: String) -> String {
        let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~".utf8)
        var out = ""
        for byte in role.utf8 {
            if unreserved.contains(byte) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let digits = Array("0123456789ABCDEF")
                out += "%" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0x0F)])
            }
        }
        return out + ".json"
    }

    public func url(of role: String) -> URL { directory.appendingPathComponent(Self.fileName(role)) }

    /// The stored metadata of `role`, or nil when there is none.
    public func read(_ role: String) throws -> Data? {
        let file = url(of: role)
        guard FileManager.default.fileExists(atPath: file.path) else { return nil }
        return try CourierError.wrapping(.io, "cannot read \(file.path)") { try Data(contentsOf: file) }
    }

    /// Replaces the metadata of `role` durably and atomically.
    public func write(_ role: String, _ data: Data) throws {
        try DurableFile.replace(url(of: role), with: data)
    }

    /// Takes the store's exclusive lock (`.lock` in its folder; `flock`, so a killed process
    /// drops it), waiting for another process that holds it. Hold it for a whole update: two
    /// processes refreshing the same trusted metadata (the agent and a `deliver`) then take
    /// turns, and neither writes back a timestamp older than the one the other just trusted.
    public func lock() async throws -> TUFStoreLock {
        let file = directory.appendingPathComponent(".lock")
        let descriptor = open(file.path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else { throw CourierError.posix("open", path: file.path) }
        var retry = 0
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            guard code == EWOULDBLOCK || code == EINTR else {
                close(descriptor)
                throw CourierError.posix("flock", path: file.path, errno: code)
            }
            retry += 1
            do {
                try await Task.sleep(for: .seconds(Self.lockRetries.delay(retry: retry)))
            } catch {
                close(descriptor)
                throw error
            }
        }
        return TUFStoreLock(descriptor: descriptor)
    }

    /// How `lock` asks again for a lock another process holds: every 20 ms until it is free
    /// (the one retry policy of Courier, without a limit or jitter).
    static let lockRetries = RetryPolicy(maxRetries: nil, backoffBase: 0.02, backoffMax: 0.02, jitter: false)

    /// Starts a store from a root the user trusts (the out-of-band first root): it must parse as
    /// root metadata signed by its own keys. An existing root is replaced only by `force`.
    public func initialize(trustedRoot data: Data, force: Bool = false) throws {
        _ = try TUFTrustedSet(trustedRoot: data, referenceTime: Date.distantPast)
        if !force, FileManager.default.fileExists(atPath: url(of: "root").path) { return }
        try write("root", data)
    }
}

/// A held `TUFMetadataStore` lock; `release()` once.
public struct TUFStoreLock: Sendable {
    let descriptor: Int32

    public func release() { close(descriptor) }
}

/// Owner-only files replaced atomically and durably.
public enum DurableFile {
    /// Creates `directory` (and missing parents) with mode 0700.
    public static func makeDirectory(_ directory: URL) throws {
        try CourierError.wrapping(.io, "cannot create \(directory.path)") {
            try FileManager.default.createDirectory(
                at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
    }

    /// Writes `data` to a new 0600 file beside `file`, fsyncs it, renames it over `file` and
    /// fsyncs the folder.
    public static func replace(_ file: URL, with data: Data, mode: mode_t = 0o600) throws {
        let folder = file.deletingLastPathComponent().path
        let temporary = "\(folder)/.\(file.lastPathComponent).\(UInt64.random(in: 0...UInt64.max)).tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard descriptor >= 0 else {
            throw CourierError(.io, "cannot create \(temporary)", cause: String(cString: strerror(errno)))
        }
        var failure: CourierError?
        if let code = data.withUnsafeBytes({ writeAll(descriptor, $0) }) {
            failure = CourierError(.io, "cannot write \(temporary)", cause: String(cString: strerror(code)))
        } else if fsync(descriptor) != 0 {
            failure = CourierError(.io, "cannot fsync \(temporary)", cause: String(cString: strerror(errno)))
        }
        close(descriptor)
        if failure == nil, rename(temporary, file.path) != 0 {
            failure = CourierError(.io, "cannot rename \(temporary) to \(file.path)", cause: String(cString: strerror(errno)))
        }
        if let failure {
            unlink(temporary)
            throw failure
        }
        let folderDescriptor = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if folderDescriptor >= 0 {
            defer { close(folderDescriptor) }
            guard fsync(folderDescriptor) == 0 else {
                throw CourierError(.io, "cannot fsync \(folder)", cause: String(cString: strerror(errno)))
            }
        }
    }
}
