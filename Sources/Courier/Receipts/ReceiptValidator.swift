import Foundation
import Logging
import X509

/// The façade every command uses to prove purchases: JWS signed transactions are verified
/// locally, legacy receipts go to the verifyReceipt service.
public struct ReceiptValidator: Sendable {
    /// The largest receipt file accepted. A legacy receipt with years of renewals is well
    /// under a megabyte; anything larger is refused without reading it all.
    public static let maximumReceiptBytes = 4 << 20

    public let configuration: ReceiptConfiguration
    public let verifier: SignedTransactionVerifier
    public let legacyClient: LegacyReceiptClient
    public let logger: Logger

    /// Loads the configured trusted roots (paths resolved against `baseDirectory`, the
    /// configuration file's folder). A root that cannot be read is a `usage` error.
    public init(
        configuration: ReceiptConfiguration,
        baseDirectory: URL,
        transport: any HTTPTransport,
        logger: Logger
    ) throws {
        self.init(
            configuration: configuration,
            verifier: try SignedTransactionVerifier(configuration: configuration, baseDirectory: baseDirectory),
            transport: transport, logger: logger)
    }

    /// A validator over `verifier` (made from the same configuration: `CourierCore.receiptValidator`).
    public init(
        configuration: ReceiptConfiguration, verifier: SignedTransactionVerifier, transport: any HTTPTransport, logger: Logger
    ) {
        self.configuration = configuration
        self.verifier = verifier
        self.legacyClient = LegacyReceiptClient(transport: transport, configuration: configuration, logger: logger)
        self.logger = logger
    }

    /// A receipt file's contents: one or more JWS signed transactions (one per line, or a JSON
    /// array of them, or an App Store Server API answer with `signedTransactions` /
    /// `signedTransactionInfo`), or a legacy receipt (base64) that goes to the verifyReceipt
    /// service. Every JWS must pass every check; the transactions come back one per
    /// transactionId (of several copies, a revoked one wins, else the latest `signedDate`:
    /// `VerifiedTransaction.latestCopies`), in input order. Revoked (refunded, cancelled) transactions come back with
    /// their `revocationDate` and entitle to nothing, unless every transaction is revoked: then
    /// the receipt proves nothing and fails the `revoked` check.
    public func validate(_ contents: Data, now: Date = Date()) async throws -> [VerifiedTransaction] {
        let transactions = try await validateAllowingRevocation(contents, now: now)
        if let first = transactions.first, let revoked = first.revocationDate,
            transactions.allSatisfy({ $0.revocationDate != nil })
        {
            throw SignedTransactionVerifier.revokedFailure(first, at: revoked)
        }
        return transactions
    }

