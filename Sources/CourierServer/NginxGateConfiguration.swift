import Courier
import Foundation

/// The nginx configuration that puts nginx in front of `courier serve` gates (docs/origin.md,
/// "Behind nginx"): nginx serves the staged files (sendfile, byte ranges, ETag) and, for every
/// request but `/catalog.json`, asks one of the gates at `/authorize` first (`auth_request`),
/// balancing over them and moving to the next on a connection error or timeout.
///
/// `render()` gives an `http`-context snippet (an `upstream` and a `server` block) to include in
/// nginx's `http { }` (e.g. as `/etc/nginx/conf.d/courier.conf`); `courier origin nginx-config`
/// prints it.
public struct NginxGateConfiguration: Sendable, Equatable {
    /// The folder `courier prestage` published; nginx's `root`.
    public var contentDirectory: String
    /// The gates, `host:port` each (`[v6]:port` for IPv6).
    public var gates: [String]
    /// nginx's `listen` address, `host:port` (or a port alone).
    public var listen: String
    /// Idle keepalive connections nginx keeps to the gates, per worker.
    public var keepalive: Int
    /// Seconds nginx waits to connect to a gate, and for its answer, before trying the next.
    public var connectTimeout: Int
    public var readTimeout: Int
    /// Seconds nginx may reuse a gate's allow (204, never a 401 or 403) for the same token and
    /// path (`proxy_cache`), so the many Range requests of one download ask a gate about once
    /// per window; 0 caches nothing. A JWS bearer token is keyed by its payload and signature
    /// only (`tokenKeyPattern`), any other `Authorization` value by the whole value. A refund (or
    /// anything else that turns an allow into a refusal but the token's own expiry, which the
    /// gate caps the entry at) takes up to this long (plus one second, nginx counting whole
    /// seconds) to reach nginx.
    public var decisionCache: Int
    /// The folder nginx keeps cached decisions in (`proxy_cache_path`; nginx makes it, owner-only,
    /// for its worker user). Its files hold the cache keys, so the bearer tokens.
    public var decisionCachePath: String

    public static let defaultDecisionCache = 2
    public static let maximumDecisionCache = 3600
    public static let defaultDecisionCachePath = "/var/lib/nginx/courier-decisions"
    /// Decision files each nginx worker keeps open (`open_file_cache max=`): file descriptors
    /// on top of its connections' (docs/origin.md, "The decision cache").
    public static let openDecisionFiles = 1000
    /// The decision cache's key for a JWS bearer token: the `Authorization` value's last two
    /// dot-separated parts (payload and signature, base64url), captured as `$1` (docs/origin.md,
    /// "The decision cache"). Unanchored on the left, so that PCRE finds the first dot with
    /// memchr rather than walking the 3 KiB JWS header (the App Store's certificates) through a
    /// character class: a third of nginx's cost of the gated path, measured with callgrind.
    public static let tokenKeyPattern = #"\.([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)$"#
    /// What a value matching `tokenKeyPattern` must also start with to be keyed by its payload
    /// and signature; anything else is keyed by the whole `Authorization` value.
    public static let bearerPrefixPattern = "^Bearer [A-Za-z0-9_-]"

    /// Checks every value against what nginx's syntax and Courier's gate accept; throws
    /// `CourierError(.usage)` naming the bad one.
    public init(
        contentDirectory: String, gates: [String], listen: String, keepalive: Int = 32, connectTimeout: Int = 2, readTimeout: Int = 10,
        decisionCache: Int = NginxGateConfiguration.defaultDecisionCache,
        decisionCachePath: String = NginxGateConfiguration.defaultDecisionCachePath
    ) throws {
        try Self.checkFolder(contentDirectory, name: "the content folder")
        guard (0...Self.maximumDecisionCache).contains(decisionCache) else {
            throw CourierError(.usage, "--decision-cache \(decisionCache) is not 0...\(Self.maximumDecisionCache) seconds")
        }
        if decisionCache > 0 { try Self.checkFolder(decisionCachePath, name: "the decision cache folder") }
        guard !gates.isEmpty else {
            throw CourierError(.usage, "at least one gate is needed", hint: "pass --gate HOST:PORT for each `courier serve` gate")
        }
        for gate in gates where !Self.isAddress(gate, portRequired: true) {
            throw CourierError(.usage, "--gate \(gate) is not HOST:PORT")
        }
        guard Self.isAddress(listen, portRequired: false) else {
            throw CourierError(.usage, "--listen \(listen) is not HOST:PORT or PORT")
        }
        guard keepalive >= 1, connectTimeout >= 1, readTimeout >= 1 else {
            throw CourierError(.usage, "keepalive and timeouts must be at least 1")
        }
        self.contentDirectory = contentDirectory.count > 1 && contentDirectory.hasSuffix("/") ? String(contentDirectory.dropLast()) : contentDirectory
        self.gates = gates
        self.listen = listen
        self.keepalive = keepalive
        self.connectTimeout = connectTimeout
        self.readTimeout = readTimeout
        self.decisionCache = decisionCache
        self.decisionCachePath = decisionCachePath.count > 1 && decisionCachePath.hasSuffix("/") ? String(decisionCachePath.dropLast()) : decisionCachePath
    }

