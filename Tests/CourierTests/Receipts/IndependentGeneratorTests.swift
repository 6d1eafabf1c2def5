import Courier
import CourierTestSupport
import Foundation
import Testing

/// Tokens made by a generator that shares no code with Courier: Python's `cryptography`, with a
/// chain shaped like Apple's real one (P-384 root and intermediate signing with SHA-384, P-256
/// leaf, marker extensions holding DER NULL).
@Suite(
    "Signed transactions from an independent generator (Python cryptography)",
    .enabled(if: IndependentGenerator.isAvailable)
)
struct IndependentGeneratorTests {
    @Test("Apple-shaped tokens from another implementation verify, and its bad ones are refused by name")
    func pythonTokens() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        try IndependentGenerator.generate(into: folder.url)
        let verifier = SignedTransactionVerifier(
            trustedRoots: try TrustRoots.load(folder.appending("root.cer")),
            bundleId: "com.example.app",
            environments: ["Sandbox"],
            clockSkew: 300
        )
        func token(_ name: String) throws -> String {
            try String(contentsOf: folder.appending("\(name).jws"), encoding: .utf8).trimmingCharacters(
                in: .whitespacesAndNewlines
            )
        }
        let valid = try await verifier.verify(try token("valid"))
        #expect(valid.productId == "com.example.magazine")
        #expect(valid.type == .autoRenewable)
        #expect(valid.transactionId == "2000000847061981")
        #expect(try await verifier.verify(try token("critical")).productId == "com.example.magazine")
        #expect(try await verifier.verify(try token("oldleaf")).productId == "com.example.magazine")
        #expect(await rejectedCheck(try token("nooid"), by: verifier) == .oid)
        #expect(await rejectedCheck(try token("expired"), by: verifier) == .certificate)
        #expect(await rejectedCheck(try token("otherkey"), by: verifier) == .signature)
    }
}

enum IndependentGenerator {
    static var isAvailable: Bool {
        (try? Shell.run("/usr/bin/python3", ["-c", "import cryptography"]).status) == 0
    }

    static func generate(into folder: URL) throws {
        let script = folder.appendingPathComponent("generate.py")
        try Data(source.utf8).write(to: script)
        let result = try Shell.run("/usr/bin/python3", [script.path, folder.path])
        guard result.status == 0 else { throw CourierError(.internal, "the generator failed", cause: result.stderr) }
    }

    static let source = #"""
        import base64, datetime, json, os, sys
        from cryptography import x509
        from cryptography.x509.oid import NameOID, ObjectIdentifier
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        out = sys.argv[1]
        now = datetime.datetime.now(datetime.timezone.utc)
        day = datetime.timedelta(days=1)
        def name(cn): return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example")])
        def ku(sign): return x509.KeyUsage(sign, False, False, False, False, not sign, not sign, False, False)
        marker = lambda oid, critical: (x509.UnrecognizedExtension(ObjectIdentifier(oid), b"\x05\x00"), critical)
        root_key, inter_key = ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())
        def cert(subject, issuer, key, issuer_key, start, end, ca, extra):
            b = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer)).public_key(key.public_key())
                 .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
                 .add_extension(x509.BasicConstraints(ca=ca, path_length=None if subject == issuer else (0 if ca else None)), critical=True)
                 .add_extension(ku(not ca), critical=True))
            for ext, critical in extra: b = b.add_extension(ext, critical=critical)
            return b.sign(issuer_key, hashes.SHA384())
        root = cert("Root CA - G3", "Root CA - G3", root_key, root_key, now - 3650 * day, now + 3650 * day, True, [])
        inter = cert("WWDR CA", "Root CA - G3", inter_key, root_key, now - 2000 * day, now + 2000 * day, True, [marker("1.2.840.113635.100.6.2.1", False)])
        open(os.path.join(out, "root.cer"), "wb").write(root.public_bytes(serialization.Encoding.DER))
        b64u = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
        ms = lambda d: int(d.timestamp() * 1000)
        def token(file, leaf_start, leaf_end, signed, oid=True, critical=False, other_key=False):
            leaf_key = ec.generate_private_key(ec.SECP256R1())
            leaf = cert("Receipt Signing", "WWDR CA", leaf_key, inter_key, leaf_start, leaf_end, False,
                        [marker("1.2.840.113635.100.6.11.1", critical)] if oid else [])
            x5c = [base64.b64encode(c.public_bytes(serialization.Encoding.DER)).decode() for c in (leaf, inter, root)]
            payload = {"transactionId": "2000000847061981", "originalTransactionId": "2000000847061981",
                       "webOrderLineItemId": "2000000069000001", "bundleId": "com.example.app", "productId": "com.example.magazine",
                       "subscriptionGroupIdentifier": "21440011", "purchaseDate": ms(signed) - 1000, "originalPurchaseDate": ms(signed) - 1000,
                       "expiresDate": ms(signed) + 30 * 86400000, "quantity": 1, "type": "Auto-Renewable Subscription",
                       "inAppOwnershipType": "PURCHASED", "signedDate": ms(signed), "environment": "Sandbox",
                       "transactionReason": "PURCHASE", "storefront": "USA", "storefrontId": "143441", "price": 4990, "currency": "USD"}
            signing_input = b64u(json.dumps({"alg": "ES256", "x5c": x5c}).encode()) + "." + b64u(json.dumps(payload).encode())
            signer = ec.generate_private_key(ec.SECP256R1()) if other_key else leaf_key
            r, s = decode_dss_signature(signer.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
            open(os.path.join(out, file + ".jws"), "w").write(signing_input + "." + b64u(r.to_bytes(32, "big") + s.to_bytes(32, "big")))
        token("valid", now - 100 * day, now + 300 * day, now)
        token("critical", now - 100 * day, now + 300 * day, now, critical=True)
        token("oldleaf", now - 400 * day, now - 30 * day, now - 60 * day)
        token("expired", now - 400 * day, now - 30 * day, now - 10 * day)
        token("nooid", now - 100 * day, now + 300 * day, now, oid=False)
        token("otherkey", now - 100 * day, now + 300 * day, now, other_key=True)
        """#
}
