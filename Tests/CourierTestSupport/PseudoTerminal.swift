import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A pseudo-terminal for CLI tests that need `courier` to believe it writes to a terminal
/// (progress bars are drawn only there): the child gets the secondary side as a descriptor, the
/// test reads what was drawn from the primary side, each read stamped with when it came.
public final class PseudoTerminal: @unchecked Sendable {  // @unchecked: `chunks` is guarded by `lock`.
    /// The side the child writes to (pass it as its standard error).
    public let secondary: FileHandle
    private let primary: Int32
    private let secondaryDescriptor: Int32
    private let lock = NSLock()
    private var chunks: [(time: Date, text: String)] = []
    private let done = DispatchSemaphore(value: 0)

    /// A terminal `columns` wide.
    public init(columns: Int, rows: Int = 24) throws {
        // posix_openpt/grantpt/unlockpt/ptsname are not imported by Glibc's module: the same
        // through /dev/ptmx and the Linux ioctls TIOCSPTLCK (unlock) and TIOCGPTN (its number),
        // whose values are the same on every Linux architecture Swift supports.
        primary = open("/dev/ptmx", O_RDWR | O_NOCTTY)
        var unlock: Int32 = 0
        var number: UInt32 = 0
        guard primary >= 0, ioctl(primary, UInt(0x4004_5431), &unlock) == 0, ioctl(primary, UInt(0x8004_5430), &number) == 0 else {
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        secondaryDescriptor = open("/dev/pts/\(number)", O_RDWR | O_NOCTTY)
        guard secondaryDescriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        var size = winsize(ws_row: UInt16(rows), ws_col: UInt16(columns), ws_xpixel: 0, ws_ypixel: 0)
        _ = ioctl(primary, UInt(TIOCSWINSZ), &size)
        secondary = FileHandle(fileDescriptor: secondaryDescriptor, closeOnDealloc: false)
        let primary = self.primary
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(primary, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }  // EIO once no process holds the secondary side
                let text = String(decoding: buffer[0..<count], as: UTF8.self)
                lock.withLock { chunks.append((Date(), text)) }
            }
            done.signal()
        }
    }

    /// Closes this process's copy of the secondary side (call once the child has started), so
    /// the reader sees the end when the child exits.
    public func closeSecondary() {
        close(secondaryDescriptor)
    }

    /// Everything read, in order, with when it came; waits (up to `timeout`) for the end.
    public func output(timeout: Double = 10) -> [(time: Date, text: String)] {
        _ = done.wait(timeout: .now() + timeout)
        return lock.withLock { chunks }
    }

    /// What was read so far, without waiting for the end.
    public func textSoFar() -> String {
        lock.withLock { chunks.map(\.text).joined() }
    }

    /// Types `text` on the terminal, as a user at the keyboard (the child reads it from the
    /// secondary side when that is its standard input).
    public func type(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(primary, $0.baseAddress, $0.count) }
    }

    deinit {
        close(primary)
    }
}
