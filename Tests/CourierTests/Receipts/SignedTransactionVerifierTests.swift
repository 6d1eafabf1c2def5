import Courier
import CourierTestSupport
import Crypto
import Foundation
import Logging
import Testing
import X509

@Suite("Signed transactions: every check")
struct SignedTransactionVerifierTests {
    @Test("a valid token verifies and yields the App Store fields")
    func valid() async throws {
        let chain = try TestSigningChain()
        let purchased = Date(timeIntervalSince1970: 1_780_000_000.123)
        let token = try chain.token(
            TestSigningChain.payload(
                productId: "com.example.magazine",
                transactionId: "2000000999",
                originalTransactionId: "2000000111",
                type: "Auto-Renewable Subscription",
                purchaseDate: purchased,
                expiresDate: purchased.addingTimeInterval(30 * 86_400),
                environment: "Production"
            )
        )
        let transaction = try await makeVerifier(trusting: [chain]).verify(token)
        #expect(transaction.productId == "com.example.magazine")
        #expect(transaction.transactionId == "2000000999")
        #expect(transaction.originalTransactionId == "2000000111")
        #expect(transaction.type == .autoRenewable)
        #expect(transaction.environment == "Production")
        #expect(transaction.bundleId == "com.example.app")
        #expect(abs(transaction.purchaseDate.timeIntervalSince(purchased)) < 0.002)
        #expect(abs((transaction.expiresDate ?? .distantPast).timeIntervalSince(purchased) - 30 * 86_400) < 0.002)
        #expect(transaction.revocationDate == nil)
    }

    @Test("every App Store type name maps to its product type")
    func typeNames() async throws {
        let chain = try TestSigningChain()
        let verifier = makeVerifier(trusting: [chain])
        let cases: [(String, Catalog.ProductType)] = [
            ("Non-Consumable", .nonConsumable), ("Consumable", .consumable),
            ("Non-Renewing Subscription", .nonRenewable), ("Auto-Renewable Subscription", .autoRenewable),
        ]
        for (name, type) in cases {
            let transaction = try await verifier.verify(try chain.token(TestSigningChain.payload(type: name)))
            #expect(transaction.type == type)
        }
        let unknown = try chain.token(TestSigningChain.payload(type: "Gift Card"))
        #expect(await rejectedCheck(unknown, by: verifier) == .format)
    }

    @Test("a tampered payload fails the signature check")
    func tamperedPayload() async throws {
        let chain = try TestSigningChain()
        let token = try chain.token(TestSigningChain.payload(productId: "com.example.cheap"))
        var parts = token.split(separator: ".").map(String.init)
        let forged = TestSigningChain.payload(productId: "com.example.expensive")
        parts[1] = TestSigningChain.base64url(try JSONSerialization.data(withJSONObject: forged))
        #expect(await rejectedCheck(parts.joined(separator: "."), by: makeVerifier(trusting: [chain])) == .signature)
    }

    @Test("a tampered header fails the signature check")
    func tamperedHeader() async throws {
        let chain = try TestSigningChain()
        let token = try chain.token(TestSigningChain.payload())
        var parts = token.split(separator: ".").map(String.init)
        let headerBytes = try #require(Base64URL.decode(parts[0]))
        let header = try #require(try JSONSerialization.jsonObject(with: headerBytes) as? [String: Any])
        var changed = header
        changed["kid"] = "attacker"
        parts[0] = TestSigningChain.base64url(try JSONSerialization.data(withJSONObject: changed))
        #expect(await rejectedCheck(parts.joined(separator: "."), by: makeVerifier(trusting: [chain])) == .signature)
    }

    @Test("a signature by another key fails the signature check")
    func otherKey() async throws {
        let chain = try TestSigningChain()
        let token = try chain.token(TestSigningChain.payload(), key: P256.Signing.PrivateKey())
        #expect(await rejectedCheck(token, by: makeVerifier(trusting: [chain])) == .signature)
    }

