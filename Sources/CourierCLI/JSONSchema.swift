import Courier
import CourierServer
import Foundation

// The one schema of `--json` output (docs/json.md): every line a command prints under `--json`
// is one of the `JSONEvent` values below, written by `Output.emit` with one encoder (JSONEncoder:
// keys sorted, `/` not escaped) that adds `event` and `time`. No line is built from an untyped
// dictionary.
//
// Adding an event (or a command's `result`):
// 1. Declare a struct here conforming to `JSONEvent`: `static let event` (the `event` value),
//    `static let from` (the commands that print it, as docs/json.md's "from" column says it).
//    Optional fields are left out when nil; a field that must print `null` is a `Nullable`.
// 2. Add one sample value to `JSONSchema.allExamples`, every optional field set and every array
//    non-empty, so each field shows.
// 3. Add its row to the events table of docs/json.md (event, from, every field path).
// `JSONSchemaDocTests` fails until the three agree, and when a `JSONEvent` type has no sample.

/// One line of `--json` output: an event, a command's `result`, or its `error`.
protocol JSONEvent: Encodable, Sendable {
    /// The `event` field: what kind of line this is.
    static var event: String { get }
    /// The commands that print it (docs/json.md's "from" column).
    static var from: String { get }
}

/// A value printed as `null` when absent (a field whose absence is part of the schema).
struct Nullable<Value: Encodable & Sendable>: Encodable, Sendable {
    var value: Value?

    init(_ value: Value?) { self.value = value }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let value { try container.encode(value) } else { try container.encodeNil() }
    }
}

/// The process that works a download: the same object in `download`, `waitingForOwner`,
/// `list`, `status` and `status --watch`.
struct JSONOwner: Encodable, Sendable, Equatable {
    var pid: Int32
    var host: String
    /// Whether the process still runs (a followed owner is alive).
    var alive: Bool
    /// When it last said it works on the download; absent when not known (events of a followed
    /// owner).
    var heartbeatAt: Date?

    init(pid: Int32, host: String, alive: Bool, heartbeatAt: Date?) {
        self.pid = pid
        self.host = host
        self.alive = alive
        self.heartbeatAt = heartbeatAt
    }

    /// A live owner another process's download was seen worked by.
    init(live owner: LeaseOwner) {
        self.init(pid: owner.pid, host: owner.host, alive: true, heartbeatAt: nil)
    }
}

/// A download's error: its `CourierError` code and message.
struct JSONErrorInfo: Encodable, Sendable, Equatable {
    var code: String
    var message: String
}

// MARK: - Every command

/// A command failed (the last line; `exitCode` is the process's).
struct ErrorEvent: JSONEvent {
    static let event = "error"
    static let from = "every command"
    var code: String
    var message: String
    var exitCode: Int32
    var cause: String?
    var hint: String?
    /// `receipt verify`, `receipt entitlements`: the receipt check that failed.
    var check: String?
}

/// A transfer is retried.
struct RetryEvent: JSONEvent {
    static let event = "retry"
    static let from = "get, deliver, resume, update"
    /// `get`: the file being saved.
    var file: String?
    /// `deliver` (and the commands that deliver): the download.
    var downloadId: String?
    var retry: Int
    var maxRetries: Int
    var delay: Double
    var code: String
    var message: String
    var cause: String?

    init(_ retry: TransferRetry, file: String?, downloadId: String?) {
        self.file = file
        self.downloadId = downloadId
        self.retry = retry.retry
        self.maxRetries = retry.maxRetries
        self.delay = (retry.delay * 1000).rounded() / 1000
        self.code = retry.error.code.rawValue
        self.message = retry.error.message
        self.cause = retry.error.cause
    }
}

// MARK: - get

/// The fields of one saved file.
struct SavedFileFields: Encodable, Sendable {
    var file: String
    var length: Int64
    var sha256: String
    var bytesFetched: Int64
    var resumedFrom: Int64
    /// The URL that served the file's last bytes (the one given or a `--mirror`).
    var url: String?
}

extension SavedFileFields {
    init(_ result: DownloadResult) {
        file = result.file.path
        length = result.length
        sha256 = result.sha256
        bytesFetched = result.bytesFetched
        resumedFrom = result.resumedFrom
        url = result.source?.absoluteString
    }
}

