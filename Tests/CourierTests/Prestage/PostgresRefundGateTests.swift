import Courier
import CourierTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Two `courier serve` gates with separate storage roots (two machines) and `--state
/// postgresql://…`: a refund POSTed to one is refused by the other.
@Suite("courier serve --state postgresql://", .serialized)
struct PostgresRefundGateTests {
    static let product = "com.example.levels.pack1"

    /// Starts `courier serve --json --port 0 ARGS`; returns it and its port once it listens.
    static func startServe(_ arguments: [String], scratch: TemporaryDirectory, name: String) throws -> (Process, Int) {
        let stdout = scratch.appending("\(name).out")
        let process = try CourierBinary.start(
            ["serve", "--json", "--port", "0"] + arguments, stdout: stdout, stderr: scratch.appending("\(name).err"))
        var port: Int?
        waitUntil(timeout: 60) {
            port = events(in: stdout).first { $0["event"] as? String == "listening" }?["port"] as? Int
            return port != nil || !process.isRunning
        }
        guard let port else {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            let errors = (try? String(contentsOf: scratch.appending("\(name).err"), encoding: .utf8)) ?? ""
            throw CourierError(.internal, "courier serve did not report a port", cause: errors)
        }
        return (process, port)
    }

    @Test(
        "a refund recorded by one gate is refused by another gate on another storage root, at once; a restored copy's refuses the original",
        arguments: [false, true])
    func refundReachesEveryGate(ofARestoredCopy: Bool) throws {
        #expect(PostgresServer.isAvailable, "\(PostgresServer.unavailableReason)")
        let server = try PostgresServer()
        defer { server.stop() }
        let scratch = try TemporaryDirectory(prefix: "courier-gates")
        defer { scratch.remove() }
        // The content folder `courier prestage` would publish: one package and the catalog.
        let content = scratch.appending("content")
        let path = "packages/\(Self.product)/\(String(repeating: "ab", count: 32)).zip"
        try FileManager.default.createDirectory(
            at: content.appendingPathComponent(path).deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(repeating: 7, count: 10_000).write(to: content.appendingPathComponent(path))
        let catalog = Catalog(
            bundleId: "com.example.app",
            products: [
                Catalog.Product(
                    productId: Self.product,
                    content: Catalog.Content(
                        url: path, sha256: String(repeating: "ab", count: 32), length: 10_000, version: "1.0", placement: .documents))
            ])
        try catalog.encoded().write(to: content.appendingPathComponent("catalog.json"))
        let chain = try TestSigningChain()
        let root = scratch.appending("root.pem")
        try chain.writeRoot(to: root)

        var gates: [(Process, Int)] = []
        defer { for (process, _) in gates where process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        // The first gate is given the database with --state, the second by its configuration
        // file (serve.state).
        let configuration = scratch.appending("courier.json")
        try JSONSerialization.data(withJSONObject: ["serve": ["state": server.url]]).write(to: configuration)
        for index in 0..<2 {
            gates.append(
                try Self.startServe(
                    [
                        "--content", content.path, "--trust-root", root.path, "--bundle-id", "com.example.app",
                        "--environment", "Sandbox", "--storage", scratch.appending("storage\(index)").path,
                    ] + (index == 0 ? ["--state", server.url] : ["--config", configuration.path]), scratch: scratch, name: "gate\(index)"))
        }
        let transaction = "3000000000000042"
        // The refund names the purchase itself, or a restored copy of it (another device's).
        let refunded = ofARestoredCopy ? "3000000000000043" : transaction
        let token = try chain.token(TestSigningChain.payload(productId: Self.product, transactionId: transaction, environment: "Sandbox"))
        func ask(_ gate: Int) throws -> String {
            try Shell.run(
                "/usr/bin/curl",
                ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer \(token)",
                 "http://127.0.0.1:\(gates[gate].1)/\(path)"]
            ).stdout
        }
        #expect(try ask(0) == "200")
        #expect(try ask(1) == "200")

        let signed = Date().addingTimeInterval(-30)
        let info = try chain.token(
            TestSigningChain.payload(
                productId: Self.product, transactionId: refunded, originalTransactionId: transaction,
                revocationDate: signed.addingTimeInterval(-5), environment: "Sandbox", signedDate: signed))
        let payload: [String: Any] = [
            "notificationType": "REFUND", "notificationUUID": UUID().uuidString.lowercased(), "version": "2.0",
            "signedDate": Int64(signed.timeIntervalSince1970 * 1000),
            "data": [
                "appAppleId": 1_234_567_890, "bundleId": "com.example.app", "bundleVersion": "1", "environment": "Sandbox",
                "signedTransactionInfo": info,
            ] as [String: Any],
        ]
        let body = scratch.appending("refund.json")
        try JSONSerialization.data(withJSONObject: ["signedPayload": try chain.token(payload)]).write(to: body)
        let posted = try Shell.run(
            "/usr/bin/curl",
            ["-s", "-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@\(body.path)",
             "http://127.0.0.1:\(gates[0].1)/notifications"])
        #expect(posted.stdout.contains("\"revoked\""), "\(posted.stdout)")
        #expect(try ask(0) == "403")
        // The other gate learns it through PostgreSQL's NOTIFY, within moments.
        var answer = ""
        #expect(waitUntil(timeout: 30) { answer = (try? ask(1)) ?? ""; return answer == "403" }, "gate 1 answered \(answer)")
        #expect(
            try server.psql("SELECT transaction_id || ' ' || original_transaction_id || ' ' || revoked FROM origin_transaction_status")
                == "\(refunded) \(transaction) true")
        // Nothing went to the gates' own SQLite files.
        for index in 0..<2 {
            #expect(!FileManager.default.fileExists(atPath: scratch.appending("storage\(index)/origin.sqlite").path))
        }
    }

