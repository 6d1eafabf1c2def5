import Foundation
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization

/// Counts the origin's open connections against a cap, shared by all event loops.
final class ConnectionLimiter: Sendable {
    let maximum: Int
    private let open = Mutex(0)

    init(maximum: Int) {
        self.maximum = maximum
    }

    /// Takes a slot; false when all `maximum` are taken.
    func acquire() -> Bool {
        open.withLock { open in
            guard open < maximum else { return false }
            open += 1
            return true
        }
    }

    func release() {
        open.withLock { $0 -= 1 }
    }

    var count: Int { open.withLock { $0 } }
}

/// The first handler of each connection (raw bytes, before the HTTP decoder): holds the
/// connection cap and the request-head deadline.
///
/// - Cap: a connection beyond `limiter.maximum` gets `503` with `Connection: close` and is
///   closed at once, so the origin never holds more descriptors than the cap (plus those being
///   turned away) however many clients connect.
/// - Head deadline: a request head must be complete within `headTimeout` of the connection
///   opening, and of the end of each exchange (its request read and its response written) on a
///   kept-alive connection; otherwise the connection is closed without an answer. A client that
///   sends half a head and waits ("slowloris"), before or after an answered request, holds
///   nothing for long. A response being sent is not the deadline's business.
/// - Whole request: a request, head and body, must be received within `requestTimeout` of its
///   first byte, and, once `rateGrace` has passed, at an average of at least `minimumRate` bytes
///   per second since that byte; otherwise the connection is closed without an answer. The idle
///   timeout restarts with each byte, so a body sent a byte every few seconds (`POST
///   /notifications`, or a GET with a body) held its connection for as long as it lasted: four
///   of them held a server of four connections. The clock starts at the request's first byte
///   and stops when its end is decoded; a response being sent holds it (a pipelined request
///   waits for it, not for its client), and its end restarts it.
///
/// The deadline is decided from counts, not from the order in which events arrive: a response's
/// end reaches this handler after the client may already hold the response's bytes (and may
/// already have sent the start of its next head), so "the head arrived" and "the response ended"
/// cannot be a single state. With `heads` heads decoded, `requests` request ends decoded and
/// `responses` response ends written, the connection is waiting for a head exactly when the
/// three are equal; it then runs the deadline, and a decoded head cancels it.
/// `RequestPartObserver`, after the decoder, reports the three events.
final class ConnectionGuardHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let headTimeout: TimeAmount?
    /// The whole request's deadline from its first byte; nil for none.
    let requestTimeout: TimeAmount?
    /// The least average rate of a request, in bytes per second, once `rateGrace` has passed
    /// since its first byte; nil for none.
    let minimumRate: Int64?
    let limiter: ConnectionLimiter?
    let logger: Logger
    /// How long a request may be slower than `minimumRate` from its first byte (Kestrel's grace
    /// period): a client that sends its head, then its body a moment later, is not cut.
    static let rateGrace = TimeAmount.seconds(5)
    /// Bytes received on the connection so far.
    private var received: Int64 = 0
    /// The request being received: when its first byte came, and `received` before it.
    private var request: (start: NIODeadline, bytesBefore: Int64)?
    private var requestTimer: Scheduled<Void>?
    /// Turned away by the cap, or closed by a deadline: nothing more it sends is read.
    private(set) var closing = false
    private var started = false
    /// Request heads decoded, request ends decoded, response ends written.
    private(set) var heads = 0
    private(set) var requests = 0
    private(set) var responses = 0
    private var holdsSlot = false
    private var deadline: Scheduled<Void>?
    private var context: ChannelHandlerContext?

    init(
        headTimeout: TimeAmount?, requestTimeout: TimeAmount? = nil, minimumRate: Int64? = nil, limiter: ConnectionLimiter?,
        logger: Logger
    ) {
        self.headTimeout = headTimeout
        self.requestTimeout = requestTimeout
        self.minimumRate = minimumRate.flatMap { $0 > 0 ? $0 : nil }
        self.limiter = limiter
        self.logger = logger
    }

    /// Whether the deadline is running: every request read was answered and no new head is
    /// complete.
    var awaitingHead: Bool { heads == requests && requests == responses }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { start(context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        finish()
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        let count = Int64(unwrapInboundIn(data).readableBytes)
        if count > 0 {
            received += count
            if request == nil, requestTimeout != nil || minimumRate != nil {
                request = (NIODeadline.now(), received - count)
                scheduleRequestCheck()
            }
        }
        context.fireChannelRead(data)
    }

    /// The decoder produced a request head: the deadline is met.
    func headReceived() {
        heads += 1
        deadline?.cancel()
        deadline = nil
    }

    /// The decoder produced a request's end: its clock stops (or restarts, for a request whose
    /// head is already decoded behind it).
    func requestEnded() {
        requests += 1
        stopRequestClock()
        if heads > requests, requestTimeout != nil || minimumRate != nil {
            request = (NIODeadline.now(), received)
            scheduleRequestCheck()
        }
        armIfAwaitingHead()
    }

    /// A response's end was written: the clock of a request received meanwhile starts again.
    func responseEnded() {
        responses += 1
        if request != nil {
            request = (NIODeadline.now(), received)
            scheduleRequestCheck()
        }
        armIfAwaitingHead()
    }

    private func stopRequestClock() {
        request = nil
        requestTimer?.cancel()
        requestTimer = nil
    }

    /// Schedules the next look at the request being received: when its deadline passes, or when
    /// its bytes so far fall below the minimum rate (never before the grace period ends).
    private func scheduleRequestCheck() {
        guard let request, let context, !closing else { return }
        var due = requestTimeout.map { request.start + $0 }
        if let minimumRate {
            // `bytes` last until start + bytes / rate (seconds, bounded: no overflow).
            let bytes = received - request.bytesBefore
            let nanoseconds = bytes >= Int64.max / 1_000_000_000 ? Int64.max / 2 : bytes * 1_000_000_000 / minimumRate
            let rateDue = request.start + max(Self.rateGrace, .nanoseconds(min(nanoseconds, Int64.max / 2)))
            due = min(due ?? rateDue, rateDue)
        }
        guard let due else { return }
        requestTimer?.cancel()
        requestTimer = context.eventLoop.assumeIsolated().scheduleTask(deadline: due) { [weak self] in
            self?.checkRequest()
        }
    }

    /// Closes the connection when the request being received is past its deadline or below the
    /// minimum rate, else looks again later. A response being sent holds the clock.
    private func checkRequest() {
        requestTimer = nil
        guard let request, !closing, let context else { return }
        if responses < requests { return }  // `responseEnded` restarts the clock
        let elapsed = NIODeadline.now() - request.start
        let bytes = received - request.bytesBefore
        var reason: String?
        if let requestTimeout, elapsed >= requestTimeout {
            reason = "the request was not received whole within \(requestTimeout)"
        } else if let minimumRate, elapsed >= Self.rateGrace,
            Double(bytes) < Double(minimumRate) * Double(elapsed.nanoseconds) / 1e9
        {
            reason = "the request arrived slower than \(minimumRate) bytes per second (\(bytes) bytes in \(elapsed))"
        }
        guard let reason else {
            scheduleRequestCheck()
            return
        }
        closing = true
        logger.debug("connection closed: \(reason)")
        context.close(promise: nil)
    }

    private func armIfAwaitingHead() {
        guard awaitingHead, let context else { return }
        armDeadline(context)
    }

    private func start(_ context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        if let limiter {
            guard limiter.acquire() else {
                closing = true
                logger.debug("connection refused: the origin holds its maximum of \(limiter.maximum) connections")
                let text = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                    + "Connection: close\r\nContent-Length: \(Self.busyBody.utf8.count)\r\n\r\n" + Self.busyBody
                let buffer = context.channel.allocator.buffer(string: text)
                context.writeAndFlush(wrapOutboundOut(buffer)).assumeIsolated().whenComplete { _ in
                    context.close(promise: nil)
                }
                return
            }
            holdsSlot = true
        }
        armDeadline(context)
    }

    static let busyBody = #"{"error":"busy","message":"the origin holds its maximum number of connections","status":"503"}"#

    private func armDeadline(_ context: ChannelHandlerContext) {
        guard let headTimeout, !closing else { return }
        deadline?.cancel()
        let headsBefore = heads
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: headTimeout) { [weak self] in
            guard let self, !self.closing, self.heads == headsBefore, let context = self.context else { return }
            self.closing = true
            self.logger.debug("connection closed: no complete request head within \(headTimeout)")
            context.close(promise: nil)
        }
    }

    private func finish() {
        deadline?.cancel()
        deadline = nil
        stopRequestClock()
        if holdsSlot {
            holdsSlot = false
            limiter?.release()
        }
    }
}

