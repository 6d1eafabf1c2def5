import Courier
import CourierTestSupport
import Foundation
import Logging
import Testing

@Suite("Legacy receipts: the verifyReceipt protocol against a loopback stub")
struct LegacyReceiptClientTests {
    static let secret = "shh-0123456789abcdef"

    func client(
        _ stub: VerifyReceiptStub,
        retries: Int = 3,
        environments: Set<String> = ["Production", "Sandbox"],
        logger: Logger = Logger(label: "test")
    ) throws -> LegacyReceiptClient {
        var configuration = ReceiptConfiguration(environments: environments)
        configuration.verifyReceipt = .init(
            productionURL: stub.productionURL.absoluteString,
            sandboxURL: stub.sandboxURL.absoluteString,
            excludeOldTransactions: true,
            retries: retries,
            retryDelay: 0.01,
            timeout: 30
        )
        return LegacyReceiptClient(
            transport: try CurlHTTPTransport(),
            configuration: configuration,
            logger: logger,
            environment: ["COURIER_SHARED_SECRET": Self.secret]
        )
    }

    static let purchase = VerifyReceiptStub.inApp(
        productId: "com.example.levels.pack1",
        transactionId: "1000000001",
        purchaseDate: Date(timeIntervalSince1970: 1_770_000_000)
    )

    @Test("status 0: the in-app entries become verified transactions; the request speaks the protocol")
    func valid() async throws {
        let cancelled = VerifyReceiptStub.inApp(
            productId: "com.example.levels.pack2",
            transactionId: "1000000002",
            purchaseDate: Date(timeIntervalSince1970: 1_770_000_000),
            cancellationDate: Date(timeIntervalSince1970: 1_770_100_000)
        )
        let stub = try VerifyReceiptStub { _, _ in
            VerifyReceiptStub.valid(environment: "Production", inApp: [Self.purchase, cancelled])
        }
        defer { stub.stop() }
        let transactions = try await client(stub).verify(receiptData: "TUlJVG1haWwK")
        #expect(transactions.map(\.transactionId) == ["1000000001", "1000000002"])
        #expect(transactions[0].productId == "com.example.levels.pack1")
        #expect(transactions[0].type == .nonConsumable)
        #expect(transactions[0].environment == "Production")
        #expect(transactions[0].revocationDate == nil)
        #expect(transactions[1].revocationDate == Date(timeIntervalSince1970: 1_770_100_000))
        let calls = stub.calls
        #expect(calls.count == 1)
        #expect(calls.first?.service == "production")
        #expect(calls.first?.receiptData == "TUlJVG1haWwK")
        #expect(calls.first?.password == Self.secret)
        #expect(calls.first?.excludeOldTransactions == true)
    }

    @Test("21007 sends the same request to the sandbox")
    func sandboxReceipt() async throws {
        let stub = try VerifyReceiptStub { service, _ in
            service == "production" ? VerifyReceiptStub.status(21007) : VerifyReceiptStub.valid(inApp: [Self.purchase])
        }
        defer { stub.stop() }
        let transactions = try await client(stub).verify(receiptData: "UkVDRUlQVA==")
        #expect(transactions.first?.environment == "Sandbox")
        #expect(stub.calls.map(\.service) == ["production", "sandbox"])
        #expect(stub.calls.map(\.receiptData) == ["UkVDRUlQVA==", "UkVDRUlQVA=="])
    }

    @Test("21008 sends it back to production; endless redirection ends in a precise error")
    func productionReceipt() async throws {
        let stub = try VerifyReceiptStub { service, index in
            switch (service, index) {
            case ("production", 0): return VerifyReceiptStub.status(21007)
            case ("sandbox", _): return VerifyReceiptStub.status(21008)
            default: return VerifyReceiptStub.valid(environment: "Production", inApp: [Self.purchase])
            }
        }
        defer { stub.stop() }
        let transactions = try await client(stub).verify(receiptData: "UkVDRUlQVA==")
        #expect(transactions.count == 1)
        #expect(stub.calls.map(\.service) == ["production", "sandbox", "production"])

        let looping = try VerifyReceiptStub { service, _ in
            VerifyReceiptStub.status(service == "production" ? 21007 : 21008)
        }
        defer { looping.stop() }
        let error = await courierError { _ = try await client(looping).verify(receiptData: "UkVDRUlQVA==") }
        #expect(error?.code == .network)
        #expect(looping.calls.count == 3)
    }

