import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Serves the control socket (`Storage/agent.sock`) on SwiftNIO's event loops: each client is a
/// child task of `run()` that reads newline-delimited JSON requests and writes one response line
/// each; `subscribe` turns the connection into a stream of event lines until the client closes
/// it. Peers with another uid than the agent's are refused (SO_PEERCRED). No thread per client,
/// and none blocked: requests are answered on the cooperative pool.
final class AgentControlServer: Sendable {
    typealias Handler = @Sendable (AgentRequest) async -> AgentResponse
    typealias Connection = NIOAsyncChannel<ByteBuffer, ByteBuffer>

    /// Held for the server's life: one agent per store (released when the server is freed).
    private let lock: AgentLock
    private let listener: UnixSocketListener
    private let queue: PaymentQueue
    private let handler: Handler
    private let logger: Logger
    private let allowedUID: uid_t

    /// Takes the store's agent lock (`AgentLock`: another agent holding it is refused with
    /// `leased`), then binds the socket at `path` (0600; a stale one replaced). Connections wait
    /// in the backlog until `run()` serves them.
    init(path: String, queue: PaymentQueue, logger: Logger, allowedUID: uid_t = getuid(), handler: @escaping Handler) throws {
        lock = try AgentLock(socketPath: path)
        listener = try UnixSocketListener(path: path)
        self.queue = queue
        self.handler = handler
        self.logger = logger
        self.allowedUID = allowedUID
    }

    /// Serves clients until the calling task is cancelled; then closes every connection and
    /// removes the socket file.
    func run() async throws {
        defer { unlink(listener.path) }
        let server: NIOAsyncChannel<Connection, Never>
        let book = ConnectionBook()
        do {
            server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(listener.descriptor) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(ControlLineDecoder()))
                        let connection = try Connection(wrappingChannelSynchronously: channel)
                        book.add(connection)
                        return connection
                    }
                }
        } catch {
            Glibc.close(listener.descriptor)
            throw CourierError(.io, "cannot serve the control socket \(listener.path)", cause: "\(error)")
        }
        // A client channel NIO accepted but dropped before it reached `serve` traps when its
        // writer is freed unfinished ("Deinited NIOAsyncWriter without calling finish()",
        // apple/swift-nio #2637, #3481): SIGTERM between an accept and its serve did that,
        // NIO dropping the connections buffered in (or yielded to) the ending accept stream.
        // So every connection is held in `book` from its creation until it is served and
        // closed, and the accept loop runs in a task nobody cancels: cancelling `run()`
        // closes the listening channel, the stream ends after handing over what it holds, the
        // children still serving are cancelled (each closes its connection), and the
        // connections that never reached `serve` are closed here.
        let accept = Task {
            try await withThrowingDiscardingTaskGroup { group in
                try await server.executeThenClose { clients in
                    for try await client in clients {
                        group.addTask { await self.serve(client, book: book) }
                    }
                }
                group.cancelAll()
            }
            for connection in book.closeAll() {
                try? await connection.executeThenClose { _, _ in }
            }
        }
        try await withTaskCancellationHandler {
            try await accept.value
        } onCancel: {
            server.channel.close(promise: nil)
        }
    }

    private func serve(_ connection: Connection, book: ConnectionBook) async {
        defer { book.remove(connection) }
        do {
            try await connection.executeThenClose { inbound, outbound in
                let credentials = try? await Self.peerCredentials(connection.channel)
                guard let uid = credentials?.uid, uid == allowedUID else {
                    try await refuse(credentials, inbound, outbound)
                    return
                }
                // One iterator for the connection's life (a NIO stream allows only one).
                var lines = inbound.makeAsyncIterator()
                while let line = try await lines.next() {
                    if line.readableBytes == 0 { continue }
                    let request: AgentRequest
                    do {
                        request = try AgentWire.decode(AgentRequest.self, from: Data(line.readableBytesView))
                    } catch {
                        try await outbound.write(
                            AgentWire.line(AgentResponse.failure(CourierError(.usage, "not a control request", cause: "\(error)"))))
                        continue
                    }
                    if request.command == .subscribe {
                        try await stream(&lines, outbound)
                        return
                    }
                    try await outbound.write(AgentWire.line(await handler(request)))
                }
            }
        } catch {
            logger.debug("control connection ended", metadata: ["error": "\(error)"])
        }
    }

    /// The credentials of the process at the other end (SO_PEERCRED).
    private static func peerCredentials(_ channel: any Channel) async throws -> PeerCredentials? {
        guard let provider = channel as? any SocketOptionProvider else { return nil }
        let future: EventLoopFuture<PeerCredentials> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
        return try await future.get()
    }

    /// Answers a peer of another user with a refusal. The client's request is taken first
    /// (waiting 2 s at most): closing with it unread would reset the connection and could
    /// discard the refusal before the client reads it.
    private func refuse(
        _ credentials: PeerCredentials?, _ inbound: NIOAsyncChannelInboundStream<ByteBuffer>,
        _ outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
    ) async throws {
        logger.warning("refused a control connection from another user", metadata: ["uid": "\(credentials.map { "\($0.uid)" } ?? "?")"])
        await withTaskGroup(of: Void.self) { group in
            group.addTask { _ = try? await inbound.first { _ in true } }
            group.addTask { try? await Task.sleep(nanoseconds: 2_000_000_000) }
            await group.next()
            group.cancelAll()
        }
        try await outbound.write(
            AgentWire.line(AgentResponse.failure(CourierError(.notEntitled, "the agent serves only its own user (uid \(allowedUID))"))))
    }

    /// Acknowledges a subscription, then writes each queue event as a line until the client
    /// closes the connection or the agent stops. A client that reads slower than events come
    /// loses the oldest beyond 4,096 (the store has the current state).
    private func stream(
        _ lines: inout NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator, _ outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
    ) async throws {
        let events = queue.eventStream()
        try await outbound.write(AgentWire.line(AgentResponse()))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await event in events { try await outbound.write(AgentWire.line(AgentResponse(event: event))) }
            }
            while try await lines.next() != nil {}  // until the client closes
            group.cancelAll()
        }
    }
}