    @Test("a signature that is not 64 bytes of r‖s fails the signature check")
    func derSignature() async throws {
        let chain = try TestSigningChain()
        let token = try chain.token(TestSigningChain.payload())
        var parts = token.split(separator: ".").map(String.init)
        let input = Data((parts[0] + "." + parts[1]).utf8)
        parts[2] = TestSigningChain.base64url(try chain.leafKey.signature(for: input).derRepresentation)
        #expect(await rejectedCheck(parts.joined(separator: "."), by: makeVerifier(trusting: [chain])) == .signature)
    }

    @Test("a chain under an untrusted root fails the chain check")
    func untrustedRoot() async throws {
        let trusted = try TestSigningChain()
        let attacker = try TestSigningChain()
        let token = try attacker.token(TestSigningChain.payload())
        #expect(await rejectedCheck(token, by: makeVerifier(trusting: [trusted])) == .chain)
    }

    @Test("a root inside the token is never trusted by itself")
    func rootInTokenNotTrusted() async throws {
        let trusted = try TestSigningChain()
        let attacker = try TestSigningChain()  // same root name, another key
        // The attacker's whole chain, its root in third place: the chain leads to no trusted root.
        #expect(
            await rejectedCheck(try attacker.token(TestSigningChain.payload()), by: makeVerifier(trusting: [trusted]))
                == .chain
        )
        // The attacker's intermediate (under its own root) with the trusted root in third place.
        let mixed = try attacker.token(
            TestSigningChain.payload(),
            chain: [attacker.leaf, attacker.intermediate, trusted.root]
        )
        #expect(await rejectedCheck(mixed, by: makeVerifier(trusting: [trusted])) == .chain)
        // No trusted roots at all.
        #expect(
            await rejectedCheck(try trusted.token(TestSigningChain.payload()), by: makeVerifier(trusting: [])) == .chain
        )
    }

    @Test("x5c[2] is not read, as Apple's verifiers: a reissued root, another root or garbage in third place")
    func thirdCertificateNotRead() async throws {
        let trusted = try TestSigningChain()
        let other = try TestSigningChain()
        let verifier = makeVerifier(trusting: [trusted])
        // Apple's own test tokens carry a reissue of the test root (same name and key).
        let reissued = try trusted.token(
            TestSigningChain.payload(transactionId: "1"),
            chain: [trusted.leaf, trusted.intermediate, try trusted.reissuedRoot()]
        )
        #expect(try await verifier.verify(reissued).transactionId == "1")
        let otherRoot = try trusted.token(
            TestSigningChain.payload(transactionId: "2"),
            chain: [trusted.leaf, trusted.intermediate, other.root]
        )
        #expect(try await verifier.verify(otherRoot).transactionId == "2")
        let leafAndIntermediate = try [trusted.leaf, trusted.intermediate].map {
            try TestSigningChain.der($0).base64EncodedString()
        }
        let garbage = try trusted.token(TestSigningChain.payload(transactionId: "3"), x5c: leafAndIntermediate + ["%%"])
        #expect(try await verifier.verify(garbage).transactionId == "3")
        // Still three entries, and leaf and intermediate must be certificates.
        let twoEntries = try trusted.token(TestSigningChain.payload(), x5c: leafAndIntermediate)
        #expect(await rejectedCheck(twoEntries, by: verifier) == .chain)
        let badIntermediate = try trusted.token(
            TestSigningChain.payload(), x5c: [leafAndIntermediate[0], "AAAA", leafAndIntermediate[1]])
        #expect(await rejectedCheck(badIntermediate, by: verifier) == .certificate)
    }

    @Test("a leaf without the receipt-signing OID fails the OID check")
    func leafWithoutOID() async throws {
        var options = TestSigningChain.Options()
        options.leafHasOID = false
        let chain = try TestSigningChain(options)
        #expect(
            await rejectedCheck(try chain.token(TestSigningChain.payload()), by: makeVerifier(trusting: [chain]))
                == .oid
        )
    }

    @Test("an intermediate without the WWDR OID fails the OID check")
    func intermediateWithoutOID() async throws {
        var options = TestSigningChain.Options()
        options.intermediateHasOID = false
        let chain = try TestSigningChain(options)
        #expect(
            await rejectedCheck(try chain.token(TestSigningChain.payload()), by: makeVerifier(trusting: [chain]))
                == .oid
        )
    }

    @Test("a two-certificate chain fails the chain check")
    func twoCertificates() async throws {
        let chain = try TestSigningChain()
        let verifier = makeVerifier(trusting: [chain])
        let withoutRoot = try chain.token(TestSigningChain.payload(), chain: [chain.leaf, chain.intermediate])
        #expect(await rejectedCheck(withoutRoot, by: verifier) == .chain)
        let four = try chain.token(
            TestSigningChain.payload(),
            chain: [chain.leaf, chain.intermediate, chain.root, chain.root]
        )
        #expect(await rejectedCheck(four, by: verifier) == .chain)
    }

    @Test("alg none and HS256 fail the format check")
    func algorithms() async throws {
        let chain = try TestSigningChain()
        let verifier = makeVerifier(trusting: [chain])
        #expect(await rejectedCheck(try chain.noneToken(TestSigningChain.payload()), by: verifier) == .format)
        let hs256 = try chain.hs256Token(TestSigningChain.payload(), secret: Data("secret".utf8))
        #expect(await rejectedCheck(hs256, by: verifier) == .format)
        let es384 = try chain.token(TestSigningChain.payload(), alg: "ES384")
        #expect(await rejectedCheck(es384, by: verifier) == .format)
    }

    @Test("a leaf expired at signedDate is refused; expired now but valid then is accepted")
    func leafExpiry() async throws {
        var options = TestSigningChain.Options()
        options.leafNotBefore = Date().addingTimeInterval(-30 * 86_400)
        options.leafNotAfter = Date().addingTimeInterval(-10 * 86_400)
        let chain = try TestSigningChain(options)
        let verifier = makeVerifier(trusting: [chain])
        let signedAfterExpiry = try chain.token(
            TestSigningChain.payload(
                purchaseDate: Date().addingTimeInterval(-6 * 86_400),
                signedDate: Date().addingTimeInterval(-5 * 86_400)
            )
        )
        #expect(await rejectedCheck(signedAfterExpiry, by: verifier) == .certificate)
        let signedWhileValid = try chain.token(
            TestSigningChain.payload(
                purchaseDate: Date().addingTimeInterval(-21 * 86_400),
                signedDate: Date().addingTimeInterval(-20 * 86_400)
            )
        )
        let transaction = try await verifier.verify(signedWhileValid)
        #expect(transaction.productId == "com.example.levels.pack1")
        let signedBeforeLeaf = try chain.token(
            TestSigningChain.payload(signedDate: Date().addingTimeInterval(-40 * 86_400))
        )
        #expect(await rejectedCheck(signedBeforeLeaf, by: verifier) == .certificate)
    }

    @Test("another bundle fails the bundle check")
    func wrongBundle() async throws {
        let chain = try TestSigningChain()
        let token = try chain.token(TestSigningChain.payload(bundleId: "com.other.app"))
        #expect(await rejectedCheck(token, by: makeVerifier(trusting: [chain])) == .bundle)
    }

    @Test("an environment outside the allowed set fails the environment check")
    func wrongEnvironment() async throws {
        let chain = try TestSigningChain()
        let token = try chain.token(TestSigningChain.payload(environment: "Sandbox"))
        #expect(
            await rejectedCheck(token, by: makeVerifier(trusting: [chain], environments: ["Production"]))
                == .environment
        )
        let xcode = try chain.token(TestSigningChain.payload(environment: "Xcode"))
        #expect(await rejectedCheck(xcode, by: makeVerifier(trusting: [chain])) == .environment)
    }

    @Test("a revoked transaction fails the revoked check")
    func revoked() async throws {
        let chain = try TestSigningChain()
        let token = try chain.token(TestSigningChain.payload(revocationDate: Date().addingTimeInterval(-120)))
        #expect(await rejectedCheck(token, by: makeVerifier(trusting: [chain])) == .revoked)
    }

    @Test("a signedDate in the future beyond the clock skew fails the future-dated check")
    func futureDated() async throws {
        let chain = try TestSigningChain()
        let verifier = makeVerifier(trusting: [chain])
        let now = Date()
        let future = try chain.token(TestSigningChain.payload(signedDate: now.addingTimeInterval(3600)))
        #expect(await rejectedCheck(future, by: verifier, now: now) == .futureDated)
        let withinSkew = try chain.token(TestSigningChain.payload(signedDate: now.addingTimeInterval(120)))
        #expect(await rejectedCheck(withinSkew, by: verifier, now: now) == nil)
    }

    @Test("garbage fails the format check")
    func garbage() async throws {
        let chain = try TestSigningChain()
        let verifier = makeVerifier(trusting: [chain])
        for token in ["", "hello", "a.b.c", "a.b", "....", "eyJhbGciOiJFUzI1NiJ9.e30.", "%%%.###.!!!"] {
            #expect(await rejectedCheck(token, by: verifier) == .format, "\(token)")
        }
        // A valid token with a payload missing required fields.
        let missing = try chain.token(["transactionId": "1", "productId": "p"])
        #expect(await rejectedCheck(missing, by: verifier) == .format)
        // x5c holding something that is not a certificate.
        var parts = try chain.token(TestSigningChain.payload()).split(separator: ".").map(String.init)
        let header: [String: Any] = ["alg": "ES256", "x5c": ["AAAA", "AAAA", "AAAA"]]
        parts[0] = TestSigningChain.base64url(try JSONSerialization.data(withJSONObject: header))
        #expect(await rejectedCheck(parts.joined(separator: "."), by: verifier) == .certificate)
    }

    @Test("a 10 MB input is refused cleanly by the format check")
    func tenMegabytes() async throws {
        let chain = try TestSigningChain()
        let huge = String(repeating: "A", count: 5 << 20) + "." + String(repeating: "B", count: 5 << 20) + ".C"
        #expect(await rejectedCheck(huge, by: makeVerifier(trusting: [chain])) == .format)

        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let file = folder.appending("huge.receipt")
        try Data(huge.utf8).write(to: file)
        let read = try ReceiptValidator.readReceipt(file)
        #expect(read.count == ReceiptValidator.maximumReceiptBytes + 1)
        let validator = try ReceiptValidator(
            configuration: ReceiptConfiguration(),
            baseDirectory: folder.url,
            transport: try CurlHTTPTransport(),
            logger: .init(label: "test")
        )
        let error = await courierError { _ = try await validator.validate(fileAt: file) }
        #expect(error.flatMap(ReceiptCheck.init(failing:)) == .format)
    }
}

