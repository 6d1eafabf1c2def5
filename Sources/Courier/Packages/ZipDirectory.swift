import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The central directory of a zip file, read directly (no decompression): what each entry claims
/// to be before a single byte is unpacked.
///
/// Courier reads it to refuse a hostile package before writing anything (entry count, declared
/// sizes, compression ratios, overlapping entries, names, Unix types and modes) and to report a
/// package's sizes without extracting it. Extraction then enforces that no entry unpacks to more
/// than the directory declared. Supports Zip64. A file without a readable end-of-directory record
/// is truncated or not a zip: `CourierError(.integrity)`.
///
/// Every number read from the archive is untrusted: each sum and offset computed from one is
/// checked, and a value that would overflow or point outside the file is refused (`integrity`
/// for a damaged structure, `hostilePackage` for sizes and overlaps), never trapped on.
/// `parse(_:maxEntryCount:)` is the same reader as a pure function of the file's bytes.
package struct ZipDirectory: Sendable {
    /// One central-directory record.
    struct Entry: Sendable {
        /// The stored name, as bytes (UTF-8 for packages made by Courier and modern tools).
        var name: [UInt8]
        /// The Unicode name of an Info-ZIP "up" extra field (0x7075), when present.
        var unicodeName: [UInt8]?
        var versionMadeBy: UInt16
        var flags: UInt16
        var method: UInt16
        /// The CRC-32 of the unpacked data, as the central record declares it.
        var crc32: UInt32 = 0
        var compressedSize: UInt64
        var uncompressedSize: UInt64
        var localHeaderOffset: UInt64
        var externalAttributes: UInt32
        /// Where the entry's data starts: after its local header (whose name and extra field
        /// lengths may differ from the central record's). Set by the reader.
        var dataOffset: UInt64 = 0

        /// The Unix mode (type and permission bits), when the entry was made on Unix.
        var unixMode: UInt32? {
            guard versionMadeBy >> 8 == 3 else { return nil }
            let mode = externalAttributes >> 16
            return mode == 0 ? nil : mode
        }

        /// Whether the entry is encrypted (general-purpose flag bit 0).
        var isEncrypted: Bool { flags & 1 != 0 }

        var displayName: String { String(decoding: name, as: UTF8.self).debugDescription }
    }

    var entries: [Entry]
    /// The size of the zip file in bytes.
    var fileSize: UInt64
    /// Where the central directory starts; every entry's data lies before it.
    var directoryOffset: UInt64
    /// The sum of the declared unpacked sizes (the reader refuses a sum that overflows).
    var declaredUnpackedSize: UInt64

    /// Reads the central directory of `url`, refusing more than `maxEntryCount` entries
    /// (`hostilePackage`) before reading them.
    static func read(_ url: URL, maxEntryCount: Int) throws -> ZipDirectory {
        let fd = open(url.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CourierError.posix("open", path: url.path) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw CourierError.posix("stat", path: url.path) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw CourierError(.integrity, "\(url.path) is not a regular file")
        }
        let source = FileSource(fd: fd, size: UInt64(max(info.st_size, 0)), path: url.path)
        return try parse(source, name: url.lastPathComponent, maxEntryCount: maxEntryCount)
    }

    /// The reader as a pure function: the bytes of a whole zip file to its directory, or a
    /// `CourierError`. No I/O; the fuzz target of the zip reader.
    package static func parse(
        _ bytes: [UInt8], name: String = "the package", maxEntryCount: Int = PackageConfiguration().maxEntryCount
    ) throws -> ZipDirectory {
        try parse(MemorySource(bytes: bytes), name: name, maxEntryCount: maxEntryCount)
    }

    private static func parse(_ reader: some ByteSource, name: String, maxEntryCount: Int) throws -> ZipDirectory {
        func damaged(_ reason: String) -> CourierError {
            CourierError(.integrity, "\(name) is not a readable zip package: \(reason)")
        }
        let fileSize = reader.size

        // The end-of-central-directory record: 22 bytes plus a comment of up to 65535 bytes.
        let tailLength = min(fileSize, 22 + 65_535)
        guard tailLength >= 22 else { throw damaged("too short") }
        let tail = try reader.bytes(at: fileSize - tailLength, count: Int(tailLength))
        var eocd: Int?
        var index = tail.count - 22
        while index >= 0 {
            if tail.u32(index) == 0x0605_4b50 && index + 22 + Int(tail.u16(index + 20)) == tail.count {
                eocd = index
                break
            }
            index -= 1
        }
        guard let eocd else { throw damaged("no end-of-central-directory record; truncated or not a zip") }
        let eocdPosition = fileSize - tailLength + UInt64(eocd)
        var entryCount = UInt64(tail.u16(eocd + 10))
        var directorySize = UInt64(tail.u32(eocd + 12))
        var directoryOffset = UInt64(tail.u32(eocd + 16))
        var directoryEnd = eocdPosition

        // Zip64: a locator just before the record points at the Zip64 end record (56 bytes),
        // which must lie before the locator.
        if eocdPosition >= 20 {
            let locator = try reader.bytes(at: eocdPosition - 20, count: 20)
            if locator.u32(0) == 0x0706_4b50 {
                let zip64Offset = locator.u64(8)
                guard eocdPosition >= 20 + 56, zip64Offset <= eocdPosition - 20 - 56 else {
                    throw damaged("bad Zip64 locator")
                }
                let record = try reader.bytes(at: zip64Offset, count: 56)
                guard record.u32(0) == 0x0606_4b50 else { throw damaged("bad Zip64 end record") }
                entryCount = record.u64(32)
                directorySize = record.u64(40)
                directoryOffset = record.u64(48)
                directoryEnd = zip64Offset
            }
        }
        guard entryCount <= UInt64(max(maxEntryCount, 0)) else {
            throw CourierError(
                .hostilePackage,
                "the package holds \(entryCount) entries, more than the limit of \(maxEntryCount)",
                hint: "raise packages.maxEntryCount if this package is trusted"
            )
        }
        guard directoryOffset <= directoryEnd, directorySize <= directoryEnd - directoryOffset else {
            throw damaged("the central directory lies outside the file; truncated")
        }
        // Each record takes at least 46 bytes: a count the directory cannot hold is a lie.
        guard entryCount <= directorySize / 46 else { throw damaged("the central directory is shorter than its entry count") }
        let directory = try reader.bytes(at: directoryOffset, count: Int(directorySize))
        var entries: [Entry] = []
        entries.reserveCapacity(Int(entryCount))
        var declaredTotal: UInt64 = 0
        var position = 0
        for _ in 0..<entryCount {
            guard position + 46 <= directory.count, directory.u32(position) == 0x0201_4b50 else {
                throw damaged("a central directory record is damaged")
            }
            let nameLength = Int(directory.u16(position + 28))
            let extraLength = Int(directory.u16(position + 30))
            let commentLength = Int(directory.u16(position + 32))
            let end = position + 46 + nameLength + extraLength + commentLength
            guard end <= directory.count else { throw damaged("a central directory record is damaged") }
            var entry = Entry(
                name: Array(directory[(position + 46)..<(position + 46 + nameLength)]),
                unicodeName: nil,
                versionMadeBy: directory.u16(position + 4),
                flags: directory.u16(position + 8),
                method: directory.u16(position + 10),
                crc32: directory.u32(position + 16),
                compressedSize: UInt64(directory.u32(position + 20)),
                uncompressedSize: UInt64(directory.u32(position + 24)),
                localHeaderOffset: UInt64(directory.u32(position + 42)),
                externalAttributes: directory.u32(position + 38)
            )
            // Extra fields: Zip64 sizes (0x0001) and the Info-ZIP Unicode path (0x7075).
            var extra = position + 46 + nameLength
            let extraEnd = extra + extraLength
            while extra + 4 <= extraEnd {
                let id = directory.u16(extra)
                let size = Int(directory.u16(extra + 2))
                let body = extra + 4
                guard body + size <= extraEnd else { break }
                if id == 0x0001 {
                    var field = body
                    if entry.uncompressedSize == 0xFFFF_FFFF, field + 8 <= body + size {
                        entry.uncompressedSize = directory.u64(field)
                        field += 8
                    }
                    if entry.compressedSize == 0xFFFF_FFFF, field + 8 <= body + size {
                        entry.compressedSize = directory.u64(field)
                        field += 8
                    }
                    if entry.localHeaderOffset == 0xFFFF_FFFF, field + 8 <= body + size {
                        entry.localHeaderOffset = directory.u64(field)
                    }
                } else if id == 0x7075, size > 5 {
                    entry.unicodeName = Array(directory[(body + 5)..<(body + size)])
                }
                extra = body + size
            }
            let (sum, overflow) = declaredTotal.addingReportingOverflow(entry.uncompressedSize)
            guard !overflow else {
                throw CourierError(.hostilePackage, "the package declares more unpacked bytes than a 64-bit size holds")
            }
            declaredTotal = sum
            // The local header: 30 bytes plus its own name and extra field, all before the
            // central directory; the entry's data follows it.
            guard entry.localHeaderOffset < directoryOffset, directoryOffset - entry.localHeaderOffset >= 30 else {
                throw damaged("the entry \(entry.displayName) starts outside the file's entries")
            }
            let local = try reader.bytes(at: entry.localHeaderOffset, count: 30)
            guard local.u32(0) == 0x0403_4b50 else { throw damaged("the local header of \(entry.displayName) is damaged") }
            entry.dataOffset = entry.localHeaderOffset + 30 + UInt64(local.u16(26)) + UInt64(local.u16(28))
            entries.append(entry)
            position = end
        }
        return ZipDirectory(
            entries: entries, fileSize: fileSize, directoryOffset: directoryOffset, declaredUnpackedSize: declaredTotal
        )
    }

    /// Refuses what the directory already shows to be hostile or unusable: declared sizes over
    /// the limits, compression ratios of a zip bomb, entries whose data overlap or run past the
    /// directory, encrypted entries, and (through `EntryRules`) bad names, types and modes.
    package func check(_ limits: PackageConfiguration) throws {
        let total = declaredUnpackedSize
        guard total <= UInt64(max(limits.maxUnpackedSize, 0)) else {
            throw CourierError(
                .hostilePackage,
                "the package declares \(total) unpacked bytes, more than the limit of \(limits.maxUnpackedSize)",
                hint: "raise packages.maxUnpackedSize if this package is trusted"
            )
        }
        let minimum = UInt64(max(limits.ratioCheckMinimumSize, 0))
        let ratio = limits.maxCompressionRatio
        let ratioText = ratio.isFinite && ratio >= 0 && ratio < 1e15 ? "\(Int(ratio))" : "\(ratio)"
        if total >= minimum, Double(total) > Double(max(fileSize, 1)) * limits.maxCompressionRatio {
            throw CourierError(
                .hostilePackage,
                "the package unpacks to \(total) bytes from \(fileSize): a compression ratio above \(ratioText):1 (zip bomb)"
            )
        }
        for entry in entries {
            let name = String(decoding: entry.name, as: UTF8.self)
            if entry.isEncrypted {
                throw CourierError(.integrity, "the entry \(name.debugDescription) is encrypted")
            }
            if entry.uncompressedSize >= minimum,
                Double(entry.uncompressedSize) > Double(max(entry.compressedSize, 1)) * limits.maxCompressionRatio
            {
                throw CourierError(
                    .hostilePackage,
                    "the entry \(name.debugDescription) unpacks \(entry.compressedSize) bytes to \(entry.uncompressedSize): a compression ratio above \(ratioText):1 (zip bomb)"
                )
            }
            guard let text = String(validating: entry.unicodeName ?? entry.name, as: UTF8.self) else {
                throw CourierError(.hostilePackage, "the entry name \(name.debugDescription) is not valid UTF-8")
            }
            _ = try EntryRules.components(of: text, maxDepth: limits.maxPathDepth)
            if let mode = entry.unixMode {
                try EntryRules.checkMode(mode, name: text, allowSymlink: true)
            }
        }
        // Entries must not overlap (a "non-recursive" zip bomb reuses one compressed kernel from
        // many entries; two records pointing at one local header are the same trick): each
        // entry's data ends before the next local header, the last one's before the directory.
        let sorted = entries.sorted { $0.localHeaderOffset < $1.localHeaderOffset }
        for (index, entry) in sorted.enumerated() {
            let next = index + 1 < sorted.count ? sorted[index + 1].localHeaderOffset : directoryOffset
            let (end, overflow) = entry.dataOffset.addingReportingOverflow(entry.compressedSize)
            if overflow || end > next {
                throw CourierError(.hostilePackage, "the entry \(entry.displayName) overlaps the next one or the directory")
            }
        }
    }
}