    @Test("21005 is retried with backoff, and gives up after the configured retries")
    func retried() async throws {
        let stub = try VerifyReceiptStub { _, index in
            index < 2 ? VerifyReceiptStub.status(21005) : VerifyReceiptStub.valid(inApp: [Self.purchase])
        }
        defer { stub.stop() }
        let transactions = try await client(stub).verify(receiptData: "UkVDRUlQVA==")
        #expect(transactions.count == 1)
        #expect(stub.calls.map(\.service) == ["production", "production", "production"])

        let down = try VerifyReceiptStub { _, _ in VerifyReceiptStub.status(21005) }
        defer { down.stop() }
        let error = await courierError { _ = try await client(down, retries: 2).verify(receiptData: "UkVDRUlQVA==") }
        #expect(error?.code == .network)
        #expect(error?.message.contains("21005") == true)
        #expect(down.calls.count == 3)
    }

    @Test("211xx is retried only when the answer says is-retryable")
    func internalErrors() async throws {
        let retryable = try VerifyReceiptStub { _, index in
            index == 0
                ? VerifyReceiptStub.status(21150, retryable: true) : VerifyReceiptStub.valid(inApp: [Self.purchase])
        }
        defer { retryable.stop() }
        #expect(try await client(retryable).verify(receiptData: "UkVDRUlQVA==").count == 1)
        #expect(retryable.calls.count == 2)

        let final = try VerifyReceiptStub { _, _ in VerifyReceiptStub.status(21150, retryable: false) }
        defer { final.stop() }
        let error = await courierError { _ = try await client(final).verify(receiptData: "UkVDRUlQVA==") }
        #expect(error?.code == .network)
        #expect(final.calls.count == 1)
    }

    @Test("21010 is a precise refusal naming the status check")
    func unauthorized() async throws {
        let stub = try VerifyReceiptStub { _, _ in VerifyReceiptStub.status(21010) }
        defer { stub.stop() }
        let error = await courierError { _ = try await client(stub).verify(receiptData: "UkVDRUlQVA==") }
        #expect(error?.code == .receiptInvalid)
        #expect(error?.exitCode == 3)
        #expect(error.flatMap(ReceiptCheck.init(failing:)) == .status)
        #expect(error?.message.contains("21010") == true)
        #expect(stub.calls.count == 1)
    }

    @Test("21004 (shared secret) is a configuration error")
    func sharedSecretMismatch() async throws {
        let stub = try VerifyReceiptStub { _, _ in VerifyReceiptStub.status(21004) }
        defer { stub.stop() }
        let error = await courierError { _ = try await client(stub).verify(receiptData: "UkVDRUlQVA==") }
        #expect(error?.code == .usage)
        #expect(error?.hint?.contains("COURIER_SHARED_SECRET") == true)
    }

    @Test("malformed JSON is a precise error, not retried")
    func malformedJSON() async throws {
        let stub = try VerifyReceiptStub { _, _ in .json("{\"status\": 0, \"receipt\": ") }
        defer { stub.stop() }
        let error = await courierError { _ = try await client(stub).verify(receiptData: "UkVDRUlQVA==") }
        #expect(error?.code == .network)
        #expect(error?.message.contains("not a verifyReceipt response") == true)
        #expect(stub.calls.count == 1)
    }

    @Test("HTTP 500 is retried, then reported as a network failure")
    func serverError() async throws {
        let stub = try VerifyReceiptStub { _, _ in .raw(status: 500, body: "oops") }
        defer { stub.stop() }
        let error = await courierError { _ = try await client(stub, retries: 2).verify(receiptData: "UkVDRUlQVA==") }
        #expect(error?.code == .network)
        #expect(error?.exitCode == 5)
        #expect(error?.cause == "HTTP 500")
        #expect(stub.calls.count == 3)
    }