@Suite("ReceiptValidator: files of signed transactions")
struct ReceiptValidatorFileTests {
    func validator(
        _ chain: TestSigningChain,
        folder: TemporaryDirectory,
        environments: Set<String> = ["Sandbox"]
    ) throws -> ReceiptValidator {
        try chain.writeRoot(to: folder.appending("root.pem"))
        return try ReceiptValidator(
            configuration: ReceiptConfiguration(trustRoots: ["root.pem"], environments: environments),
            baseDirectory: folder.url,
            transport: try CurlHTTPTransport(),
            logger: Logger(label: "test")
        )
    }

    @Test("lines, JSON arrays and App Store Server API answers; duplicates once; one refund does not hide the rest")
    func shapes() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let chain = try TestSigningChain()
        let validator = try validator(chain, folder: folder)
        let a = try chain.token(TestSigningChain.payload(productId: "a", transactionId: "1"))
        let b = try chain.token(TestSigningChain.payload(productId: "b", transactionId: "2"))
        let refunded = try chain.token(
            TestSigningChain.payload(productId: "c", transactionId: "3", revocationDate: Date().addingTimeInterval(-60))
        )

        let lines = try await validator.validate(Data("\(a)\r\n\(b)\n\(a)\n".utf8))
        #expect(lines.map(\.transactionId) == ["1", "2"])
        let array = try await validator.validate(try JSONSerialization.data(withJSONObject: [a, b]))
        #expect(array.map(\.productId) == ["a", "b"])
        let answer = try await validator.validate(
            try JSONSerialization.data(withJSONObject: ["signedTransactions": [b], "hasMore": false] as [String: Any])
        )
        #expect(answer.map(\.productId) == ["b"])

