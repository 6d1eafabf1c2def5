import Courier
import Foundation
import Testing

@Suite("Queue state machines")
struct StateMachineTests {
    @Test("a download runs waiting → active → finished and then drops its partial data")
    func happyPath() throws {
        var machine = DownloadStateMachine()
        #expect(try machine.handle(.start) == [])
        #expect(machine.state == .active)
        let url = URL(fileURLWithPath: "/tmp/content")
        #expect(try machine.handle(.installed(contentURL: url)) == [.removePartialData])
        #expect(machine.state == .finished)
        #expect(machine.contentURL == url)
        #expect(throws: CourierError.self) { try machine.handle(.start) }
        #expect(throws: CourierError.self) { try machine.handle(.cancel) }
    }

    @Test("pause stops an active transfer, resume waits again, pausing twice changes nothing")
    func pauseResume() throws {
        var machine = DownloadStateMachine()
        _ = try machine.handle(.start)
        #expect(try machine.handle(.pause(.user)) == [.stopTransfer])
        #expect(machine.state == .paused)
        #expect(machine.pauseReason == .user)
        #expect(try machine.handle(.pause(.user)) == [])
        #expect(try machine.handle(.resume) == [])
        #expect(machine.state == .waiting)
        #expect(try machine.handle(.resume) == [])
    }

    @Test("disk full pauses with insufficientSpace; network failure fails; integrity drops the bytes")
    func failures() throws {
        var machine = DownloadStateMachine(state: .active)
        #expect(try machine.handle(.failed(CourierError(.insufficientSpace, "full"))) == [])
        #expect(machine.state == .paused)
        #expect(machine.pauseReason == .insufficientSpace)
        #expect(machine.error?.code == .insufficientSpace)

        machine = DownloadStateMachine(state: .active)
        #expect(try machine.handle(.failed(CourierError(.network, "gone"))) == [])
        #expect(machine.state == .failed)
        #expect(machine.error?.code == .network)
        #expect(try machine.handle(.resume) == [])
        #expect(machine.error == nil)

        machine = DownloadStateMachine(state: .active)
        #expect(try machine.handle(.failed(CourierError(.integrity, "sha"))) == [.removePartialData])
        #expect(machine.state == .failed)
    }

    @Test("cancel drops partial data; discard keeps the state and is refused while active")
    func cancelDiscard() throws {
        var machine = DownloadStateMachine(state: .active)
        #expect(try machine.handle(.cancel) == [.stopTransfer, .removePartialData])
        #expect(machine.state == .cancelled)
        #expect(try machine.handle(.cancel) == [])
        // A cancelled download can be started again (issue 14: StoreKit allows it); it waits, from zero.
        #expect(try machine.handle(.resume) == [])
        #expect(machine.state == .waiting)

        var paused = DownloadStateMachine(state: .paused, pauseReason: .user)
        #expect(try paused.handle(.discard) == [.removePartialData])
        #expect(paused.state == .paused)
        var active = DownloadStateMachine(state: .active)
        #expect { try active.handle(.discard) } throws: { ($0 as? CourierError)?.code == .invalidState }
    }

    @Test("a worker failing after another process cancelled drops the data; after a pause keeps the pause")
    func failureAfterExternalChange() throws {
        var cancelled = DownloadStateMachine(state: .cancelled)
        #expect(try cancelled.handle(.failed(CourierError(.paused, "stopped"))) == [.removePartialData])
        #expect(cancelled.state == .cancelled)
        var paused = DownloadStateMachine(state: .paused, pauseReason: .user)
        #expect(try paused.handle(.failed(CourierError(.paused, "stopped"))) == [])
        #expect(paused.state == .paused)
        #expect(paused.pauseReason == .user)
    }

    @Test("an interruption pauses with its error; a user's pause over it carries none; resume clears both")
    func pauseReasons() throws {
        var machine = DownloadStateMachine(state: .active)
        #expect(try machine.handle(.pause(.interrupted)) == [.stopTransfer])
        #expect(machine.pauseReason == .interrupted)
        #expect(machine.error?.code == .interrupted)
        #expect(try machine.handle(.pause(.user)) == [])
        #expect(machine.pauseReason == .user)
        #expect(machine.error == nil)
        _ = try machine.handle(.resume)
        #expect(machine.pauseReason == nil && machine.error == nil && machine.state == .waiting)
        #expect(PauseReason.allCases.map(\.rawValue) == ["user", "interrupted", "insufficientSpace"])
    }

    @Test("a dead owner's active download waits again")
    func ownerDied() throws {
        var machine = DownloadStateMachine(state: .active)
        #expect(try machine.handle(.ownerDied) == [])
        #expect(machine.state == .waiting)
        var finished = DownloadStateMachine(state: .finished)
        #expect(try finished.handle(.ownerDied) == [])
    }

    @Test("finish is refused while a download is unsettled and idempotent once finished")
    func transactionFinish() throws {
        var machine = TransactionStateMachine()
        #expect(try machine.handle(.verified(restored: false)) == [.queueDownloads])
        #expect(machine.state == .purchased)
        for unsettled in [DownloadState.waiting, .active, .paused, .failed] {
            #expect { try machine.handle(.finish(downloads: [.finished, unsettled])) } throws: {
                ($0 as? CourierError)?.code == .invalidState
            }
            #expect(machine.state == .purchased)
        }
        #expect(try machine.handle(.finish(downloads: [.finished, .cancelled])) == [.markFinished])
        #expect(machine.state == .finished)
        #expect(try machine.handle(.finish(downloads: [.finished])) == [])
        #expect(throws: CourierError.self) { try machine.handle(.verified(restored: false)) }
    }

    @Test("restored, deferred and failed transactions")
    func otherTransactionStates() throws {
        var restored = TransactionStateMachine()
        _ = try restored.handle(.verified(restored: true))
        #expect(restored.state == .restored)

        var deferred = TransactionStateMachine()
        _ = try deferred.handle(.deferred)
        #expect(deferred.state == .deferred)
        #expect(throws: CourierError.self) { try deferred.handle(.finish(downloads: [])) }
        _ = try deferred.handle(.verified(restored: false))
        #expect(deferred.state == .purchased)

        var failed = TransactionStateMachine()
        _ = try failed.handle(.failed(CourierError(.receiptInvalid, "bad")))
        #expect(failed.state == .failed)
        #expect(try failed.handle(.finish(downloads: [])) == [.markFinished])
    }
}