/// `get URL`: the file saved.
struct GetResult: JSONEvent {
    static let event = "result"
    static let from = "get"
    var saved: SavedFileFields
    func encode(to encoder: any Encoder) throws { try saved.encode(to: encoder) }
}

/// `get -i`: one file of the list saved.
struct GetSavedEvent: JSONEvent {
    static let event = "saved"
    static let from = "get URL URL…, get -i"
    var saved: SavedFileFields
    func encode(to encoder: any Encoder) throws { try saved.encode(to: encoder) }
}

/// `get -i`: every file of the list saved.
struct GetListResult: JSONEvent {
    static let event = "result"
    static let from = "get URL URL…, get -i"
    var saved: Int
    var directory: String
}

/// `get -i`: one file of the list failed.
struct GetFailedEvent: JSONEvent {
    static let event = "failed"
    static let from = "get URL URL…, get -i"
    var file: String
    var code: String
    var message: String
}

/// `get -i`: one line of the list refused.
struct GetRefusedEvent: JSONEvent {
    static let event = "refused"
    static let from = "get URL URL…, get -i"
    /// Its line in the list (`-i`), or
    var line: Int?
    /// its position on the command line (from 1).
    var argument: Int?
    var url: String
    var code: String
    var message: String
}

/// `content open`: the content placed and pinned.
struct ContentOpenResult: JSONEvent {
    static let event = "result"
    static let from = "content open"
    var contentIdentifier: String
    var contentPath: String
    var delivery: String
    var preservation: String
    /// `open` (until `content close`) or `held` (while the `--hold` process lives).
    var pin: String
    /// False: it was placed already (a lookup).
    var fetched: Bool
}

/// `content close`: the pin `content open` left ended.
struct ContentCloseResult: JSONEvent {
    static let event = "result"
    static let from = "content close"
    var contentIdentifier: String
    var wasPinned: Bool
}

/// `wait --essential`: every essential content placed.
struct WaitEssentialResult: JSONEvent {
    static let event = "result"
    static let from = "wait --essential"
    var essentialPlaced: Bool
}

/// `wait --essential`: the essential content not placed yet, when that list changes.
struct WaitingEvent: JSONEvent {
    static let event = "waiting"
    static let from = "wait --essential"
    var pending: [String]
}

/// `get --mirror`: the download switches to another URL.
struct GetMirrorEvent: JSONEvent {
    static let event = "mirror"
    static let from = "get --mirror"
    var file: String?
    /// The URL that failed.
    var failedURL: String
    /// The URL tried next.
    var nextURL: String
    var code: String
    var message: String
    var cause: String?

    enum CodingKeys: String, CodingKey {
        case file, failedURL = "from", nextURL = "to", code, message, cause
    }
}

/// `get`: progress of the transfer.
struct GetProgressEvent: JSONEvent {
    static let event = "progress"
    static let from = "get"
    var file: String
    var bytesReceived: Int64
    var rate: Int64
    var contentLength: Int64?
    var progress: Double?
    var timeRemaining: Double?
}

// MARK: - enqueue, pause, resume, cancel, discard

/// `enqueue`: what was queued.
struct EnqueueResult: JSONEvent {
    static let event = "result"
    static let from = "enqueue"
    struct Transaction: Encodable, Sendable {
        var transactionId: String
        var productId: String
        var state: String
        var downloads: [Download]
    }
    struct Download: Encodable, Sendable {
        var downloadId: String
        var contentIdentifier: String
        var state: String
    }
    var transactions: [Transaction]
    /// Queued through a running agent.
    var agent: Bool
}

/// `pause`, `resume`, `cancel`, `discard`: the downloads changed (empty: nothing to do).
struct QueueChangeResult: JSONEvent {
    static let event = "result"
    static let from = "pause, resume, cancel, discard"
    struct Download: Encodable, Sendable {
        var downloadId: String
        var transactionId: String
        var state: String
    }
    var downloads: [Download]
}

/// `priority`: the downloads whose priority changed (empty: nothing to do).
struct PriorityResult: JSONEvent {
    static let event = "result"
    static let from = "priority"
    struct Download: Encodable, Sendable {
        var downloadId: String
        var transactionId: String
        var state: String
        var priority: String
    }
    /// The priority asked for.
    var priority: String
    var downloads: [Download]
}

