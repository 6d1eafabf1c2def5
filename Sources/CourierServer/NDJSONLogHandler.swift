import Courier
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
        var object: [String: Logger.Metadata.Value] = metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 })
        // Never numbers, whatever they hold (metadata strings that are integers are).
        object["time"] = .stringConvertible(Self.timestamp(Date()))
        object["level"] = .stringConvertible(event.level.rawValue)
        object["label"] = .stringConvertible(label)
        object["message"] = .stringConvertible("\(event.message)")
        // Written by hand rather than with JSONSerialization: this runs once per request, and
        // the access log was most of the cost of an `/authorize` (docs/origin.md).
        var line: [UInt8] = []
        line.reserveCapacity(512)
        Self.append(.dictionary(object), to: &line)
        line.append(0x0A)
        Self.lock.lock()
        defer { Self.lock.unlock() }
        _ = line.withUnsafeBytes { writeAll(descriptor, $0) }
    }

    /// `date` as RFC 3339 in UTC with milliseconds: "2026-11-23T14:05:25.123Z" (the `time` of
    /// every NDJSON line, logs and the CLI's events alike).
    public static func timestamp(_ date: Date) -> String {
        let interval = date.timeIntervalSince1970
        var seconds = time_t(interval.rounded(.down))
        var milliseconds = Int(((interval - Double(seconds)) * 1000).rounded(.down))
        if milliseconds >= 1000 {
            seconds += 1
            milliseconds -= 1000
        }
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(milliseconds), 3))Z"
    }

    /// Appends `value` as JSON: objects with sorted keys; a `.string` that is an integer as a
    /// number, a `.stringConvertible` always as a string.
    static func append(_ value: Logger.Metadata.Value, to output: inout [UInt8]) {
        switch value {
        case .string(let text):
            if let number = Int64(text) {
                output.append(contentsOf: String(number).utf8)
            } else {
                JSONLine.appendString(text, to: &output)
            }
        case .stringConvertible(let value):
            JSONLine.appendString("\(value)", to: &output)
        case .array(let values):
            output.append(UInt8(ascii: "["))
            for (index, element) in values.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                append(element, to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .dictionary(let values):
            output.append(UInt8(ascii: "{"))
            for (index, key) in values.keys.sorted().enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                JSONLine.appendString(key, to: &output)
                output.append(UInt8(ascii: ":"))
                if let element = values[key] { append(element, to: &output) }
            }
            output.append(UInt8(ascii: "}"))
        }
    }
}
