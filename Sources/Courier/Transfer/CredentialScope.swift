import Foundation

/// The one rule for every request that carries a purchase's credentials (`Authorization:
/// Bearer <signed transaction>`, and any other header the caller gives with them): they go only
/// to the origin they are for, the same scheme, host and port, and to no other.
///
/// Every request that may carry them asks here: a package download and each of its mirrors
/// (`TransferEngine`), a delta update's manifest and its range requests (`DeltaUpdater`), and
/// any later metadata fetched beside a package. A request to another origin (a mirror on a CDN,
/// a manifest the catalog names on another host or port) goes without them, as curl and
/// browsers do for credentials on a redirect to another origin (docs/updates.md, "Tokens").
public enum CredentialScope {
    /// Whether `a` and `b` are the same origin: the same scheme and host (both compared without
    /// case) and the same port, a missing port standing for its scheme's default (80 for
    /// `http`, 443 for `https`). A URL without a host (a file) is no origin.
    public static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        guard let schemeA = a.scheme?.lowercased(), let schemeB = b.scheme?.lowercased(), schemeA == schemeB,
            let hostA = a.host?.lowercased(), let hostB = b.host?.lowercased(), !hostA.isEmpty, hostA == hostB
        else { return false }
        return effectivePort(a, scheme: schemeA) == effectivePort(b, scheme: schemeB)
    }

    /// The headers a request to `url` may carry, when `headers` are credentials for `origin`: all
    /// of them when `url` is of the same origin (`sameOrigin`), else none.
    public static func headers(_ headers: [(String, String)], for origin: URL, sendingTo url: URL) -> [(String, String)] {
        sameOrigin(origin, url) ? headers : []
    }

    private static func effectivePort(_ url: URL, scheme: String) -> Int? {
        if let port = url.port { return port }
        switch scheme {
        case "http": return 80
        case "https": return 443
        default: return nil
        }
    }
}