/// Sits after the HTTP decoder: tells the `ConnectionGuardHandler` when a request's head and end
/// were decoded and when a response's end was written, keeps a close from cutting a finished
/// response, and cuts responses nobody reads.
///
/// - NIO's `close()` drops writes still queued in the channel, and Hummingbird closes a
///   connection right after writing a response's end when it shuts down gracefully (or when the
///   idle timer fires after the end was written): with a client slower than the socket buffers,
///   the tail of a response it had fully produced was lost (curl: exit 18, partial file). So a
///   full close that comes while a response's end is still queued waits until that end has
///   reached the socket (its write promise), at most `drainTimeout`, then closes.
/// - Send stall: a client that asks for a package and stops reading leaves the channel
///   unwritable and the response suspended, which neither the idle timeout (a response is in
///   progress) nor the head deadline covers; after `sendTimeout` unwritable without a break the
///   connection is closed (nginx's `send_timeout`).
/// - Shutdown grace: Hummingbird lets every response in flight finish on graceful shutdown, for
///   as long as it takes; `drainTimeout` after the shutdown began, a connection still open is
///   closed, so a slow download cannot hold the origin's exit (the client resumes with a range).
final class RequestPartObserver: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    let guardHandler: ConnectionGuardHandler
    let drainTimeout: TimeAmount
    let sendTimeout: TimeAmount?
    let logger: Logger
    /// Response ends written into the pipeline whose write has not completed yet.
    private var unflushedEnds = 0
    /// A full close waiting for `unflushedEnds` to reach 0.
    private var deferredClose: (promise: EventLoopPromise<Void>?, timer: Scheduled<Void>)?
    /// Runs while the channel is unwritable.
    private var stallTimer: Scheduled<Void>?
    /// Runs from the start of a graceful shutdown.
    private var graceTimer: Scheduled<Void>?

    init(guardHandler: ConnectionGuardHandler, drainTimeout: TimeAmount, sendTimeout: TimeAmount?, logger: Logger) {
        self.guardHandler = guardHandler
        self.drainTimeout = drainTimeout
        self.sendTimeout = sendTimeout
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head: guardHandler.headReceived()
        case .end: guardHandler.requestEnded()
        case .body: break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .end = unwrapOutboundIn(data) else {
            context.write(data, promise: promise)
            return
        }
        guardHandler.responseEnded()
        unflushedEnds += 1
        let written = promise ?? context.eventLoop.makePromise(of: Void.self)
        written.futureResult.assumeIsolated().whenComplete { [weak self] _ in
            guard let self else { return }
            self.unflushedEnds -= 1
            if self.unflushedEnds == 0 { self.performDeferredClose(context) }
        }
        context.write(data, promise: written)
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard mode == .all, unflushedEnds > 0 else {
            context.close(mode: mode, promise: promise)
            return
        }
        if let deferredClose {
            // Already waiting: this close completes with that one.
            if let promise {
                if let waiting = deferredClose.promise {
                    waiting.futureResult.cascade(to: promise)
                } else {
                    self.deferredClose = (promise, deferredClose.timer)
                }
            }
            return
        }
        context.flush()
        let timer = context.eventLoop.assumeIsolated().scheduleTask(in: drainTimeout) { [weak self] in
            guard let self else { return }
            self.performDeferredClose(context)
        }
        deferredClose = (promise, timer)
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancelTimers()
        performDeferredClose(context)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelTimers()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            stallTimer?.cancel()
            stallTimer = nil
        } else if let sendTimeout, stallTimer == nil {
            stallTimer = context.eventLoop.assumeIsolated().scheduleTask(in: sendTimeout) { [weak self] in
                guard let self else { return }
                self.stallTimer = nil
                guard context.channel.isActive, !context.channel.isWritable else { return }
                self.logger.debug("connection closed: the client read nothing for \(sendTimeout)")
                self.cut(context)
            }
        }
        context.fireChannelWritabilityChanged()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, graceTimer == nil {
            graceTimer = context.eventLoop.assumeIsolated().scheduleTask(in: drainTimeout) { [weak self] in
                guard let self else { return }
                self.graceTimer = nil
                guard context.channel.isActive else { return }
                self.logger.debug("connection closed: still open \(self.drainTimeout) after the graceful shutdown began")
                self.cut(context)
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// Closes now, dropping whatever is still queued.
    private func cut(_ context: ChannelHandlerContext) {
        if let pending = deferredClose {
            deferredClose = nil
            pending.timer.cancel()
            context.close(mode: .all, promise: pending.promise)
        } else {
            context.close(mode: .all, promise: nil)
        }
    }

    private func cancelTimers() {
        stallTimer?.cancel()
        stallTimer = nil
        graceTimer?.cancel()
        graceTimer = nil
    }

    private func performDeferredClose(_ context: ChannelHandlerContext) {
        guard let pending = deferredClose else { return }
        deferredClose = nil
        pending.timer.cancel()
        context.close(mode: .all, promise: pending.promise)
    }
}

@available(*, unavailable)
extension ConnectionGuardHandler: Sendable {}

@available(*, unavailable)
extension RequestPartObserver: Sendable {}

/// Hummingbird's HTTP/1.1 child channel with the origin's guard in front: the connection cap and
/// the request-head deadline (`ConnectionGuardHandler`), and closes that let a finished
/// response reach the socket first (`RequestPartObserver`); Hummingbird's idle timeout stays.
struct GuardedHTTP1Channel: ServerChildChannel, HTTPChannelHandler {
    typealias Value = HTTP1Channel.Value

    let inner: HTTP1Channel
    let headTimeout: TimeAmount?
    /// A whole request's deadline from its first byte, and its least rate (bytes per second).
    var requestTimeout: TimeAmount? = nil
    var minimumRequestRate: Int64? = nil
    let limiter: ConnectionLimiter?
    /// How long a close waits for a finished response to reach the socket, and how long
    /// connections may stay open after a graceful shutdown began.
    let drainTimeout: TimeAmount
    /// How long a response may stay unwritable (its client reads nothing) before the connection
    /// is closed; nil for no limit.
    let sendTimeout: TimeAmount?

    var responder: HTTPChannelHandler.Responder { inner.responder }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let headTimeout = headTimeout
        let requestTimeout = requestTimeout
        let minimumRequestRate = minimumRequestRate
        let limiter = limiter
        let drainTimeout = drainTimeout
        let sendTimeout = sendTimeout
        return inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let operations = channel.pipeline.syncOperations
            let guardHandler = ConnectionGuardHandler(
                headTimeout: headTimeout, requestTimeout: requestTimeout, minimumRate: minimumRequestRate, limiter: limiter,
                logger: logger)
            let stateHandler = try operations.handler(type: HTTPConnectionStateHandler.self)
            try operations.addHandler(RequestPartObserver(guardHandler: guardHandler, drainTimeout: drainTimeout, sendTimeout: sendTimeout, logger: logger), position: .before(stateHandler))
            try operations.addHandler(guardHandler, position: .first)
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}