/// SIGHUP reloaded the configuration's rate limits (`none`: unset).
struct ReloadedEvent: JSONEvent {
    static let event = "reloaded"
    static let from = "deliver"
    var message: String
    var maxRate: String
    var backgroundMaxRate: String
    /// The windows, `HH:MM-HH:MM=rate/background`, comma-separated.
    var rateSchedule: String
}

/// SIGHUP found a configuration that does not load; the limits in force stay.
struct ReloadFailedEvent: JSONEvent {
    static let event = "reloadFailed"
    static let from = "deliver"
    var message: String
    var error: String
}

/// `resume` without an agent: the downloads resumed, which it then delivers (its `result` is
/// `deliver`'s).
struct ResumedEvent: JSONEvent {
    static let event = "resumed"
    static let from = "resume"
    var downloads: [QueueChangeResult.Download]
}

// MARK: - deliver, resume, update

/// Another live process works these downloads.
struct WaitingForOwnerEvent: JSONEvent {
    static let event = "waitingForOwner"
    static let from = "deliver"
    var owners: [JSONOwner]
    var downloads: [String]
}

/// An update fetches its whole package instead of its changed entries.
struct WholePackageEvent: JSONEvent {
    static let event = "wholePackage"
    static let from = "update, deliver, resume"
    var downloadId: String
    var contentIdentifier: String
    var contentLength: Int64
    var reason: String
}

/// A download changed.
struct DownloadEvent: JSONEvent {
    static let event = "download"
    static let from = "deliver, resume, update, content verify --repair"
    var downloadId: String
    var transactionId: String
    var contentIdentifier: String
    var state: String
    var progress: Double
    var bytesReceived: Int64
    var contentLength: Int64
    var rate: Double
    var timeRemaining: Double?
    var error: JSONErrorInfo?
    var contentPath: String?
    var fromVersion: String?
    /// A download another live process works (absent for this process's own).
    var owner: JSONOwner?
}

/// A transaction changed.
struct TransactionEvent: JSONEvent {
    static let event = "transaction"
    static let from = "deliver, resume, update"
    var transactionId: String
    var productId: String
    var state: String
}

/// A download a run left unfinished (in `deliver`'s and `update`'s results).
struct UnfinishedDownload: Encodable, Sendable {
    var downloadId: String
    var state: String
    var error: Nullable<String>

    static func list(_ downloads: [DownloadRecord]) -> [UnfinishedDownload] {
        downloads.map { UnfinishedDownload(downloadId: $0.id, state: $0.state.rawValue, error: Nullable($0.errorCode?.rawValue)) }
    }
}

/// `deliver` (a first run and a re-run alike).
struct DeliverResult: JSONEvent {
    static let event = "result"
    static let from = "deliver, resume"
    var finishedDownloads: [String]
    var finishedTransactions: [String]
    var unfinished: [UnfinishedDownload]
    /// The paths of the content placed.
    var content: [String]
    /// Transactions delivered before this run.
    var alreadyDelivered: [String]
}

/// `update`: an update about to run.
struct UpdateEvent: JSONEvent {
    static let event = "update"
    static let from = "update"
    var downloadId: String
    var contentIdentifier: String
    var fromVersion: String
    var toVersion: String
    var contentLength: Int64
    var url: String
}

/// `update`: what was updated, what is up to date, what was skipped.
struct UpdateResult: JSONEvent {
    static let event = "result"
    static let from = "update"
    struct Updated: Encodable, Sendable {
        var downloadId: String
        var contentIdentifier: String
        var fromVersion: Nullable<String>
        var toVersion: String
        var contentPath: Nullable<String>
    }
    struct UpToDate: Encodable, Sendable {
        var contentIdentifier: String
        var version: String
    }
    struct Skipped: Encodable, Sendable {
        var contentIdentifier: String
        var reason: String
        var message: String
        var installedVersion: String
        var catalogVersion: Nullable<String>
    }
    var updated: [Updated]
    var unfinished: [UnfinishedDownload]
    var upToDate: [UpToDate]
    var skipped: [Skipped]

