import Foundation

/// Courier's version, printed by `courier --version`: the one place it is defined.
public enum CourierVersion {
    public static let current = "0.9.0"
}

/// "Did you mean …" suggestions for mistyped names (subcommands, configuration keys).
public enum Spelling {
    /// The candidate closest to `word` when it is close enough to be a likely typo (an edit
    /// distance of at most 1 for short words, 2 from five letters, and less than a third of the
    /// word), else nil. Case is ignored.
    public static func suggestion(for word: String, among candidates: some Sequence<String>) -> String? {
        let lowered = Array(word.lowercased())
        let limit = lowered.count >= 5 ? 2 : 1
        var best: (name: String, distance: Int)?
        for candidate in candidates {
            let distance = editDistance(lowered, Array(candidate.lowercased()))
            guard distance <= limit, distance * 3 <= max(lowered.count, 1) + 1 else { continue }
            if distance < (best?.distance ?? Int.max) { best = (candidate, distance) }
        }
        return best?.name
    }

    /// The Levenshtein distance between `a` and `b` (adjacent transpositions count as one edit).
    public static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previousPrevious = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [Int](repeating: 0, count: b.count + 1)
            current[0] = i
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], previousPrevious[j - 2] + 1)
                }
            }
            previousPrevious = previous
            previous = current
        }
        return previous[b.count]
    }
}

extension CourierError {
    /// A file named on the command line (or by the environment) that cannot be read, in one line:
    /// "cannot read the receipt FILE: no such file". A usage error (exit 2).
    public static func unreadable(_ what: String, path: String, error: any Error) -> CourierError {
        CourierError(.usage, "cannot read \(what) \(path): \(readFailure(path: path, error: error))")
    }

    /// Why reading `path` failed, in a few words ("no such file", "permission denied").
    public static func readFailure(path: String, error: any Error) -> String {
        var isFolder: ObjCBool = false
        if !FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) { return "no such file" }
        if isFolder.boolValue { return "it is a folder" }
        let nsError = error as NSError
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code))).lowercased()
        }
        if nsError.domain == NSPOSIXErrorDomain { return String(cString: strerror(Int32(nsError.code))).lowercased() }
        if access(path, R_OK) != 0 { return "permission denied" }
        return "unreadable"
    }
}