/// Where the reader finds a zip's bytes: a file (positional reads) or memory.
private protocol ByteSource {
    var size: UInt64 { get }
    /// `count` bytes at `offset`; a range outside the source is `integrity` (truncated).
    func bytes(at offset: UInt64, count: Int) throws -> [UInt8]
}

private struct MemorySource: ByteSource {
    var bytes: [UInt8]
    var size: UInt64 { UInt64(bytes.count) }

    func bytes(at offset: UInt64, count: Int) throws -> [UInt8] {
        guard count >= 0, offset <= size, UInt64(count) <= size - offset else {
            throw CourierError(.integrity, "the package is truncated")
        }
        return Array(bytes[Int(offset)..<(Int(offset) + count)])
    }
}

/// Positional reads from an open file.
private struct FileSource: ByteSource {
    var fd: Int32
    var size: UInt64
    var path: String

    func bytes(at offset: UInt64, count: Int) throws -> [UInt8] {
        guard count >= 0, offset <= size, UInt64(count) <= size - offset else {
            throw CourierError(.integrity, "\(path) is truncated")
        }
        if count == 0 { return [] }
        var buffer = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = buffer.withUnsafeMutableBytes {
                pread(fd, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done))
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw CourierError.posix("read", path: path)
            }
            if n == 0 { throw CourierError(.integrity, "\(path) is truncated") }
            done += n
        }
        return buffer
    }
}

extension Array where Element == UInt8 {
    fileprivate func u16(_ at: Int) -> UInt16 {
        UInt16(self[at]) | UInt16(self[at + 1]) << 8
    }
    fileprivate func u32(_ at: Int) -> UInt32 {
        UInt32(u16(at)) | UInt32(u16(at + 2)) << 16
    }
    fileprivate func u64(_ at: Int) -> UInt64 {
        UInt64(u32(at)) | UInt64(u32(at + 4)) << 32
    }
}