    init(updated: [DownloadRecord], unfinished: [DownloadRecord], plan: UpdatePlan, skipped: [UpdatePlan.Skipped]) {
        self.updated = updated.map {
            Updated(
                downloadId: $0.id, contentIdentifier: $0.contentIdentifier, fromVersion: Nullable($0.updateFrom),
                toVersion: $0.version, contentPath: Nullable($0.contentURL?.path))
        }
        self.unfinished = UnfinishedDownload.list(unfinished)
        self.upToDate = plan.upToDate.map { UpToDate(contentIdentifier: $0.contentIdentifier, version: $0.version) }
        self.skipped = skipped.map {
            Skipped(
                contentIdentifier: $0.contentIdentifier, reason: $0.reason.rawValue, message: $0.message,
                installedVersion: $0.installedVersion, catalogVersion: Nullable($0.catalogVersion))
        }
    }

    init(updated: [Updated], unfinished: [UnfinishedDownload], upToDate: [UpToDate], skipped: [Skipped]) {
        (self.updated, self.unfinished, self.upToDate, self.skipped) = (updated, unfinished, upToDate, skipped)
    }
}

// MARK: - status --watch

/// `status --watch`: the entries changed.
struct StatusEvent: JSONEvent {
    static let event = "status"
    static let from = "status --watch, top"
    var entries: [QueueListing.Line]
}

/// `status --watch`: the entries once nothing moves.
struct StatusResult: JSONEvent {
    static let event = "result"
    static let from = "status --watch, top"
    var entries: [QueueListing.Line]
}

// MARK: - content

/// `content verify`: one content checked.
struct VerifiedContentEvent: JSONEvent {
    static let event = "verified"
    static let from = "content verify"
    var contentIdentifier: String
    var productId: String
    var version: String
    var placement: String
    var contentPath: String
    var status: String
    var missingFiles: [String]
    var damagedFiles: [String]
    var filesChecked: Int
    /// The check after `--repair` mended it.
    var repaired: Bool
}

/// `content verify --repair`: one content being mended.
struct RepairEvent: JSONEvent {
    static let event = "repair"
    static let from = "content verify --repair"
    var contentIdentifier: String
    var method: String
    var bytesFetched: Int64?
    var downloadId: String?
}

/// `content verify`: every content as delivered.
struct ContentVerifyResult: JSONEvent {
    static let event = "result"
    static let from = "content verify"
    var ok: [String]
    var unverifiable: [String]
}

/// `content delete`: the content deleted.
struct ContentDeleteResult: JSONEvent {
    static let event = "result"
    static let from = "content delete"
    var contentIdentifier: String
}

// MARK: - receipt, sandbox

/// A transaction a receipt proves.
struct JSONTransaction: Encodable, Sendable {
    var productId: String
    var transactionId: String
    var originalTransactionId: String
    var bundleId: String
    var type: String
    var environment: String
    var purchaseDate: String?
    var signedDate: String?
    var expiresDate: Nullable<String>
    var revocationDate: String?

    init(
        productId: String, transactionId: String, originalTransactionId: String, bundleId: String, type: String,
        environment: String, purchaseDate: String?, signedDate: String?, expiresDate: String?, revocationDate: String?
    ) {
        self.productId = productId
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.bundleId = bundleId
        self.type = type
        self.environment = environment
        self.purchaseDate = purchaseDate
        self.signedDate = signedDate
        self.expiresDate = Nullable(expiresDate)
        self.revocationDate = revocationDate
    }

    init(_ transaction: VerifiedTransaction) {
        self.init(
            productId: transaction.productId, transactionId: transaction.transactionId,
            originalTransactionId: transaction.originalTransactionId, bundleId: transaction.bundleId,
            type: SignedTransactionPayload.appStoreName(of: transaction.type), environment: transaction.environment,
            purchaseDate: ReceiptCLI.iso(transaction.purchaseDate), signedDate: ReceiptCLI.iso(transaction.signedDate),
            expiresDate: ReceiptCLI.iso(transaction.expiresDate), revocationDate: ReceiptCLI.iso(transaction.revocationDate))
    }
}

/// `receipt verify`: the transactions the receipt proves.
struct ReceiptVerifyResult: JSONEvent {
    static let event = "result"
    static let from = "receipt verify"
    var transactions: [JSONTransaction]
}

/// `receipt entitlements`: the content the receipts unlock.
struct EntitlementsResult: JSONEvent {
    static let event = "result"
    static let from = "receipt entitlements"
    struct Content: Encodable, Sendable {
        var contentIdentifier: String
        var productId: String
        var transactionId: String
        var url: String
        var sha256: String
        var length: Int64
        var version: String
        var placement: String
        var itemId: String?
    }
    var content: [Content]
}

