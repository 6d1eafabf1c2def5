import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Serves the control socket (`Storage/agent.sock`): one thread accepts, one thread per client
/// reads newline-delimited JSON requests and writes one response line each; `subscribe` turns
/// the connection into a stream of event lines until the client closes it. Peers with another
/// uid than the agent's are refused (SO_PEERCRED). Never runs on Swift's cooperative pool.
final class AgentControlServer: @unchecked Sendable {  // @unchecked: `connections` and `stopped` are guarded by `lock`.
    typealias Handler = @Sendable (AgentRequest) -> AgentResponse

    private let listener: UnixSocketListener
    private let queue: PaymentQueue
    private let handler: Handler
    private let logger: Logger
    private let allowedUID: uid_t
    private let lock = NSLock()
    private var connections: [Int32: UnixSocketConnection] = [:]
    private var stopped = false
    private let acceptExited = DispatchSemaphore(value: 0)

    /// Binds the socket at `path` (0600; a stale one replaced). `start()` begins serving.
    init(path: String, queue: PaymentQueue, logger: Logger, allowedUID: uid_t = getuid(), handler: @escaping Handler) throws {
        listener = try UnixSocketListener(path: path)
        self.queue = queue
        self.handler = handler
        self.logger = logger
        self.allowedUID = allowedUID
    }

    func start() {
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "courier.agent.accept"
        thread.start()
    }

    /// Stops accepting, removes the socket file and disconnects every client.
    func stop() {
        let open: [UnixSocketConnection]? = lock.withLock {
            guard !stopped else { return nil }
            stopped = true
            return Array(connections.values)
        }
        guard let open else { return }
        listener.stop()
        for connection in open { connection.shutdownBoth() }
        // The accept thread closes the listening descriptor itself; wait for it briefly.
        _ = acceptExited.wait(timeout: .now() + 2)
    }

    private func acceptLoop() {
        defer {
            listener.close()
            acceptExited.signal()
        }
        while let connection = listener.accept() {
            let accepted: Bool = lock.withLock {
                guard !stopped else { return false }
                connections[connection.descriptor] = connection
                return true
            }
            guard accepted else {
                connection.close()
                return
            }
            let thread = Thread { [self] in serve(connection) }
            thread.name = "courier.agent.client"
            thread.start()
        }
    }

    private func serve(_ connection: UnixSocketConnection) {
        defer {
            lock.withLock { _ = connections.removeValue(forKey: connection.descriptor) }
            connection.close()
        }
        guard let uid = connection.peerUID(), uid == allowedUID else {
            logger.warning("refused a control connection from another user", metadata: ["uid": "\(connection.peerUID().map { "\($0)" } ?? "?")"])
            let refusal = AgentResponse.failure(
                CourierError(.notEntitled, "the agent serves only its own user (uid \(allowedUID))"))
            // Take the client's request first (waiting 2 s at most): closing with it unread would
            // reset the connection and could discard the refusal before the client reads it.
            connection.setReceiveTimeout(2)
            _ = try? connection.readLine()
            if let line = try? AgentWire.encode(refusal) { try? connection.write(line) }
            return
        }
        do {
            while let line = try connection.readLine() {
                if line.isEmpty { continue }
                let request: AgentRequest
                do {
                    request = try AgentWire.decode(AgentRequest.self, from: line)
                } catch {
                    try connection.write(
                        AgentWire.encode(AgentResponse.failure(CourierError(.usage, "not a control request", cause: "\(error)"))))
                    continue
                }
                if request.command == .subscribe {
                    try stream(to: connection)
                    return
                }
                try connection.write(AgentWire.encode(handler(request)))
            }
        } catch {
            logger.debug("control connection ended", metadata: ["error": "\(error)"])
        }
    }

    /// Acknowledges a subscription, then writes each queue event as a line until the client
    /// closes the connection or the agent stops.
    private func stream(to connection: UnixSocketConnection) throws {
        let subscriber = EventRelay()
        queue.addObserver(subscriber)
        defer { queue.removeObserver(subscriber) }
        try connection.write(AgentWire.encode(AgentResponse()))
        while true {
            let events = subscriber.take(waiting: 0.25)
            for event in events {
                try connection.write(AgentWire.encode(AgentResponse(event: event)))
            }
            let stopped = lock.withLock { self.stopped }
            if stopped || connection.peerClosed() { return }
        }
    }
}

/// Buffers the queue's events for one subscriber's thread, so a slow client never holds up the
/// queue's observer calls.
final class EventRelay: PaymentQueueObserver, @unchecked Sendable {  // @unchecked: `pending` is guarded by `lock`.
    private let lock = NSLock()
    private var pending: [PaymentQueueEvent] = []
    private let signal = DispatchSemaphore(value: 0)
    /// Beyond this many unsent events the oldest are dropped (the store has the current state).
    private let limit = 4096

    private func append(_ event: PaymentQueueEvent) {
        lock.withLock {
            pending.append(event)
            if pending.count > limit { pending.removeFirst(pending.count - limit) }
        }
        signal.signal()
    }

    /// The events buffered so far, waiting up to `seconds` for one.
    func take(waiting seconds: Double) -> [PaymentQueueEvent] {
        _ = signal.wait(timeout: .now() + seconds)
        return lock.withLock {
            defer { pending.removeAll() }
            return pending
        }
    }

    func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [TransactionRecord]) {
        append(.updatedTransactions(transactions))
    }

    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [DownloadRecord]) {
        append(.updatedDownloads(downloads))
    }

    func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [TransactionRecord]) {
        append(.removedTransactions(transactions))
    }

    func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue, productIds: [String]) {
        append(.restoreCompleted(productIds: productIds))
    }

    func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: CourierError) {
        append(.restoreFailed(error))
    }
}
