import Foundation

/// The rules every package entry obeys, whoever made the package. Breaking one is
/// `CourierError(.hostilePackage)`.
///
/// Names are relative, `/`-separated UTF-8 paths without `..`, backslashes or NUL; only regular
/// files, folders and symbolic links that stay inside the package are allowed; no setuid or
/// setgid bits. Symbolic-link targets are checked by `symlinkTargetStaysInside`.
enum EntryRules {
    static let fileType: UInt32 = 0o170000
    static let regularFile: UInt32 = 0o100000
    static let directory: UInt32 = 0o040000
    static let symbolicLink: UInt32 = 0o120000

    /// The checks an archive entry passes before anything is done with it (by the inspection
    /// and the extraction alike): the `count`th entry within the limit, a UTF-8 name within the
    /// path rules, no hard link, an allowed mode. Returns its name, components and file type.
    static func check(_ entry: ArchiveReader.Entry, count: Int, limits: PackageConfiguration) throws -> (
        name: String, components: [String], type: UInt32
    ) {
        guard count <= limits.maxEntryCount else {
            throw hostile("the package holds more than \(limits.maxEntryCount) entries")
        }
        guard let name = entry.name else { throw hostile("an entry name is not valid UTF-8") }
        let components = try Self.components(of: name, maxDepth: limits.maxPathDepth)
        if entry.hardlinkTarget != nil {
            throw hostile("the entry \(name.debugDescription) is a hard link; packages hold none")
        }
        try checkMode(entry.mode, name: name, allowSymlink: true)
        return (name, components, entry.mode & fileType)
    }

    /// The path components of an entry name: `.` and empty components dropped. An empty result
    /// names the package root itself.
    ///
    /// Read byte by byte, as the kernel reads a path, never by `Character`: to Swift's `String`
    /// a `/` followed by a combining mark (`"/\u{301}"`) is one grapheme, not a `/`, so splitting
    /// or `hasPrefix("/")` by characters took `"../\u{301}x"` for one harmless component and
    /// `"/\u{301}x"` for a relative name, and `openat(2)` then climbed out of the package or
    /// wrote at the file system's root.
    static func components(of name: String, maxDepth: Int) throws -> [String] {
        let bytes = name.utf8
        if bytes.isEmpty { throw hostile("an entry has an empty name") }
        if bytes.first == slash { throw hostile("the entry \(name.debugDescription) has an absolute path") }
        if bytes.contains(backslash) {
            throw hostile("the entry \(name.debugDescription) uses a backslash as a path separator")
        }
        if bytes.contains(0) { throw hostile("the entry \(name.debugDescription) contains a NUL byte") }
        if bytes.count > 4000 { throw hostile("the entry name \(name.prefix(64).debugDescription)... is too long") }
        var components: [String] = []
        for part in bytes.split(separator: slash, omittingEmptySubsequences: true) {
            if isDot(part) { continue }
            if isDotDot(part) { throw hostile("the entry \(name.debugDescription) climbs out with \"..\"") }
            if part.count > 255 { throw hostile("the entry \(name.debugDescription) has a component longer than 255 bytes") }
            // Whole UTF-8 sequences: `name` is valid UTF-8 and `/` (0x2F) is never inside one.
            components.append(String(decoding: part, as: UTF8.self))
        }
        if components.count > maxDepth {
            throw hostile("the entry \(name.debugDescription) is nested deeper than \(maxDepth) folders")
        }
        return components
    }

    static let slash = UInt8(ascii: "/")
    static let backslash = UInt8(ascii: "\\")
    static let dot = UInt8(ascii: ".")

    /// Whether the bytes of a path component are exactly `.` (byte-wise; see `components(of:)`).
    static func isDot(_ part: some Collection<UInt8>) -> Bool {
        part.count == 1 && part.first == dot
    }

    /// Whether the bytes of a path component are exactly `..`.
    static func isDotDot(_ part: some Collection<UInt8>) -> Bool {
        part.count == 2 && part.allSatisfy { $0 == dot }
    }

    /// Refuses device files, FIFOs, sockets, setuid and setgid bits (and symbolic links unless
    /// `allowSymlink`). A mode without type bits is taken as a regular file.
    static func checkMode(_ mode: UInt32, name: String, allowSymlink: Bool) throws {
        let type = mode & fileType
        switch type {
        case 0, regularFile, directory: break
        case symbolicLink where allowSymlink: break
        case symbolicLink: throw hostile("the entry \(name.debugDescription) is a symbolic link")
        case 0o020000, 0o060000: throw hostile("the entry \(name.debugDescription) is a device file")
        case 0o010000: throw hostile("the entry \(name.debugDescription) is a FIFO")
        case 0o140000: throw hostile("the entry \(name.debugDescription) is a socket")
        default: throw hostile("the entry \(name.debugDescription) has an unknown file type \(String(type, radix: 8))")
        }
        if mode & 0o6000 != 0 {
            throw hostile("the entry \(name.debugDescription) has the setuid or setgid bit")
        }
    }

    /// Whether a symbolic link at `link` (components) pointing at `target` resolves inside the
    /// package, step by step, without passing through another link of `links` (a link through a
    /// link could climb out once both exist). Absolute targets never stay inside. The target is
    /// read byte by byte, as the kernel resolves it (see `components(of:)`: by characters,
    /// `"/\u{301}/../etc"` was a relative target that climbed back into the package).
    static func symlinkTargetStaysInside(link: [String], target: String, links: Set<[String]>) -> Bool {
        let bytes = target.utf8
        if bytes.isEmpty || bytes.first == slash || bytes.contains(backslash) || bytes.contains(0) { return false }
        var position = Array(link.dropLast())
        let parts = bytes.split(separator: slash, omittingEmptySubsequences: true)
        for (index, part) in parts.enumerated() {
            if isDot(part) { continue }
            if isDotDot(part) {
                if position.isEmpty { return false }
                position.removeLast()
            } else {
                position.append(String(decoding: part, as: UTF8.self))
                // Every step but the last must be a folder, not a link.
                if index < parts.count - 1 && links.contains(position) { return false }
            }
            if links.contains(position) && index < parts.count - 1 { return false }
        }
        return position != link
    }

    static func hostile(_ message: String) -> CourierError {
        CourierError(.hostilePackage, message, hint: "the package was refused and nothing was installed")
    }
}