/// `sandbox init`: the sandbox store.
struct SandboxInitResult: JSONEvent {
    static let event = "result"
    static let from = "sandbox init"
    var created: Bool
    var directory: String
    var trustRoot: String
    var trustRootDER: String
    var catalog: String
    var catalogRoot: String
    var keys: String
    var products: [String]
}

/// `sandbox purchase`: the signed transaction.
struct SandboxPurchaseResult: JSONEvent {
    static let event = "result"
    static let from = "sandbox purchase"
    var productId: String
    var transactionId: String
    var signedTransaction: String
}

// MARK: - serve, origin

/// `serve`: the origin listens.
struct ListeningEvent: JSONEvent {
    static let event = "listening"
    static let from = "serve"
    var host: String
    var port: Int
    var url: String
    var content: String
    var gated: Bool
}

/// `serve --metrics-port`, `prestage --metrics-port`: the metrics endpoint listens.
struct MetricsEvent: JSONEvent {
    static let event = "metrics"
    static let from = "serve, prestage"
    var host: String
    var port: Int
    var url: String
}

/// `serve`: a signal asked it to stop; open requests are being finished.
struct StoppingEvent: JSONEvent {
    static let event = "stopping"
    static let from = "serve"
    var signal: String
}

/// `serve`: it stopped (written once every listener is closed).
struct ServeResult: JSONEvent {
    static let event = "result"
    static let from = "serve"
    /// The folder it served.
    var content: String
    var stopped: Bool
}

/// `origin nginx-config`: the configuration written.
struct NginxConfigResult: JSONEvent {
    static let event = "result"
    static let from = "origin nginx-config"
    var content: String
    var gates: [String]
    var listen: String
    /// Seconds nginx keeps a gate's decision (0: none kept).
    var decisionCache: Int
    var configuration: String
}

// MARK: - prestage

/// `prestage`: what the run stages.
struct PrestagePlannedEvent: JSONEvent {
    static let event = "planned"
    static let from = "prestage"
    var packages: Int
    var bytes: Int64
    var unchanged: Int
    var refused: Int
}

/// `prestage`: one package started.
struct PrestageStartedEvent: JSONEvent {
    static let event = "started"
    static let from = "prestage"
    var contentIdentifier: String
    var url: String
}

/// `prestage`: one package staged.
struct PrestageStagedEvent: JSONEvent {
    static let event = "staged"
    static let from = "prestage"
    var contentIdentifier: String
    var bytesFetched: Int64
    var path: String
}

/// `prestage`: one package failed.
struct PrestageFailedEvent: JSONEvent {
    static let event = "failed"
    static let from = "prestage"
    var contentIdentifier: String
    var code: String
    var message: String
    var cause: String?
}

/// `prestage`: the catalog published.
struct PrestagePublishedEvent: JSONEvent {
    static let event = "published"
    static let from = "prestage"
    var packages: Int
    var changed: Bool
}

/// `prestage`: overall progress, once a second.
struct PrestageProgressEvent: JSONEvent {
    static let event = "progress"
    static let from = "prestage"
    var packages: Int
    var packagesDone: Int
    var packagesFailed: Int
    var bytesReceived: Int64
    var contentLength: Int64
    var rate: Int64
    var timeRemaining: Double?
}

/// `prestage --tuf-keys`: the catalog's TUF metadata signed.
struct PrestageSignedEvent: JSONEvent {
    static let event = "signed"
    static let from = "prestage"
    var root: Int64
    var targets: Int64
    var snapshot: Int64
    var timestamp: Int64
    var target: String
}

/// The numbers of a `prestage` run.
struct PrestageSummaryFields: Encodable, Sendable {
    struct Failure: Encodable, Sendable {
        var contentIdentifier: String
        var code: String
        var message: String
    }
    var staged: Int
    var unchanged: Int
    var failed: [Failure]
    var bytesFetched: Int64
    var catalogChanged: Bool
    var seconds: Double
}

/// `prestage`: some packages failed; the `error` follows.
struct PrestageSummaryEvent: JSONEvent {
    static let event = "summary"
    static let from = "prestage"
    var summary: PrestageSummaryFields
    func encode(to encoder: any Encoder) throws { try summary.encode(to: encoder) }
}

