import Foundation

/// A transfer rate in bytes per second, written as curl writes `--limit-rate`: a number with an
/// optional unit suffix, `k`/`K` (KiB), `m`/`M` (MiB), `g`/`G` (GiB) or `t`/`T` (TiB), 1024-based
/// as in curl: `"500k"`, `"2M"`, `"1.5G"`, `"65536"`. In a configuration file it is that string
/// or a plain number of bytes per second (`transfer.maxRate`, `transfer.backgroundMaxRate`).
public struct ByteRate: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Bytes per second; always at least 1.
    public let bytesPerSecond: Int64

    /// The largest rate accepted: 1 PiB/s (far above any link, far below overflow).
    public static let maximum: Int64 = 1 << 50

    public init(bytesPerSecond: Int64) throws {
        guard bytesPerSecond >= 1, bytesPerSecond <= Self.maximum else {
            throw CourierError(.usage, "a rate must be between 1 byte and 1 PiB per second, not \(bytesPerSecond)")
        }
        self.bytesPerSecond = bytesPerSecond
    }

    /// Parses curl's syntax (see the type). Throws `.usage` naming what is wrong.
    public init(parsing text: String) throws {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        func refuse(_ why: String) -> CourierError {
            CourierError(
                .usage, "not a rate: \"\(trimmed.prefix(40))\" (\(why))",
                hint: "write bytes per second with an optional k, M, G or T suffix, as curl's --limit-rate: 500k, 2M")
        }
        guard !trimmed.isEmpty else { throw refuse("it is empty") }
        var digits = Substring(trimmed)
        var multiplier: Double = 1
        if let last = digits.last, last.isLetter {
            switch last {
            case "k", "K": multiplier = 1024
            case "m", "M": multiplier = 1024 * 1024
            case "g", "G": multiplier = 1024 * 1024 * 1024
            case "t", "T": multiplier = 1024 * 1024 * 1024 * 1024
            default: throw refuse("unknown unit \(last)")
            }
            digits = digits.dropLast()
        }
        // Digits with at most one decimal point: no sign, exponent, hex, inf or nan.
        let points = digits.filter { $0 == "." }.count
        guard !digits.isEmpty, points <= 1, digits != ".",
            digits.allSatisfy({ $0 == "." || ($0.isASCII && $0.isNumber) })
        else { throw refuse("expected a number") }
        guard digits.count <= 24, let number = Double(digits), number.isFinite else { throw refuse("expected a number") }
        let bytes = (number * multiplier).rounded(.down)
        guard bytes >= 1 else { throw refuse("it must be at least 1 byte per second") }
        guard bytes <= Double(Self.maximum) else { throw refuse("it is above 1 PiB per second") }
        try self.init(bytesPerSecond: Int64(bytes))
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        do {
            if let number = try? container.decode(Int64.self) {
                try self.init(bytesPerSecond: number)
            } else {
                try self.init(parsing: try container.decode(String.self))
            }
        } catch let error as CourierError {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }

    /// The rate in curl's syntax, exact: `2M`, `1536k`, `1000`.
    public var description: String {
        for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("k", 10)] as [(String, Int64)]
        where bytesPerSecond % (1 << shift) == 0 {
            return "\(bytesPerSecond >> shift)\(unit)"
        }
        return "\(bytesPerSecond)"
    }
}

/// A time window of the day with its own rate limits (`transfer.rateSchedule`), as Delivery
/// Optimization's business hours: `{"from": "09:00", "to": "17:00", "maxRate": "1M"}` holds
/// every download of the process to 1 MiB/s from 09:00 to 17:00 local time. A window may cross
/// midnight (`"from": "22:00", "to": "06:00"`). Inside a window its `maxRate` and
/// `backgroundMaxRate` replace `transfer.maxRate` and `transfer.backgroundMaxRate` (a key left
/// out means no limit of that kind in the window); outside every window those keys apply.
public struct RateScheduleWindow: Sendable, Hashable, Codable {
    /// Minutes after local midnight the window starts (inclusive) and ends (exclusive).
    public var from: Int
    public var to: Int
    public var maxRate: ByteRate?
    public var backgroundMaxRate: ByteRate?

    public init(from: Int, to: Int, maxRate: ByteRate?, backgroundMaxRate: ByteRate? = nil) {
        self.from = from
        self.to = to
        self.maxRate = maxRate
        self.backgroundMaxRate = backgroundMaxRate
    }

    enum CodingKeys: String, CodingKey { case from, to, maxRate, backgroundMaxRate }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func minute(_ key: CodingKeys) throws -> Int {
            let text = try container.decode(String.self, forKey: key)
            guard let minute = Self.minuteOfDay(text) else {
                throw DecodingError.dataCorruptedError(
                    forKey: key, in: container, debugDescription: "expected a time of day as HH:MM (00:00 to 24:00), not \"\(text.prefix(20))\"")
            }
            return minute
        }
        self.from = try minute(.from)
        self.to = try minute(.to)
        self.maxRate = try container.decodeIfPresent(ByteRate.self, forKey: .maxRate)
        self.backgroundMaxRate = try container.decodeIfPresent(ByteRate.self, forKey: .backgroundMaxRate)
        guard from != to else {
            throw DecodingError.dataCorruptedError(forKey: .to, in: container, debugDescription: "a window must not be empty (from equals to)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(Self.clock(from), forKey: .from)
        try container.encode(Self.clock(to), forKey: .to)
        try container.encodeIfPresent(maxRate, forKey: .maxRate)
        try container.encodeIfPresent(backgroundMaxRate, forKey: .backgroundMaxRate)
    }

    /// Whether `minute` (after local midnight) is inside the window.
    public func contains(minute: Int) -> Bool {
        from < to ? (from <= minute && minute < to) : (minute >= from || minute < to)
    }

    /// `HH:MM` (or `H:MM`) as minutes after midnight, 0...1440; nil if it is not one.
    public static func minuteOfDay(_ text: String) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, (1...2).contains(parts[0].count), parts[1].count == 2,
            parts.allSatisfy({ $0.allSatisfy { $0.isASCII && $0.isNumber } }),
            let hours = Int(parts[0]), let minutes = Int(parts[1]), minutes < 60
        else { return nil }
        let total = hours * 60 + minutes
        return total <= 1440 ? total : nil
    }

    static func clock(_ minute: Int) -> String {
        String(format: "%02ld:%02ld", minute / 60, minute % 60)
    }
}
