import Foundation

/// Settings of package inspection and extraction (limits against hostile packages).
///
/// Every property has a documented default; a key missing from `Config/courier.json` keeps it.
/// A package that breaks a limit is refused with `CourierError(.hostilePackage)` before anything
/// is written when its zip directory already shows it, or as soon as extraction reaches it.
public struct PackageConfiguration: Sendable, Codable, Equatable {
    /// The largest total unpacked size of one package, in bytes. Default 8 GiB.
    public var maxUnpackedSize: Int64 = 8 << 30
    /// The most entries (files, folders, links) one package may hold. Default 100 000.
    public var maxEntryCount: Int = 100_000
    /// The highest compression ratio (unpacked / packed) of one entry, and of the whole package,
    /// once it unpacks to at least `ratioCheckMinimumSize`. Default 200: ordinary content stays
    /// far below it, while a zip bomb (deflate reaches about 1030:1 on zeros) is well above it.
    public var maxCompressionRatio: Double = 200
    /// Entries (and packages) smaller than this many unpacked bytes are exempt from the ratio
    /// rule: a small file of zeros is harmless. Default 1 MiB.
    public var ratioCheckMinimumSize: Int64 = 1 << 20
    /// The largest `ContentInfo.plist` read into memory, in bytes. Default 64 KiB.
    public var maxInfoPlistSize: Int = 64 << 10
    /// The deepest folder nesting of an entry name. Default 64.
    public var maxPathDepth: Int = 64
    /// The read and write block size of extraction, in bytes. Default 1 MiB.
    public var blockSize: Int = 1 << 20

    public init() {}
}
