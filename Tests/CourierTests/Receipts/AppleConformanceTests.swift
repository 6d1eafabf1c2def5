import CourierTestSupport
import Foundation
import Testing

/// Apple's receipt conformance vectors (`../shared/apple-vectors`, beside the clone): Apple's App
/// Store Server Library test data and real Apple-signed transactions, each with Apple's verdict
/// and how it maps onto `courier receipt verify` (`cases.json`'s `expect`). Every case runs
/// through the built binary, since the exit code and the named check are the contract.
///
/// A case with a `courier_contract` may meet that contract instead of Apple's verdict only if
/// it is listed in `acceptedDivergences`, with the reason it is still right for Courier.
@Suite("Apple conformance vectors through courier receipt verify")
struct AppleConformanceTests {
    /// The folder of the vectors: `../shared/apple-vectors` beside the clone, else the committed copy.
    static let folder: URL = SharedFixtures.folder("apple-vectors")

    /// Where Courier departs from Apple's verdict on purpose (docs/receipts.md says so).
    static let acceptedDivergences: [String: String] = [
        "fixture-transactionInfo":
            "the fixture's payload has no transactionId, productId, type or purchaseDate; Apple's decoder makes every field optional, Courier needs them to unlock anything (format check)",
        "real-refunded-alone":
            "a receipt whose every transaction is revoked proves no purchase: Courier refuses it with the revoked check where Apple's signature verifier returns the payload",
    ]

    struct Outcome {
        var status: Int32
        var check: String?
        var transactions: [[String: Any]]
        /// The error event's message, else standard error.
        var message: String

        var summary: String {
            status == 0
                ? "exit 0, \(transactions.count) transaction(s)"
                : "exit \(status), check \(check ?? "none"): \(message.trimmingCharacters(in: .whitespacesAndNewlines))"
        }
    }

    /// Whether `outcome` meets an expectation (`expect` or `courier_contract` of cases.json);
    /// nil if it does, else why not.
    static func mismatch(_ outcome: Outcome, _ expectation: [String: Any]) -> String? {
        let result = expectation["result"] as? String ?? ""
        let revoked = expectation["revoked"] as? [String] ?? []
        func validMismatch() -> String? {
            guard outcome.status == 0 else { return "expected exit 0, got \(outcome.summary)" }
            if let count = expectation["transactions"] as? Int, outcome.transactions.count != count {
                return "expected \(count) transactions, got \(outcome.transactions.count)"
            }
            for id in revoked {
                guard let entry = outcome.transactions.first(where: { $0["transactionId"] as? String == id }) else {
                    return "transaction \(id) missing"
                }
                if entry["revocationDate"] == nil { return "transaction \(id) has no revocationDate" }
            }
            return nil
        }
        switch result {
        case "valid":
            return validMismatch()
        case "invalid":
            guard outcome.status == 3 else { return "expected exit 3, got \(outcome.summary)" }
            let checks = expectation["checks"] as? [String] ?? []
            guard let check = outcome.check else { return "exit 3 without a named check: \(outcome.message)" }
            if !checks.isEmpty && !checks.contains(check) {
                return "expected one of \(checks), got check \(check)"
            }
            return nil
        case "valid-or-revoked":
            if outcome.status == 3 {
                return outcome.check == "revoked" ? nil : "expected exit 0 or the revoked check, got \(outcome.summary)"
            }
            return validMismatch()
        default:
            return "unknown expected result \(result)"
        }
    }

    /// Runs `courier receipt verify` on one case, in an empty folder with an empty configuration.
    static func run(_ testCase: [String: Any], scratch: TemporaryDirectory) throws -> Outcome {
        let file = try #require(testCase["file"] as? String)
        var arguments = ["receipt", "verify", folder.appendingPathComponent(file).path, "--json"]
        for root in testCase["trust_roots"] as? [String] ?? [] {
            arguments += ["--trust-root", folder.appendingPathComponent(root).path]
        }
        if let bundle = testCase["bundle_id"] as? String { arguments += ["--bundle-id", bundle] }
        for environment in testCase["environments"] as? [String] ?? [] { arguments += ["--environment", environment] }
        arguments += ["--config", scratch.appending("courier.json").path, "--storage", scratch.appending("Storage").path]
        let result = try CourierBinary.run(arguments, directory: scratch.url, timeout: 60)
        let events = result.events
        let error = events.first { $0["event"] as? String == "error" }
        let verified = events.first { $0["event"] as? String == "result" }
        return Outcome(
            status: result.status,
            check: error?["check"] as? String,
            transactions: verified?["transactions"] as? [[String: Any]] ?? [],
            message: error?["message"] as? String ?? result.stderr
        )
    }

    @Test("every case gets Apple's verdict, or a documented and accepted divergence")
    func vectors() throws {
        let casesFile = Self.folder.appendingPathComponent("cases.json")
        guard FileManager.default.fileExists(atPath: casesFile.path) else {
            Issue.record(
                "the Apple conformance vectors are missing: expected \(casesFile.path)"
            )
            return
        }
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: casesFile)) as? [String: Any]
        )
        let cases = try #require(document["cases"] as? [[String: Any]])
        #expect(cases.count >= 77, "cases.json lists \(cases.count) cases")
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        // A file the classifier took for a legacy receipt would go to verifyReceipt: keep that
        // on a closed loopback port, never Apple's servers.
        let configuration = #"""
            {"receipts": {"verifyReceipt": {"productionURL": "http://127.0.0.1:9/verifyReceipt",
                                            "sandboxURL": "http://127.0.0.1:9/verifyReceipt", "retries": 0}}}
            """#
        try Data(configuration.utf8).write(to: scratch.appending("courier.json"))
        for name in Self.acceptedDivergences.keys {
            #expect(
                cases.contains { $0["case"] as? String == name && $0["courier_contract"] != nil },
                "accepted divergence \(name) is not a case with a courier_contract"
            )
        }

        var counted = 0
        var matchedApple = 0
        var divergent: [String] = []
        var observed: [String] = []
        for testCase in cases {
            let name = testCase["case"] as? String ?? "?"
            let expectation = try #require(testCase["expect"] as? [String: Any], "\(name) has no expect")
            if testCase["skip"] != nil {
                if testCase["observe"] as? Bool == true {
                    let outcome = try Self.run(testCase, scratch: scratch)
                    observed.append("\(name): \(outcome.summary) (not counted: \(testCase["skip"] ?? ""))")
                }
                continue
            }
            counted += 1
            let outcome = try Self.run(testCase, scratch: scratch)
            guard let appleMismatch = Self.mismatch(outcome, expectation) else {
                matchedApple += 1
                continue
            }
            if let contract = testCase["courier_contract"] as? [String: Any],
                let reason = Self.acceptedDivergences[name],
                Self.mismatch(outcome, contract) == nil
            {
                divergent.append("\(name): \(reason)")
                continue
            }
            Issue.record("\(name): \(appleMismatch) (file \(testCase["file"] ?? ""))")
        }
        print("Apple conformance: \(matchedApple) of \(counted) cases get Apple's verdict, \(divergent.count) documented divergences")
        for line in divergent { print("  divergence  \(line)") }
        for line in observed { print("  observed    \(line)") }
        #expect(matchedApple + divergent.count <= counted)
        #expect(counted > 0)
    }
}
