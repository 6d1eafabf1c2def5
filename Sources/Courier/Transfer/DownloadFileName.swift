import Foundation

/// The file name a URL saves to in a folder (`courier get --input-file LIST -d DIR`): its last
/// path component, percent-decoded, accepted only if it is one safe path component, so that a
/// URL can never name a file outside the folder (`..%2F..%2Fetc%2Fx`) or clash with the
/// download's own side files. Pure (no I/O): the fuzz entry for names derived from URLs.
public enum DownloadFileName {
    /// The longest name, in UTF-8 bytes (Linux's NAME_MAX).
    public static let maximumLength = 255

    /// The suffixes of the side files kept beside a download; a name ending with one would
    /// collide with another download's partial file or journal.
    static let reservedSuffixes = [".courier-part", ".courier-journal", ".courier-journal.tmp"]

    /// The safe file name of `url`, or `.usage` saying why it has none.
    public static func derive(from url: URL) throws -> String {
        try check(url.lastPathComponent)
    }

    /// `name` if it is one safe path component: not empty, `.` or `..`; no `/`, NUL or other
    /// control character; at most `maximumLength` bytes; not ending in a side-file suffix.
    /// Throws `.usage` otherwise.
    public static func check(_ name: String) throws -> String {
        func refuse(_ reason: String) -> CourierError {
            CourierError(.usage, reason, hint: "name the file in the URL's last path segment")
        }
        if name.isEmpty || name == "/" { throw refuse("the URL has no file name") }
        if name == "." || name == ".." { throw refuse("the file name \(name) is not a file") }
        // By bytes: `contains("/")` compares characters, and "/\u{301}" is one character, not "/".
        if name.utf8.contains(UInt8(ascii: "/")) { throw refuse("the file name \(escaped(name)) holds a /") }
        if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw refuse("the file name \(escaped(name)) holds a control character")
        }
        if name.utf8.count > maximumLength {
            throw refuse("the file name is longer than \(maximumLength) bytes")
        }
        if let suffix = reservedSuffixes.first(where: { name.hasSuffix($0) }) {
            throw refuse("the file name \(escaped(name)) ends in \(suffix), the suffix of Courier's own files")
        }
        return name
    }

    /// Where `url` saves to in `folder`: `folder/NAME` with NAME from `derive(from:)`, checked
    /// to be directly inside `folder`. Throws `.usage` otherwise.
    public static func destination(for url: URL, in folder: URL) throws -> URL {
        let name = try derive(from: url)
        let base = folder.standardizedFileURL
        let destination = base.appendingPathComponent(name, isDirectory: false)
        guard destination.lastPathComponent == name,
            destination.deletingLastPathComponent().standardizedFileURL.path == base.path
        else {
            throw CourierError(.usage, "the file name \(escaped(name)) leaves \(base.path)")
        }
        return destination
    }

    /// `text` with control characters shown as `\u{…}` escapes, safe to print on a terminal.
    public static func escaped(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            if scalar.properties.generalCategory == .control {
                result += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
