import Courier
import CourierTestSupport
import Foundation
import Testing
import X509

@Suite("Sandbox store: an App Store-shaped chain that signs")
struct SandboxStoreTests {
    @Test("init writes the chain with owner-only keys; its purchases verify against its root")
    func signsVerifiableTransactions() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let directory = folder.appending("Sandbox")
        let created = try SandboxStore.create(at: directory)
        for name in ["root", "intermediate", "leaf"] {
            let attributes = try FileManager.default.attributesOfItem(
                atPath: directory.appendingPathComponent("\(name).key.pem").path
            )
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        }
        #expect(created.leaf.extensions.contains { $0.oid == AppStoreOIDs.receiptSigner })
        #expect(created.intermediate.extensions.contains { $0.oid == AppStoreOIDs.wwdrIntermediate })

        let store = try SandboxStore(directory: directory)
        #expect(store.root == created.root)
        #expect(try TrustRoots.load(directory) == [store.root])
        for rootFile in [store.rootCertificateFile, store.rootCertificateDERFile, directory] {
            let verifier = SignedTransactionVerifier(
                trustedRoots: try TrustRoots.load(rootFile),
                bundleId: "com.example.app",
                environments: ["Sandbox"],
                clockSkew: 300
            )
            let token = try store.purchase(productId: "com.example.levels.pack1")
            let transaction = try await verifier.verify(token)
            #expect(transaction.productId == "com.example.levels.pack1")
            #expect(transaction.environment == "Sandbox")
            #expect(transaction.transactionId.count == 16)
        }
    }

    @Test("subscriptions get a month by default; revoked purchases are refused")
    func subscriptionsAndRevocation() async throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let store = try SandboxStore.create(at: folder.url)
        let verifier = SignedTransactionVerifier(
            trustedRoots: [store.root],
            bundleId: "com.example.app",
            environments: ["Sandbox"],
            clockSkew: 300
        )
        let start = day("2026-02-20")
        let subscription = try await verifier.verify(
            try store.purchase(productId: "com.example.magazine", type: .autoRenewable, purchaseDate: start)
        )
        #expect(subscription.type == .autoRenewable)
        #expect(subscription.expiresDate == day("2026-03-20"))
        let revoked = try store.purchase(productId: "pack", revocationDate: Date().addingTimeInterval(-60))
        #expect(await rejectedCheck(revoked, by: verifier) == .revoked)
    }
}
