import Courier
import CourierTestSupport
import Crypto
import Foundation
import Logging

/// Builders for queue tests: verified transactions, content, a queue on a fresh storage folder,
/// and in-memory pipeline stages that do real file I/O.
enum QueueFixtures {
    static func transaction(_ id: String, product: String = "com.example.pack", restored: Bool = false) -> VerifiedTransaction {
        VerifiedTransaction(
            transactionId: id, originalTransactionId: id, productId: product, bundleId: "com.example.app",
            type: .nonConsumable, purchaseDate: Date(timeIntervalSince1970: 1_700_000_000), environment: "Sandbox",
            signedDate: Date(timeIntervalSince1970: 1_700_000_001))
    }

    static func content(
        for transaction: VerifiedTransaction, identifier: String? = nil, payload: Data = Data("payload".utf8),
        placement: Catalog.Placement = .cache
    ) -> QueuedContent {
        QueuedContent(
            contentIdentifier: identifier ?? transaction.productId, productId: transaction.productId,
            transactionId: transaction.transactionId,
            url: URL(string: "http://127.0.0.1:9/\(identifier ?? transaction.productId).zip")!,
            sha256: sha256(payload), length: Int64(payload.count), version: "1.0", placement: placement)
    }

    static func sha256(_ data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    static func queue(_ directory: TemporaryDirectory, configure: (inout QueueConfiguration) -> Void = { _ in }) throws
        -> PaymentQueue
    {
        var configuration = QueueConfiguration()
        configuration.heartbeatInterval = 0.1
        configuration.leaseDuration = 5
        configure(&configuration)
        let layout = StorageLayout(root: directory.appending("Storage"))
        return try PaymentQueue(layout: layout, configuration: configuration, logger: Logger(label: "test"))
    }
}

/// A download stage that serves payloads from memory and writes them to the partial file and
/// then the destination, honouring the journal (resumes append) and cancellation (pause).
final class MemoryDownloader: ContentDownloading, @unchecked Sendable {  // @unchecked: mutable state is guarded by `lock`.
    enum Behaviour: Sendable {
        case deliver
        /// Write half the bytes, checkpoint, then wait until cancelled.
        case hangHalfway
        case fail(CourierError)
    }

    private let lock = NSLock()
    private var payloads: [String: Data] = [:]
    private var behaviours: [String: Behaviour] = [:]
    private(set) var running = 0
    private(set) var maxRunning = 0
    private(set) var calls: [String] = []
    private(set) var resumedFrom: [String: Int64] = [:]

    func serve(_ identifier: String, _ payload: Data, behaviour: Behaviour = .deliver) {
        lock.withLock {
            payloads[identifier] = payload
            behaviours[identifier] = behaviour
        }
    }

    func setBehaviour(_ identifier: String, _ behaviour: Behaviour) {
        lock.withLock { behaviours[identifier] = behaviour }
    }

    var snapshot: (calls: [String], maxRunning: Int, resumedFrom: [String: Int64]) {
        lock.withLock { (calls, maxRunning, resumedFrom) }
    }

    func download(
        _ download: DownloadRecord, to destination: URL, journal: any ResumeJournalStore,
        progress: @escaping @Sendable (DownloadProgress) -> Void
    ) async throws -> URL {
        let (payload, behaviour) = lock.withLock { () -> (Data?, Behaviour) in
            running += 1
            maxRunning = max(maxRunning, running)
            calls.append(download.contentIdentifier)
            return (payloads[download.contentIdentifier], behaviours[download.contentIdentifier] ?? .deliver)
        }
        defer { lock.withLock { running -= 1 } }
        guard let payload else { throw CourierError(.network, "404 for \(download.url)") }
        let partial = URL(fileURLWithPath: download.partialPath)
        var state = try journal.load(downloadId: download.id)
            ?? ResumeJournal(downloadId: download.id, url: download.url)
        lock.withLock { resumedFrom[download.contentIdentifier] = state.durableOffset }
        if !FileManager.default.fileExists(atPath: partial.path) || state.durableOffset == 0 {
            _ = FileManager.default.createFile(atPath: partial.path, contents: nil)
            state.durableOffset = 0
        }
        let handle = try FileHandle(forWritingTo: partial)
        defer { try? handle.close() }
        try handle.truncate(atOffset: UInt64(state.durableOffset))
        try handle.seekToEnd()
        switch behaviour {
        case .fail(let error):
            throw error
        case .hangHalfway:
            let half = payload.count / 2
            if state.durableOffset < half {
                try handle.write(contentsOf: payload[Int(state.durableOffset)..<half])
                try handle.synchronize()
                state.durableOffset = Int64(half)
                state.totalLength = Int64(payload.count)
                try journal.save(state)
                progress(DownloadProgress(bytesReceived: Int64(half), totalBytes: Int64(payload.count), bytesPerSecond: 100, timeRemaining: 1))
            }
            while !Task.isCancelled { try? await Task.sleep(nanoseconds: 10_000_000) }
            throw CourierError(.paused, "paused at \(state.durableOffset)")
        case .deliver:
            try handle.write(contentsOf: payload[Int(state.durableOffset)...])
            try handle.synchronize()
            progress(DownloadProgress(bytesReceived: Int64(payload.count), totalBytes: Int64(payload.count), bytesPerSecond: 1000, timeRemaining: 0))
        }
        try handle.close()
        let written = try Data(contentsOf: partial)
        guard QueueFixtures.sha256(written) == download.sha256 else {
            try? FileManager.default.removeItem(at: partial)
            throw CourierError(.integrity, "checksum mismatch for \(download.contentIdentifier)")
        }
        try? FileManager.default.removeItem(at: destination)
        try FileManager.default.moveItem(at: partial, to: destination)
        try journal.remove(downloadId: download.id)
        return destination
    }
}

/// An install stage that copies the package into `<root>/<placement>/<contentIdentifier>/payload`.
struct CopyInstaller: ContentInstalling {
    let layout: StorageLayout

    func install(package: URL, for download: DownloadRecord) throws -> URL {
        let base = download.placement == .cache ? layout.caches : layout.documents
        let folder = base.appendingPathComponent(download.contentIdentifier)
        try? FileManager.default.removeItem(at: folder)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: package, to: folder.appendingPathComponent("payload"))
        return folder
    }
}

/// Collects observer callbacks.
final class RecordingObserver: PaymentQueueObserver, @unchecked Sendable {  // @unchecked: guarded by `lock`.
    private let lock = NSLock()
    private var log: [String] = []

    var events: [String] { lock.withLock { log } }

    func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [TransactionRecord]) {
        lock.withLock { log += transactions.map { "transaction \($0.id) \($0.state.rawValue)" } }
    }

    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord]) {
        lock.withLock { log += downloads.map { "download \($0.contentIdentifier) \($0.state.rawValue)" } }
    }

    func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [TransactionRecord]) {
        lock.withLock { log += transactions.map { "removed \($0.id)" } }
    }

    func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue, productIds: [String]) {
        lock.withLock { log.append("restore completed \(productIds.joined(separator: ","))") }
    }

    func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: CourierError) {
        lock.withLock { log.append("restore failed \(error.code.rawValue)") }
    }
}

/// Waits for `condition` with a generous deadline (never a fixed sleep as synchronisation).
func eventually(timeout: Double = 30, _ condition: () throws -> Bool) async throws -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return true }
        try await Task.sleep(nanoseconds: 20_000_000)
    }
    return try condition()
}
