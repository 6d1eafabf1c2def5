import Foundation

/// What the origin reads from a request before it decides anything: the request target's
/// canonical path and the bearer token. `package` so the fuzz targets reach them without a
/// module compiled for testing (`swift build -c release` builds those targets too).
package enum RequestTarget {
    /// The path of an original request target if it is canonical: absolute, and unchanged by
    /// percent-decoding and dot-segment removal (`PublishedCatalog.requestPath`) and without
    /// empty segments; the query, if any, is dropped. nil otherwise.
    package static func canonicalPath(_ target: String) -> String? {
        let pathOnly = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        guard pathOnly.hasPrefix("/"), !pathOnly.contains("//"), !pathOnly.contains("%"), !pathOnly.contains("#"),
            let path = PublishedCatalog.requestPath(pathOnly), path == pathOnly
        else { return nil }
        return path
    }

    /// The token of an `Authorization` value `Bearer <token>` (scheme case-insensitive, spaces
    /// and tabs around the token dropped), nil for another scheme. Works on the UTF-8 bytes: a
    /// token is a few KiB and this runs on every request (Foundation's trimming was a seventh of
    /// an `/authorize`).
    package static func bearer(_ value: String) -> String? {
        let bytes = value.utf8
        func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        guard let start = bytes.firstIndex(where: { !isBlank($0) }) else { return nil }
        guard let schemeEnd = bytes[start...].firstIndex(of: UInt8(ascii: " ")) else { return nil }
        guard String(Substring(value.utf8[start..<schemeEnd])).lowercased() == "bearer" else { return nil }
        guard let tokenStart = bytes[schemeEnd...].firstIndex(where: { !isBlank($0) }),
            let tokenLast = bytes[tokenStart...].lastIndex(where: { !isBlank($0) })
        else { return nil }
        return String(Substring(value.utf8[tokenStart...tokenLast]))
    }
}