    @Test("a --state that is not a PostgreSQL URL is refused: exit 2, the password not printed")
    func badStateIsRefused() throws {
        let scratch = try TemporaryDirectory(prefix: "courier-gates")
        defer { scratch.remove() }
        let chain = try TestSigningChain()
        let root = scratch.appending("root.pem")
        try chain.writeRoot(to: root)
        let result = try CourierBinary.run([
            "serve", "--content", scratch.path, "--port", "0", "--trust-root", root.path, "--state", "postgresql://u:hunter22@db:99999/x",
        ])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("port") && !result.stderr.contains("hunter22"), "\(result.stderr)")
    }

    @Test("serve.state in the configuration is read as --state is; the flag wins over it")
    func stateFromConfiguration() throws {
        let scratch = try TemporaryDirectory(prefix: "courier-gates")
        defer { scratch.remove() }
        let chain = try TestSigningChain()
        let root = scratch.appending("root.pem")
        try chain.writeRoot(to: root)
        let configuration = scratch.appending("courier.json")
        try JSONSerialization.data(withJSONObject: ["serve": ["state": "postgresql://u:hunter22@db:99999/x"]]).write(to: configuration)
        let serve = ["serve", "--content", scratch.path, "--port", "0", "--trust-root", root.path, "--config", configuration.path]
        let result = try CourierBinary.run(serve)
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("port") && !result.stderr.contains("hunter22"), "\(result.stderr)")
        // A configured URL is overridden by the flag's (here one that is not PostgreSQL's).
        try JSONSerialization.data(withJSONObject: ["serve": ["state": "postgresql://courier@127.0.0.1:1/x"]]).write(to: configuration)
        let flagged = try CourierBinary.run(serve + ["--state", "mysql://courier@127.0.0.1/x"])
        #expect(flagged.status == 2, "\(flagged.stderr)")
        #expect(flagged.stderr.contains("mysql"), "\(flagged.stderr)")
    }
}
