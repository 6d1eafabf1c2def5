import Foundation

/// Content packages for tests, made by real tools: Info-ZIP `zip`, `bsdtar`, and a Python
/// `zipfile` script for what the tools refuse to make (`..` and absolute names, links that leave,
/// device and FIFO entries, setuid bits, bombs, sizes that lie).
public enum PackageFixtures {
    /// One entry of a hand-made zip.
    public struct Entry: Encodable, Sendable {
        public var name: String
        /// The entry's bytes (a link's target for a symbolic link).
        public var data: Data
        /// The Unix mode stored in the external attributes (type and permission bits).
        public var mode: UInt32
        /// Stream this many zero bytes instead of `data` (a bomb; under 2 GiB).
        public var zeros: Int64?
        /// Overwrite the declared unpacked size in both headers (a lying entry).
        public var declaredSize: UInt32?
        /// Store instead of deflate.
        public var stored: Bool

        public init(name: String, data: Data = Data(), mode: UInt32 = 0o100644, zeros: Int64? = nil, declaredSize: UInt32? = nil, stored: Bool = false) {
            self.name = name
            self.data = data
            self.mode = mode
            self.zeros = zeros
            self.declaredSize = declaredSize
            self.stored = stored
        }

        public static func file(_ name: String, _ text: String, mode: UInt32 = 0o100644) -> Entry {
            Entry(name: name, data: Data(text.utf8), mode: mode)
        }

        public static func folder(_ name: String) -> Entry {
            Entry(name: name.hasSuffix("/") ? name : name + "/", mode: 0o040755)
        }

        public static func symlink(_ name: String, to target: String) -> Entry {
            Entry(name: name, data: Data(target.utf8), mode: 0o120777, stored: true)
        }

        /// ContentInfo.plist naming `product` and `version`.
        public static func contentInfo(product: String, version: String) -> Entry {
            .file("ContentInfo.plist", PackageFixtures.contentInfo(product: product, version: version))
        }
    }

    /// A ContentInfo.plist as Apple's tools write it.
    public static func contentInfo(product: String, version: String) -> String {
        """
        <?xml version="1.0" encoding="UTF-8"?>
        <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
        <plist version="1.0">
        <dict>
        \t<key>ContentVersion</key>
        \t<string>\(version)</string>
        \t<key>IAPProductIdentifier</key>
        \t<string>\(product)</string>
        </dict>
        </plist>

        """
    }

    /// Writes a zip with exactly `entries` (in order) using Python's `zipfile`.
    public static func handMade(_ entries: [Entry], at output: URL) throws {
        let scratch = try TemporaryDirectory(prefix: "courier-fixture")
        defer { scratch.remove() }
        let script = scratch.appending("make_zip.py")
        try Data(pythonScript.utf8).write(to: script)
        let spec = scratch.appending("spec.json")
        try JSONEncoder().encode(entries).write(to: spec)
        let result = try Shell.run("/usr/bin/env", ["python3", script.path, output.path, spec.path])
        guard result.status == 0 else {
            throw FixtureError("python fixture script failed: \(result.stderr)")
        }
    }

    /// Writes `files` (relative path → bytes) under `folder`, creating folders.
    public static func writeTree(_ files: [String: Data], in folder: URL) throws {
        for (path, data) in files {
            let url = folder.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try data.write(to: url)
        }
    }

    /// A normal package made by Info-ZIP `zip`: ContentInfo.plist plus Contents/ with `files`.
    public static func infoZip(product: String, version: String, files: [String: Data], at output: URL, level: Int = 6) throws {
        let scratch = try TemporaryDirectory(prefix: "courier-fixture")
        defer { scratch.remove() }
        var tree = files.reduce(into: [String: Data]()) { $0["Contents/" + $1.key] = $1.value }
        tree["ContentInfo.plist"] = Data(contentInfo(product: product, version: version).utf8)
        try writeTree(tree, in: scratch.url)
        try? FileManager.default.removeItem(at: output)
        let result = try Shell.run("/usr/bin/zip", ["-q", "-r", "-\(level)", output.path, "ContentInfo.plist", "Contents"], directory: scratch.url)
        guard result.status == 0 else { throw FixtureError("zip failed: \(result.stderr)") }
    }

    /// A normal package made by `bsdtar --format zip` (names start with "./").
    public static func bsdtarZip(product: String, version: String, files: [String: Data], at output: URL) throws {
        let scratch = try TemporaryDirectory(prefix: "courier-fixture")
        defer { scratch.remove() }
        var tree = files.reduce(into: [String: Data]()) { $0["Contents/" + $1.key] = $1.value }
        tree["ContentInfo.plist"] = Data(contentInfo(product: product, version: version).utf8)
        try writeTree(tree, in: scratch.url)
        let result = try Shell.run("/usr/bin/bsdtar", ["--format", "zip", "-cf", output.path, "-C", scratch.path, "."])
        guard result.status == 0 else { throw FixtureError("bsdtar failed: \(result.stderr)") }
    }