/// The control connections NIO made and `serve` has not finished yet (`AgentControlServer.run`):
/// holding them keeps an unserved connection's writer from being freed unfinished. Once
/// closed, a connection made late (accepted while the listener closed) is closed at once and
/// kept until the process exits.
final class ConnectionBook: Sendable {
    typealias Connection = AgentControlServer.Connection
    private struct State {
        var open: [ObjectIdentifier: Connection] = [:]
        var closed = false
    }
    private let state = Mutex(State())
    private static let late = Mutex<[Connection]>([])

    func add(_ connection: Connection) {
        let closed = state.withLock { state in
            if !state.closed { state.open[ObjectIdentifier(connection.channel)] = connection }
            return state.closed
        }
        if closed {
            Self.late.withLock { $0.append(connection) }
            connection.channel.close(promise: nil)
        }
    }

    func remove(_ connection: Connection) {
        _ = state.withLock { $0.open.removeValue(forKey: ObjectIdentifier(connection.channel)) }
    }

    /// The connections still held, handed over for closing; later ones are closed as they come.
    func closeAll() -> [Connection] {
        state.withLock { state in
            state.closed = true
            defer { state.open = [:] }
            return Array(state.open.values)
        }
    }
}

/// Splits the control socket's bytes into lines (without their newline), refusing a line longer
/// than `UnixSocketConnection.maxLineBytes`. At the end of input NIO's default `decodeLast`
/// runs `decode` on what is left.
struct ControlLineDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer
    /// How many readable bytes are known to hold no newline (so a long line is scanned once).
    private var scanned = 0

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        let bytes = buffer.readableBytesView
        guard let newline = bytes.dropFirst(scanned).firstIndex(of: 0x0A) else {
            scanned = bytes.count
            guard scanned <= UnixSocketConnection.maxLineBytes else {
                throw CourierError(.usage, "a control request is longer than \(UnixSocketConnection.maxLineBytes) bytes")
            }
            return .needMoreData
        }
        scanned = 0
        let line = buffer.readSlice(length: newline - bytes.startIndex)
        buffer.moveReaderIndex(forwardBy: 1)
        if let line { context.fireChannelRead(wrapInboundOut(line)) }
        return .continue
    }
}

extension AgentWire {
    /// `value` as one line for a NIO channel.
    static func line<T: Encodable>(_ value: T) throws -> ByteBuffer {
        ByteBuffer(bytes: try encode(value))
    }
}