/// `prestage`: every package staged (or unchanged).
struct PrestageResult: JSONEvent {
    static let event = "result"
    static let from = "prestage"
    var summary: PrestageSummaryFields
    func encode(to encoder: any Encoder) throws { try summary.encode(to: encoder) }
}

// MARK: - The samples

enum JSONSchema {
    /// One sample of every `JSONEvent` type, every optional field set and every array non-empty:
    /// the schema docs/json.md is checked against (`JSONSchemaDocTests`).
    static var allExamples: [any JSONEvent] {
        let date = Date(timeIntervalSince1970: 1_795_000_000)
        let owner = JSONOwner(pid: 4242, host: "host", alive: true, heartbeatAt: date)
        let line = QueueListing.Line.example(owner: owner)
        let saved = SavedFileFields(
            file: "/tmp/a.bin", length: 12, sha256: "ab", bytesFetched: 12, resumedFrom: 0, url: "http://127.0.0.1:8080/a.bin")
        let retry = TransferRetry(
            id: "d1", retry: 1, maxRetries: 5, delay: 0.25, error: CourierError(.network, "HTTP 503", cause: "HTTP 503"))
        let prestageSummary = PrestageSummaryFields(
            staged: 1, unchanged: 0, failed: [.init(contentIdentifier: "q", code: "network", message: "m")], bytesFetched: 3,
            catalogChanged: true, seconds: 0.5)
        let retryEvent = RetryEvent(retry, file: "/tmp/a.bin", downloadId: "d1")
        return [
            ErrorEvent(code: "usage", message: "m", exitCode: 2, cause: "c", hint: "h", check: "format"),
            retryEvent,
            GetResult(saved: saved),
            GetSavedEvent(saved: saved),
            GetListResult(saved: 1, directory: "/tmp"),
            GetFailedEvent(file: "/tmp/a.bin", code: "network", message: "m"),
            GetRefusedEvent(line: 2, argument: 3, url: "x", code: "usage", message: "m"),
            ContentOpenResult(
                contentIdentifier: "p", contentPath: "/c", delivery: "onDemand", preservation: "normal", pin: "open", fetched: true),
            ContentCloseResult(contentIdentifier: "p", wasPinned: true),
            PriorityResult(priority: "high", downloads: [.init(downloadId: "d1", transactionId: "t1", state: "waiting", priority: "high")]),
            ReloadedEvent(message: "configuration reloaded", maxRate: "8M", backgroundMaxRate: "none", rateSchedule: "09:00-17:00=1M/none"),
            ReloadFailedEvent(message: "cannot reload the configuration; keeping the one in force", error: "e"),
            WaitEssentialResult(essentialPlaced: true),
            WaitingEvent(pending: ["p"]),
            GetMirrorEvent(
                file: "/tmp/a.bin", failedURL: "http://127.0.0.1:1/a.bin", nextURL: "http://127.0.0.1:2/a.bin", code: "network",
                message: "m", cause: "HTTP 503"),
            GetProgressEvent(file: "/tmp/a.bin", bytesReceived: 1, rate: 1, contentLength: 2, progress: 0.5, timeRemaining: 1),
            EnqueueResult(
                transactions: [
                    .init(transactionId: "t1", productId: "p", state: "purchased", downloads: [.init(downloadId: "d1", contentIdentifier: "p", state: "waiting")])
                ], agent: false),
            QueueChangeResult(downloads: [.init(downloadId: "d1", transactionId: "t1", state: "paused")]),
            ResumedEvent(downloads: [.init(downloadId: "d1", transactionId: "t1", state: "waiting")]),
            WaitingForOwnerEvent(owners: [owner], downloads: ["d1"]),
            WholePackageEvent(downloadId: "d1", contentIdentifier: "p", contentLength: 3, reason: "r"),
            DownloadEvent.example(owner: owner),
            TransactionEvent(transactionId: "t1", productId: "p", state: "finished"),
            DeliverResult(
                finishedDownloads: ["d1"], finishedTransactions: ["t1"],
                unfinished: [UnfinishedDownload(downloadId: "d2", state: "failed", error: Nullable("network"))], content: ["/c"],
                alreadyDelivered: ["t0"]),
            UpdateEvent(downloadId: "d1", contentIdentifier: "p", fromVersion: "1", toVersion: "2", contentLength: 3, url: "http://x"),
            UpdateResult(
                updated: [.init(downloadId: "d1", contentIdentifier: "p", fromVersion: Nullable("1"), toVersion: "2", contentPath: Nullable("/c"))],
                unfinished: [UnfinishedDownload(downloadId: "d2", state: "failed", error: Nullable("network"))],
                upToDate: [.init(contentIdentifier: "q", version: "1")],
                skipped: [.init(contentIdentifier: "r", reason: "downgrade", message: "m", installedVersion: "2", catalogVersion: Nullable("1"))]),
            StatusEvent(entries: [line]),
            StatusResult(entries: [line]),
            VerifiedContentEvent(
                contentIdentifier: "p", productId: "p", version: "1", placement: "applicationSupport", contentPath: "/c", status: "damaged",
                missingFiles: ["a"], damagedFiles: ["b"], filesChecked: 2, repaired: false),
            RepairEvent(contentIdentifier: "p", method: "entries", bytesFetched: 3, downloadId: "d1"),
            ContentVerifyResult(ok: ["p"], unverifiable: ["q"]),
            ContentDeleteResult(contentIdentifier: "p"),
            ReceiptVerifyResult(transactions: [
                JSONTransaction(
                    productId: "p", transactionId: "t1", originalTransactionId: "t0", bundleId: "b", type: "Non-Consumable",
                    environment: "Sandbox", purchaseDate: "2026-01-01T00:00:00Z", signedDate: "2026-01-01T00:00:00Z",
                    expiresDate: nil, revocationDate: "2026-01-02T00:00:00Z")
            ]),
            EntitlementsResult(content: [
                .init(
                    contentIdentifier: "p", productId: "p", transactionId: "t1", url: "http://x", sha256: "ab", length: 3, version: "1",
                    placement: "applicationSupport", itemId: "i")
            ]),
            SandboxInitResult(
                created: true, directory: "/s", trustRoot: "/s/r.pem", trustRootDER: "/s/r.der", catalog: "/s/catalog.json",
                catalogRoot: "/s/metadata/1.root.json", keys: "/s/keys", products: ["p"]),
            SandboxPurchaseResult(productId: "p", transactionId: "t1", signedTransaction: "a.b.c"),
            ListeningEvent(host: "127.0.0.1", port: 8080, url: "http://127.0.0.1:8080", content: "/c", gated: true),
            MetricsEvent(host: "127.0.0.1", port: 9090, url: "http://127.0.0.1:9090/metrics"),
            StoppingEvent(signal: "SIGTERM"),
            ServeResult(content: "/c", stopped: true),
            NginxConfigResult(content: "/c", gates: ["127.0.0.1:8081"], listen: "8080", decisionCache: 5, configuration: "events {}"),
            PrestagePlannedEvent(packages: 1, bytes: 3, unchanged: 0, refused: 0),
            PrestageStartedEvent(contentIdentifier: "p", url: "http://x"),
            PrestageStagedEvent(contentIdentifier: "p", bytesFetched: 3, path: "p/1.zip"),
            PrestageFailedEvent(contentIdentifier: "p", code: "network", message: "m", cause: "c"),
            PrestagePublishedEvent(packages: 1, changed: true),
            PrestageProgressEvent(packages: 1, packagesDone: 0, packagesFailed: 0, bytesReceived: 1, contentLength: 3, rate: 1, timeRemaining: 2),
            PrestageSignedEvent(root: 1, targets: 1, snapshot: 1, timestamp: 1, target: "catalog.json"),
            PrestageSummaryEvent(summary: prestageSummary),
            PrestageResult(summary: prestageSummary),
        ]
    }
}

