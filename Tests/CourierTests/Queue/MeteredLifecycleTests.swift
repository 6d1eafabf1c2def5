import Courier
import Foundation
import Testing

/// The download lifecycle's answer to the connection (`.connection`), the machine alone: no
/// store, no bus (the agent's tests run it against a real dbus-daemon: MeteredNetworkTests).
@Suite("Download lifecycle: metered connections")
struct MeteredLifecycleTests {
    typealias Machine = DownloadLifecycle

    @Test("metered: background work that waits, runs or was interrupted pauses as waitingForUnmetered; a running transfer stops")
    func meteredPausesBackgroundWork() throws {
        var waiting = Machine()
        #expect(try waiting.handle(.connection(metered: true, background: true)) == [.persist])
        #expect(waiting.state == .paused && waiting.pauseReason == .waitingForUnmetered)
        #expect(waiting.error?.message == "paused: waitingForUnmetered")

        var active = Machine(state: .active)
        #expect(try active.handle(.connection(metered: true, background: true)) == [.persist, .stopTransfer])
        #expect(active.state == .paused && active.pauseReason == .waitingForUnmetered)

        var interrupted = Machine(state: .paused, pauseReason: .interrupted, error: CourierError(.interrupted, "paused: interrupted"))
        #expect(try interrupted.handle(.connection(metered: true, background: true)) == [.persist])
        #expect(interrupted.pauseReason == .waitingForUnmetered)

        // Already waiting for it: nothing changes.
        #expect(try active.handle(.connection(metered: true, background: true)) == [])
        // A waiting download is not stalled: no review moves it, only the connection does.
        #expect(active.stallReason(lease: .none, now: Date(), stallTimeout: 60) == nil)
        let review = Machine.Review(now: Date(), lease: .none, trigger: .automatic, policy: .init())
        #expect(try active.handle(.review(review)) == [])
        #expect(active.pauseReason == .waitingForUnmetered)
        // Nor does the pipeline's claim take it.
        #expect(try active.handle(.claim(.none)) == [])
        #expect(active.state == .paused)
    }

    @Test("metered: foreground work, a user's pause, failures and finished downloads are left alone")
    func meteredLeavesTheRest() throws {
        var foreground = Machine(state: .active)
        #expect(try foreground.handle(.connection(metered: true, background: false)) == [])
        #expect(foreground.state == .active)
        for (state, reason) in [(DownloadState.paused, PauseReason?.some(.user)), (.paused, .insufficientSpace), (.failed, nil), (.finished, nil), (.cancelled, nil)] {
            var machine = Machine(state: state, pauseReason: reason)
            #expect(try machine.handle(.connection(metered: true, background: true)) == [], "\(state) \(String(describing: reason))")
            #expect(machine.state == state && machine.pauseReason == reason)
        }
    }

    @Test("not metered (or allowed): what waited for an unmetered connection waits for a worker again; nothing else moves")
    func unmeteredResumes() throws {
        for background in [true, false] {
            var machine = Machine(state: .paused, pauseReason: .waitingForUnmetered, error: CourierError(.paused, "paused: waitingForUnmetered"))
            let metered = !background  // foreground work need not wait even while metered
            #expect(try machine.handle(.connection(metered: metered, background: background)) == [.persist])
            #expect(machine.state == .waiting && machine.pauseReason == nil && machine.error == nil)
            #expect(try machine.handle(.claim(.none)) == [.persist, .takeLease])
        }
        var user = Machine(state: .paused, pauseReason: .user)
        #expect(try user.handle(.connection(metered: false, background: true)) == [])
        #expect(user.state == .paused && user.pauseReason == .user)
        var active = Machine(state: .active)
        #expect(try active.handle(.connection(metered: false, background: true)) == [])
    }

    @Test("a user's resume or a re-run deliver continues a download waiting for an unmetered connection")
    func userOverrides() throws {
        var machine = Machine(state: .paused, pauseReason: .waitingForUnmetered)
        #expect(try machine.handle(.resume) == [.persist])
        #expect(machine.state == .waiting)
        var rerun = Machine(state: .paused, pauseReason: .waitingForUnmetered)
        let review = Machine.Review(now: Date(), lease: .none, trigger: .rerun, policy: .init())
        #expect(try rerun.handle(.review(review)) == [.persist])
        #expect(rerun.state == .waiting)
    }
}