    /// A folder nginx's configuration can name in double quotes: absolute, without `"`, `\`,
    /// `$` or control characters.
    static func checkFolder(_ path: String, name: String) throws {
        guard path.hasPrefix("/") else {
            throw CourierError(.usage, "\(name) must be an absolute path: \(path)")
        }
        guard !path.unicodeScalars.contains(where: { $0 == "\"" || $0 == "\\" || $0 == "$" || $0.value < 0x20 || $0.value == 0x7f }) else {
            throw CourierError(.usage, "\(name)'s path holds a character nginx's configuration cannot carry (\", \\, $ or a control character)")
        }
    }

    /// `host:port` with a port 1...65535 and a host of letters, digits, `.`, `-`, `_` (or an IPv6
    /// address in brackets); with `portRequired` false a bare port is fine too.
    static func isAddress(_ text: String, portRequired: Bool) -> Bool {
        func isPort(_ value: Substring) -> Bool {
            guard let port = Int(value), !value.hasPrefix("+"), !value.hasPrefix("-") else { return false }
            return (1...65535).contains(port)
        }
        guard let colon = text.lastIndex(of: ":") else { return !portRequired && isPort(Substring(text)) }
        let host = text[..<colon]
        guard isPort(text[text.index(after: colon)...]), !host.isEmpty else { return false }
        if host.hasPrefix("[") {
            guard host.hasSuffix("]"), host.count > 2 else { return false }
            return host.dropFirst().dropLast().allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." }
        }
        return host.allSatisfy { ($0.isASCII && ($0.isLetter || $0.isNumber)) || $0 == "." || $0 == "-" || $0 == "_" }
    }

