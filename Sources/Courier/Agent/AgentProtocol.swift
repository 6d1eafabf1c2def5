import Foundation

/// One request on the agent's control socket: a single line of JSON (docs/agent.md).
public struct AgentRequest: Sendable, Codable, Equatable {
    /// The operations the agent serves.
    public enum Command: String, Sendable, Codable {
        case enqueue, list, status, pause, resume, cancel, discard, priority, subscribe
    }

    public var command: Command
    /// `pause`, `resume`, `cancel`, `discard`, `priority`: download ids, transaction ids or unambiguous
    /// prefixes; `status`: the one id to show.
    public var ids: [String]?
    /// `list`: include finished transactions. `pause`, `resume`, `cancel`: every download the
    /// operation applies to.
    public var all: Bool?
    /// `list`: only stalled downloads. `resume`: every stalled download.
    public var stalled: Bool?
    /// `enqueue`: the receipt file's bytes, base64 (JWS signed transactions or a legacy receipt).
    public var receipt: String?
    /// `enqueue`: the catalog (file path or URL) instead of the agent's configured one.
    public var catalog: String?
    /// `enqueue`: only these products.
    public var products: [String]?
    /// `enqueue`: restore the completed transactions of `products`.
    public var restore: Bool?
    /// `priority`: `high`, `normal` or `low`.
    public var priority: String?

    public init(
        _ command: Command, ids: [String]? = nil, all: Bool? = nil, stalled: Bool? = nil, receipt: Data? = nil,
        catalog: String? = nil, products: [String]? = nil, restore: Bool? = nil
    ) {
        self.command = command
        self.ids = ids
        self.all = all
        self.stalled = stalled
        self.receipt = receipt?.base64EncodedString()
        self.catalog = catalog
        self.products = products
        self.restore = restore
    }

    /// The decoded bytes of `receipt`.
    public var receiptData: Data? { receipt.flatMap { Data(base64Encoded: $0) } }
}

/// The agent's answer to one request, or (after `subscribe`) one event: a line of JSON.
public struct AgentResponse: Sendable, Codable, Equatable {
    /// A refused or failed request: the `CourierError` the agent met.
    public struct Failure: Sendable, Codable, Equatable {
        public var code: String
        public var message: String
        public var cause: String?
        public var hint: String?
        public var exitCode: Int32

        public init(_ error: CourierError) {
            code = error.code.rawValue
            message = error.message
            cause = error.cause
            hint = error.hint
            exitCode = error.exitCode
        }

        public var error: CourierError {
            CourierError(.init(rawValue: code), message, cause: cause, hint: hint)
        }
    }

    public var ok: Bool
    public var error: Failure?
    /// `list`, `status`: the queue's lines.
    public var entries: [QueueEntry]?
    /// `pause`, `resume`, `cancel`, `discard`, `priority`: the downloads that changed. `enqueue`: the queued
    /// transactions' downloads. Events: updated downloads.
    public var downloads: [DownloadRecord]?
    /// `enqueue`: the queued transactions as stored. Events: updated or removed transactions.
    public var transactions: [TransactionRecord]?
    /// `enqueue`: products of purchases the catalog does not list, left unqueued.
    public var notInCatalog: [String]?
    /// Events only: `updatedTransactions`, `updatedDownloads`, `removedTransactions`,
    /// `restoreCompleted`, `restoreFailed`.
    public var event: String?
    /// `restoreCompleted` events: the restored products.
    public var productIds: [String]?

    public init(ok: Bool = true) { self.ok = ok }

    public static func failure(_ error: CourierError) -> AgentResponse {
        var response = AgentResponse(ok: false)
        response.error = Failure(error)
        return response
    }

    /// The event line the agent streams to subscribers for `event`.
    public init(event: PaymentQueueEvent) {
        ok = true
        switch event {
        case .updatedTransactions(let records):
            self.event = "updatedTransactions"
            transactions = records
        case .updatedDownloads(let records):
            self.event = "updatedDownloads"
            downloads = records
        case .removedTransactions(let records):
            self.event = "removedTransactions"
            transactions = records
        case .restoreCompleted(let products):
            self.event = "restoreCompleted"
            productIds = products
        case .restoreFailed(let failure):
            self.event = "restoreFailed"
            error = Failure(failure)
        }
    }
}

/// The JSON coding of the control protocol (dates as seconds since 1970, one line per value).
package enum AgentWire {
    static func encode<T: Encodable>(_ value: T) throws -> Data {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var data = try encoder.encode(value)
        data.append(0x0A)
        return data
    }

    package static func decode<T: Decodable>(_ type: T.Type, from line: Data) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return try decoder.decode(type, from: line)
    }
}
