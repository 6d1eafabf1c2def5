import CArchive
import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Builds hosted content packages: `ContentInfo.plist` plus `Contents/` holding a folder's files.
///
/// Reproducible: the same folder, product and version give the same bytes (entries sorted by
/// name, every timestamp fixed to `SOURCE_DATE_EPOCH` or 2000-01-01T00:00:00Z, owner 0, files
/// 0644, folders 0755). The folder may hold regular files and folders only.
public enum PackageBuilder {
    /// The timestamp of every entry: `SOURCE_DATE_EPOCH` when set, else 2000-01-01T00:00:00Z.
    static var fixedTime: Int {
        ProcessInfo.processInfo.environment["SOURCE_DATE_EPOCH"].flatMap { Int($0) } ?? 946_684_800
    }

    /// Packs `directory` as product `productId` version `version` into `output` (replaced
    /// atomically) and returns what the package is. Its manifest (`PackageManifest`) is written
    /// beside it, at `PackageManifest.url(besidePackage: output)`, after the package.
    public static func create(from directory: URL, productId: String, version: String, output: URL) throws -> PackageInfo {
        guard !productId.isEmpty, !version.isEmpty else {
            throw CourierError(.usage, "a package needs a product identifier and a version")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw CourierError(.usage, "\(directory.path) is not a folder")
        }
        var entries: [(name: String, source: URL?)] = [("Contents/", nil)]
        try collect(directory, prefix: "Contents/", into: &entries)
        let temporary = output.deletingLastPathComponent()
            .appendingPathComponent(".\(output.lastPathComponent).\(getpid()).partial")
        let digests: [String: String]
        do {
            digests = try write(entries: entries, info: ContentInfo(productId: productId, version: version), to: temporary)
            guard rename(temporary.path, output.path) == 0 else { throw CourierError.posix("rename", path: output.path) }
        } catch {
            unlink(temporary.path)
            throw error
        }
        let manifest = try PackageManifest.build(package: output, digests: digests)
        try manifest.write(to: PackageManifest.url(besidePackage: output))
        return PackageInfo(
            productId: manifest.productId, version: manifest.version, entryCount: manifest.entries.count,
            packedSize: manifest.package.length, unpackedSize: manifest.unpackedSize, sha256: manifest.package.sha256
        )
    }

    /// Appends the entries below `folder`, sorted by name (bytewise), folders before their content.
    private static func collect(_ folder: URL, prefix: String, into entries: inout [(name: String, source: URL?)]) throws {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        } catch {
            throw CourierError(.io, "cannot list \(folder.path)", cause: "\(error)")
        }
        for name in names.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }) {
            let url = folder.appendingPathComponent(name)
            var info = stat()
            guard lstat(url.path, &info) == 0 else { throw CourierError.posix("stat", path: url.path) }
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                entries.append((prefix + name + "/", nil))
                try collect(url, prefix: prefix + name + "/", into: &entries)
            case S_IFREG:
                entries.append((prefix + name, url))
            default:
                throw CourierError(
                    .usage,
                    "\(url.path) is not a regular file or folder",
                    hint: "packages carry regular files and folders only; replace links by copies"
                )
            }
        }
    }

    /// Writes the zip and returns the SHA-256 of each file entry (by name), hashed as it is packed.
    private static func write(entries: [(name: String, source: URL?)], info: ContentInfo, to file: URL) throws -> [String: String] {
        var digests: [String: String] = [:]
        guard let archive = archive_write_new() else { throw CourierError(.internal, "libarchive could not allocate a writer") }
        defer { archive_write_free(archive) }
        func check(_ status: Int32, _ what: String) throws {
            guard status >= ARCHIVE_WARN else {
                let cause = archive_error_string(archive).map { String(cString: $0) }
                throw CourierError(.io, "cannot write the package \(file.path): \(what)", cause: cause)
            }
        }
        try check(archive_write_set_format_zip(archive), "zip format")
        try check(archive_write_set_options(archive, "zip:compression=deflate"), "deflate")
        try check(archive_write_open_filename(archive, file.path), "open")
        guard let entry = archive_entry_new() else { throw CourierError(.internal, "libarchive could not allocate an entry") }
        defer { archive_entry_free(entry) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }

        func header(_ name: String, type: UInt32, permissions: UInt32, size: Int64) throws {
            archive_entry_clear(entry)
            archive_entry_set_pathname_utf8(entry, name)
            archive_entry_set_filetype(entry, type)
            archive_entry_set_perm(entry, mode_t(permissions))
            archive_entry_set_size(entry, size)
            archive_entry_set_mtime(entry, time_t(fixedTime), 0)
            archive_entry_set_uid(entry, 0)
            archive_entry_set_gid(entry, 0)
            try check(archive_write_header(archive, entry), name)
        }
        func data(_ bytes: UnsafeRawBufferPointer, _ name: String) throws {
            guard archive_write_data(archive, bytes.baseAddress, bytes.count) == bytes.count else {
                try check(ARCHIVE_FATAL, name)
                return
            }
        }

        let plist = info.xml()
        try header(ContentInfo.fileName, type: EntryRules.regularFile, permissions: 0o644, size: Int64(plist.count))
        try plist.withUnsafeBytes { try data($0, ContentInfo.fileName) }
        digests[ContentInfo.fileName] = SHA256.hash(data: plist).hex
        for (name, source) in entries {
            guard let source else {
                try header(name, type: EntryRules.directory, permissions: 0o755, size: 0)
                continue
            }
            let fd = open(source.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard fd >= 0 else { throw CourierError.posix("open", path: source.path) }
            defer { close(fd) }
            var info = stat()
            guard fstat(fd, &info) == 0 else { throw CourierError.posix("stat", path: source.path) }
            try header(name, type: EntryRules.regularFile, permissions: 0o644, size: Int64(info.st_size))
            var total: Int64 = 0
            var hasher = SHA256()
            while true {
                let n = read(fd, buffer.baseAddress, buffer.count)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw CourierError.posix("read", path: source.path)
                }
                if n == 0 { break }
                total += Int64(n)
                guard total <= Int64(info.st_size) else {
                    throw CourierError(.io, "\(source.path) grew while it was being packed")
                }
                let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
                hasher.update(bufferPointer: chunk)
                try data(chunk, name)
            }
            guard total == Int64(info.st_size) else {
                throw CourierError(.io, "\(source.path) shrank while it was being packed")
            }
            digests[name] = hasher.finalize().hex
        }
        try check(archive_write_close(archive), "close")
        return digests
    }
}