    /// `validate`, but a receipt whose transactions are all revoked gives them back (with their
    /// `revocationDate`) instead of failing: what `courier update` reads a refund from.
    public func validateAllowingRevocation(_ contents: Data, now: Date = Date()) async throws -> [VerifiedTransaction] {
        guard contents.count <= Self.maximumReceiptBytes else {
            throw ReceiptCheck.format.failure(
                "the receipt is larger than \(Self.maximumReceiptBytes) bytes, the most accepted"
            )
        }
        guard let text = String(data: contents, encoding: .utf8) else {
            throw ReceiptCheck.format.failure("the receipt is not text (a JWS or base64 legacy receipt)")
        }
        let trimmed = text.trimmingASCIIWhitespace()
        guard !trimmed.isEmpty else { throw ReceiptCheck.format.failure("the receipt is empty") }
        let tokens: [String]
        if trimmed.hasPrefix("{") || trimmed.hasPrefix("[") {
            tokens = try Self.tokens(json: Data(trimmed.utf8))
        } else {
            let lines = asciiLines(trimmed.utf8)
            if lines.allSatisfy({ $0.utf8.contains(UInt8(ascii: ".")) }) {
                tokens = lines
            } else if lines.contains(where: { $0.utf8.contains(UInt8(ascii: ".")) }) {
                throw ReceiptCheck.format.failure("the receipt mixes signed transactions and other lines")
            } else {
                let receiptData = lines.joined()
                guard let decoded = Data(base64Encoded: receiptData) else {
                    throw ReceiptCheck.format.failure(
                        "the receipt is neither a JWS signed transaction nor a base64 legacy receipt"
                    )
                }
                // Only a PKCS#7 receipt goes to Apple: anything else is refused here, unsent.
                if let problem = LegacyReceiptShape.problem([UInt8](decoded)) {
                    throw ReceiptCheck.format.failure(
                        "the receipt is base64 but not a PKCS#7 App Store receipt (\(problem)); nothing was sent to verifyReceipt",
                        hint: "a receipt is a JWS signed transaction per line, or the base64 app receipt from the device")
                }
                logger.debug("receipt: legacy receipt, asking the verifyReceipt service")
                return try await legacyClient.verify(receiptData: receiptData)
            }
        }
        // Tokens are verified side by side (one per core), and judged in file order: the first
        // failing token's error is the one reported, whichever finished first.
        let verifier = self.verifier
        var outcomes = [Result<VerifiedTransaction, any Error>?](repeating: nil, count: tokens.count)
        let width = max(1, min(ProcessInfo.processInfo.activeProcessorCount, 8))
        await withTaskGroup(of: (Int, Result<VerifiedTransaction, any Error>).self) { group in
            var next = 0
            func submit() {
                guard next < tokens.count else { return }
                let index = next
                let token = tokens[index]
                next += 1
                group.addTask {
                    // The outcome is awaited into a local before the tuple is built. Written as
                    // `return (index, .success(try await …))` in a `do`, swiftc 6.3.1 -O stores
                    // `index` before the suspension and loses it: the child answers index 0
                    // (every release build crashed here, "Index out of range"). Reproduction:
                    // Tests/Toolchain/TupleAcrossSuspension.swift; swiftlang/swift#91911.
                    let outcome: Result<VerifiedTransaction, any Error>
                    do {
                        outcome = .success(try await verifier.verifyAllowingRevocation(token, now: now))
                    } catch {
                        outcome = .failure(error)
                    }
                    return (index, outcome)
                }
            }
            for _ in 0..<width { submit() }
            for await (index, outcome) in group {
                outcomes[index] = outcome
                submit()
            }
        }
        var verified: [VerifiedTransaction] = []
        for (index, outcome) in outcomes.enumerated() {
            do {
                guard let outcome else { throw CancellationError() }
                let transaction = try outcome.get()
                logger.debug("receipt: verified", metadata: ["transaction-id": "\(transaction.transactionId)"])
                verified.append(transaction)
            } catch var error as CourierError {
                if tokens.count > 1 { error.message += " (transaction \(index + 1) of \(tokens.count))" }
                throw error
            }
        }
        // Two signed copies of one transaction (a purchase and its refund): the refund wins,
        // else the newer statement, whatever their order in the file.
        return VerifiedTransaction.latestCopies(verified)
    }

    /// Reads a receipt file (refusing one larger than `maximumReceiptBytes` without reading it
    /// all) and validates it.
    public func validate(fileAt url: URL, now: Date = Date()) async throws -> [VerifiedTransaction] {
        try await validate(try Self.readReceipt(url), now: now)
    }

    /// The first `maximumReceiptBytes + 1` bytes of `url`, so an oversized file is detected with
    /// bounded memory.
    public static func readReceipt(_ url: URL) throws -> Data {
        let handle: FileHandle
        do {
            handle = try FileHandle(forReadingFrom: url)
        } catch {
            throw CourierError.unreadable("the receipt", path: url.path, error: error)
        }
        defer { try? handle.close() }
        return try CourierError.wrapping(.io, "cannot read the receipt \(url.path)") {
            try handle.read(upToCount: maximumReceiptBytes + 1) ?? Data()
        }
    }

    static func tokens(json: Data) throws -> [String] {
        let object = try? JSONSerialization.jsonObject(with: json)
        if let array = object as? [String] { return array }
        if let dictionary = object as? [String: Any] {
            var tokens: [String] = []
            if let single = dictionary["signedTransactionInfo"] as? String { tokens.append(single) }
            if let list = dictionary["signedTransactions"] as? [String] { tokens += list }
            if !tokens.isEmpty { return tokens }
        }
        throw ReceiptCheck.format.failure(
            "a JSON receipt must be an array of signed transactions or hold signedTransactions / signedTransactionInfo"
        )
    }
}
