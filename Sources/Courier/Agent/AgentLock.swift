import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One agent per store: an exclusive `flock` on `Storage/agent.sock.lock`, taken before the
/// control socket is bound and held until the agent ends (the kernel drops it when the process
/// dies, so a killed agent leaves nothing to clean up).
///
/// Without it two agents started at once both found no live socket: the second failed to bind
/// (`EADDRINUSE`), or removed the first one's socket and bound its own, and both ran. The file
/// is created 0600, holds the owner's pid (for the loser's message) and is never removed: a
/// removed lock file lets a third process lock a new inode while the first still holds the old.
final class AgentLock: Sendable {
    let path: String
    private let descriptor: Int32

    /// Takes the lock for the agent that will serve `socketPath`, or throws `leased` naming the
    /// agent that holds it.
    init(socketPath: String) throws {
        path = socketPath + ".lock"
        let fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CourierError.posix("open", path: path) }
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            if errno == EINTR { continue }
            let code = errno
            let owner = Self.owner(fd)
            close(fd)
            if code == EWOULDBLOCK {
                throw CourierError(
                    .leased,
                    "an agent\(owner.map { " (pid \($0))" } ?? "") already runs on this store and serves \(socketPath)",
                    hint: "stop it first, or use another --storage")
            }
            throw CourierError.posix("flock", path: path, errno: code)
        }
        // Ours now: record our pid (the lock, not the content, is what counts).
        let text = Array("\(getpid())\n".utf8)
        if ftruncate(fd, 0) != 0 || text.withUnsafeBytes({ writeAll(fd, $0) }) != nil {
            let error = CourierError.posix("write", path: path)
            close(fd)
            throw error
        }
        descriptor = fd
    }

    /// The pid written in the lock file, if it reads as one (checked: a positive 32-bit number).
    private static func owner(_ fd: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 16)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[0..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let pid = Int32(text), pid > 0 else { return nil }
        return pid
    }

    deinit { close(descriptor) }
}
