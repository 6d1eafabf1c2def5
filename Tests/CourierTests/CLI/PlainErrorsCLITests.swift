@testable import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 31, items 2 and 7: Foundation's internals never reach the user (one `courier:` line
/// naming the file and the key or line at fault), and curl's and wget's habits work: a URL
/// without a scheme, `-i -`, a relative date that starts with a minus, the umask's mode on a finished file.
@Suite("Plain errors and curl habits (the built courier binary)")
struct PlainErrorsCLITests {
    private func environment(_ directory: TemporaryDirectory) -> [String: String] {
        CourierBinary.isolatedEnvironment(directory)
    }

    /// Foundation's dumps, which must never be printed.
    static let internals = ["NSCocoaErrorDomain", "Error Domain=", "UserInfo=", "DecodingError", "Debug description"]

    @Test("a missing, a junk and a mistyped catalog each get one plain line naming the file and what is wrong")
    func catalogErrors() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let sandbox = try SandboxStore.create(at: directory.appending("sandbox"))
        let receipt = directory.appending("receipt.jws")
        try Data(try sandbox.purchase(productId: "com.example.levels").utf8).write(to: receipt)
        let junk = directory.appending("junk.json")
        try Data("junk\n".utf8).write(to: junk)
        let mistyped = directory.appending("mistyped.json")
        try Data(#"{"bundleId": 3, "products": []}"#.utf8).write(to: mistyped)
        let missing = directory.appending("nocat.json")
        let cases: [(URL, [String])] = [
            (missing, ["cannot read the catalog \(missing.path)", "No such file or directory"]),
            (junk, ["the catalog \(junk.path) is not valid", "not JSON"]),
            (mistyped, ["the catalog \(mistyped.path) is not valid", "bundleId: expected String"]),
        ]
        for (catalog, expected) in cases {
            let result = try CourierBinary.run(
                [
                    "deliver", "--receipt", receipt.path, "--catalog", catalog.path, "--storage", directory.appending("Storage").path,
                    "--trust-root", sandbox.rootCertificateDERFile.path, "--environment", "Sandbox",
                ],
                environment: environment(directory))
            #expect(result.status == 2, "\(catalog.lastPathComponent): \(result.stderr)")
            for text in expected { #expect(result.stderr.contains(text), "\(catalog.lastPathComponent): \(result.stderr)") }
            for text in Self.internals { #expect(!result.stderr.contains(text), "\(catalog.lastPathComponent): \(result.stderr)") }
            #expect(result.stderr.split(separator: "\n").allSatisfy { $0.hasPrefix("courier: ") }, "\(result.stderr)")
        }
    }

    @Test("get: a URL without a scheme is http, -i - reads the list from standard input")
    func curlHabits() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let served = directory.appending("www")
        try FileManager.default.createDirectory(at: served, withIntermediateDirectories: true)
        for name in ["a.bin", "b.bin"] {
            try Data(String(repeating: name, count: 500).utf8).write(to: served.appendingPathComponent(name))
        }
        let nginx = try NginxServer(root: served)
        defer { nginx.stop() }
        let config = try TransferFixture.writeConfigFile(in: directory)

        let bare = "127.0.0.1:\(nginx.port)/a.bin"
        let target = directory.appending("bare.bin")
        let get = try CourierBinary.run(["get", bare, "-o", target.path, "--config", config.path], environment: environment(directory))
        #expect(get.status == 0, "\(get.stderr)")
        #expect(try Data(contentsOf: target) == Data(contentsOf: served.appendingPathComponent("a.bin")))

        let out = directory.appending("list")
        let line = "printf '%s\\n%s\\n' '\(nginx.url("/a.bin").absoluteString)' '127.0.0.1:\(nginx.port)/b.bin' | "
            + "COURIER_NO_AGENT=1 '\(CourierBinary.url.path)' get -i - -d '\(out.path)' --config '\(config.path)'"
        let piped = try CourierBinary.runShell(line)
        #expect(piped.status == 0, "\(piped.stderr)")
        for name in ["a.bin", "b.bin"] {
            #expect(try Data(contentsOf: out.appendingPathComponent(name)) == Data(contentsOf: served.appendingPathComponent(name)))
        }
        #expect(!piped.stderr.contains("NSCocoaErrorDomain"))

        // The finished file takes the user's umask, as curl's and wget's do; the part file and
        // the journal were owner-only while it was unfinished.
        for (mask, expected) in [("022", 0o644), ("077", 0o600), ("002", 0o664)] {
            let file = directory.appending("umask-\(mask).bin")
            let run = try CourierBinary.runShell(
                "umask \(mask); COURIER_NO_AGENT=1 '\(CourierBinary.url.path)' get '\(nginx.url("/a.bin").absoluteString)' "
                    + "-o '\(file.path)' --config '\(config.path)'")
            #expect(run.status == 0, "\(run.stderr)")
            var info = stat()
            #expect(stat(file.path, &info) == 0)
            #expect(Int(info.st_mode & 0o777) == expected, "umask \(mask): \(String(info.st_mode & 0o777, radix: 8))")
        }

        // A cause the message already says is not said twice: not "answered HTTP 404 (HTTP 404)".
        let missing = try CourierBinary.run(
            ["get", nginx.url("/missing.bin").absoluteString, "-o", directory.appending("missing.bin").path, "--config", config.path],
            environment: environment(directory))
        #expect(missing.status == 8)
        #expect(missing.stderr.contains("answered HTTP 404"), "\(missing.stderr)")
        #expect(!missing.stderr.contains("(HTTP 404)"), "\(missing.stderr)")
    }

    @Test("a space refusal before any length is known names the reserve, not '0 B + reserve'")
    func reserveOnlyShortage() {
        let before = CourierError.notEnoughSpace(
            at: "/data", bytes: 0, reserve: 64 << 20, reserveSetting: "transfer.diskReserve", available: 20 << 20)
        #expect(before.message == "not enough disk space at /data: the 64 MiB reserve (transfer.diskReserve) must stay free, 20 MiB free")
        #expect(before.hint == "free 44 MiB there, or lower transfer.diskReserve; then resume")
        let known = CourierError.notEnoughSpace(
            at: "/data", bytes: 3 << 20, reserve: 64 << 20, reserveSetting: "transfer.diskReserve", available: 20 << 20)
        #expect(known.message.contains("3 MiB + 64 MiB reserve (transfer.diskReserve) needed"))
        let none = CourierError.notEnoughSpace(at: "/data", bytes: 3 << 20, reserve: 0, reserveSetting: "transfer.diskReserve", available: 1 << 20)
        #expect(none.hint == "free 2 MiB there; then resume", "no advice to lower a reserve that is 0")
    }

    @Test("sandbox purchase takes --purchase-date -60d as written")
    func negativeDateOffset() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let storage = directory.appending("Storage")
        let initialized = try CourierBinary.run(["sandbox", "init", "--storage", storage.path], environment: environment(directory))
        #expect(initialized.status == 0, "\(initialized.stderr)")
        for arguments in [["--purchase-date", "-60d"], ["--purchase-date=-60d"], ["--revoked", "-1h"]] {
            let result = try CourierBinary.run(
                ["sandbox", "purchase", "com.example.levels", "--storage", storage.path] + arguments, environment: environment(directory))
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            #expect(result.stdout.split(separator: ".").count == 3, "a JWS: \(result.stdout)")
        }
    }
}
