import Courier
import Foundation
import Logging
import NIOSSL
import PostgresNIO

/// Where a PostgreSQL database is: `postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=M]`
/// (`postgres://` too), as `--queue`, `--state` and the configuration name it.
///
/// The user and the database are required; the port defaults to 5432; `HOST` is a name, an IPv4
/// address or a bracketed IPv6 address. User, password and database may be percent-encoded.
/// `sslmode` is `disable`, `require` (TLS with certificate and host name verification) or, by
/// default, `require` for any host but loopback and `disable` for loopback. Nothing else is
/// accepted: an unknown parameter is refused rather than silently ignored. The password is never
/// printed (`description` hides it).
public struct PostgresURL: Sendable, Equatable, CustomStringConvertible {
    public enum TLSMode: String, Sendable, Equatable {
        case disable, require
    }

    public var user: String
    public var password: String?
    public var host: String
    public var port: Int
    public var database: String
    public var tls: TLSMode

    /// Parses `text`; throws `CourierError(.usage)` naming what is wrong.
    public init(parsing text: String) throws {
        func refuse(_ reason: String) -> CourierError {
            CourierError(
                .usage, "\(Self.redacted(text)) is not a PostgreSQL URL: \(reason)",
                hint: "write postgresql://USER@HOST:PORT/DATABASE")
        }
        guard text.utf8.count <= 2048 else { throw refuse("longer than 2048 bytes") }
        guard !text.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value > 0x7e }) else {
            throw refuse("it holds spaces, control or non-ASCII characters (percent-encode them)")
        }
        var rest = Substring(text)
        if rest.lowercased().hasPrefix("postgresql://") {
            rest = rest.dropFirst("postgresql://".count)
        } else if rest.lowercased().hasPrefix("postgres://") {
            rest = rest.dropFirst("postgres://".count)
        } else {
            throw refuse("the scheme must be postgresql://")
        }
        if rest.contains("#") { throw refuse("a fragment (#) is not allowed") }
        var query: Substring?
        if let mark = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: mark)...]
            rest = rest[..<mark]
        }
        guard let slash = rest.firstIndex(of: "/") else { throw refuse("the database is missing") }
        let authority = rest[..<slash]
        let path = rest[rest.index(after: slash)...]
        guard let at = authority.lastIndex(of: "@") else { throw refuse("the user is missing (USER@HOST)") }
        let userInfo = authority[..<at]
        let hostPort = authority[authority.index(after: at)...]

        let userPart: Substring
        if let colon = userInfo.firstIndex(of: ":") {
            userPart = userInfo[..<colon]
            password = try Self.decode(userInfo[userInfo.index(after: colon)...], refuse("the password is badly percent-encoded"))
        } else {
            userPart = userInfo
            password = nil
        }
        user = try Self.decode(userPart, refuse("the user is badly percent-encoded"))
        guard !user.isEmpty, user.utf8.count <= 63 else { throw refuse("the user must be 1 to 63 bytes") }
        guard !user.contains("\0"), !(password ?? "").contains("\0") else { throw refuse("NUL is not allowed") }

        var portText: Substring?
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else { throw refuse("an IPv6 address lacks its ]") }
            host = String(hostPort[hostPort.index(after: hostPort.startIndex)..<close])
            let after = hostPort[hostPort.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw refuse("unexpected text after the IPv6 address") }
                portText = after.dropFirst()
            }
            guard !host.isEmpty, host.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else {
                throw refuse("the IPv6 address is not valid")
            }
        } else {
            if let colon = hostPort.firstIndex(of: ":") {
                host = String(hostPort[..<colon])
                portText = hostPort[hostPort.index(after: colon)...]
            } else {
                host = String(hostPort)
            }
            guard !host.isEmpty, host.utf8.count <= 253 else { throw refuse("the host is missing") }
            guard host.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." || $0 == "_" }) else {
                throw refuse("the host name holds characters a host name cannot")
            }
        }
        if let portText {
            guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy(\.isASCII), let value = Int(portText),
                (1...65535).contains(value)
            else { throw refuse("the port must be 1...65535") }
            port = value
        } else {
            port = 5432
        }

        database = try Self.decode(path, refuse("the database is badly percent-encoded"))
        guard !database.isEmpty, database.utf8.count <= 63, !database.contains("/"), !database.contains("\0") else {
            throw refuse("the database must be one name of 1 to 63 bytes")
        }

        tls = Self.isLoopback(host) ? .disable : .require
        if let query, !query.isEmpty {
            for pair in query.split(separator: "&", omittingEmptySubsequences: false) {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, parts[0] == "sslmode" else {
                    throw refuse("only the parameter sslmode=disable|require is understood")
                }
                guard let mode = TLSMode(rawValue: String(parts[1])) else { throw refuse("sslmode must be disable or require") }
                tls = mode
            }
        }
    }

    /// The URL without its password.
    public var description: String {
        let hostText = host.contains(":") ? "[\(host)]" : host
        return "postgresql://\(user)\(password == nil ? "" : ":***")@\(hostText):\(port)/\(database)"
    }

    /// The configuration of a `PostgresClient` (a pool) for this database.
    public var clientConfiguration: PostgresClient.Configuration {
        get throws {
            var configuration = PostgresClient.Configuration(
                host: host, port: port, username: user, password: password, database: database,
                tls: try clientTLS)
            configuration.options.maximumConnections = 40
            return configuration
        }
    }

    /// The configuration of one `PostgresConnection` (the coordinator's lock, a LISTEN).
    public var connectionConfiguration: PostgresConnection.Configuration {
        get throws {
            PostgresConnection.Configuration(
                host: host, port: port, username: user, password: password, database: database,
                tls: tls == .disable ? .disable : .require(try Self.tlsContext()))
        }
    }

    private var clientTLS: PostgresClient.Configuration.TLS {
        get throws {
            tls == .disable ? .disable : .require(Self.verifyingTLS())
        }
    }

    private static func verifyingTLS() -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = .fullVerification
        return configuration
    }

    private static func tlsContext() throws -> NIOSSLContext {
        do {
            return try NIOSSLContext(configuration: verifyingTLS())
        } catch {
            throw CourierError(.internal, "cannot set up TLS for PostgreSQL", cause: "\(error)")
        }
    }

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }

    private static func decode(_ text: Substring, _ error: @autoclosure () -> CourierError) throws -> String {
        guard let decoded = String(text).removingPercentEncoding else { throw error() }
        return decoded
    }

    /// `text` with anything between `://` and the last `@` of its authority replaced, so an error
    /// never prints a password.
    package static func redacted(_ text: String) -> String {
        let clipped = text.count > 200 ? String(text.prefix(200)) + "…" : text
        guard let scheme = clipped.range(of: "://") else { return clipped.debugDescription }
        let afterScheme = clipped[scheme.upperBound...]
        let authorityEnd = afterScheme.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? afterScheme.endIndex
        guard let at = afterScheme[..<authorityEnd].lastIndex(of: "@") else { return clipped.debugDescription }
        let userInfo = afterScheme[..<at]
        let user = userInfo.split(separator: ":", maxSplits: 1).first.map(String.init) ?? ""
        let hidden = userInfo.contains(":") ? "\(user):***" : user
        return (String(clipped[..<scheme.upperBound]) + hidden + String(afterScheme[at...])).debugDescription
    }
}
