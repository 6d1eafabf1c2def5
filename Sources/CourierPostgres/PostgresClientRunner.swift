import Logging
import PostgresNIO
import Synchronization

/// Runs a `PostgresClient`'s pool for as long as the calling task lives, and never lets the
/// caller wait for ever on the pool's shutdown.
///
/// postgres-nio 1.33.2 can miss the end of its own shutdown: when the pool is cancelled while a
/// connection is still being created, the creation fails (`clientClosedConnection`) and
/// `PostgresClient.run()` never returns, though every connection is closed by then. A task group
/// that awaits it (a gate stopping on SIGTERM, a test) then hangs. Seen in the suite: the pool
/// logged "Connection creation failed" at the cancel and `run()` had not returned 13 minutes later.
/// So the pool runs in a task of its own: when the caller is cancelled, the pool is cancelled
/// and given `grace` to finish; after that the caller goes on and the pool's bookkeeping task is
/// left behind (it holds no connection, only memory).
public enum PostgresClientRunner {
    /// Runs `client.run()` until the calling task is cancelled (or the pool stops on its own).
    public static func run(_ client: PostgresClient, grace: Duration = .seconds(2), logger: Logger) async {
        await runCancellable(grace: grace, logger: logger) { await client.run() }
    }

    /// Runs `client.run()` beside `body`, then stops the pool (within `grace`) and returns what
    /// `body` returned or throws what it threw.
    public static func withRunningClient<T: Sendable>(
        _ client: PostgresClient, grace: Duration = .seconds(2), logger: Logger,
        _ body: @Sendable (PostgresClient) async throws -> T
    ) async throws -> T {
        let pool = Task { await run(client, grace: grace, logger: logger) }
        do {
            let value = try await body(client)
            pool.cancel()
            await pool.value
            return value
        } catch {
            pool.cancel()
            await pool.value
            throw error
        }
    }

    /// Runs `operation` in a task of its own until the calling task is cancelled, then cancels it
    /// and waits at most `grace` for it to end. Returns at once if `operation` ends first.
    public static func runCancellable(grace: Duration, logger: Logger, _ operation: @escaping @Sendable () async -> Void) async {
        let worker = Task { await operation() }
        let latch = Latch()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                latch.install(continuation)
                Task {
                    await worker.value
                    latch.open()
                }
            }
        } onCancel: {
            worker.cancel()
            Task {
                try? await Task.sleep(for: grace)
                if latch.open() {
                    logger.warning(
                        "the PostgreSQL pool did not stop within its grace period; going on without it",
                        metadata: ["grace": "\(grace)"])
                }
            }
        }
    }

    /// Resumes one waiting continuation once, whichever side opens it first; an `open()` that
    /// comes before `install` makes `install` resume at once.
    final class Latch: Sendable {
        private enum State {
            case waiting(CheckedContinuation<Void, Never>?)
            case open
        }
        private let state = Mutex(State.waiting(nil))

        func install(_ continuation: CheckedContinuation<Void, Never>) {
            let resumeNow = state.withLock { state -> Bool in
                switch state {
                case .open: return true
                case .waiting: state = .waiting(continuation); return false
                }
            }
            if resumeNow { continuation.resume() }
        }

        /// Opens the latch; true if this call opened it (false if it was open already).
        @discardableResult
        func open() -> Bool {
            let (opened, continuation) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
                switch state {
                case .open: return (false, nil)
                case .waiting(let continuation): state = .open; return (true, continuation)
                }
            }
            continuation?.resume()
            return opened
        }
    }
}
