import Courier
import CourierTestSupport
import Foundation
import Testing

@Suite("courier receipt / courier sandbox, run as a user would")
struct ReceiptCLITests {
    /// A folder with a sandbox store in `Sandbox/`; the commands run inside it.
    struct Workspace {
        let folder: TemporaryDirectory
        var sandbox: URL { folder.appending("Sandbox") }
        var root: String { sandbox.appendingPathComponent("root.pem").path }

        init() throws {
            folder = try TemporaryDirectory()
            let result = try run(["sandbox", "init", "--dir", folder.appending("Sandbox").path, "--json"])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(
                result.events.first?["trustRoot"] as? String
                    == folder.appending("Sandbox").appendingPathComponent("root.pem").path
            )
        }

        func run(_ arguments: [String]) throws -> CourierBinary.Result {
            try CourierBinary.run(arguments + ["--storage", folder.appending("Storage").path], directory: folder.url)
        }

        func write(_ text: String, _ name: String) throws -> String {
            let url = folder.appending(name)
            try Data(text.utf8).write(to: url)
            return url.path
        }

        func purchase(_ arguments: [String]) throws -> String {
            let result = try run(["sandbox", "purchase"] + arguments + ["--dir", sandbox.path])
            #expect(result.status == 0, "\(result.stderr)")
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    @Test("sandbox purchase → receipt verify: exit 0 and the transaction's fields")
    func verifiesSandboxPurchase() throws {
        let workspace = try Workspace()
        defer { workspace.folder.remove() }
        let token = try workspace.purchase(["com.example.levels.pack1", "--transaction-id", "2000000000000042"])
        let file = try workspace.write(token + "\n", "purchase.jws")

        let text = try workspace.run(["receipt", "verify", file, "--trust-root", workspace.root, "--environment", "Sandbox"])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdout.contains("com.example.levels.pack1"))
        #expect(text.stdout.contains("2000000000000042"))
        #expect(text.stdout.contains("Non-Consumable"))

        let json = try workspace.run([
            "receipt", "verify", file, "--trust-root", workspace.root, "--environment", "sandbox", "--json",
        ])
        #expect(json.status == 0)
        let transactions = json.events.first?["transactions"] as? [[String: Any]]
        #expect(transactions?.count == 1)
        #expect(transactions?.first?["productId"] as? String == "com.example.levels.pack1")
        #expect(transactions?.first?["transactionId"] as? String == "2000000000000042")
        #expect(transactions?.first?["originalTransactionId"] as? String == "2000000000000042")
        #expect(transactions?.first?["environment"] as? String == "Sandbox")
        #expect(transactions?.first?["type"] as? String == "Non-Consumable")
        #expect(transactions?.first?["purchaseDate"] is String)

        // Sandbox purchases are free: accepted only when asked for (flag or configuration).
        let byDefault = try workspace.run(["receipt", "verify", file, "--trust-root", workspace.root, "--json"])
        #expect(byDefault.status == 3)
        #expect(byDefault.events.first?["check"] as? String == "environment")
        #expect((byDefault.events.first?["hint"] as? String)?.contains("--environment Sandbox") == true)
        let config = try workspace.write(#"{"receipts": {"environments": ["Production", "Sandbox"]}}"#, "courier.json")
        let configured = try workspace.run([
            "receipt", "verify", file, "--trust-root", workspace.root, "--config", config,
        ])
        #expect(configured.status == 0, "\(configured.stderr)")
    }

    @Test("refusals exit 3 and name the failing check")
    func refusals() throws {
        let workspace = try Workspace()
        defer { workspace.folder.remove() }
        let token = try workspace.purchase(["com.example.levels.pack1"])
        var parts = token.split(separator: ".").map(String.init)
        let payloadBytes = try #require(Base64URL.decode(parts[1]))
        var payload = try #require(try JSONSerialization.jsonObject(with: payloadBytes) as? [String: Any])
        payload["productId"] = "com.example.levels.everything"
        parts[1] = TestSigningChain.base64url(try JSONSerialization.data(withJSONObject: payload))
        let tampered = try workspace.write(parts.joined(separator: "."), "tampered.jws")
        let signature = try workspace.run(["receipt", "verify", tampered, "--trust-root", workspace.root])
        #expect(signature.status == 3)
        #expect(signature.stderr.contains("signature check failed"))

        let genuine = try workspace.write(token, "genuine.jws")
        let bundle = try workspace.run([
            "receipt", "verify", genuine, "--trust-root", workspace.root, "--bundle-id", "com.other.app",
        ])
        #expect(bundle.status == 3)
        #expect(bundle.stderr.contains("bundle check failed"))

        let environment = try workspace.run([
            "receipt", "verify", genuine, "--trust-root", workspace.root, "--environment", "Production", "--json",
        ])
        #expect(environment.status == 3)
        #expect(environment.events.first?["check"] as? String == "environment")
        #expect(environment.events.first?["code"] as? String == "receiptInvalid")

        let untrusted = try TestSigningChain()
        let otherRoot = workspace.folder.appending("other-root.der")
        try untrusted.writeRoot(to: otherRoot, pem: false)
        let chain = try workspace.run(["receipt", "verify", genuine, "--trust-root", otherRoot.path])
        #expect(chain.status == 3)
        #expect(chain.stderr.contains("chain check failed"))

        let revoked = try workspace.write(
            try workspace.purchase(["com.example.levels.pack1", "--revoked=-1h"]),
            "revoked.jws"
        )
        let revokedRun = try workspace.run([
            "receipt", "verify", revoked, "--trust-root", workspace.root, "--environment", "Sandbox",
        ])
        #expect(revokedRun.status == 3)
        #expect(revokedRun.stderr.contains("revoked check failed"))

        let huge = workspace.folder.appending("huge.receipt")
        try Data(repeating: UInt8(ascii: "A"), count: 10 << 20).write(to: huge)
        let tooLarge = try workspace.run(["receipt", "verify", huge.path, "--trust-root", workspace.root])
        #expect(tooLarge.status == 3)
        #expect(tooLarge.stderr.contains("format check failed"))

        let garbage = try workspace.write("this is not a receipt.at.all", "garbage.jws")
        let format = try workspace.run(["receipt", "verify", garbage, "--trust-root", workspace.root])
        #expect(format.status == 3)
        #expect(format.stderr.contains("format check failed"))
    }

    @Test("tokens from an independent generator verify through the CLI")
    func independentTokens() throws {
        let workspace = try Workspace()
        defer { workspace.folder.remove() }
        let chain = try TestSigningChain()
        let root = workspace.folder.appending("test-root.der")
        try chain.writeRoot(to: root, pem: false)
        let lines = [
            try chain.token(TestSigningChain.payload(productId: "a", transactionId: "1")),
            try chain.token(TestSigningChain.payload(productId: "b", transactionId: "2", environment: "Production")),
        ]
        let file = try workspace.write(lines.joined(separator: "\n"), "two.jws")
        let result = try workspace.run([
            "receipt", "verify", file, "--trust-root", root.path, "--environment", "Sandbox", "--environment",
            "Production", "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let products = (result.events.first?["transactions"] as? [[String: Any]])?.compactMap {
            $0["productId"] as? String
        }
        #expect(products == ["a", "b"])

        var noOID = TestSigningChain.Options()
        noOID.leafHasOID = false
        let bad = try TestSigningChain(noOID)
        try bad.writeRoot(to: root, pem: false)
        let badFile = try workspace.write(try bad.token(TestSigningChain.payload()), "bad.jws")
        let refused = try workspace.run(["receipt", "verify", badFile, "--trust-root", root.path])
        #expect(refused.status == 3)
        #expect(refused.stderr.contains("OID check failed"))
    }

    /// Tokens are verified side by side and reported in file order. The release build of
    /// 8411a71 trapped here (SIGILL, exit 132): every child task answered index 0
    /// (Tests/Toolchain/TupleAcrossSuspension.swift).
    @Test("several tokens in one file: each verified, in file order; a bad one named by its place")
    func severalTokensInOrder() throws {
        let workspace = try Workspace()
        defer { workspace.folder.remove() }
        let chain = try TestSigningChain()
        let root = workspace.folder.appending("test-root.der")
        try chain.writeRoot(to: root, pem: false)
        let ids = (1...7).map { "30000000000000\($0)" }
        var tokens = try ids.enumerated().map { index, id in
            try chain.token(TestSigningChain.payload(productId: "p\(index + 1)", transactionId: id))
        }
        let file = try workspace.write(tokens.joined(separator: "\n"), "seven.jws")
        let result = try workspace.run(["receipt", "verify", file, "--trust-root", root.path, "--environment", "Sandbox", "--json"])
        #expect(result.status == 0, "exit \(result.status): \(result.stderr)")
        let transactions = result.events.first?["transactions"] as? [[String: Any]]
        #expect(transactions?.compactMap { $0["transactionId"] as? String } == ids)
        #expect(transactions?.compactMap { $0["productId"] as? String } == (1...7).map { "p\($0)" })

        // The fifth token's signature is broken: the error names it, not the first.
        var parts = tokens[4].split(separator: ".").map(String.init)
        parts[2] = String(parts[2].reversed())
        tokens[4] = parts.joined(separator: ".")
        let broken = try workspace.write(tokens.joined(separator: "\n"), "broken.jws")
        let refused = try workspace.run(["receipt", "verify", broken, "--trust-root", root.path, "--environment", "Sandbox"])
        #expect(refused.status == 3, "exit \(refused.status): \(refused.stderr)")
        #expect(refused.stderr.contains("transaction 5 of 7"), "\(refused.stderr)")
    }

    @Test("receipt entitlements lists the content a purchase unlocks, exit 3 when none")
    func entitlements() throws {
        let workspace = try Workspace()
        defer { workspace.folder.remove() }
        let catalog = """
            { "bundleId": "com.example.app",
              "products": [
                { "productId": "com.example.levels.pack1",
                  "content": { "url": "pack1.zip", "sha256": "\(String(repeating: "a", count: 64))", "length": 10, "version": "1.0", "placement": "documents" } },
                { "productId": "com.example.magazine", "type": "autoRenewable",
                  "items": [
                    { "itemId": "2026-01", "publishedAt": "2026-01-01", "content": { "url": "jan.zip", "sha256": "00", "length": 1, "version": "1", "placement": "cache" } },
                    { "itemId": "2026-02", "publishedAt": "2026-02-01", "content": { "url": "feb.zip", "sha256": "00", "length": 1, "version": "1", "placement": "cache" } },
                    { "itemId": "2026-03", "publishedAt": "2026-03-01", "content": { "url": "mar.zip", "sha256": "00", "length": 1, "version": "1", "placement": "cache" } } ] } ] }
            """
        let catalogFile = try workspace.write(catalog, "catalog.json")
        let pack = try workspace.write(try workspace.purchase(["com.example.levels.pack1"]), "pack.jws")
        let magazine = try workspace.write(
            try workspace.purchase([
                "com.example.magazine", "--type", "auto-renewable", "--purchase-date", "2026-02-20", "--expires",
                "2026-03-20",
            ]),
            "magazine.jws"
        )
        let result = try workspace.run([
            "receipt", "entitlements", pack, magazine, "--catalog", catalogFile, "--trust-root", workspace.root,
            "--environment", "Sandbox", "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let content = result.events.first?["content"] as? [[String: Any]] ?? []
        #expect(
            content.compactMap { $0["contentIdentifier"] as? String }
                == ["com.example.levels.pack1", "com.example.magazine.2026-02", "com.example.magazine.2026-03"]
        )
        #expect((content.first?["url"] as? String)?.hasSuffix("/pack1.zip") == true)

        let nothing = try workspace.write(try workspace.purchase(["com.example.unknown"]), "nothing.jws")
        let none = try workspace.run([
            "receipt", "entitlements", nothing, "--catalog", catalogFile, "--trust-root", workspace.root,
            "--environment", "Sandbox",
        ])
        #expect(none.status == 3)
    }

    @Test("a legacy receipt goes to the configured verifyReceipt service over libcurl")
    func legacyReceipt() throws {
        let workspace = try Workspace()
        defer { workspace.folder.remove() }
        let stub = try VerifyReceiptStub { service, _ in
            service == "production"
                ? VerifyReceiptStub.status(21007)
                : VerifyReceiptStub.valid(inApp: [
                    VerifyReceiptStub.inApp(
                        productId: "com.example.levels.pack1",
                        transactionId: "1000000077",
                        purchaseDate: Date()
                    )
                ])
        }
        defer { stub.stop() }
        let config = try workspace.write(
            """
            { "receipts": { "verifyReceipt": { "productionURL": "\(stub.productionURL.absoluteString)",
                                               "sandboxURL": "\(stub.sandboxURL.absoluteString)",
                                               "sharedSecret": "s3cr3t-value", "retryDelay": 0.01 } } }
            """,
            "courier.json"
        )
        // The outer shape of an App Store receipt: PKCS#7 signedData in BER, as Apple writes it.
        let pkcs7: [UInt8] = [
            0x30, 0x80, 0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02, 0xA0, 0x80, 0x30, 0x80, 0x02, 0x01, 0x01,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ]
        let receipt = try workspace.write(Data(pkcs7).base64EncodedString(), "legacy.receipt")
        let result = try workspace.run([
            "receipt", "verify", receipt, "--config", config, "--environment", "Sandbox", "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let transactions = result.events.first?["transactions"] as? [[String: Any]]
        #expect(transactions?.first?["transactionId"] as? String == "1000000077")
        #expect(stub.calls.map(\.service) == ["production", "sandbox"])
        #expect(stub.calls.first?.password == "s3cr3t-value")
        #expect(!result.stdout.contains("s3cr3t-value") && !result.stderr.contains("s3cr3t-value"))

        let refusing = try VerifyReceiptStub { _, _ in VerifyReceiptStub.status(21010) }
        defer { refusing.stop() }
        let refusingConfig = try workspace.write(
            #"{ "receipts": { "verifyReceipt": { "productionURL": "\#(refusing.productionURL.absoluteString)" } } }"#,
            "refusing.json"
        )
        let refused = try workspace.run(["receipt", "verify", receipt, "--config", refusingConfig])
        #expect(refused.status == 3)
        #expect(refused.stderr.contains("status check failed"))

        // Base64 that is not a PKCS#7 receipt (a picture, text, a PKCS#7 of another type) is
        // refused here with the format check, and never sent to Apple.
        let before = stub.calls.count
        let data: [UInt8] = [0x30, 0x0B, 0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01]
        for (name, bytes) in [("text", Array("legacy receipt bytes".utf8)), ("png", [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]), ("data", data)] {
            let junk = try workspace.write(Data(bytes).base64EncodedString(), "\(name).receipt")
            let plain = try workspace.run(["receipt", "verify", junk, "--config", config])
            #expect(plain.status == 3, "\(name): \(plain.stderr)")
            #expect(plain.stderr.hasPrefix("courier: format check failed: the receipt is base64 but not a PKCS#7"), "\(name): \(plain.stderr)")
            let json = try workspace.run(["receipt", "verify", junk, "--config", config, "--json"])
            #expect(json.status == 3)
            #expect(json.events.last?["event"] as? String == "error" && json.events.last?["check"] as? String == "format", "\(json.stdout)")
        }
        #expect(stub.calls.count == before, "a receipt that is not PKCS#7 went to verifyReceipt")
    }

    @Test("sandbox init keeps an existing chain; purchase without a store says how to make one")
    func sandboxLifecycle() throws {
        let workspace = try Workspace()
        defer { workspace.folder.remove() }
        let before = try Data(contentsOf: workspace.sandbox.appendingPathComponent("root.der"))
        let again = try workspace.run(["sandbox", "init", "--dir", workspace.sandbox.path])
        #expect(again.status == 0)
        #expect(again.stdout.contains("kept"))
        #expect(again.stdout.contains("--environment Sandbox"))
        #expect(try Data(contentsOf: workspace.sandbox.appendingPathComponent("root.der")) == before)

        let missing = try workspace.run([
            "sandbox", "purchase", "p", "--dir", workspace.folder.appending("nowhere").path,
        ])
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("sandbox init"))

        let usage = try workspace.run(["sandbox", "purchase", "p", "--type", "gift", "--dir", workspace.sandbox.path])
        #expect(usage.status == 64 || usage.status == 2)
    }
}
