import CArchive
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A libarchive reader of one zip file (seekable: entries come from the central directory).
///
/// Not thread-safe: one thread opens, iterates and closes it. Entry names are decoded as UTF-8
/// whatever the process locale: the reader switches its thread to a C.UTF-8 `LC_CTYPE` while open
/// and restores the previous locale on `close()`.
final class ArchiveReader {
    /// One entry header, copied out of libarchive.
    struct Entry {
        var name: String?
        var mode: UInt32
        var size: Int64?
        var symlinkTarget: String?
        var hardlinkTarget: String?
        var mtime: timespec?
    }

    private let handle: OpaquePointer
    private let path: String
    private let previousLocale: locale_t?
    private var closed = false

    /// The C.UTF-8 `LC_CTYPE` locale every reader switches its thread to, made once: glibc's
    /// locale objects do not change once made and may be in use on several threads at once.
    /// (Made per reader, `newlocale` read the locale's files for each package: 1% of a prestage.)
    private struct SharedLocale: @unchecked Sendable {  // @unchecked: an immutable glibc locale object, never freed.
        let value: locale_t?
    }

    private static let utf8Locale = SharedLocale(value: courier_utf8_ctype_locale())

    /// Opens `url`: a whole zip, read through its central directory; or, when `streamable`, the
    /// bytes of entries from their local headers on (a delta update's fetched entry: its local
    /// header, data and data descriptor), read front to back.
    ///
    /// `verifiesCRC: false` leaves each entry's CRC-32 to the caller (`PackageInspector`'s
    /// hashing pass computes it itself, three times quicker than libarchive's zlib).
    convenience init(url: URL, blockSize: Int, streamable: Bool = false, verifiesCRC: Bool = true) throws {
        try self.init(path: url.path, streamable: streamable, verifiesCRC: verifiesCRC) { handle in
            archive_read_open_filename(handle, url.path, max(blockSize, 16 << 10))
        }
    }

    /// Opens a whole zip held in memory, read through its central directory as `init(url:)`
    /// reads a file: the bytes a download just wrote, so a check reads no file back. libarchive
    /// reads them in place (no copy): `bytes` must stay valid and unchanged until `close()`.
    /// `path` names the file they are the bytes of, in errors.
    convenience init(bytes: UnsafeRawBufferPointer, path: String, verifiesCRC: Bool = true) throws {
        try self.init(path: path, streamable: false, verifiesCRC: verifiesCRC) { handle in
            guard let base = bytes.baseAddress else { return ARCHIVE_FATAL }
            return archive_read_open_memory(handle, base, bytes.count)
        }
    }

    /// A reader of the zip format chosen, opened by `open` (libarchive's status), on this thread's
    /// C.UTF-8 `LC_CTYPE`.
    private init(path: String, streamable: Bool, verifiesCRC: Bool, open: (OpaquePointer) -> Int32) throws {
        guard let handle = archive_read_new() else {
            throw CourierError(.internal, "libarchive could not allocate a reader")
        }
        self.handle = handle
        self.path = path
        previousLocale = Self.utf8Locale.value.map { uselocale($0) }
        if streamable {
            archive_read_support_format_zip_streamable(handle)
        } else {
            archive_read_support_format_zip_seekable(handle)
        }
        if !verifiesCRC {
            // A libarchive without the option verifies the CRC as well: twice, never less.
            _ = archive_read_set_option(handle, "zip", "ignorecrc32", "1")
        }
        if open(handle) != ARCHIVE_OK {
            let error = Self.integrity(handle, "cannot read \(URL(fileURLWithPath: path).lastPathComponent) as a zip package")
            close()
            throw error
        }
    }

    deinit { close() }

    /// Frees libarchive's state and restores the thread's locale. Idempotent.
    func close() {
        guard !closed else { return }
        closed = true
        archive_read_free(handle)
        if let previousLocale { uselocale(previousLocale) }
    }

    /// The next entry header, or nil at the end. A damaged header is `integrity`.
    func next() throws -> Entry? {
        var pointer: OpaquePointer?
        let status = archive_read_next_header(handle, &pointer)
        if status == ARCHIVE_EOF { return nil }
        guard status == ARCHIVE_OK, let entry = pointer else {
            throw Self.integrity(handle, "a damaged entry header in \(URL(fileURLWithPath: path).lastPathComponent)")
        }
        let name = (archive_entry_pathname_utf8(entry) ?? archive_entry_pathname(entry)).flatMap {
            String(validatingCString: $0)
        }
        let symlink = (archive_entry_symlink_utf8(entry) ?? archive_entry_symlink(entry)).map { String(cString: $0) }
        let hardlink = (archive_entry_hardlink_utf8(entry) ?? archive_entry_hardlink(entry)).map { String(cString: $0) }
        var mtime: timespec?
        if archive_entry_mtime_is_set(entry) != 0 {
            mtime = timespec(tv_sec: archive_entry_mtime(entry), tv_nsec: archive_entry_mtime_nsec(entry))
        }
        return Entry(
            name: name,
            mode: UInt32(archive_entry_mode(entry)),
            size: archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : nil,
            symlinkTarget: symlink,
            hardlinkTarget: hardlink,
            mtime: mtime
        )
    }

    /// Streams the current entry's data to `body` in libarchive's blocks (offset, bytes).
    /// A CRC mismatch or damaged data is `integrity`.
    func readData(_ body: (Int64, UnsafeRawBufferPointer) throws -> Void) throws {
        var buffer: UnsafeRawPointer?
        var size = 0
        var offset: la_int64_t = 0
        while true {
            let status = archive_read_data_block(handle, &buffer, &size, &offset)
            if status == ARCHIVE_EOF { return }
            guard status == ARCHIVE_OK else {
                throw Self.integrity(handle, "damaged data in \(URL(fileURLWithPath: path).lastPathComponent)")
            }
            if size > 0, let buffer {
                try body(offset, UnsafeRawBufferPointer(start: buffer, count: size))
            }
        }
    }

    /// Reads the current entry into memory; more than `limit` bytes is `hostilePackage`.
    func readAll(limit: Int, name: String) throws -> Data {
        var data = Data()
        try readData { offset, bytes in
            let (end, overflow) = Int(offset).addingReportingOverflow(bytes.count)
            guard offset >= 0, !overflow, end <= limit else {
                throw EntryRules.hostile("\(name) is larger than \(limit) bytes")
            }
            if Int(offset) > data.count { data.append(Data(count: Int(offset) - data.count)) }
            data.append(contentsOf: bytes)
        }
        return data
    }

    /// Skips the current entry's data without unpacking it.
    func skipData() throws {
        guard archive_read_data_skip(handle) == ARCHIVE_OK else {
            throw Self.integrity(handle, "damaged data in \(URL(fileURLWithPath: path).lastPathComponent)")
        }
    }

    private static func integrity(_ handle: OpaquePointer, _ message: String) -> CourierError {
        let cause = archive_error_string(handle).map { String(cString: $0) }
        return CourierError(.integrity, message, cause: cause.map { "libarchive: \($0)" })
    }
}
