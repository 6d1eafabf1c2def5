import Foundation

/// Files that hold what only the user may read (the state database, tokens, catalogs), created
/// owner-only from their first byte: `open(O_CREAT | O_EXCL, 0600)` rather than a default mode
/// and a later chmod, which leaves a window in which another local user can open the file and
/// keep the descriptor.
package enum OwnerOnlyFile {
    /// Creates an empty file at `path` with mode 0600 unless something (a file, a symlink) is
    /// already there. Returns whether it created one.
    @discardableResult
    package static func create(atPath path: String) throws -> Bool {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if descriptor < 0 {
            if errno == EEXIST { return false }
            throw CourierError(.io, "cannot create \(path)", cause: String(cString: strerror(errno)))
        }
        close(descriptor)
        return true
    }

    /// Writes `data` to a new owner-only file at `path`, unless something is already there
    /// (then it returns false and changes nothing).
    @discardableResult
    static func write(_ data: Data, toNewFileAt path: String) throws -> Bool {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            if errno == EEXIST { return false }
            throw CourierError(.io, "cannot create \(path)", cause: String(cString: strerror(errno)))
        }
        defer { close(descriptor) }
        if let code = data.withUnsafeBytes({ writeAll(descriptor, $0) }) {
            throw CourierError(.io, "cannot write \(path)", cause: String(cString: strerror(code)))
        }
        return true
    }
}