    /// Pseudo-random bytes (incompressible), reproducible from `seed`.
    public static func noise(_ count: Int, seed: UInt64 = 1) -> Data {
        var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
        var data = Data(count: count)
        data.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for index in 0..<words.count {
                state ^= state << 13
                state ^= state >> 7
                state ^= state << 17
                words[index] = state
            }
        }
        return data
    }

    /// Every path below `folder` (relative, sorted), links not followed.
    public static func snapshot(_ folder: URL) -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: folder.path) else { return [] }
        return (enumerator.allObjects as? [String] ?? []).sorted()
    }

    public struct FixtureError: Error, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    /// Writes a zip from a JSON spec: python3 make_zip.py OUT.zip SPEC.json
    static let pythonScript = #"""
        import base64, json, struct, sys, zipfile

        out, spec_path = sys.argv[1], sys.argv[2]
        entries = json.load(open(spec_path))
        lies = {}
        with zipfile.ZipFile(out, "w") as z:
            for e in entries:
                info = zipfile.ZipInfo(e["name"], date_time=(2021, 3, 4, 5, 6, 8))
                info.create_system = 3
                info.external_attr = (e["mode"] & 0xFFFF) << 16
                if e["name"].endswith("/"):
                    info.external_attr |= 0x10
                info.compress_type = zipfile.ZIP_STORED if e.get("stored") else zipfile.ZIP_DEFLATED
                if e.get("zeros") is not None:
                    chunk = bytes(1 << 20)
                    left = e["zeros"]
                    with z.open(info, "w") as f:
                        while left > 0:
                            n = min(left, len(chunk))
                            f.write(chunk[:n])
                            left -= n
                else:
                    z.writestr(info, base64.b64decode(e.get("data", "")))
                if e.get("declaredSize") is not None:
                    lies[e["name"].encode()] = e["declaredSize"]
        if lies:
            data = bytearray(open(out, "rb").read())
            eocd = data.rfind(b"PK\x05\x06")
            count, size, offset = struct.unpack("<HII", data[eocd + 10:eocd + 20])
            p = offset
            for _ in range(count):
                name_len, extra_len, comment_len = struct.unpack("<HHH", data[p + 28:p + 34])
                name = bytes(data[p + 46:p + 46 + name_len])
                local = struct.unpack("<I", data[p + 42:p + 46])[0]
                if name in lies:
                    struct.pack_into("<I", data, p + 24, lies[name])
                    struct.pack_into("<I", data, local + 22, lies[name])
                p += 46 + name_len + extra_len + comment_len
            open(out, "wb").write(bytes(data))
        """#
}

/// Zips whose numbers are built to overflow a reader's arithmetic (issue 10): each is refused,
/// never trapped on.
extension PackageFixtures {
    /// Little-endian bytes of a zip built field by field.
    struct Bytes {
        var data: [UInt8] = []
        mutating func u16(_ value: UInt16) { data += [UInt8(value & 0xFF), UInt8(value >> 8)] }
        mutating func u32(_ value: UInt32) { u16(UInt16(value & 0xFFFF)); u16(UInt16(value >> 16)) }
        mutating func u64(_ value: UInt64) { u32(UInt32(value & 0xFFFF_FFFF)); u32(UInt32(value >> 32)) }
        mutating func bytes(_ value: [UInt8]) { data += value }
    }

    /// 106 bytes: 64 bytes of padding, a Zip64 end-of-central-directory locator whose record
    /// offset is near 2^64 (`offset + 56` overflows), and an end record that defers to it.
    public static func zip64LocatorOverflow() -> Data {
        var b = Bytes()
        b.bytes([UInt8](repeating: 0, count: 64))
        b.u32(0x0706_4b50)  // Zip64 locator
        b.u32(0)
        b.u64(UInt64.max - 10)  // the Zip64 end record's offset
        b.u32(1)
        b.u32(0x0605_4b50)  // end of central directory
        b.u16(0); b.u16(0); b.u16(0xFFFF); b.u16(0xFFFF)
        b.u32(0xFFFF_FFFF); b.u32(0xFFFF_FFFF); b.u16(0)
        return Data(b.data)
    }

    /// A well-formed Zip64 zip of one stored entry `a` whose Zip64 extra field declares a
    /// compressed size of 2^64-1 (`30 + size` overflows) and an unpacked size of 0.
    public static func zip64SizeOverflow() -> Data {
        var b = Bytes()
        // Local header at 0.
        b.u32(0x0403_4b50); b.u16(45); b.u16(0); b.u16(0); b.u16(0); b.u16(0); b.u32(0)
        b.u32(0xFFFF_FFFF); b.u32(0xFFFF_FFFF); b.u16(1); b.u16(0); b.bytes([0x61])
        let directoryOffset = UInt64(b.data.count)
        // Central directory record with a Zip64 extra field (uncompressed, compressed).
        b.u32(0x0201_4b50); b.u16(3 << 8 | 45); b.u16(45); b.u16(0); b.u16(0); b.u16(0); b.u16(0); b.u32(0)
        b.u32(0xFFFF_FFFF); b.u32(0xFFFF_FFFF); b.u16(1); b.u16(20); b.u16(0); b.u16(0); b.u16(0)
        b.u32(0o100644 << 16); b.u32(0); b.bytes([0x61])
        b.u16(0x0001); b.u16(16); b.u64(0); b.u64(UInt64.max)
        let directorySize = UInt64(b.data.count) - directoryOffset
        let zip64Record = UInt64(b.data.count)
        // Zip64 end record, locator, end record.
        b.u32(0x0606_4b50); b.u64(44); b.u16(45); b.u16(45); b.u32(0); b.u32(0)
        b.u64(1); b.u64(1); b.u64(directorySize); b.u64(directoryOffset)
        b.u32(0x0706_4b50); b.u32(0); b.u64(zip64Record); b.u32(1)
        b.u32(0x0605_4b50); b.u16(0); b.u16(0); b.u16(0xFFFF); b.u16(0xFFFF)
        b.u32(0xFFFF_FFFF); b.u32(0xFFFF_FFFF); b.u16(0)
        return Data(b.data)
    }
}