        let mixed = try await validator.validate(Data("\(a)\n\(refunded)".utf8))
        #expect(mixed.map(\.transactionId) == ["1", "3"])
        #expect(mixed.last?.revocationDate != nil)
        let onlyRefunded = await courierError { _ = try await validator.validate(Data(refunded.utf8)) }
        #expect(onlyRefunded.flatMap(ReceiptCheck.init(failing:)) == .revoked)

        let tampered = a.dropLast(4) + "AAAA"
        let error = await courierError { _ = try await validator.validate(Data("\(b)\n\(tampered)".utf8)) }
        #expect(error.flatMap(ReceiptCheck.init(failing:)) == .signature)
        #expect(error?.message.contains("transaction 2 of 2") == true)
    }

    @Test("a purchase and its refund in one file: the refund wins in either order")
    func refundNotHiddenByOlderCopy() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let chain = try TestSigningChain()
        let validator = try validator(chain, folder: folder)
        let now = Date()
        let purchase = try chain.token(
            TestSigningChain.payload(productId: "a", transactionId: "7", signedDate: now.addingTimeInterval(-3600)))
        let refund = try chain.token(
            TestSigningChain.payload(
                productId: "a", transactionId: "7", revocationDate: now.addingTimeInterval(-120),
                signedDate: now.addingTimeInterval(-60)))
        let other = try chain.token(TestSigningChain.payload(productId: "b", transactionId: "8"))
        for lines in [[purchase, refund], [refund, purchase]] {
            let error = await courierError { _ = try await validator.validate(Data(lines.joined(separator: "\n").utf8)) }
            #expect(error.flatMap(ReceiptCheck.init(failing:)) == .revoked)
        }
        for lines in [[purchase, refund, other], [refund, other, purchase], [other, purchase, refund]] {
            let transactions = try await validator.validate(Data(lines.joined(separator: "\n").utf8))
            #expect(Set(transactions.map(\.transactionId)) == ["7", "8"])
            #expect(transactions.first { $0.transactionId == "7" }?.revocationDate != nil)
            #expect(transactions.first { $0.transactionId == "8" }?.revocationDate == nil)
        }
        // Unrevoked copies: the later signedDate is the App Store's newer statement.
        let renewedLater = try chain.token(
            TestSigningChain.payload(
                productId: "a", transactionId: "7", type: "Auto-Renewable Subscription",
                expiresDate: now.addingTimeInterval(86_400), signedDate: now.addingTimeInterval(-30)))
        let renewedEarlier = try chain.token(
            TestSigningChain.payload(
                productId: "a", transactionId: "7", type: "Auto-Renewable Subscription",
                expiresDate: now.addingTimeInterval(-86_400), signedDate: now.addingTimeInterval(-90_000)))
        for lines in [[renewedLater, renewedEarlier], [renewedEarlier, renewedLater]] {
            let transactions = try await validator.validate(Data(lines.joined(separator: "\n").utf8))
            #expect(transactions.count == 1)
            #expect((transactions.first?.expiresDate ?? .distantPast) > now)
        }
    }

    @Test("Sandbox is accepted only when asked for: the default is Production only")
    func productionOnlyByDefault() async throws {
        #expect(ReceiptConfiguration().environments == ["Production"])
        #expect(try CourierConfiguration.decode(Data(#"{"receipts": {}}"#.utf8)).receipts.environments == ["Production"])
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let chain = try TestSigningChain()
        try chain.writeRoot(to: folder.appending("root.pem"))
        let defaults = try ReceiptValidator(
            configuration: ReceiptConfiguration(trustRoots: ["root.pem"]),
            baseDirectory: folder.url,
            transport: try CurlHTTPTransport(),
            logger: Logger(label: "test")
        )
        let sandbox = try chain.token(TestSigningChain.payload(environment: "Sandbox"))
        let error = await courierError { _ = try await defaults.validate(Data(sandbox.utf8)) }
        #expect(error.flatMap(ReceiptCheck.init(failing:)) == .environment)
        let production = try chain.token(TestSigningChain.payload(environment: "Production"))
        #expect(try await defaults.validate(Data(production.utf8)).count == 1)
        let configured = try validator(chain, folder: folder, environments: ["Production", "Sandbox"])
        #expect(try await configured.validate(Data(sandbox.utf8)).count == 1)
    }

    @Test("the token decoder is a pure function on the token's bytes")
    func decodeUnverified() async throws {
        let chain = try TestSigningChain()
        let token = try chain.token(TestSigningChain.payload(productId: "a", transactionId: "9"))
        let decoded = try SignedTransactionVerifier.decodeUnverified(Data(token.utf8))
        #expect(decoded.payload.transactionId == "9")
        #expect(decoded.jws.certificateChain?.count == 3)
        for garbage in [Data([0xff, 0xfe]), Data("a.b.c".utf8), Data()] {
            let error = await courierError { _ = try SignedTransactionVerifier.decodeUnverified(garbage) }
            #expect(error.flatMap(ReceiptCheck.init(failing:)) == .format)
        }
    }

    @Test("dates outside 1970…10000 fail the format check instead of trapping when written back (fuzz finding)")
    func datesOutOfRange() async throws {
        let chain = try TestSigningChain()
        let verifier = makeVerifier(trusting: [chain])
        for bad: Any in [1.687e20, -1, Double.greatestFiniteMagnitude, "1e300", "-5"] {
            for key in ["purchaseDate", "signedDate", "expiresDate", "revocationDate"] {
                var payload = TestSigningChain.payload()
                payload[key] = bad
                let data = try JSONSerialization.data(withJSONObject: payload)
                let error = await courierError { _ = try SignedTransactionPayload(json: data) }
                #expect(error.flatMap(ReceiptCheck.init(failing:)) == .format, "\(key) = \(bad)")
                #expect(await rejectedCheck(try chain.token(payload), by: verifier) == .format, "\(key) = \(bad)")
            }
        }
        // The largest date accepted still writes back.
        var latest = TestSigningChain.payload()
        latest["expiresDate"] = 253_402_300_800_000
        let decoded = try SignedTransactionPayload(json: try JSONSerialization.data(withJSONObject: latest))
        #expect(try SignedTransactionPayload(json: try decoded.json()) == decoded)
    }

    @Test("a missing trusted root file is a usage error; empty and binary files fail the format check")
    func badInputs() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let missing = await courierError {
            _ = try ReceiptValidator(
                configuration: ReceiptConfiguration(trustRoots: ["nope.pem"]),
                baseDirectory: folder.url,
                transport: try CurlHTTPTransport(),
                logger: Logger(label: "test")
            )
        }
        #expect(missing?.code == .usage)
        let validator = try validator(try TestSigningChain(), folder: folder)
        for contents in [Data(), Data("  \n".utf8), Data([0xff, 0xfe, 0x00, 0x01]), Data("[1, 2]".utf8)] {
            let error = await courierError { _ = try await validator.validate(contents) }
            #expect(error.flatMap(ReceiptCheck.init(failing:)) == .format)
        }
    }
}

