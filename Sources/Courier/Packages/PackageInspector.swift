import CCRC32
import Crypto
import Foundation

/// Reads what a package is without extracting it: its ContentInfo.plist, entry count, sizes and
/// SHA-256. Applies every rule that can be checked without unpacking (limits, names, types,
/// modes, links, duplicates, overlaps), so a package that inspects cleanly only fails extraction
/// on damaged data.
public struct PackageInspector {
    /// Inspects `file`; a hostile package is `hostilePackage`, an unreadable one `integrity`.
    public static func inspect(_ file: URL, limits: PackageConfiguration) throws -> PackageInfo {
        let preflight = try preflight(file, limits: limits)
        let sha256 = try PackageHasher.hash(file, blockSize: limits.blockSize).get()
        return preflight.packageInfo(sha256: sha256)
    }

    /// The product and version `file`'s ContentInfo.plist names, after the same checks as
    /// `inspect` but without hashing the file.
    public static func contentInfo(of file: URL, limits: PackageConfiguration) throws -> (productId: String, version: String) {
        let info = try preflight(file, limits: limits).info
        return (info.productId, info.version)
    }

    /// Every rule that needs no unpacking, in one pass over the central directory and one over
    /// the entry headers (data skipped, only ContentInfo.plist read). Installs and extractions run
    /// it before any space check, purge or byte written.
    ///
    /// With `hashingEntries`, the pass over the entries also reads each regular file's data and
    /// records its SHA-256 in `entryDigests` (what a manifest needs), so a caller that builds the
    /// manifest reads the package once, not twice. Damaged entry data changes nothing in what
    /// the preflight accepts: the pass is then made again without hashing (`entryDigests` empty).
    ///
    /// `bytes`, when given, are the whole of `file` (the bytes a download just wrote and
    /// verified): the passes read them instead of the file, which they never open.
    package static func preflight(
        _ file: URL, bytes: [UInt8]? = nil, limits: PackageConfiguration, hashingEntries: Bool = false
    ) throws -> PackagePreflight {
        guard hashingEntries else { return try preflightPass(file, bytes: bytes, limits: limits, hashingEntries: false) }
        do {
            return try preflightPass(file, bytes: bytes, limits: limits, hashingEntries: true)
        } catch is EntryDataError {
            return try preflightPass(file, bytes: bytes, limits: limits, hashingEntries: false)
        }
    }

    /// An entry's data could not be read while hashing it (only the hashing preflight reads it).
    private struct EntryDataError: Error {}

    private static func preflightPass(
        _ file: URL, bytes: [UInt8]?, limits: PackageConfiguration, hashingEntries: Bool
    ) throws -> PackagePreflight {
        guard let bytes else {
            let directory = try ZipDirectory.read(file, maxEntryCount: limits.maxEntryCount)
            try directory.check(limits)
            let reader = try ArchiveReader(url: file, blockSize: limits.blockSize, verifiesCRC: !hashingEntries)
            defer { reader.close() }
            return try entriesPass(directory, reader: reader, limits: limits, hashingEntries: hashingEntries)
        }
        let directory = try ZipDirectory.parse(bytes, name: file.lastPathComponent, maxEntryCount: limits.maxEntryCount)
        try directory.check(limits)
        return try bytes.withUnsafeBytes { raw in
            let reader = try ArchiveReader(bytes: raw, path: file.path, verifiesCRC: !hashingEntries)
            defer { reader.close() }
            return try entriesPass(directory, reader: reader, limits: limits, hashingEntries: hashingEntries)
        }
    }