    @Test("a receipt for another bundle or environment is refused by its check")
    func bundleAndEnvironment() async throws {
        let other = try VerifyReceiptStub { _, _ in
            VerifyReceiptStub.valid(bundleId: "com.other.app", inApp: [Self.purchase])
        }
        defer { other.stop() }
        let error = await courierError { _ = try await client(other).verify(receiptData: "UkVDRUlQVA==") }
        #expect(error.flatMap(ReceiptCheck.init(failing:)) == .bundle)

        let stub = try VerifyReceiptStub { _, _ in
            VerifyReceiptStub.valid(environment: "Sandbox", inApp: [Self.purchase])
        }
        defer { stub.stop() }
        var production = try client(stub)
        var configuration = production.configuration
        configuration.environments = ["Production"]
        production = LegacyReceiptClient(
            transport: production.transport,
            configuration: configuration,
            logger: production.logger
        )
        let refused = await courierError { _ = try await production.verify(receiptData: "UkVDRUlQVA==") }
        #expect(refused.flatMap(ReceiptCheck.init(failing:)) == .environment)
    }

    @Test("the shared secret never reaches the logs, even at trace level")
    func secretNotLogged() async throws {
        let sink = LogSink()
        var logger = Logger(label: "test") { _ in CapturingLogHandler(sink: sink) }
        logger.logLevel = .trace
        let stub = try VerifyReceiptStub { service, index in
            index == 0
                ? VerifyReceiptStub.status(21005)
                : (service == "production"
                    ? VerifyReceiptStub.status(21007) : VerifyReceiptStub.valid(inApp: [Self.purchase]))
        }
        defer { stub.stop() }
        _ = try await client(stub, logger: logger).verify(receiptData: "UkVDRUlQVA==")
        let lines = sink.lines
        #expect(!lines.isEmpty)
        #expect(!lines.contains { $0.contains(Self.secret) })
        #expect(stub.calls.allSatisfy { $0.password == Self.secret })
    }

    @Test("ReceiptValidator sends a base64 receipt file to the service")
    func validatorRoutesLegacy() async throws {
        let stub = try VerifyReceiptStub { _, _ in VerifyReceiptStub.valid(inApp: [Self.purchase]) }
        defer { stub.stop() }
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        var configuration = ReceiptConfiguration(environments: ["Sandbox"])
        configuration.verifyReceipt.productionURL = stub.productionURL.absoluteString
        configuration.verifyReceipt.sandboxURL = stub.sandboxURL.absoluteString
        let validator = try ReceiptValidator(
            configuration: configuration,
            baseDirectory: folder.url,
            transport: try CurlHTTPTransport(),
            logger: Logger(label: "test")
        )
        // Wrapped base64 of a PKCS#7 signedData header in BER (the shape of Apple's receipts).
        let receipt = Data("MIAGCSqGSIb3DQEH\nAqCAMIACAQEAAAAAAAA=\n".utf8)
        let transactions = try await validator.validate(receipt)
        #expect(transactions.map(\.productId) == ["com.example.levels.pack1"])
        #expect(stub.calls.first?.receiptData == "MIAGCSqGSIb3DQEHAqCAMIACAQEAAAAAAAA=")
        // Base64 of anything else is refused with the format check and never sent.
        let calls = stub.calls.count
        let error = await courierError { _ = try await validator.validate(Data("TUlJVG1haWwKAAAA".utf8)) }
        #expect(error.flatMap(ReceiptCheck.init(failing:)) == .format)
        #expect(stub.calls.count == calls)
    }
}

