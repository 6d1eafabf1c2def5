import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The per-entry list of a hosted content package, published beside it so that an update can
/// fetch only the entries that changed (docs/packages.md, "Manifest").
///
/// ```json
/// { "format": 1, "productId": "com.example.pack1", "version": "2.0",
///   "package": { "sha256": "<hex>", "length": 1001100 },
///   "entries": [
///     { "path": "Contents/", "type": "directory" },
///     { "path": "Contents/level1.dat", "type": "file", "size": 5000, "sha256": "<hex>",
///       "crc32": 123456789, "method": 8, "compressedSize": 1234, "offset": 310, "length": 1320 } ] }
/// ```
/// `offset` and `length` are the bytes of the zip holding the entry: its local header, its data
/// and its data descriptor, up to the next local header (or the central directory). `method` is
/// the zip compression method (0 stored, 8 deflate). Paths follow `EntryRules`.
///
/// A manifest is untrusted input: `decode` checks every field (names, digests, that each range
/// lies inside the package and no two overlap, that sizes and counts stay within the limits), so
/// a manifest that decodes can be used without further arithmetic checks.
public struct PackageManifest: Sendable, Codable, Equatable {
    public static let currentFormat = 1
    /// The largest manifest document `decode` accepts (64 MiB).
    public static let maxDocumentSize = 64 << 20

    public var format: Int
    public var productId: String
    public var version: String
    public var package: Package
    public var entries: [Entry]

    /// The package the manifest describes.
    public struct Package: Sendable, Codable, Equatable {
        public var sha256: String
        public var length: Int64
    }

    public enum EntryType: String, Sendable, Codable, Equatable {
        case file, directory
    }

    /// One entry of the package.
    public struct Entry: Sendable, Codable, Equatable {
        /// The entry's name in the zip: `/`-separated, a folder's ending in `/`.
        public var path: String
        public var type: EntryType
        /// Unpacked bytes (files).
        public var size: Int64?
        /// Lowercase hex SHA-256 of the unpacked bytes (files).
        public var sha256: String?
        /// The zip's CRC-32 of the unpacked bytes (files).
        public var crc32: UInt32?
        /// The zip compression method: 0 stored, 8 deflate (files).
        public var method: Int?
        /// Bytes of compressed data (files).
        public var compressedSize: Int64?
        /// Where the entry's local header starts in the zip (files).
        public var offset: Int64?
        /// Bytes from `offset` to the end of the entry's data descriptor (files).
        public var length: Int64?

        /// The byte range in the package of a file entry (checked by `decode`).
        public var range: Range<Int64>? {
            guard let offset, let length else { return nil }
            return offset..<(offset + length)
        }
    }

    /// The manifest's file beside a package: `X.zip` gives `X.manifest.json`.
    public static func url(besidePackage package: URL) -> URL {
        let base = package.pathExtension.lowercased() == "zip" ? package.deletingPathExtension() : package
        return base.deletingLastPathComponent().appendingPathComponent(base.lastPathComponent + ".manifest.json")
    }

