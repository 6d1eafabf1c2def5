import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// What `courier content verify` found for one content.
public struct ContentCheck: Sendable, Codable, Equatable {
    public enum Status: String, Sendable, Codable {
        /// Every file is as its install placed it (size and SHA-256).
        case ok
        /// The content folder is gone (deleted, purged, removed behind Courier's back) while a
        /// delivery of it is recorded.
        case missing
        /// Some files are gone, or differ from what was placed.
        case damaged
        /// Placed before per-file records existed: nothing to compare the files with (a repair
        /// fetches the whole package, which records them).
        case unverifiable
    }

    public var contentIdentifier: String
    public var productId: String
    public var version: String
    public var placement: Catalog.Placement
    public var path: String
    public var status: Status
    /// Files (below the content folder, `/`-separated) that are gone.
    public var missingFiles: [String]
    /// Files whose type, size or SHA-256 differs from what was placed.
    public var damagedFiles: [String]
    /// Files compared with their records.
    public var filesChecked: Int

    /// Whether something is wrong (missing or damaged).
    public var isWrong: Bool { status == .missing || status == .damaged }
}

extension ContentPlacer {
    /// Checks delivered content against what its install recorded of each file (`content_file`:
    /// the path, size and SHA-256 of every regular file as unpacked from the verified package,
    /// whose entries libarchive checked by CRC-32): every file is read and hashed. A file that
    /// is gone is missing; one that is no regular file, or has another size or digest, is
    /// damaged; a folder that is gone makes the content missing. Files the package did not hold
    /// are not looked at. Blocking: call from a Dispatch worker.
    public func verify(_ delivered: DeliveredContent) throws -> ContentCheck {
        let folder = contentURL(delivered.contentIdentifier, placement: delivered.placement)
        var check = ContentCheck(
            contentIdentifier: delivered.contentIdentifier, productId: delivered.productId, version: delivered.version,
            placement: delivered.placement, path: folder.path, status: .ok, missingFiles: [], damagedFiles: [], filesChecked: 0)
        var status = stat()
        guard lstat(folder.path, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
            check.status = .missing
            return check
        }
        let records = try installedFiles(delivered.contentIdentifier)
        guard !records.isEmpty else {
            check.status = .unverifiable
            return check
        }
        for record in records {
            let file = folder.appendingPathComponent(record.path)
            var status = stat()
            guard lstat(file.path, &status) == 0 else {
                check.missingFiles.append(record.path)
                continue
            }
            check.filesChecked += 1
            guard status.st_mode & S_IFMT == S_IFREG, Int64(status.st_size) == record.size else {
                check.damagedFiles.append(record.path)
                continue
            }
            // Without a digest (a file that could not be hashed in one pass) the size decides.
            guard let expected = record.sha256 else { continue }
            switch PackageHasher.hash(file, blockSize: packages.blockSize) {
            case .success(let digest) where digest == expected:
                continue
            default:
                check.damagedFiles.append(record.path)
            }
        }
        if !check.missingFiles.isEmpty || !check.damagedFiles.isEmpty { check.status = .damaged }
        return check
    }

    /// The content `name` designates: its content identifier, else every content of the product
    /// `name` (a subscription's items); all delivered content when nil. Each as recorded, its
    /// folder there or not.
    public func recorded(_ name: String?) throws -> [DeliveredContent] {
        let all = try list()
        guard let name else { return all }
        let exact = all.filter { $0.contentIdentifier.isIdentical(to: name) }
        return exact.isEmpty ? all.filter { $0.productId.isIdentical(to: name) } : exact
    }
}
