import Courier
import Foundation
import Testing

/// The download lifecycle alone: events, lease facts, the clock and free space in; actions out.
/// No store, no network, no disk (the shell's tests are PaymentQueueTests and the agent's).
@Suite("Download lifecycle (the pure machine)")
struct DownloadLifecycleTests {
    typealias Machine = DownloadLifecycle

    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    static let mib: Int64 = 1 << 20

    /// A stopped download of `length` bytes, `downloaded` of them durable, stopped at `t0`.
    static func machine(
        _ state: DownloadState, pauseReason: PauseReason? = nil, error: CourierError.Code? = nil, length: Int64 = 100 * mib,
        downloaded: Int64 = 0, unpackedLength: Int64? = nil, lastProgressAt: Date? = nil
    ) -> Machine {
        Machine(
            state: state, pauseReason: pauseReason, error: error.map { CourierError($0, "stopped") },
            facts: .init(
                length: length, durableOffset: downloaded, unpackedLength: unpackedLength, lastProgressAt: lastProgressAt,
                changedAt: t0))
    }

    static func review(
        after seconds: Double, lease: Machine.LeaseFact = .none, free: Int64? = nil, retries: Int = 0,
        trigger: Machine.Trigger = .automatic, policy: Machine.Policy = Machine.Policy()
    ) -> Machine.Event {
        .review(
            Machine.Review(
                now: t0.addingTimeInterval(seconds), lease: lease, freeSpace: free, retries: retries, trigger: trigger,
                policy: policy))
    }

    // MARK: Events from users and workers

    @Test("a download runs waiting → active → finished and then drops its partial data")
    func happyPath() throws {
        var machine = Machine()
        #expect(try machine.handle(.start) == [.persist])
        #expect(machine.state == .active)
        let url = URL(fileURLWithPath: "/tmp/content")
        #expect(try machine.handle(.installed(contentURL: url)) == [.persist, .removePartialData])
        #expect(machine.state == .finished)
        #expect(machine.contentURL == url)
        #expect(throws: CourierError.self) { try machine.handle(.start) }
        #expect(throws: CourierError.self) { try machine.handle(.cancel) }
    }

    @Test("pause stops an active transfer, resume waits again, pausing twice changes nothing")
    func pauseResume() throws {
        var machine = Machine()
        _ = try machine.handle(.start)
        #expect(try machine.handle(.pause(.user)) == [.persist, .stopTransfer])
        #expect(machine.state == .paused)
        #expect(machine.pauseReason == .user)
        #expect(try machine.handle(.pause(.user)) == [])
        #expect(try machine.handle(.resume) == [.persist])
        #expect(machine.state == .waiting)
        #expect(try machine.handle(.resume) == [])
        // A waiting download has no transfer to stop.
        #expect(try machine.handle(.pause(.user)) == [.persist])
    }

    @Test("disk full pauses with insufficientSpace; network failure fails; integrity drops the bytes")
    func failures() throws {
        var machine = Machine(state: .active)
        #expect(try machine.handle(.failed(CourierError(.insufficientSpace, "full"))) == [.persist])
        #expect(machine.state == .paused)
        #expect(machine.pauseReason == .insufficientSpace)
        #expect(machine.error?.code == .insufficientSpace)

        machine = Machine(state: .active)
        #expect(try machine.handle(.failed(CourierError(.network, "gone"))) == [.persist])
        #expect(machine.state == .failed)
        #expect(machine.error?.code == .network)
        #expect(try machine.handle(.resume) == [.persist])
        #expect(machine.error == nil)

        machine = Machine(state: .active)
        #expect(try machine.handle(.failed(CourierError(.integrity, "sha"))) == [.persist, .removePartialData])
        #expect(machine.state == .failed)
    }

    @Test("cancel drops partial data; discard keeps the state and is refused while active")
    func cancelDiscard() throws {
        var machine = Machine(state: .active)
        #expect(try machine.handle(.cancel) == [.persist, .stopTransfer, .removePartialData])
        #expect(machine.state == .cancelled)
        #expect(try machine.handle(.cancel) == [])
        // A cancelled download can be started again (issue 14: StoreKit allows it); it waits, from zero.
        #expect(try machine.handle(.resume) == [.persist])
        #expect(machine.state == .waiting)

        var paused = Machine(state: .paused, pauseReason: .user)
        #expect(try paused.handle(.discard) == [.removePartialData])
        #expect(paused.state == .paused)
        var active = Machine(state: .active)
        #expect { try active.handle(.discard) } throws: { ($0 as? CourierError)?.code == .invalidState }
    }