extension DownloadEvent {
    /// `record` as it changed; `owner`: another live process works it.
    init(_ record: DownloadRecord, owner: LeaseOwner?) {
        downloadId = record.id
        transactionId = record.transactionId
        contentIdentifier = record.contentIdentifier
        state = record.state.rawValue
        progress = record.progress
        bytesReceived = record.bytesReceived
        contentLength = record.length
        rate = record.rate
        timeRemaining = record.timeRemaining
        error = record.errorCode.map { JSONErrorInfo(code: $0.rawValue, message: record.errorMessage ?? "") }
        contentPath = record.contentURL?.path
        fromVersion = record.updateFrom
        self.owner = owner.map(JSONOwner.init(live:))
    }

    /// A sample with every field set (`JSONSchema.allExamples`).
    static func example(owner: JSONOwner) -> DownloadEvent {
        DownloadEvent(
            downloadId: "d1", transactionId: "t1", contentIdentifier: "p", state: "active", progress: 0.5, bytesReceived: 1,
            contentLength: 2, rate: 1, timeRemaining: 1, error: JSONErrorInfo(code: "network", message: "m"), contentPath: "/c",
            fromVersion: "1", owner: owner)
    }
}

extension JSONSchema {
    /// One sample of `allExamples` as `COURIER_JSON_SCHEMA_SAMPLES=1 courier` prints it: the
    /// line as `Output.emit` writes it, the type and its `from`, and the paths of any optional
    /// field left nil or array left empty in the sample (which would hide fields from the check).
    struct Sample<Event: JSONEvent>: Encodable {
        var type: String
        var from: String
        var line: Output.Envelope<Event>
        var unset: [String]