    /// The configuration text.
    public func render() -> String {
        let servers = gates.map { "        server \($0) max_fails=1 fail_timeout=5s;" }.joined(separator: "\n")
        var cachePath = ""
        var cacheDirectives = ""
        if decisionCache > 0 {
            cachePath = """

                # Gate allows (204), reused for \(decisionCache) s per token and path (`--decision-cache`):
                # a refund reaches nginx within that (plus a second); an allow never outlives its
                # token (the gate caps X-Accel-Expires at the token's end). Refusals (401, 403)
                # are never kept: each is put to a gate again.
                # The path of the original request, without its query (the gate ignores it).
                map $request_uri $courier_original_path {
                    "~^(?<courier_path>[^?]*)" $courier_path;
                }
                # Keep the gate's answer only when it is an allow (204; after a failed attempt on
                # another gate $upstream_status is "502, 204"): the gate also says how long to
                # keep a 401 or 403 (X-Accel-Expires), and that would win over proxy_cache_valid.
                map $upstream_status $courier_no_cache {
                    "~(^|\\D)204$" "";
                    default 1;
                }
                proxy_cache_path "\(decisionCachePath)" levels=1:2 keys_zone=courier_decisions:10m max_size=64m inactive=\(max(60, 2 * decisionCache))s use_temp_path=off;


                """
            cacheDirectives = """

                        # Reuse a gate's allow for the same token and path; the gate says for how
                        # long (X-Accel-Expires: at most the window, and never past the token's
                        # end); never a stale answer, never a refusal. No cache lock: its waiters
                        # poll every 500 ms, which cost wrk -c64 a 300 ms p99 for no throughput,
                        # while concurrent misses of one key only ask a gate a few times more.
                        proxy_cache courier_decisions;
                        proxy_cache_key "$courier_original_path $courier_token_key";
                        proxy_cache_valid 204 \(decisionCache)s;
                        proxy_no_cache $courier_no_cache;
                        proxy_cache_lock off;
                        proxy_cache_use_stale off;
                        proxy_set_header X-Courier-Decision-Cache \(decisionCache);
                        # The token's part of the key: for `Bearer HEADER.PAYLOAD.SIGNATURE` the
                        # payload and signature only (the header, Apple's algorithm and public
                        # certificates, is 3 KiB that nginx would hash twice per request; the
                        # signature binds it, so of two tokens sharing the rest at most one
                        # verifies, and only allows are kept); any other value whole.
                        set $courier_token_key "header $http_authorization";
                        if ($http_authorization ~ "\(Self.tokenKeyPattern)") {
                            set $courier_token_key "jws $1";
                        }
                        if ($http_authorization !~ "\(Self.bearerPrefixPattern)") {
                            set $courier_token_key "header $http_authorization";
                        }
                        # The key holds the token's signed part (1 KiB or more): nginx keeps it
                        # with the answer's head in this buffer, and caches nothing when it does
                        # not fit.
                        proxy_buffer_size 16k;
                        proxy_busy_buffers_size 16k;
                        # Keep the decision files open between requests (an open, a stat and a
                        # close less per request). Safe for the cache: nginx reopens a file the
                        # gate's next answer replaced (its inode differs from the cache entry's),
                        # and every hit reads the answer's expiry from the file itself.
                        open_file_cache max=\(Self.openDecisionFiles) inactive=10s;
                        open_file_cache_valid 1s;
                """
        }
        return """
            # nginx in front of `courier serve` gates: nginx serves the staged packages (sendfile,
            # ranges, ETag); each request but /catalog.json is first put to a gate (auth_request
            # /authorize: 204 serve it, 401 no or bad token, 403 not entitled or revoked).
            # Printed by `courier origin nginx-config`; include it in nginx's http { } block.
            \(cachePath)upstream courier_gates {
            \(servers)
                keepalive \(keepalive);
                # Shorter than a gate's wait for the next request on a kept-alive connection
                # (`courier serve --header-timeout`, 10 s): nginx closes idle ones first.
                keepalive_timeout 5s;
            }

            server {
                listen \(listen);
                root "\(contentDirectory)";
                sendfile on;
                tcp_nopush on;
                # One byte range per request, as `courier serve` answers (several: the whole file).
                max_ranges 1;
                types { application/zip zip; application/json json; }
                default_type application/octet-stream;

                # Public, as on `courier serve`: the catalog clients fetch before buying.
                location = /catalog.json {
                    add_header Cache-Control no-cache;
                }

                # Public too: the catalog's signed TUF metadata and targets (docs/trust.md).
                # timestamp.json and root.json change in place; versioned and hash-prefixed
                # names never do.
                location ~ "^/metadata/(timestamp|root)\\.json$" {
                    add_header Cache-Control no-cache;
                }
                location /metadata/ {
                }
                location ^~ /targets/ {
                }

                # Everything else (packages, their manifests) is served only if a gate says 204.
                location / {
                    auth_request /authorize;
                }

                # App Store Server Notifications (refunds) and health go to a gate as they are.
                # A notification is idempotent (its notificationUUID), so it may be retried on
                # the next gate.
                location = /notifications {
                    proxy_pass http://courier_gates;
                    proxy_http_version 1.1;
                    proxy_set_header Connection "";
                    client_max_body_size 256k;
                    proxy_next_upstream error timeout non_idempotent;
                }

                location = /health {
                    proxy_pass http://courier_gates;
                    proxy_http_version 1.1;
                    proxy_set_header Connection "";
                    proxy_next_upstream error timeout;
                }

                location = /authorize {
                    internal;
                    proxy_pass http://courier_gates;
                    proxy_method GET;
                    proxy_pass_request_body off;
                    proxy_set_header Content-Length "";
                    proxy_set_header X-Original-URI $request_uri;
                    proxy_set_header Authorization $http_authorization;
                    proxy_http_version 1.1;
                    proxy_set_header Connection "";
                    proxy_next_upstream error timeout;
                    proxy_connect_timeout \(connectTimeout)s;
                    proxy_read_timeout \(readTimeout)s;
                    proxy_send_timeout \(readTimeout)s;\(cacheDirectives)
                }
            }

            """
    }
}
