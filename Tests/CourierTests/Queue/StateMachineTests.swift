import Courier
import Foundation
import Testing

@Suite("Transaction state machine")
struct StateMachineTests {
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