        init(_ value: Event) {
            type = String(describing: Event.self)
            from = Event.from
            line = Output.Envelope(value: value, time: NDJSONLogHandler.timestamp(Date()))
            unset = JSONSchema.unset(in: value, path: "")
        }
    }

    /// What a command does when one of its lines cannot be encoded (a non-finite number):
    /// through `Output` as every command, a `download` event with a NaN rate, then a `result`.
    /// Returns the exit code `GlobalOptions.run` ends such a command with.
    static func emitUnencodable() -> Int32 {
        let output = Output(json: true)
        var event = DownloadEvent.example(owner: JSONOwner(pid: 1, host: "host", alive: true, heartbeatAt: nil))
        event.rate = .nan
        output.emit(event)
        output.emit(ContentDeleteResult(contentIdentifier: "p"))
        return output.encodingFailed ? 1 : 0
    }

    /// The sample lines, one per line on standard output (JSONSchemaDocTests reads them).
    static func printSamples() {
        let encoder = Output.encoder()
        for example in allExamples {
            func line<Event: JSONEvent>(_ value: Event) -> String {
                guard let data = try? encoder.encode(Sample(value)) else { return #"{"error":"\#(Event.self) cannot be encoded"}"# }
                return String(decoding: data, as: UTF8.self)
            }
            print(line(example))
        }
    }

    /// The paths below `value` of optional properties that are nil and of arrays that are empty
    /// (a `Nullable` may be nil: it prints `null`).
    static func unset(in value: Any, path: String) -> [String] {
        let mirror = Mirror(reflecting: value)
        if String(describing: mirror.subjectType).hasPrefix("Nullable<") { return [] }
        if mirror.displayStyle == .optional {
            guard let wrapped = mirror.children.first?.value else { return [path] }
            return unset(in: wrapped, path: path)
        }
        if mirror.displayStyle == .collection {
            if mirror.children.isEmpty { return [path] }
            return mirror.children.flatMap { unset(in: $0.value, path: path) }
        }
        guard mirror.displayStyle == .struct else { return [] }
        return mirror.children.flatMap { child in
            unset(in: child.value, path: path.isEmpty ? child.label ?? "?" : path + "." + (child.label ?? "?"))
        }
    }
}

extension QueueListing.Line {
    /// A sample with every field set (`JSONSchema.allExamples`).
    static func example(owner: JSONOwner) -> QueueListing.Line {
        var line = QueueListing.Line(transactionId: "t1", productId: "p", transactionState: "purchased")
        line.revoked = true
        line.downloadId = "d1"
        line.contentIdentifier = "p"
        line.state = "active"
        line.pauseReason = "user"
        line.progress = 0.5
        line.bytesReceived = 1
        line.contentLength = 2
        line.contentVersion = "2"
        line.placement = "applicationSupport"
        line.rate = 1
        line.timeRemaining = 1
        line.error = ErrorLine(code: "network", message: "m")
        line.contentPath = "/c"
        line.owner = owner
        line.stalled = "network"
        line.updateFrom = "1"
        line.source = "http://x"
        line.mirrors = ["http://y"]
        line.delivery = "prefetch"
        line.preservation = "low"
        line.priority = "low"
        return line
    }

    private init(transactionId: String, productId: String, transactionState: String) {
        self.transactionId = transactionId
        self.productId = productId
        self.transactionState = transactionState
    }
}
