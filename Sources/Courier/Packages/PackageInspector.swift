import Foundation

/// Reads what a package is without extracting it: its ContentInfo.plist, entry count, sizes and
/// SHA-256. Applies every rule that can be checked without unpacking (limits, names, types,
/// modes, links), so a package that inspects cleanly only fails extraction on damaged data.
public struct PackageInspector {
    /// Inspects `file`; a hostile package is `hostilePackage`, an unreadable one `integrity`.
    public static func inspect(_ file: URL, limits: PackageConfiguration) throws -> PackageInfo {
        try read(file, limits: limits, hash: true)
    }

    /// The product and version `file`'s ContentInfo.plist names, after the same checks as
    /// `inspect` but without hashing the file.
    public static func contentInfo(of file: URL, limits: PackageConfiguration) throws -> (productId: String, version: String) {
        let info = try read(file, limits: limits, hash: false)
        return (info.productId, info.version)
    }

    private static func read(_ file: URL, limits: PackageConfiguration, hash: Bool) throws -> PackageInfo {
        let directory = try ZipDirectory.read(file, maxEntryCount: limits.maxEntryCount)
        try directory.check(limits)
        let reader = try ArchiveReader(url: file, blockSize: limits.blockSize)
        defer { reader.close() }
        var info: ContentInfo?
        var entryCount = 0
        var links: [[String]: String] = [:]
        while let entry = try reader.next() {
            entryCount += 1
            guard let name = entry.name else { throw EntryRules.hostile("an entry name is not valid UTF-8") }
            let components = try EntryRules.components(of: name, maxDepth: limits.maxPathDepth)
            if entry.hardlinkTarget != nil {
                throw EntryRules.hostile("the entry \(name.debugDescription) is a hard link; packages hold none")
            }
            try EntryRules.checkMode(entry.mode, name: name, allowSymlink: true)
            let type = entry.mode & EntryRules.fileType
            if type == EntryRules.symbolicLink {
                links[components] = entry.symlinkTarget ?? ""
            }
            if components == [ContentInfo.fileName] && type == EntryRules.regularFile {
                info = try ContentInfo.parse(reader.readAll(limit: limits.maxInfoPlistSize, name: ContentInfo.fileName))
            } else {
                try reader.skipData()
            }
        }
        for (link, target) in links
        where !EntryRules.symlinkTargetStaysInside(link: link, target: target, links: Set(links.keys)) {
            throw EntryRules.hostile("the symbolic link \(link.joined(separator: "/").debugDescription) leaves the package")
        }
        guard let info else { throw EntryRules.hostile("the package has no ContentInfo.plist at its root") }
        let sha256 = try hash ? PackageHasher.hash(file, blockSize: limits.blockSize).get() : ""
        return PackageInfo(
            productId: info.productId,
            version: info.version,
            entryCount: entryCount,
            packedSize: Int64(directory.fileSize),
            unpackedSize: Int64(clamping: directory.declaredUnpackedSize),
            sha256: sha256
        )
    }
}