    /// The pass over the entry headers (and, when hashing, their data) of `reader`.
    ///
    /// When hashing, `reader` leaves the CRC-32 of each entry to this pass: it takes it beside the
    /// SHA-256, with carry-less multiplication (`CCRC32`), and compares it with the central
    /// directory's. libarchive's own check (zlib's `crc32`) took 24 ms per 100 MB here, about a
    /// third of a SHA-256 pass over the same bytes; this one takes 7. An entry whose CRC does not
    /// match, or that the directory does not name as libarchive does, is damaged data
    /// (`EntryDataError`): the pass without hashing, whose reader checks every CRC, then gives
    /// the verdict.
    private static func entriesPass(
        _ directory: ZipDirectory, reader: ArchiveReader, limits: PackageConfiguration, hashingEntries: Bool
    ) throws -> PackagePreflight {
        var info: ContentInfo?
        var entryCount = 0
        var links: [[String]: String] = [:]
        var tree = EntryTree()
        var digests: [String: String] = [:]
        if hashingEntries {
            // Before any entry's data is read: a package whose central directory names no
            // ContentInfo.plist at all is refused now, not after its data was unpacked to be
            // hashed (a bomb's gigabytes; a finer check follows in the pass).
            let plist = Array(ContentInfo.fileName.utf8)
            guard directory.entries.contains(where: { $0.name.ends(with: plist) || $0.unicodeName?.ends(with: plist) == true }) else {
                throw EntryRules.hostile("the package has no ContentInfo.plist at its root")
            }
        }
        // What the hashing may unpack: each entry its declared size, all of them their declared
        // total within the limit (the extractor's bounds; a size that lies is refused here too).
        let totalLimit = min(limits.maxUnpackedSize, Int64(clamping: directory.declaredUnpackedSize))
        var hashedTotal: Int64 = 0
        // The CRC-32 the directory declares for each name, as the manifest names entries.
        // A name listed twice has none (the pass refuses the package at its second entry).
        var declaredCRC: [String: UInt32] = [:]
        if hashingEntries {
            var listedTwice = Set<String>()
            for record in directory.entries {
                guard let name = String(validating: record.unicodeName ?? record.name, as: UTF8.self) else { continue }
                if declaredCRC.updateValue(record.crc32, forKey: name) != nil { listedTwice.insert(name) }
            }
            for name in listedTwice { declaredCRC[name] = nil }
        }
        /// Throws `EntryDataError` unless `crc` is what the directory declares for `name`.
        func verify(_ crc: UInt32, of name: String) throws {
            guard declaredCRC[name] == crc else { throw EntryDataError() }
        }
        while let entry = try reader.next() {
            entryCount += 1
            let (name, components, type) = try EntryRules.check(entry, count: entryCount, limits: limits)
            try tree.add(components, type: type, name: name)
            if type == EntryRules.symbolicLink {
                links[components] = entry.symlinkTarget ?? ""
            }
            if components == [ContentInfo.fileName] && (type == EntryRules.regularFile || type == 0) {
                // Hashed from the same bytes when hashing: the plist is small and read whole.
                let data = try reader.readAll(limit: limits.maxInfoPlistSize, name: ContentInfo.fileName)
                if hashingEntries {
                    // Checked before it is parsed: this reader checks no CRC itself.
                    guard let name = entry.name else { throw EntryDataError() }
                    try verify(data.withUnsafeBytes { courier_crc32(0, $0.baseAddress, $0.count) }, of: name)
                    digests[name] = SHA256.hash(data: data).hex
                }
                info = try ContentInfo.parse(data)
            } else if hashingEntries, type == EntryRules.regularFile || type == 0, let name = entry.name {
                var hasher = SHA256()
                var crc: UInt32 = 0
                var oversize: CourierError?
                do {
                    try reader.readData { offset, bytes in
                        let (end, overflow) = offset.addingReportingOverflow(Int64(bytes.count))
                        let (total, totalOverflow) = hashedTotal.addingReportingOverflow(Int64(bytes.count))
                        if offset < 0 || overflow || entry.size.map({ end > $0 }) == true {
                            oversize = EntryRules.hostile(
                                "the entry \(name.debugDescription) unpacks to more than its declared \(entry.size ?? 0) bytes")
                        } else if totalOverflow || total > totalLimit {
                            oversize = EntryRules.hostile(
                                "the package unpacks to more than its declared size or the limit of \(limits.maxUnpackedSize) bytes")
                        }
                        if let oversize { throw oversize }
                        hashedTotal = total
                        hasher.update(bufferPointer: bytes)
                        crc = courier_crc32(crc, bytes.baseAddress, bytes.count)
                    }
                } catch {
                    if let oversize { throw oversize }
                    throw EntryDataError()
                }
                try verify(crc, of: name)
                digests[name] = hasher.finalize().hex
            } else {
                try reader.skipData()
            }
        }
        for (link, target) in links
        where !EntryRules.symlinkTargetStaysInside(link: link, target: target, links: Set(links.keys)) {
            throw EntryRules.hostile("the symbolic link \(link.joined(separator: "/").debugDescription) leaves the package")
        }
        guard let info else { throw EntryRules.hostile("the package has no ContentInfo.plist at its root") }
        return PackagePreflight(directory: directory, info: info, entryCount: entryCount, entryDigests: digests)
    }
}

/// What `PackageInspector.preflight` found: the checked directory and ContentInfo.plist.
package struct PackagePreflight: Sendable {
    var directory: ZipDirectory
    var info: ContentInfo
    var entryCount: Int
    /// Lowercase hex SHA-256 of each regular file's unpacked bytes, by entry name, when the
    /// preflight hashed the entries (`hashingEntries`); empty otherwise.
    var entryDigests: [String: String] = [:]

    /// The declared unpacked size (within `packages.maxUnpackedSize`, which the check enforced).
    var declaredUnpackedSize: Int64 { Int64(clamping: directory.declaredUnpackedSize) }

    func packageInfo(sha256: String) -> PackageInfo {
        PackageInfo(
            productId: info.productId,
            version: info.version,
            entryCount: entryCount,
            packedSize: Int64(clamping: directory.fileSize),
            unpackedSize: declaredUnpackedSize,
            sha256: sha256
        )
    }
}

/// The paths a package's entries make, to refuse before extraction what extraction would refuse
/// half-way: an entry that appears twice or replaces another, and one below a file or a link.
private struct EntryTree {
    /// Type bits by path; folders made implicitly by deeper entries count as folders.
    private var kinds: [[String]: UInt32] = [[]: EntryRules.directory]

    mutating func add(_ components: [String], type: UInt32, name: String) throws {
        let isFolder = type == EntryRules.directory
        // Walk up until a known folder: each folder is registered once, so this stays linear.
        var parent = Array(components.dropLast())
        var missing: [[String]] = []
        while kinds[parent] == nil {
            missing.append(parent)
            parent.removeLast()
        }
        guard kinds[parent] == EntryRules.directory else {
            throw EntryRules.hostile("the entry \(name.debugDescription) is written through the link or file \(parent.joined(separator: "/").debugDescription)")
        }
        for folder in missing { kinds[folder] = EntryRules.directory }
        if let existing = kinds[components] {
            if isFolder && existing == EntryRules.directory { return }
            throw EntryRules.hostile("the entry \(name.debugDescription) appears twice or replaces another entry")
        }
        kinds[components] = isFolder ? EntryRules.directory : (type == 0 ? EntryRules.regularFile : type)
    }
}

extension Array where Element == UInt8 {
    fileprivate func ends(with suffix: [UInt8]) -> Bool {
        count >= suffix.count && self[(count - suffix.count)...].elementsEqual(suffix)
    }
}