    /// The files of the manifest, by path.
    public var files: [String: Entry] {
        Dictionary(entries.filter { $0.type == .file }.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
    }

    // MARK: Encoding and decoding

    /// The manifest as compact, key-sorted JSON (reproducible: the same package gives the same bytes).
    ///
    /// Written by hand (one per staged package: 2% of a prestage run went to `JSONEncoder`), byte
    /// for byte what `JSONEncoder` writes with `.sortedKeys` and `.withoutEscapingSlashes`: keys
    /// in that order, absent fields left out, its string escapes (`PackageManifestTests` compares).
    public func encoded() throws -> Data {
        var out: [UInt8] = []
        out.reserveCapacity(256 + entries.count * 256)
        out.append(contentsOf: #"{"entries":["#.utf8)
        for (index, entry) in entries.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            var separator = UInt8(ascii: "{")
            func field(_ name: String) {
                out.append(separator)
                separator = UInt8(ascii: ",")
                out.append(UInt8(ascii: "\""))
                out.append(contentsOf: name.utf8)
                out.append(contentsOf: #"":"#.utf8)
            }
            if let value = entry.compressedSize { field("compressedSize"); out.append(contentsOf: String(value).utf8) }
            if let value = entry.crc32 { field("crc32"); out.append(contentsOf: String(value).utf8) }
            if let value = entry.length { field("length"); out.append(contentsOf: String(value).utf8) }
            if let value = entry.method { field("method"); out.append(contentsOf: String(value).utf8) }
            if let value = entry.offset { field("offset"); out.append(contentsOf: String(value).utf8) }
            field("path")
            JSONLine.appendString(entry.path, to: &out)
            if let value = entry.sha256 { field("sha256"); JSONLine.appendString(value, to: &out) }
            if let value = entry.size { field("size"); out.append(contentsOf: String(value).utf8) }
            field("type")
            JSONLine.appendString(entry.type.rawValue, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: #"],"format":"#.utf8)
        out.append(contentsOf: String(format).utf8)
        out.append(contentsOf: #","package":{"length":"#.utf8)
        out.append(contentsOf: String(package.length).utf8)
        out.append(contentsOf: #","sha256":"#.utf8)
        JSONLine.appendString(package.sha256, to: &out)
        out.append(contentsOf: #"},"productId":"#.utf8)
        JSONLine.appendString(productId, to: &out)
        out.append(contentsOf: #","version":"#.utf8)
        JSONLine.appendString(version, to: &out)
        out.append(UInt8(ascii: "}"))
        return Data(out)
    }

    /// Decodes and checks a manifest document (the fuzz target of the manifest reader). Anything
    /// malformed, inconsistent or beyond `limits` is `integrity`.
    public static func decode(_ data: Data, limits: PackageConfiguration = PackageConfiguration()) throws -> PackageManifest {
        guard data.count <= maxDocumentSize else {
            throw bad("the manifest is larger than \(maxDocumentSize) bytes")
        }
        let manifest: PackageManifest
        do {
            manifest = try JSONDecoder().decode(PackageManifest.self, from: data)
        } catch {
            throw bad("the manifest is not valid JSON of the manifest format", cause: "\(error)")
        }
        try manifest.check(limits)
        return manifest
    }

    /// Checks every field: see the type's documentation.
    func check(_ limits: PackageConfiguration) throws {
        guard format == Self.currentFormat else { throw Self.bad("manifest format \(format) is not supported") }
        guard !productId.isEmpty, !version.isEmpty else { throw Self.bad("the manifest names no product or version") }
        guard Self.isDigest(package.sha256) else { throw Self.bad("the manifest's package digest is not 64 hex digits") }
        guard (0...Catalog.Content.maxLength).contains(package.length) else {
            throw Self.bad("the manifest's package length \(package.length) is out of range")
        }
        guard entries.count <= limits.maxEntryCount else {
            throw Self.bad("the manifest lists \(entries.count) entries, more than the limit of \(limits.maxEntryCount)")
        }
        var seen = Set<[String]>()
        var ranges: [Range<Int64>] = []
        var total: Int64 = 0
        for entry in entries {
            let components: [String]
            do {
                components = try EntryRules.components(of: entry.path, maxDepth: limits.maxPathDepth)
            } catch let error as CourierError {
                throw Self.bad("the manifest names a bad entry: \(error.message)")
            }
            guard !components.isEmpty else { throw Self.bad("the manifest names the package root as an entry") }
            guard seen.insert(components).inserted else {
                throw Self.bad("the manifest lists \(entry.path.debugDescription) twice")
            }
            switch entry.type {
            case .directory:
                guard entry.size == nil, entry.sha256 == nil, entry.offset == nil, entry.length == nil else {
                    throw Self.bad("the folder \(entry.path.debugDescription) has file fields")
                }
            case .file:
                guard !entry.path.hasSuffix("/") else { throw Self.bad("the file \(entry.path.debugDescription) ends in /") }
                guard let size = entry.size, let sha256 = entry.sha256, entry.crc32 != nil, let method = entry.method,
                    let compressedSize = entry.compressedSize, let offset = entry.offset, let length = entry.length
                else {
                    throw Self.bad("the file \(entry.path.debugDescription) lacks a field")
                }
                guard Self.isDigest(sha256) else { throw Self.bad("the digest of \(entry.path.debugDescription) is not 64 hex digits") }
                guard method == 0 || method == 8 else {
                    throw Self.bad("the entry \(entry.path.debugDescription) uses compression method \(method)")
                }
                guard (0...limits.maxUnpackedSize).contains(size), compressedSize >= 0, offset >= 0, length >= 30,
                    offset <= package.length, length <= package.length - offset, compressedSize <= length - 30
                else {
                    throw Self.bad("the range or sizes of \(entry.path.debugDescription) lie outside the package")
                }
                if method == 0 && compressedSize != size {
                    throw Self.bad("the stored entry \(entry.path.debugDescription) has two sizes")
                }
                let (sum, overflow) = total.addingReportingOverflow(size)
                guard !overflow, sum <= limits.maxUnpackedSize else {
                    throw Self.bad("the manifest declares more than the limit of \(limits.maxUnpackedSize) unpacked bytes")
                }
                total = sum
                ranges.append(offset..<(offset + length))
            }
        }
        ranges.sort { $0.lowerBound < $1.lowerBound }
        for index in ranges.indices.dropFirst() where ranges[index].lowerBound < ranges[index - 1].upperBound {
            throw Self.bad("two entries of the manifest overlap")
        }
    }

    /// The unpacked bytes of every file.
    public var unpackedSize: Int64 {
        entries.reduce(0) { $0 + ($1.size ?? 0) }
    }

    static func isDigest(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    static func bad(_ message: String, cause: String? = nil) -> CourierError {
        CourierError(.integrity, message, cause: cause, hint: "the whole package is downloaded instead")
    }

    // MARK: Building

    /// The manifest of the package file `package`: offsets, sizes, CRCs from its central directory,
    /// each file's SHA-256 from `digests` (path to hex, as the builder computed them while packing)
    /// or by unpacking the entry. Refuses a package `PackageInspector` would refuse.
    ///
    /// Blocking (reads the package): call it from a Dispatch worker.
    public static func build(
        package: URL, limits: PackageConfiguration = PackageConfiguration(), digests: [String: String] = [:]
    ) throws -> PackageManifest {
        let preflight = try PackageInspector.preflight(package, limits: limits)
        let packageDigest = try PackageHasher.hash(package, blockSize: limits.blockSize).get()
        return try build(package: package, preflight: preflight, packageDigest: packageDigest, limits: limits, digests: digests)
    }

    /// The manifest of `package` given what a caller already has: its `preflight` (the checks of
    /// `PackageInspector`) and its lowercase hex SHA-256 `packageDigest` (e.g. verified by the
    /// download). Reads each file entry's data once, unless `digests` or the preflight's
    /// `entryDigests` (a preflight that hashed the entries in its pass) has it.
    static func build(
        package: URL, preflight: PackagePreflight, packageDigest: String, limits: PackageConfiguration,
        digests: [String: String] = [:]
    ) throws -> PackageManifest {
        let directory = preflight.directory
        var digests = digests.merging(preflight.entryDigests) { given, _ in given }
        let missing = directory.entries.contains { entry in
            guard let name = String(validating: entry.unicodeName ?? entry.name, as: UTF8.self) else { return false }
            return !name.hasSuffix("/") && digests[name] == nil
        }
        if missing {
            let reader = try ArchiveReader(url: package, blockSize: limits.blockSize)
            defer { reader.close() }
            while let entry = try reader.next() {
                guard let name = entry.name, entry.mode & EntryRules.fileType != EntryRules.directory,
                    digests[name] == nil
                else {
                    try reader.skipData()
                    continue
                }
                var hasher = SHA256()
                try reader.readData { _, bytes in hasher.update(bufferPointer: bytes) }
                digests[name] = hasher.finalize().hex
            }
        }
        let sorted = directory.entries.sorted { $0.localHeaderOffset < $1.localHeaderOffset }
        var entries: [Entry] = []
        for (index, entry) in sorted.enumerated() {
            guard let name = String(validating: entry.unicodeName ?? entry.name, as: UTF8.self) else {
                throw CourierError(.hostilePackage, "an entry name is not valid UTF-8")
            }
            let isDirectory =
                name.hasSuffix("/") || entry.unixMode.map { $0 & EntryRules.fileType == EntryRules.directory } == true
            if isDirectory {
                entries.append(Entry(path: name.hasSuffix("/") ? name : name + "/", type: .directory))
                continue
            }
            if let mode = entry.unixMode, mode & EntryRules.fileType == EntryRules.symbolicLink {
                throw CourierError(.usage, "the package holds the symbolic link \(name.debugDescription); a manifest lists files and folders only")
            }
            guard let digest = digests[name] else {
                throw CourierError(.integrity, "the entry \(name.debugDescription) could not be read")
            }
            let end = index + 1 < sorted.count ? sorted[index + 1].localHeaderOffset : directory.directoryOffset
            entries.append(
                Entry(
                    path: name, type: .file, size: Int64(clamping: entry.uncompressedSize), sha256: digest,
                    crc32: entry.crc32, method: Int(entry.method), compressedSize: Int64(clamping: entry.compressedSize),
                    offset: Int64(clamping: entry.localHeaderOffset),
                    length: Int64(clamping: end - entry.localHeaderOffset)
                )
            )
        }
        let manifest = PackageManifest(
            format: currentFormat, productId: preflight.info.productId, version: preflight.info.version,
            package: Package(sha256: packageDigest, length: Int64(clamping: directory.fileSize)), entries: entries
        )
        try manifest.check(limits)
        return manifest
    }

    /// Writes the manifest to `file` atomically (a temporary name, fsync, rename).
    public func write(to file: URL) throws {
        let data = try encoded()
        let temporary = file.deletingLastPathComponent().appendingPathComponent(".\(file.lastPathComponent).\(getpid()).partial")
        do {
            try Durable.write(data, to: temporary)
            try Durable.rename(temporary, to: file)
        } catch {
            unlink(temporary.path)
            throw error
        }
    }
}

extension PackageManifest {
    /// The fuzz target (`manifest`): a manifest document; one that decodes has every file's
    /// range inside the package, no two overlapping, and plans a delta without trapping.
    package static func fuzz(_ data: Data) {
        guard let manifest = try? decode(data) else { return }
        var end: Int64 = 0
        for range in manifest.entries.compactMap(\.range).sorted(by: { $0.lowerBound < $1.lowerBound }) {
            precondition(range.lowerBound >= end && range.upperBound <= manifest.package.length, "a bad range was accepted")
            end = range.upperBound
        }
        _ = try? DeltaPlan(manifest: manifest, installed: [], folder: URL(fileURLWithPath: "/nonexistent"), limits: PackageConfiguration())
    }
}