    @Test("a worker failing after another process cancelled drops the data; after a pause keeps the pause")
    func failureAfterExternalChange() throws {
        var cancelled = Machine(state: .cancelled)
        #expect(try cancelled.handle(.failed(CourierError(.paused, "stopped"))) == [.removePartialData])
        #expect(cancelled.state == .cancelled)
        var paused = Machine(state: .paused, pauseReason: .user)
        #expect(try paused.handle(.failed(CourierError(.paused, "stopped"))) == [])
        #expect(paused.state == .paused)
        #expect(paused.pauseReason == .user)
    }

    @Test("an interruption pauses with its error; a user's pause over it carries none; resume clears both")
    func pauseReasons() throws {
        var machine = Machine(state: .active)
        #expect(try machine.handle(.pause(.interrupted)) == [.persist, .stopTransfer])
        #expect(machine.pauseReason == .interrupted)
        #expect(machine.error?.code == .interrupted)
        #expect(try machine.handle(.pause(.user)) == [.persist])
        #expect(machine.pauseReason == .user)
        #expect(machine.error == nil)
        _ = try machine.handle(.resume)
        #expect(machine.pauseReason == nil && machine.error == nil && machine.state == .waiting)
        #expect(PauseReason.allCases.map(\.rawValue) == ["user", "interrupted", "insufficientSpace", "waitingForUnmetered"])
    }

    @Test("a worker stopped by its process's shutdown pauses an active download as interrupted, nothing else")
    func workerInterrupted() throws {
        var active = Machine(state: .active)
        // The worker is the one stopping: no stop signal for itself.
        #expect(try active.handle(.interrupted) == [.persist])
        #expect(active.state == .paused && active.pauseReason == .interrupted)
        var paused = Machine(state: .paused, pauseReason: .user)
        #expect(try paused.handle(.interrupted) == [])
        #expect(paused.pauseReason == .user)
        // Cancelled by another process meanwhile: the worker, holding the lease, drops the data.
        var cancelled = Machine(state: .cancelled)
        #expect(try cancelled.handle(.interrupted) == [.removePartialData])
    }

    @Test("a dead owner's active download waits again")
    func ownerDied() throws {
        var machine = Machine(state: .active)
        #expect(try machine.handle(.ownerDied) == [.persist])
        #expect(machine.state == .waiting)
        var finished = Machine(state: .finished)
        #expect(try finished.handle(.ownerDied) == [])
    }

    // MARK: Claims

    @Test("a claim takes waiting, interrupted and dead owners' downloads; never a live one's, ours or a user's pause")
    func claims() throws {
        let claimable: [(Machine, Machine.LeaseFact)] = [
            (Machine(state: .waiting), .none), (Machine(state: .waiting), .stale),
            (Machine(state: .paused, pauseReason: .interrupted), .none), (Machine(state: .active), .stale),
            (Machine(state: .active), .none),
        ]
        for (machine, lease) in claimable {
            var machine = machine
            #expect(try machine.handle(.claim(lease)) == [.persist, .takeLease])
            #expect(machine.state == .active && machine.pauseReason == nil)
        }
        let left: [(Machine, Machine.LeaseFact)] = [
            (Machine(state: .waiting), .live(acquiredAt: Self.t0)),
            (Machine(state: .active), .ours(acquiredAt: Self.t0)), (Machine(state: .active), .live(acquiredAt: Self.t0)),
            (Machine(state: .paused, pauseReason: .user), .none), (Machine(state: .paused, pauseReason: .insufficientSpace), .none),
            (Machine(state: .failed, error: CourierError(.network, "x")), .none), (Machine(state: .finished), .none),
            (Machine(state: .cancelled), .none),
        ]
        for (machine, lease) in left {
            var machine = machine
            let before = machine
            #expect(try machine.handle(.claim(lease)) == [])
            #expect(machine == before)
        }
    }

    // MARK: Stalls and reviews

