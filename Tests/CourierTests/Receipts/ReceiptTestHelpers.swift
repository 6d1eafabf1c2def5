import Courier
import CourierTestSupport
import Foundation
import Testing

/// The error `body` throws, as a `CourierError` (nil when it succeeds or throws something else).
func courierError(_ body: () async throws -> Void) async -> CourierError? {
    do {
        try await body()
        return nil
    } catch let error as CourierError {
        return error
    } catch {
        Issue.record("unexpected error \(error)")
        return nil
    }
}

/// The check named by the rejection of `token`, or nil if it verified.
func rejectedCheck(
    _ token: String,
    by verifier: SignedTransactionVerifier,
    now: Date = Date()
) async -> ReceiptCheck? {
    guard let error = await courierError({ _ = try await verifier.verify(token, now: now) }) else { return nil }
    #expect(error.code == .receiptInvalid)
    #expect(error.exitCode == 3)
    let check = ReceiptCheck(failing: error)
    if let check { #expect(error.message.hasPrefix("\(check.rawValue) check failed")) }
    return check
}

func makeVerifier(
    trusting roots: [TestSigningChain],
    environments: Set<String> = ["Production", "Sandbox"]
) -> SignedTransactionVerifier {
    SignedTransactionVerifier(
        trustedRoots: roots.map(\.root),
        bundleId: "com.example.app",
        environments: environments,
        clockSkew: 300
    )
}

/// A date from `yyyy-MM-dd` (midnight UTC).
func day(_ text: String) -> Date {
    guard let date = Catalog.parseDate(text) else { fatalError("bad test date \(text)") }
    return date
}
