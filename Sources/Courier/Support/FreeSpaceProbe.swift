import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// How much space a filesystem has free for Courier, in bytes: the one `statvfs` probe the
/// transfer's space check, placement and the agent's disk-space retry all use (tests inject others).
public struct FreeSpaceProbe: Sendable {
    public let available: @Sendable (URL) throws -> Int64

    public init(_ available: @escaping @Sendable (URL) throws -> Int64) {
        self.available = available
    }

    /// `statvfs`: the blocks available to unprivileged users on the filesystem holding `url`, or
    /// its folder while `url` does not exist yet; saturating instead of overflowing.
    public static let statvfs = FreeSpaceProbe(availableBytes)
}

private func availableBytes(at url: URL) throws -> Int64 {
    var path = url.path
    if !FileManager.default.fileExists(atPath: path) { path = url.deletingLastPathComponent().path }
    var info = statvfs()
    guard statvfs(path, &info) == 0 else { throw CourierError.posix("statvfs", path: path) }
    let (bytes, overflow) = info.f_bavail.multipliedReportingOverflow(by: UInt(info.f_frsize))
    return overflow ? .max : Int64(clamping: bytes)
}
