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
struct ZipDirectory: Sendable {
    /// One central-directory record.
    struct Entry: Sendable {
        /// The stored name, as bytes (UTF-8 for packages made by Courier and modern tools).
        var name: [UInt8]
        /// The Unicode name of an Info-ZIP "up" extra field (0x7075), when present.
        var unicodeName: [UInt8]?
        var versionMadeBy: UInt16
        var flags: UInt16
        var method: UInt16
        var compressedSize: UInt64
        var uncompressedSize: UInt64
        var localHeaderOffset: UInt64
        var externalAttributes: UInt32

        /// The Unix mode (type and permission bits), when the entry was made on Unix.
        var unixMode: UInt32? {
            guard versionMadeBy >> 8 == 3 else { return nil }
            let mode = externalAttributes >> 16
            return mode == 0 ? nil : mode
        }

        /// Whether the entry is encrypted (general-purpose flag bit 0).
        var isEncrypted: Bool { flags & 1 != 0 }
    }

    var entries: [Entry]
    /// The size of the zip file in bytes.
    var fileSize: UInt64
    /// Where the central directory starts; every entry's data lies before it.
    var directoryOffset: UInt64

    /// The sum of the declared unpacked sizes.
    var declaredUnpackedSize: UInt64 {
        entries.reduce(0) { $0 &+ $1.uncompressedSize }
    }

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
        let fileSize = UInt64(info.st_size)
        let reader = Reader(fd: fd, fileSize: fileSize, path: url.path)

        // The end-of-central-directory record: 22 bytes plus a comment of up to 65535 bytes.
        let tailLength = min(fileSize, 22 + 65_535)
        guard tailLength >= 22 else { throw notAZip(url, "too short") }
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
        guard let eocd else { throw notAZip(url, "no end-of-central-directory record; truncated or not a zip") }
        let eocdPosition = fileSize - tailLength + UInt64(eocd)
        var entryCount = UInt64(tail.u16(eocd + 10))
        var directorySize = UInt64(tail.u32(eocd + 12))
        var directoryOffset = UInt64(tail.u32(eocd + 16))
        var directoryEnd = eocdPosition

        // Zip64: a locator just before the record points at the Zip64 end record.
        if eocdPosition >= 20 {
            let locator = try reader.bytes(at: eocdPosition - 20, count: 20)
            if locator.u32(0) == 0x0706_4b50 {
                let zip64Offset = locator.u64(8)
                guard zip64Offset + 56 <= eocdPosition - 20 else { throw notAZip(url, "bad Zip64 locator") }
                let record = try reader.bytes(at: zip64Offset, count: 56)
                guard record.u32(0) == 0x0606_4b50 else { throw notAZip(url, "bad Zip64 end record") }
                entryCount = record.u64(32)
                directorySize = record.u64(40)
                directoryOffset = record.u64(48)
                directoryEnd = zip64Offset
            }
        }
        guard entryCount <= UInt64(maxEntryCount) else {
            throw CourierError(
                .hostilePackage,
                "the package holds \(entryCount) entries, more than the limit of \(maxEntryCount)",
                hint: "raise packages.maxEntryCount if this package is trusted"
            )
        }
        guard directoryOffset <= directoryEnd, directorySize <= directoryEnd - directoryOffset else {
            throw notAZip(url, "the central directory lies outside the file; truncated")
        }
        let directory = try reader.bytes(at: directoryOffset, count: Int(directorySize))
        var entries: [Entry] = []
        entries.reserveCapacity(Int(entryCount))
        var position = 0
        for _ in 0..<entryCount {
            guard position + 46 <= directory.count, directory.u32(position) == 0x0201_4b50 else {
                throw notAZip(url, "a central directory record is damaged")
            }
            let nameLength = Int(directory.u16(position + 28))
            let extraLength = Int(directory.u16(position + 30))
            let commentLength = Int(directory.u16(position + 32))
            let end = position + 46 + nameLength + extraLength + commentLength
            guard end <= directory.count else { throw notAZip(url, "a central directory record is damaged") }
            var entry = Entry(
                name: Array(directory[(position + 46)..<(position + 46 + nameLength)]),
                unicodeName: nil,
                versionMadeBy: directory.u16(position + 4),
                flags: directory.u16(position + 8),
                method: directory.u16(position + 10),
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
            entries.append(entry)
            position = end
        }
        return ZipDirectory(entries: entries, fileSize: fileSize, directoryOffset: directoryOffset)
    }

    /// Refuses what the directory already shows to be hostile or unusable: declared sizes over
    /// the limits, compression ratios of a zip bomb, entries whose data overlap or run past the
    /// directory, encrypted entries, and (through `EntryRules`) bad names, types and modes.
    func check(_ limits: PackageConfiguration) throws {
        let total = declaredUnpackedSize
        guard total <= UInt64(max(limits.maxUnpackedSize, 0)) else {
            throw CourierError(
                .hostilePackage,
                "the package declares \(total) unpacked bytes, more than the limit of \(limits.maxUnpackedSize)",
                hint: "raise packages.maxUnpackedSize if this package is trusted"
            )
        }
        let minimum = UInt64(max(limits.ratioCheckMinimumSize, 0))
        if total >= minimum, Double(total) > Double(max(fileSize, 1)) * limits.maxCompressionRatio {
            throw CourierError(
                .hostilePackage,
                "the package unpacks to \(total) bytes from \(fileSize): a compression ratio above \(Int(limits.maxCompressionRatio)):1 (zip bomb)"
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
                    "the entry \(name.debugDescription) unpacks \(entry.compressedSize) bytes to \(entry.uncompressedSize): a compression ratio above \(Int(limits.maxCompressionRatio)):1 (zip bomb)"
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
        // Entries' data must not overlap (a "non-recursive" zip bomb reuses one compressed kernel).
        let sorted = entries.sorted { $0.localHeaderOffset < $1.localHeaderOffset }
        for (index, entry) in sorted.enumerated() {
            let next = index + 1 < sorted.count ? sorted[index + 1].localHeaderOffset : directoryOffset
            let (end, overflow) = entry.localHeaderOffset.addingReportingOverflow(30 + entry.compressedSize)
            if overflow || end > next {
                throw CourierError(
                    .hostilePackage,
                    "the entry \(String(decoding: entry.name, as: UTF8.self).debugDescription) overlaps the next one or the directory"
                )
            }
        }
    }

    private static func notAZip(_ url: URL, _ reason: String) -> CourierError {
        CourierError(.integrity, "\(url.lastPathComponent) is not a readable zip package: \(reason)")
    }

    /// Positional reads from an open file.
    private struct Reader {
        var fd: Int32
        var fileSize: UInt64
        var path: String

        func bytes(at offset: UInt64, count: Int) throws -> [UInt8] {
            guard offset <= fileSize, UInt64(count) <= fileSize - offset else {
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
