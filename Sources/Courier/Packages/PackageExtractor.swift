import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Unpacks a hosted content package into a staging folder, refusing anything hostile.
///
/// Two gates: the zip's central directory is checked before anything is written (entry count,
/// declared sizes and compression ratios, overlapping entries, names, types, modes), then every
/// entry is checked again as libarchive streams it, and no entry may unpack to more than it
/// declared. Files are created relative to the staging folder's descriptor, one path component
/// at a time with `O_NOFOLLOW`, so nothing can be written through a link or outside the folder.
/// Files get mode 0644 and folders 0755 (executable bits are dropped: content is never code);
/// modification times are kept. Names are UTF-8 whatever the locale.
public struct PackageExtractor: Sendable {
    public let configuration: PackageConfiguration

    public init(configuration: PackageConfiguration) {
        self.configuration = configuration
    }

    /// Streams `package` into `staging` (which must not exist; on the destination's filesystem).
    /// Refuses hostile packages with CourierError(.hostilePackage) and corrupt ones with
    /// (.integrity), removing `staging` in both cases. Checks ContentInfo.plist against the
    /// expected product and version.
    ///
    /// Runs on the calling thread (blocking I/O: call it from a Dispatch worker, not from Swift's
    /// cooperative pool); the package's SHA-256 is computed on a second thread meanwhile, unless
    /// the caller passes `verifiedSHA256` (the digest it already checked while downloading the
    /// file, which the result then carries).
    public func extract(
        _ package: URL,
        into staging: URL,
        expectedProductId: String,
        expectedVersion: String?,
        verifiedSHA256: String? = nil
    ) throws -> PackageInfo {
        try extractRecording(
            package, into: staging, expectedProductId: expectedProductId, expectedVersion: expectedVersion,
            verifiedSHA256: verifiedSHA256, preflight: nil
        ).info
    }

    /// `extract`, also returning each regular file written with its size and SHA-256, hashed as
    /// it was written (the record an update compares with a manifest). It reuses the
    /// `PackageInspector.preflight` the caller already ran on `package` (nil: runs it here):
    /// every rule it applies, and the product and version, are checked before `staging` is made.
    func extractRecording(
        _ package: URL,
        into staging: URL,
        expectedProductId: String,
        expectedVersion: String?,
        verifiedSHA256: String?,
        preflight: PackagePreflight?
    ) throws -> (info: PackageInfo, files: [ExtractedFile]) {
        let preflight = try preflight ?? PackageInspector.preflight(package, limits: configuration)
        try preflight.info.check(expectedProductId: expectedProductId, expectedVersion: expectedVersion)
        let directory = preflight.directory
        guard mkdir(staging.path, 0o755) == 0 else {
            if errno == EEXIST {
                throw CourierError(.internal, "the staging folder \(staging.path) already exists")
            }
            throw CourierError.posix("mkdir", path: staging.path)
        }
        let hasher = verifiedSHA256 == nil ? PackageHasher(url: package, blockSize: configuration.blockSize) : nil
        do {
            let extraction = try Extraction(
                package: package,
                staging: staging,
                configuration: configuration,
                declaredTotal: directory.declaredUnpackedSize
            )
            let outcome = try extraction.run()
            try outcome.info.check(expectedProductId: expectedProductId, expectedVersion: expectedVersion)
            let info = PackageInfo(
                productId: outcome.info.productId,
                version: outcome.info.version,
                entryCount: outcome.entryCount,
                packedSize: Int64(clamping: directory.fileSize),
                unpackedSize: outcome.unpackedSize,
                sha256: try hasher?.wait() ?? verifiedSHA256 ?? ""
            )
            return (info, outcome.files)
        } catch {
            hasher?.cancel()
            try? FileManager.default.removeItem(at: staging)
            throw error
        }
    }
}

/// A regular file an extraction wrote: its path below the content folder (components joined
/// by `/`), size and SHA-256 (nil when the archive gave its data with holes, which is not
/// hashed in one pass).
package struct ExtractedFile: Sendable, Equatable {
    package var path: String
    package var size: Int64
    package var sha256: String?

    package init(path: String, size: Int64, sha256: String?) {
        self.path = path
        self.size = size
        self.sha256 = sha256
    }
}

