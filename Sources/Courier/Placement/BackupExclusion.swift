import CSystemShims
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Marks files excluded from backups in the ways Linux backup tools honour: the freedesktop
/// `user.xdg.robots.backup=false` extended attribute and the `nodump` inode flag (`chattr +d`).
public enum BackupExclusion {
    /// The extended attribute of the freedesktop "robots" convention.
    public static let attributeName = "user.xdg.robots.backup"

    /// Which marks a filesystem accepted.
    public struct Support: Sendable, Codable, Equatable, CustomStringConvertible {
        /// `user.xdg.robots.backup=false` could be set.
        public var extendedAttribute: Bool
        /// The `nodump` attribute could be set.
        public var nodump: Bool
        /// Why a mark failed, when one did.
        public var problems: [String]

        public init(extendedAttribute: Bool, nodump: Bool, problems: [String] = []) {
            self.extendedAttribute = extendedAttribute
            self.nodump = nodump
            self.problems = problems
        }

        /// Whether at least one mark works.
        public var isSupported: Bool { extendedAttribute || nodump }

        public var description: String {
            switch (extendedAttribute, nodump) {
            case (true, true): return "xattr user.xdg.robots.backup=false and nodump"
            case (true, false): return "xattr user.xdg.robots.backup=false only (no nodump attribute)"
            case (false, true): return "nodump attribute only (no user extended attributes)"
            case (false, false): return "none: this filesystem supports neither user.xdg.robots.backup nor nodump"
            }
        }
    }

    /// Marks `url` (a file or folder, not followed if a link) and reports which marks held.
    @discardableResult
    public static func mark(_ url: URL) -> Support {
        var problems: [String] = []
        let value = "false"
        let attribute = lsetxattr(url.path, attributeName, value, value.utf8.count, 0) == 0
        if !attribute { problems.append("setxattr \(attributeName): \(String(cString: strerror(errno)))") }
        var nodump = false
        let fd = open(url.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        if fd >= 0 {
            var flags: Int32 = 0
            if courier_get_inode_flags(fd, &flags) == 0 {
                if flags & Int32(FS_NODUMP_FL) != 0 {
                    nodump = true
                } else {
                    flags |= Int32(FS_NODUMP_FL)
                    nodump = courier_set_inode_flags(fd, &flags) == 0
                }
            }
            if !nodump { problems.append("nodump: \(String(cString: strerror(errno)))") }
            close(fd)
        } else {
            problems.append("open: \(String(cString: strerror(errno)))")
        }
        return Support(extendedAttribute: attribute, nodump: nodump, problems: problems)
    }
}
