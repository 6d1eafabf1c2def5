@testable import Courier
import Foundation
import Testing

/// The attempt machine alone: events in, actions out, no network and no clock.
@Suite("TransferAttempts")
struct TransferAttemptsTests {
    let url = URL(string: "https://cdn.example.com/pack.zip")!
    let policy = RetryPolicy(maxRetries: 3, backoffBase: 1, backoffMax: 30, jitter: false)
    let refused = CourierError(.network, "connection refused")

    @Test("a retryable failure is retried by the policy, then fails with its cause")
    func retriesThenFails() {
        var machine = TransferAttempts(policy: policy, sourceCount: 1, url: url)
        var actions: [TransferAttempts.Action] = []
        for _ in 0..<4 {
            actions.append(machine.next(after: .retryable(refused, retryAfter: nil, receivedBytes: 0), now: 0, random: 0))
        }
        #expect(
            actions == [
                .retry(retry: 1, of: 3, source: 0, delay: 1, cause: refused),
                .retry(retry: 2, of: 3, source: 0, delay: 2, cause: refused),
                .retry(retry: 3, of: 3, source: 0, delay: 4, cause: refused),
                .fail(refused),
            ])
    }

    @Test("bytes received reset the count; Retry-After wins, capped")
    func progressResets() {
        var machine = TransferAttempts(policy: policy, sourceCount: 1, url: url)
        _ = machine.next(after: .retryable(refused, retryAfter: nil, receivedBytes: 0), now: 0, random: 0)
        _ = machine.next(after: .retryable(refused, retryAfter: nil, receivedBytes: 0), now: 0, random: 0)
        #expect(
            machine.next(after: .retryable(refused, retryAfter: 90, receivedBytes: 10), now: 0, random: 0)
                == .retry(retry: 1, of: 3, source: 0, delay: 30, cause: refused))
    }

    @Test("with mirrors a failing source hands over at once; a retry counts once all failed in turn")
    func mirrors() {
        var machine = TransferAttempts(policy: policy, sourceCount: 3, url: url)
        let event = TransferAttempts.Event.retryable(refused, retryAfter: nil, receivedBytes: 0)
        #expect(machine.next(after: event, now: 0, random: 0) == .handOver(to: 1, after: refused))
        #expect(machine.next(after: event, now: 0, random: 0) == .handOver(to: 2, after: refused))
        #expect(machine.next(after: event, now: 0, random: 0) == .retry(retry: 1, of: 3, source: 0, delay: 1, cause: refused))
        #expect(machine.source == 0)
    }

    @Test("an error that cannot heal fails at once, or moves to the next mirror")
    func permanent() {
        let tls = CourierError(.network, "TLS handshake failed", cause: "curl 35")
        var alone = TransferAttempts(policy: policy, sourceCount: 1, url: url)
        #expect(alone.next(after: .failed(tls), now: 0) == .fail(tls))
        var mirrored = TransferAttempts(policy: policy, sourceCount: 2, url: url)
        let missing = CourierError(.serverRejected, "HTTP 404")
        #expect(mirrored.next(after: .failed(missing), now: 0) == .handOver(to: 1, after: missing))
        #expect(mirrored.next(after: .failed(missing), now: 0) == .fail(missing))
        let integrity = CourierError(.integrity, "too long")
        var other = TransferAttempts(policy: policy, sourceCount: 2, url: url)
        #expect(other.next(after: .failed(integrity), now: 0) == .fail(integrity))
    }

    @Test("a changing resource restarts from zero three times, then fails")
    func restarts() {
        var machine = TransferAttempts(policy: policy, sourceCount: 1, url: url)
        #expect(machine.next(after: .restartFromZero, now: 0) == .restartFromZero(restart: 1))
        #expect(machine.next(after: .restartFromZero, now: 0) == .restartFromZero(restart: 2))
        #expect(machine.next(after: .restartFromZero, now: 0) == .restartFromZero(restart: 3))
        guard case .fail(let error) = machine.next(after: .restartFromZero, now: 0) else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.code == .network)
    }

    @Test("a failed verification falls back to each offset once, then fails")
    func fallbacks() {
        let mismatch = CourierError(.integrity, "SHA-256 mismatch")
        var machine = TransferAttempts(policy: policy, sourceCount: 1, url: url, fallbacks: [4096, 0])
        #expect(machine.next(after: .verificationFailed(mismatch), now: 0) == .fallBack(to: 4096))
        #expect(machine.next(after: .verificationFailed(mismatch), now: 0) == .fallBack(to: 0))
        #expect(machine.next(after: .verificationFailed(mismatch), now: 0) == .fail(mismatch))
    }

    @Test("no retry starts past the time limit; the failure names the limit and the last cause")
    func timeLimit() {
        var machine = TransferAttempts(policy: policy, sourceCount: 1, url: url, start: 100, timeLimit: 5)
        #expect(machine.remaining(at: 101) == 4)
        #expect(machine.remaining(at: 200) == 0)
        let event = TransferAttempts.Event.retryable(refused, retryAfter: nil, receivedBytes: 0)
        #expect(machine.next(after: event, now: 101, random: 0) == .retry(retry: 1, of: 3, source: 0, delay: 1, cause: refused))
        // The second delay (2 s) would end past the limit.
        guard case .fail(let error) = machine.next(after: event, now: 103.5, random: 0) else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.code == .network)
        #expect(error.message.contains("time limit of 5 s"))
        #expect(error.cause == "connection refused")
        var unlimited = TransferAttempts(policy: policy, sourceCount: 1, url: url, start: 100, timeLimit: 0)
        #expect(unlimited.remaining(at: 1e9) == nil)
        #expect(unlimited.next(after: event, now: 1e9, random: 0) == .retry(retry: 1, of: 3, source: 0, delay: 1, cause: refused))
    }

    @Test("completion and pause end the attempts")
    func ends() {
        var machine = TransferAttempts(policy: policy, sourceCount: 1, url: url)
        #expect(machine.next(after: .completed, now: 0) == .finish)
        #expect(machine.next(after: .paused, now: 0) == .pause)
    }
}
