import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// A swift-log handler that writes each entry as one JSON object on one line (NDJSON): `time`,
/// `level`, `label`, `message`, then the metadata keys flattened (`http.status`, `content-id` …).
/// Lines from concurrent requests never interleave (one `write(2)` per entry under a lock).
public struct NDJSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    let label: String
    let descriptor: Int32
    private static let lock = NSLock()

    /// Writes to `descriptor` (standard output by default).
    public init(label: String, descriptor: Int32 = STDOUT_FILENO) {
        self.label = label
        self.descriptor = descriptor
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var object: [String: Any] = [
            "time": ISO8601DateFormatter.string(from: Date(), timeZone: .gmt, formatOptions: [.withInternetDateTime, .withFractionalSeconds]),
            "level": event.level.rawValue,
            "label": label,
            "message": "\(event.message)",
        ]
        for (key, value) in metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 }) {
            object[key] = Self.plain(value)
        }
        guard var data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return
        }
        data.append(0x0A)
        Self.lock.lock()
        defer { Self.lock.unlock() }
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(descriptor, raw.baseAddress.map { $0 + offset }, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += n
            }
        }
    }

    private static func plain(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let text): return Int64(text).map { $0 as Any } ?? text
        case .stringConvertible(let value): return "\(value)"
        case .array(let values): return values.map(plain)
        case .dictionary(let values): return values.mapValues(plain)
        }
    }
}