/// One extraction: the state of a single pass over the archive. Used on one thread only.
private final class Extraction {
    struct Outcome {
        var info: ContentInfo
        var entryCount: Int
        var unpackedSize: Int64
        var files: [ExtractedFile]
    }

    let package: URL
    let configuration: PackageConfiguration
    let reader: ArchiveReader
    let root: Int32
    /// The most bytes the whole package may unpack to: its declared total, within the limit.
    let totalLimit: Int64
    var written: Int64 = 0
    var entryCount = 0
    var files: [ExtractedFile] = []
    var info: ContentInfo?
    var links: [[String]: String] = [:]
    var folderTimes: [([String], timespec)] = []
    /// The last parent folder opened, to avoid walking the same path for every file in it.
    var cachedParent: (components: [String], fd: Int32)?

    init(package: URL, staging: URL, configuration: PackageConfiguration, declaredTotal: UInt64) throws {
        self.package = package
        self.configuration = configuration
        totalLimit = min(configuration.maxUnpackedSize, Int64(clamping: declaredTotal))
        root = open(staging.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard root >= 0 else { throw CourierError.posix("open", path: staging.path) }
        do {
            reader = try ArchiveReader(url: package, blockSize: configuration.blockSize)
        } catch {
            close(root)
            throw error
        }
    }

    deinit {
        if let cachedParent { close(cachedParent.fd) }
        reader.close()
        close(root)
    }

    func run() throws -> Outcome {
        while let entry = try reader.next() {
            try place(entry)
        }
        // Links are checked again against the complete set: one made before another could
        // otherwise climb out through it.
        for (link, target) in links
        where !EntryRules.symlinkTargetStaysInside(link: link, target: target, links: Set(links.keys)) {
            throw EntryRules.hostile("the symbolic link \(link.joined(separator: "/").debugDescription) leaves the package")
        }
        for (components, time) in folderTimes.sorted(by: { $0.0.count > $1.0.count }) {
            let fd = try openFolder(components)
            var times = [time, time]
            futimens(fd, &times)
            close(fd)
        }
        guard let info else {
            throw EntryRules.hostile("the package has no ContentInfo.plist at its root")
        }
        return Outcome(info: info, entryCount: entryCount, unpackedSize: written, files: files)
    }

    private func place(_ entry: ArchiveReader.Entry) throws {
        entryCount += 1
        let (name, components, type) = try EntryRules.check(entry, count: entryCount, limits: configuration)
        guard let last = components.last else {
            if type == EntryRules.directory { return }
            throw EntryRules.hostile("the entry \(name.debugDescription) names the package root")
        }
        switch type {
        case EntryRules.directory:
            let fd = try openFolder(components)
            close(fd)
            if let mtime = entry.mtime { folderTimes.append((components, mtime)) }
        case EntryRules.symbolicLink:
            guard let target = entry.symlinkTarget,
                EntryRules.symlinkTargetStaysInside(link: components, target: target, links: Set(links.keys))
            else {
                throw EntryRules.hostile("the symbolic link \(name.debugDescription) leaves the package")
            }
            let parent = try parentFolder(components)
            guard symlinkat(target, parent, last) == 0 else { throw creationError(name) }
            links[components] = target
        default:
            let parent = try parentFolder(components)
            let fd = openat(parent, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw creationError(name) }
            defer { close(fd) }
            if components == [ContentInfo.fileName] {
                let data = try reader.readAll(limit: configuration.maxInfoPlistSize, name: ContentInfo.fileName)
                try write(fd, data: data, name: name)
                info = try ContentInfo.parse(data)
                files.append(
                    ExtractedFile(
                        path: ContentInfo.fileName, size: Int64(data.count), sha256: SHA256.hash(data: data).hex))
            } else {
                let (size, digest) = try stream(into: fd, name: name, declaredSize: entry.size)
                files.append(ExtractedFile(path: components.joined(separator: "/"), size: size, sha256: digest))
            }
            if let mtime = entry.mtime {
                var times = [mtime, mtime]
                futimens(fd, &times)
            }
        }
    }

    /// Copies the current entry's data into `fd`, bounded by its declared size and the total,
    /// hashing it on the way; returns its size and SHA-256 (nil if the data came with holes).
    private func stream(into fd: Int32, name: String, declaredSize: Int64?) throws -> (Int64, String?) {
        var hasher = SHA256()
        var hashed: Int64 = 0
        var contiguous = true
        var size: Int64 = 0
        try reader.readData { offset, bytes in
            let (end, endOverflow) = offset.addingReportingOverflow(Int64(bytes.count))
            if offset < 0 || endOverflow || declaredSize.map({ end > $0 }) == true {
                throw EntryRules.hostile("the entry \(name.debugDescription) unpacks to more than its declared \(declaredSize ?? 0) bytes")
            }
            let (total, totalOverflow) = written.addingReportingOverflow(Int64(bytes.count))
            written = total
            guard !totalOverflow, written <= totalLimit else {
                throw EntryRules.hostile("the package unpacks to more than its declared size or the limit of \(configuration.maxUnpackedSize) bytes")
            }
            if contiguous && offset == hashed {
                hasher.update(bufferPointer: bytes)
                hashed = end
            } else {
                contiguous = false
            }
            size = max(size, end)
            var done = 0
            while done < bytes.count {
                let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
                if n < 0 {
                    if errno == EINTR { continue }
                    throw CourierError.posix("write", path: name)
                }
                done += n
            }
        }
        return (size, contiguous && hashed == size ? hasher.finalize().hex : nil)
    }

    private func write(_ fd: Int32, data: Data, name: String) throws {
        // At most packages.maxInfoPlistSize bytes: the sum cannot overflow.
        written += Int64(data.count)
        try data.withUnsafeBytes { bytes in
            var done = 0
            while done < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw CourierError.posix("write", path: name)
                }
                done += n
            }
        }
    }

    /// The folder holding `components`' last element, created as needed.
    private func parentFolder(_ components: [String]) throws -> Int32 {
        let parent = Array(components.dropLast())
        if parent.isEmpty { return root }
        if let cachedParent, cachedParent.components == parent { return cachedParent.fd }
        let fd = try openFolder(parent)
        if let cachedParent { close(cachedParent.fd) }
        cachedParent = (parent, fd)
        return fd
    }

    /// Opens (creating as needed) the folder `components` below the root; see `EntryFolders`.
    private func openFolder(_ components: [String]) throws -> Int32 {
        try EntryFolders.open(components, below: root)
    }

    private func creationError(_ name: String) -> CourierError {
        let failure = errno
        if failure == EEXIST {
            return EntryRules.hostile("the entry \(name.debugDescription) appears twice or replaces another entry")
        }
        return CourierError.posix("create", path: name, errno: failure)
    }
}

/// Folders of package entries below a root descriptor, shared by the extractor and the delta
/// update's build.
enum EntryFolders {
    /// Opens (creating as needed, mode 0755) the folder `components` below `root`, one component
    /// at a time without following links: a component that is a link or a file is
    /// `hostilePackage`. The caller closes the returned descriptor.
    static func open(_ components: [String], below root: Int32) throws -> Int32 {
        var current = dup(root)
        guard current >= 0 else { throw CourierError.posix("dup") }
        for (index, component) in components.enumerated() {
            var next = openat(current, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if next < 0 && errno == ENOENT {
                if mkdirat(current, component, 0o755) != 0 && errno != EEXIST {
                    let error = CourierError.posix("mkdir", path: components[...index].joined(separator: "/"))
                    close(current)
                    throw error
                }
                next = openat(current, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            }
            let failure = errno
            close(current)
            guard next >= 0 else {
                let path = components[...index].joined(separator: "/")
                if failure == ELOOP || failure == ENOTDIR {
                    throw EntryRules.hostile("an entry writes through the link or file \(path.debugDescription)")
                }
                throw CourierError.posix("open", path: path, errno: failure)
            }
            current = next
        }
        return current
    }
}