extension LegacyReceiptClientTests {
    @Test("an answer without environment takes the environment of the endpoint that answered")
    func environmentFromEndpoint() async throws {
        // Production says 21007; the sandbox answers status 0 without an `environment` key.
        let silent = try VerifyReceiptStub { service, _ in
            service == "production"
                ? VerifyReceiptStub.status(21007) : VerifyReceiptStub.valid(environment: nil, inApp: [Self.purchase])
        }
        defer { silent.stop() }
        let both = try await client(silent).verify(receiptData: "UkVDRUlQVA==")
        #expect(both.map(\.environment) == ["Sandbox"])
        let refused = await courierError {
            _ = try await client(silent, environments: ["Production"]).verify(receiptData: "UkVDRUlQVA==")
        }
        #expect(refused.flatMap(ReceiptCheck.init(failing:)) == .environment)
        #expect(refused?.message.contains("sandbox service") == true)

        // The sandbox endpoint cannot vouch for a production purchase, whatever it says.
        let claiming = try VerifyReceiptStub { service, _ in
            service == "production"
                ? VerifyReceiptStub.status(21007)
                : VerifyReceiptStub.valid(environment: "Production", inApp: [Self.purchase])
        }
        defer { claiming.stop() }
        let claimed = await courierError {
            _ = try await client(claiming, environments: ["Production"]).verify(receiptData: "UkVDRUlQVA==")
        }
        #expect(claimed.flatMap(ReceiptCheck.init(failing:)) == .environment)

        // Production answering without `environment` is Production.
        let production = try VerifyReceiptStub { _, _ in VerifyReceiptStub.valid(environment: nil, inApp: [Self.purchase]) }
        defer { production.stop() }
        let live = try await client(production, environments: ["Production"]).verify(receiptData: "UkVDRUlQVA==")
        #expect(live.map(\.environment) == ["Production"])
    }

    @Test("a cancellation in latest_receipt_info is not hidden by the uncancelled in_app copy")
    func cancelledCopyWins() async throws {
        let cancelled = VerifyReceiptStub.inApp(
            productId: "com.example.levels.pack1",
            transactionId: "1000000001",
            purchaseDate: Date(timeIntervalSince1970: 1_770_000_000),
            cancellationDate: Date(timeIntervalSince1970: 1_770_100_000)
        )
        let live = VerifyReceiptStub.inApp(
            productId: "com.example.levels.pack2",
            transactionId: "1000000002",
            purchaseDate: Date(timeIntervalSince1970: 1_770_000_000)
        )
        for (inApp, latest) in [([Self.purchase, live], [cancelled, live]), ([cancelled, live], [Self.purchase, live])] {
            let stub = try VerifyReceiptStub { _, _ in
                VerifyReceiptStub.valid(environment: "Production", inApp: inApp, latestReceiptInfo: latest)
            }
            defer { stub.stop() }
            let transactions = try await client(stub).verify(receiptData: "UkVDRUlQVA==")
            #expect(transactions.map(\.transactionId) == ["1000000001", "1000000002"])
            #expect(transactions.first?.revocationDate == Date(timeIntervalSince1970: 1_770_100_000))
            #expect(transactions.last?.revocationDate == nil)
        }
    }

    @Test("the response decoder is a pure function on the body's bytes")
    func responseDecoder() throws {
        #expect(VerifyReceiptResponse(body: Data("{\"status\": 0, \"receipt\": ".utf8)) == nil)
        #expect(VerifyReceiptResponse(body: Data("{\"status\": \"0\"}".utf8)) == nil)
        #expect(VerifyReceiptResponse(body: Data("{\"status\": 1e300}".utf8)) == nil)
        let retry = try #require(VerifyReceiptResponse(body: Data(#"{"status": 21150, "is_retryable": 1}"#.utf8)))
        #expect(retry.status == 21150 && retry.isRetryable)
        let body = #"{"status": 0, "receipt": {"bundle_id": "com.example.app", "in_app": [7, {"transaction_id": 5, "product_id": "p", "purchase_date_ms": "1770000000000"}]}}"#
        let response = try #require(VerifyReceiptResponse(body: Data(body.utf8)))
        let transactions = try response.transactions(
            answeredBy: .production, bundleId: "com.example.app", environments: ["Production"])
        #expect(transactions.map(\.transactionId) == ["5"])
        #expect(transactions.first?.environment == "Production")
    }

