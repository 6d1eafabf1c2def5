import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Downloads from a local file (`file:` URLs: the packages of a catalog given as a file path,
/// named relative to its folder). The bytes are copied through the same partial file, journal,
/// streaming SHA-256, space check, checkpoints and pause as a network download, so verification,
/// resume and placement are identical; libcurl is not involved (its `file:` protocol answers no
/// HTTP status or `Content-Range`, which every decision of the network path reads).
extension TransferEngine {
    /// Bytes read and written per hop to the writer's queue: a pause is seen between two.
    static let localCopyChunk = 1 << 20

    /// Refuses `file:` URLs that name another host or no absolute path.
    static func checkLocalFile(_ url: URL) throws {
        let host = url.host ?? ""
        guard host.isEmpty || host.lowercased() == "localhost", url.path.hasPrefix("/") else {
            throw CourierError(.usage, "\(url.absoluteString) is not a local file URL", hint: "use file:///absolute/path or an https:// URL")
        }
    }

    /// Copies `request.url`'s file into the partial file from the writer's offset to its end.
    /// The file must be a regular file (a symlink to one is followed, as a path would be) and
    /// have the expected length; cancelling the calling task checkpoints and pauses, like a
    /// transfer. A file that shrinks during the copy fails with `integrity`.
    func copyLocalFile(_ request: DownloadRequest, writer: PartialFileWriter, logger: Logger) async throws {
        let path = request.url.path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            throw CourierError(
                code == ENOENT ? .network : .io, "cannot read \(path): \(String(cString: strerror(code)))",
                cause: "errno \(code)", hint: code == ENOENT ? "check the catalog's folder: the package it names is missing" : nil)
        }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            throw CourierError(.io, "\(path) is not a regular file")
        }
        let size = Int64(status.st_size)
        if let expected = request.expectedLength, expected != size {
            throw CourierError(
                .integrity, "\(path) is \(size) bytes, not the \(expected) the catalog names", cause: "length mismatch",
                hint: "the catalog and its package disagree; publish them together")
        }
        let source = request.url
        let start: Int64 = try await writer.perform {
            var offset = writer.writtenOffset
            if offset > size {
                try writer.restart(with: ResumeJournal(downloadId: request.id, url: source))
                offset = 0
            }
            // Named before any byte is written: what the partial file holds past its durable
            // offset then comes from this file (a killed process's successor resumes from it).
            var journal = writer.journal
            journal.url = source
            journal.etag = nil
            journal.lastModified = nil
            journal.totalLength = size
            writer.submitJournal(journal)
            return offset
        }
        logger.debug("copying a local file", metadata: ["file": "\(path)", "from": "\(start)", "length": "\(size)"])
        var position = start
        let chunk = Self.localCopyChunk
        while position < size {
            if Task.isCancelled {
                let offset = (try? await writer.perform { () -> Int64 in
                    try writer.checkpoint()
                    return writer.durableOffset
                }) ?? 0
                throw CourierError(.paused, "paused at byte \(offset) of \(size)", hint: "run the same command again to resume")
            }
            let from = position
            position = try await writer.perform { () -> Int64 in
                var buffer = [UInt8](repeating: 0, count: Int(min(Int64(chunk), size - from)))
                var filled = 0
                while filled < buffer.count {
                    let count = buffer.withUnsafeMutableBytes { bytes -> Int in
                        guard let base = bytes.baseAddress else { return 0 }
                        return pread(fd, base + filled, bytes.count - filled, off_t(from + Int64(filled)))
                    }
                    if count < 0 && errno == EINTR { continue }
                    guard count >= 0 else { throw CourierError.posix("read", path: path) }
                    guard count > 0 else {
                        throw CourierError(.integrity, "\(path) shrank while it was copied", cause: "length mismatch")
                    }
                    filled += count
                }
                try writer.writeNow(buffer)
                return from + Int64(filled)
            }
        }
    }
}