@Suite("Signed transactions: the verifier of a configuration")
struct VerifierFromConfigurationTests {
    /// `CourierCore.transactionVerifier` (receipts, the origin's gate) and `ReceiptValidator`
    /// build it here. A configuration folder given without a trailing slash once resolved
    /// `receipts.trustRoots` against its parent (URL's `relativeTo:`), while `courier serve`
    /// resolved them under it.
    @Test("a relative trust root is read under the configuration's folder, with or without a trailing slash")
    func relativeTrustRoot() throws {
        let directory = try TemporaryDirectory(prefix: "courier-verifier")
        defer { directory.remove() }
        let folder = directory.url.appendingPathComponent("config")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let chain = try TestSigningChain()
        try chain.writeRoot(to: folder.appendingPathComponent("root.pem"))
        var configuration = ReceiptConfiguration()
        configuration.trustRoots = ["root.pem"]
        let withoutSlash = try #require(URL(string: "file://" + folder.path))
        #expect(!withoutSlash.absoluteString.hasSuffix("/"))
        for base in [URL(fileURLWithPath: folder.path + "/"), withoutSlash] {
            let verifier = try SignedTransactionVerifier(configuration: configuration, baseDirectory: base)
            #expect(verifier.trustedRoots.count == 1, "\(base)")
        }
    }
}