    @Test("a legacy receipt whose every purchase was cancelled fails the revoked check")
    func allCancelled() async throws {
        let cancelled = VerifyReceiptStub.inApp(
            productId: "com.example.levels.pack1",
            transactionId: "1000000009",
            purchaseDate: Date(timeIntervalSince1970: 1_770_000_000),
            cancellationDate: Date(timeIntervalSince1970: 1_770_500_000)
        )
        let stub = try VerifyReceiptStub { _, _ in VerifyReceiptStub.valid(inApp: [cancelled]) }
        defer { stub.stop() }
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        var configuration = ReceiptConfiguration(environments: ["Sandbox"])
        configuration.verifyReceipt.productionURL = stub.productionURL.absoluteString
        let validator = try ReceiptValidator(
            configuration: configuration,
            baseDirectory: folder.url,
            transport: try CurlHTTPTransport(),
            logger: Logger(label: "test")
        )
        let error = await courierError { _ = try await validator.validate(Data("MIAGCSqGSIb3DQEHAqCAMIACAQEAAAAAAAA=".utf8)) }
        #expect(error.flatMap(ReceiptCheck.init(failing:)) == .revoked)
        #expect(error?.exitCode == 3)
    }
}

/// Collects rendered log lines (message and metadata) for the secret check.
final class LogSink: @unchecked Sendable {  // @unchecked: `storage` is guarded by `lock`.
    private let lock = NSLock()
    private var storage: [String] = []
    func append(_ line: String) {
        lock.lock()
        storage.append(line)
        lock.unlock()
    }
    var lines: [String] {
        lock.lock()
        defer { lock.unlock() }
        return storage
    }
}

struct CapturingLogHandler: LogHandler {
    let sink: LogSink
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        sink.append("\(event.level) \(event.message) \(event.metadata ?? [:]) \(metadata)")
    }
}

@Suite("LegacyReceiptShape: the PKCS#7 check before verifyReceipt")
struct LegacyReceiptShapeTests {
    static let oid: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]

    @Test("BER with indefinite lengths (Apple's) and DER pass; other shapes are named")
    func shapes() {
        #expect(LegacyReceiptShape.problem([0x30, 0x80] + Self.oid + [0xA0, 0x80, 0x30, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00]) == nil)
        #expect(LegacyReceiptShape.problem([0x30, 0x0F] + Self.oid + [0xA0, 0x02, 0x30, 0x00]) == nil)
        // Long-form lengths: 0x81 0x0F is 15 bytes too.
        #expect(LegacyReceiptShape.problem([0x30, 0x81, 0x0F] + Self.oid + [0xA0, 0x02, 0x30, 0x00]) == nil)
        #expect(LegacyReceiptShape.problem([]) == "it is not an ASN.1 SEQUENCE")
        #expect(LegacyReceiptShape.problem(Array("legacy receipt bytes".utf8)) == "it is not an ASN.1 SEQUENCE")
        #expect(LegacyReceiptShape.problem([0x30, 0x10] + Self.oid + [0xA0, 0x02, 0x30, 0x00]) == "its SEQUENCE says 16 bytes but 15 follow")
        #expect(LegacyReceiptShape.problem([0x30, 0x80] + Self.oid + [0xA0, 0x80]) == "its SEQUENCE of indefinite length has no end")
        var data = Self.oid
        data[data.count - 1] = 0x01  // 1.2.840.113549.1.7.1, PKCS#7 data
        #expect(LegacyReceiptShape.problem([0x30, 0x0F] + data + [0xA0, 0x02, 0x30, 0x00])?.contains("not PKCS#7 signedData") == true)
        #expect(LegacyReceiptShape.problem([0x30, 0x0F] + Self.oid + [0x31, 0x02, 0x30, 0x00]) == "it has no signedData content")
        #expect(LegacyReceiptShape.problem([0x30, 0x0F] + Self.oid + [0xA0, 0x05, 0x30, 0x00]) == "its signedData content is cut short")
        // Lengths of more than 4 bytes, or longer than the input, are refused, never read past the end.
        #expect(LegacyReceiptShape.problem([0x30, 0x88, 1, 2, 3, 4, 5, 6, 7, 8]) == "it is not an ASN.1 SEQUENCE")
        #expect(LegacyReceiptShape.problem([0x30, 0x84, 0xFF, 0xFF]) == "it is not an ASN.1 SEQUENCE")
    }
}
