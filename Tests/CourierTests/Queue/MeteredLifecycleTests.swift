import Courier
import CourierTestSupport
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

@Suite("Metered networks: the background predicate and its configuration")
struct MeteredPolicyTests {
    @Test("the queue applies the connection: background downloads pause and come back; allowMetered and foreground runs are left alone")
    func queueAppliesConnection() throws {
        let directory = try TemporaryDirectory(prefix: "courier-metered")
        defer { directory.remove() }
        let queue = try QueueFixtures.queue(directory)
        let transaction = QueueFixtures.transaction("t1")
        try queue.add([transaction], content: [QueueFixtures.content(for: transaction)])
        let download = try #require(try queue.downloads(transactionId: "t1").first)
        let agent = MeteredPolicy(backgroundProcess: true, allowMetered: false)
        #expect(agent.isBackground(download))
        #expect(!MeteredPolicy(backgroundProcess: true, allowMetered: true).isBackground(download))
        #expect(!MeteredPolicy(backgroundProcess: false, allowMetered: false).isBackground(download))
        // Prefetch content is background work wherever it runs (docs/delivery-classes.md).
        var prefetch = download
        prefetch.delivery = .prefetch
        #expect(MeteredPolicy(backgroundProcess: false, allowMetered: false).isBackground(prefetch))
        #expect(!MeteredPolicy(backgroundProcess: false, allowMetered: true).isBackground(prefetch))

        // A foreground run's or an allowed download is not touched.
        #expect(try queue.applyConnection(metered: true, policy: MeteredPolicy(backgroundProcess: false, allowMetered: false)).isEmpty)
        #expect(try queue.applyConnection(metered: true, policy: MeteredPolicy(backgroundProcess: true, allowMetered: true)).isEmpty)
        #expect(try queue.download(download.id)?.state == .waiting)

        let paused = try queue.applyConnection(metered: true, policy: agent)
        #expect(paused.map(\.id) == [download.id])
        let stored = try #require(try queue.download(download.id))
        #expect(stored.state == .paused && stored.pauseReason == .waitingForUnmetered)
        #expect(stored.errorMessage == "paused: waitingForUnmetered")
        #expect(try queue.entries().first?.stalled == nil)
        // Metered again: nothing more moves.
        #expect(try queue.applyConnection(metered: true, policy: agent).isEmpty)

        let resumed = try queue.applyConnection(metered: false, policy: agent)
        #expect(resumed.map(\.id) == [download.id])
        #expect(try queue.download(download.id)?.state == .waiting)
        #expect(try queue.download(download.id)?.pauseReason == nil)
        #expect(try queue.remainingBytes(scope: .all) == Int64("payload".utf8.count))
    }

    @Test("transfer.allowMetered and agent.notifications are read; both default to false; a typo is named")
    func configuration() throws {
        #expect(CourierConfiguration().transfer.allowMetered == false)
        #expect(CourierConfiguration().agent.notifications == false)
        let file = Data(#"{"transfer": {"allowMetered": true}, "agent": {"notifications": true}}"#.utf8)
        let configuration = try CourierConfiguration.decode(file)
        #expect(configuration.transfer.allowMetered)
        #expect(configuration.agent.notifications)
        #expect(CourierConfiguration.unknownKeys(in: file).isEmpty)
        let typo = CourierConfiguration.unknownKeys(in: Data(#"{"agent": {"notification": true}}"#.utf8))
        #expect(typo == [.init(section: "agent", key: "notification", suggestion: "notifications")])
    }
}