    @Test("stall reasons: dead owner, silent owner, interruption, network, refused, space, busy file; not a user's pause")
    func stallReasons() {
        let timeout = 60.0
        let now = Self.t0.addingTimeInterval(100)
        #expect(Self.machine(.active).stallReason(lease: .stale, now: now, stallTimeout: timeout) == .ownerDied)
        #expect(Self.machine(.active).stallReason(lease: .none, now: now, stallTimeout: timeout) == .ownerDied)
        let silent = Self.machine(.active, lastProgressAt: Self.t0)
        #expect(silent.stallReason(lease: .live(acquiredAt: Self.t0), now: now, stallTimeout: timeout) == .noBytes)
        #expect(silent.stallReason(lease: .live(acquiredAt: Self.t0), now: now, stallTimeout: 200) == nil)
        #expect(Self.machine(.paused, pauseReason: .interrupted).stallReason(lease: .none, now: now, stallTimeout: timeout) == .interrupted)
        #expect(Self.machine(.paused, pauseReason: .user).stallReason(lease: .none, now: now, stallTimeout: timeout) == nil)
        #expect(
            Self.machine(.paused, pauseReason: .insufficientSpace, error: .insufficientSpace)
                .stallReason(lease: .none, now: now, stallTimeout: timeout) == .insufficientSpace)
        #expect(Self.machine(.failed, error: .network).stallReason(lease: .none, now: now, stallTimeout: timeout) == .network)
        #expect(Self.machine(.failed, error: .serverRejected).stallReason(lease: .none, now: now, stallTimeout: timeout) == .network)
        #expect(Self.machine(.failed, error: .leased).stallReason(lease: .none, now: now, stallTimeout: timeout) == .partialFileBusy)
        for code in [CourierError.Code.integrity, .hostilePackage, .notEntitled] {
            #expect(Self.machine(.failed, error: code).stallReason(lease: .none, now: now, stallTimeout: timeout) == nil)
        }
    }

    @Test("a network failure is retried at the end of its backoff, each attempt later, without a cap")
    func networkRetrySchedule() throws {
        var machine = Self.machine(.failed, error: .network)
        // Default backoff: 2 s, doubling, at most 300 s.
        #expect(try machine.handle(Self.review(after: 1)) == [.retry(at: Self.t0.addingTimeInterval(2))])
        #expect(machine.state == .failed)
        #expect(try machine.handle(Self.review(after: 5, retries: 2)) == [.retry(at: Self.t0.addingTimeInterval(8))])
        #expect(try machine.handle(Self.review(after: 299, retries: 40)) == [.retry(at: Self.t0.addingTimeInterval(300))])
        #expect(try machine.handle(Self.review(after: 300, retries: 40)) == [.persist])
        #expect(machine.state == .waiting && machine.error == nil)
    }

    /// Issue 30 (a): `resume --stalled` retried a `serverRejected` failure and the agent never
    /// did. The one rule: both retry it, the agent after the backoff and at most
    /// `maxRejectedRetries` times, a user at once.
    @Test("a serverRejected failure is retried by the agent after its backoff, with a cap, and by a user at once")
    func serverRejectedRule() throws {
        var automatic = Self.machine(.failed, error: .serverRejected)
        #expect(try automatic.handle(Self.review(after: 1)) == [.retry(at: Self.t0.addingTimeInterval(2))])
        #expect(try automatic.handle(Self.review(after: 2)) == [.persist])
        #expect(automatic.state == .waiting)

        let policy = Machine.Policy(maxRejectedRetries: 3)
        var capped = Self.machine(.failed, error: .serverRejected)
        #expect(try capped.handle(Self.review(after: 10_000, retries: 3, policy: policy)) == [])
        #expect(capped.state == .failed)
        // The cap is for refusals: the network is retried however often it failed.
        var network = Self.machine(.failed, error: .network)
        #expect(try network.handle(Self.review(after: 10_000, retries: 3, policy: policy)) == [.persist])

        // A user (`resume --stalled`) retries it at once, capped or not, as it did before.
        for retries in [0, 3] {
            var user = Self.machine(.failed, error: .serverRejected)
            #expect(try user.handle(Self.review(after: 0, retries: retries, trigger: .user, policy: policy)) == [.persist])
            #expect(user.state == .waiting)
        }
    }

    /// Issue 30 (b): the agent resumed a download paused for space once `remaining + unpacked
    /// (or the length)` fit, leaving out the 64 MiB reserve and the unpack factor the transfer
    /// counts: in that gap it resumed every second and the transfer paused it again.
    @Test("space: a download paused for space resumes only when remaining + unpacked + reserve fit")
    func spaceRule() throws {
        let rule = Machine.SpaceRule()
        #expect(rule.reserve == 64 * Self.mib && rule.unpackedSizeFactor == 2)
        // 100 MiB package, 40 MiB on disk, unpacked size unknown: 60 + 200 + 64 MiB.
        #expect(rule.needed(length: 100 * Self.mib, downloaded: 40 * Self.mib, unpackedLength: nil) == 324 * Self.mib)
        // The catalog's unpacked size wins over the factor.
        #expect(rule.needed(length: 100 * Self.mib, downloaded: 0, unpackedLength: 150 * Self.mib) == 314 * Self.mib)
        // Saturating, whatever the store or the catalog says.
        #expect(rule.needed(length: .max, downloaded: 0, unpackedLength: nil) == .max)
        #expect(rule.needed(length: 10, downloaded: 50, unpackedLength: -5) == rule.reserve)
        #expect(Machine.SpaceRule(reserve: 0, unpackedSizeFactor: .nan).unpacked(length: 10, unpackedLength: nil) == 0)

        let needed = 324 * Self.mib
        // Each free space in the gaps the agent's old formula left: remaining + unpacked (no reserve),
        // and remaining + length (no factor).
        for free in [needed - 1, 60 * Self.mib + 200 * Self.mib, 60 * Self.mib + 100 * Self.mib, needed - 64 * Self.mib] {
            var machine = Self.machine(
                .paused, pauseReason: .insufficientSpace, error: .insufficientSpace, downloaded: 40 * Self.mib)
            for second in 1...5 {
                #expect(try machine.handle(Self.review(after: Double(second), free: free)) == [.resumeWhenFree(atLeast: needed)])
                #expect(machine.state == .paused)
            }
        }
        var machine = Self.machine(.paused, pauseReason: .insufficientSpace, error: .insufficientSpace, downloaded: 40 * Self.mib)
        #expect(try machine.handle(Self.review(after: 1, free: nil)) == [.resumeWhenFree(atLeast: needed)])
        #expect(try machine.handle(Self.review(after: 1, free: needed)) == [.persist])
        #expect(machine.state == .waiting && machine.pauseReason == nil && machine.error == nil)

        // A user's resume --stalled tries at once; the transfer checks the same sum and explains.
        var user = Self.machine(.paused, pauseReason: .insufficientSpace, error: .insufficientSpace)
        #expect(try user.handle(Self.review(after: 0, free: 0, trigger: .user)) == [.persist])
        #expect(user.state == .waiting)
    }

    @Test("a user's review requeues dead and silent owners' downloads (stopping the silent transfer); the agent's leaves them")
    func activeStalls() throws {
        var dead = Self.machine(.active)
        #expect(try dead.handle(Self.review(after: 1, lease: .stale)) == [])
        #expect(dead.state == .active)
        #expect(try dead.handle(Self.review(after: 1, lease: .stale, trigger: .user)) == [.persist])
        #expect(dead.state == .waiting)

        var silent = Self.machine(.active, lastProgressAt: Self.t0)
        let lease = Machine.LeaseFact.live(acquiredAt: Self.t0)
        #expect(try silent.handle(Self.review(after: 61, lease: lease)) == [])
        #expect(try silent.handle(Self.review(after: 59, lease: lease, trigger: .user)) == [])
        #expect(silent.state == .active)
        #expect(try silent.handle(Self.review(after: 61, lease: lease, trigger: .user)) == [.persist, .stopTransfer])
        #expect(silent.state == .waiting)

        var interrupted = Self.machine(.paused, pauseReason: .interrupted)
        #expect(try interrupted.handle(Self.review(after: 1)) == [])
        #expect(try interrupted.handle(Self.review(after: 1, trigger: .user)) == [.persist])
        #expect(interrupted.state == .waiting)
    }

    @Test("a re-run deliver's review resumes every paused or failed download, stalled or not; leaves the rest")
    func rerunReview() throws {
        let resumed: [Machine] = [
            Self.machine(.paused, pauseReason: .user), Self.machine(.paused, pauseReason: .interrupted),
            Self.machine(.paused, pauseReason: .insufficientSpace, error: .insufficientSpace),
            Self.machine(.failed, error: .integrity), Self.machine(.failed, error: .serverRejected),
            Self.machine(.failed, error: .network),
        ]
        for before in resumed {
            var machine = before
            // No backoff, no cap, no space check: the user asked for the purchase again.
            #expect(try machine.handle(Self.review(after: 0, free: 0, retries: 100, trigger: .rerun)) == [.persist])
            #expect(machine.state == .waiting && machine.error == nil && machine.pauseReason == nil)
        }
        let left: [(Machine, Machine.LeaseFact)] = [
            (Self.machine(.active), .stale), (Self.machine(.active, lastProgressAt: Self.t0), .live(acquiredAt: Self.t0)),
            (Self.machine(.waiting), .none), (Self.machine(.finished), .none), (Self.machine(.cancelled), .none),
        ]
        for (before, lease) in left {
            var machine = before
            #expect(try machine.handle(Self.review(after: 10_000, lease: lease, trigger: .rerun)) == [])
            #expect(machine == before)
        }
    }

    @Test("a review leaves alone what is not stalled: a user's pause, integrity failures, finished, waiting")
    func reviewNotStalled() throws {
        let notStalled: [Machine] = [
            Self.machine(.paused, pauseReason: .user), Self.machine(.failed, error: .integrity),
            Self.machine(.failed, error: .hostilePackage), Self.machine(.finished), Self.machine(.waiting),
            Self.machine(.cancelled),
        ]
        for before in notStalled {
            for trigger in [Machine.Trigger.automatic, .user] {
                var machine = before
                #expect(try machine.handle(Self.review(after: 10_000, free: .max, trigger: trigger)) == [])
                #expect(machine == before)
            }
        }
    }
}
