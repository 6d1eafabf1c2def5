import Foundation

/// An error Courier reports to its callers: a stable `code`, a human `message`, the underlying
/// `cause` (a curl code, an errno, a libarchive message, an HTTP status) and, for users, what to
/// do next.
///
/// The download error codes are the fixed set of DESIGN.md; the others classify failures of the
/// surrounding flow (receipts, usage, paused). `exitCode` maps every code to the exit-code table
/// of the command-line contract.
public struct CourierError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An extensible set of error codes.
    public struct Code: Hashable, Sendable, RawRepresentable, Codable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        // The download error codes of DESIGN.md.
        /// Not enough free space for the remaining bytes, the unpacked content and the reserve.
        public static let insufficientSpace = Code(rawValue: "insufficientSpace")
        /// The network failed after retries, or the server answered a non-retryable error.
        public static let network = Code(rawValue: "network")
        /// A checksum, size or archive-structure check failed.
        public static let integrity = Code(rawValue: "integrity")
        /// The package tried to leave its folder or broke a package rule.
        public static let hostilePackage = Code(rawValue: "hostilePackage")
        /// The purchase does not entitle the user to this content.
        public static let notEntitled = Code(rawValue: "notEntitled")
        /// The server refused the request: an HTTP 4xx other than 403 (`notEntitled`), 408/429
        /// (retried) and a resolved 416; a 401 from a receipt-gated origin, a 404, a 410. Exit 8.
        public static let serverRejected = Code(rawValue: "serverRejected")
        /// The download was cancelled by the user.
        public static let cancelled = Code(rawValue: "cancelled")
        /// A bug or an unexpected condition inside Courier.
        public static let `internal` = Code(rawValue: "internal")

        // Codes of the surrounding flow.
        /// The receipt or signed transaction failed verification.
        public static let receiptInvalid = Code(rawValue: "receiptInvalid")
        /// The work was paused or interrupted and can be resumed.
        public static let paused = Code(rawValue: "paused")
        /// The input or configuration is unusable.
        public static let usage = Code(rawValue: "usage")
        /// A file or record that was asked for does not exist.
        public static let notFound = Code(rawValue: "notFound")
        /// A local I/O operation failed (other than running out of space).
        public static let io = Code(rawValue: "io")
    }

    public var code: Code
    public var message: String
    /// The underlying cause, for logs and `--json` output (curl code, errno text, HTTP status...).
    public var cause: String?
    /// What the user can do next, if anything.
    public var hint: String?

    public init(_ code: Code, _ message: String, cause: String? = nil, hint: String? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
        self.hint = hint
    }

    public var description: String {
        var text = "\(code): \(message)"
        if let cause { text += " (\(cause))" }
        return text
    }

    /// The process exit code of the command-line contract (DESIGN.md).
    public var exitCode: Int32 {
        switch code {
        case .receiptInvalid, .notEntitled: return 3
        case .insufficientSpace: return 4
        case .network: return 5
        case .integrity, .hostilePackage: return 6
        case .paused: return 7
        case .serverRejected: return 8
        case .usage: return 2
        default: return 1
        }
    }
}

extension CourierError {
    /// Runs `body`; whatever it throws becomes a `code` error saying `message`, with the thrown
    /// error as its cause.
    public static func wrapping<T>(_ code: Code, _ message: @autoclosure () -> String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch {
            throw CourierError(code, message(), cause: plainDescription(of: error))
        }
    }

    /// `error` in one line for a user: the errno text of a file error ("No such file or
    /// directory"), the key path and the reason of a JSON decoding error ("bundleId: expected
    /// String", "Unexpected character 'j' around line 1, column 1."), never Foundation's
    /// `Error Domain=NSCocoaErrorDomain Code=260 … UserInfo={…}` or `DecodingError.dataCorrupted
    /// … Debug description` dumps.
    public static func plainDescription(of error: any Error) -> String {
        func path(_ keys: [any CodingKey]) -> String {
            keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
        }
        if let error = error as? CourierError { return error.message + (error.cause.map { " (\($0))" } ?? "") }
        if let decoding = error as? DecodingError {
            switch decoding {
            case .typeMismatch(let type, let context):
                return "\(path(context.codingPath)): expected \(type)"
            case .valueNotFound(let type, let context):
                return "\(path(context.codingPath)): expected \(type), found null"
            case .keyNotFound(let key, let context):
                return "\(path(context.codingPath + [key])): missing"
            case .dataCorrupted(let context):
                let underlying = (context.underlyingError as NSError?)?.userInfo[NSDebugDescriptionErrorKey] as? String
                let location = context.codingPath.isEmpty ? "" : path(context.codingPath) + ": "
                return location + (underlying.map { "not JSON: \($0)" } ?? context.debugDescription)
            @unknown default:
                return "\(decoding)"
            }
        }
        let ns = error as NSError
        if ns.domain == NSPOSIXErrorDomain { return String(cString: strerror(Int32(truncatingIfNeeded: ns.code))) }
        if ns.domain == NSCocoaErrorDomain {
            // On Linux the underlying error is kept as a Swift error: `as? NSError` misses it.
            if let underlying = (ns.userInfo[NSUnderlyingErrorKey] as? any Error).map({ $0 as NSError }),
                underlying.domain == NSPOSIXErrorDomain
            {
                return String(cString: strerror(Int32(truncatingIfNeeded: underlying.code)))
            }
            switch CocoaError.Code(rawValue: ns.code) {
            case .fileReadNoSuchFile, .fileNoSuchFile: return String(cString: strerror(ENOENT))
            case .fileReadNoPermission, .fileWriteNoPermission: return String(cString: strerror(EACCES))
            default: break
            }
            if let reason = ns.userInfo[NSDebugDescriptionErrorKey] as? String { return reason }
            return ns.localizedDescription
        }
        return "\(error)"
    }

    /// Where `data` stops being JSON, for a user: "not JSON: Invalid value at line 2, column 2";
    /// nil when it is JSON. (JSONDecoder on Linux says only "The given data was not valid JSON.")
    public static func jsonSyntaxProblem(in data: Data) -> String? {
        do {
            _ = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
            return nil
        } catch {
            let reason = ((error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String) ?? "\((error as NSError).localizedDescription)"
            // "Invalid value around character 10." gives the offset; a line and column say more.
            guard let marker = reason.range(of: " around character "),
                let offset = Int(reason[marker.upperBound...].prefix { $0.isNumber }), offset >= 0
            else { return "not JSON: \(reason)" }
            let bytes = [UInt8](data.prefix(offset))
            let line = bytes.reduce(1) { $1 == 0x0A ? $0 + 1 : $0 }
            let column = bytes.count - (bytes.lastIndex(of: 0x0A).map { $0 + 1 } ?? 0) + 1
            return "not JSON: \(reason[..<marker.lowerBound]) at line \(line), column \(column)"
        }
    }

    /// An error from a failed system call, with the errno text as its cause.
    public static func posix(
        _ operation: String,
        path: String? = nil,
        errno code: Int32 = errno
    ) -> CourierError {
        let text = String(cString: strerror(code))
        let what = path.map { "\(operation) \($0)" } ?? operation
        if code == ENOSPC || code == EDQUOT {
            return CourierError(
                .insufficientSpace,
                "\(what) failed: the disk is full",
                cause: "errno \(code): \(text)",
                hint: "free some space, then resume"
            )
        }
        return CourierError(.io, "\(what) failed", cause: "errno \(code): \(text)")
    }
}
