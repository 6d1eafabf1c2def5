import Foundation

/// The lifecycle of one download: `waiting -> active <-> paused -> finished | failed | cancelled`.
///
/// A value type with no I/O: `handle(_:)` moves the state and returns what the shell
/// (`PaymentQueue`) must do, and the shell does all of it: it persists the new state in the same
/// database transaction as the move, then carries out each action. An event that does not apply throws `CourierError(.invalidState)`;
/// one that is already satisfied (pausing a paused download) changes nothing and returns no action.
public struct DownloadStateMachine: Sendable, Equatable {
    /// What the shell must do after a transition.
    public enum Action: Sendable, Equatable {
        /// Stop the running transfer; its owner checkpoints the partial data.
        case stopTransfer
        /// Delete the partial file and reset the journal and progress.
        case removePartialData
    }

    /// What can happen to a download.
    public enum Event: Sendable, Equatable {
        case start
        /// Pause, by the user or because the process stops (`interrupted`).
        case pause(PauseReason)
        /// Continue a paused or failed download, or start a cancelled one again (as StoreKit lets
        /// an app start a cancelled download again; its partial data went with the cancel, so it
        /// starts from zero): it waits for a worker again.
        case resume
        case cancel
        /// Drop the partial data, keeping the download's state.
        case discard
        /// The transfer or the installation stopped with `error`.
        case failed(CourierError)
        /// The package was unpacked and placed at `contentURL`.
        case installed(contentURL: URL)
        /// The process that held the lease on an active download died or stopped its heartbeat.
        case ownerDied
        /// The download now names other content (an update to a newer version): whatever it
        /// held goes, and it waits for a worker. Refused while active.
        case retarget
    }

    public private(set) var state: DownloadState
    /// Why it is paused; nil unless paused.
    public private(set) var pauseReason: PauseReason?
    /// Set while failed or paused for an error.
    public private(set) var error: CourierError?
    public private(set) var contentURL: URL?

    public init(
        state: DownloadState = .waiting, pauseReason: PauseReason? = nil, error: CourierError? = nil, contentURL: URL? = nil
    ) {
        self.state = state
        self.pauseReason = pauseReason
        self.error = error
        self.contentURL = contentURL
    }

    /// The machine of a stored download.
    public init(record: DownloadRecord) {
        self.init(state: record.state, pauseReason: record.pauseReason, error: record.error, contentURL: record.contentURL)
    }

    /// Errors that pause a download rather than fail it: it can continue once the cause is gone.
    public static func pausesInsteadOfFailing(_ code: CourierError.Code) -> Bool {
        code == .paused || code == .insufficientSpace
    }

    /// Moves the machine for `event` and returns the shell's actions, in order.
    public mutating func handle(_ event: Event) throws -> [Action] {
        switch (event, state) {
        case (.start, .waiting), (.start, .paused):
            move(to: .active)
            return []
        case (.start, .active):
            return []
        case (.start, _):
            throw refusal("start")

        case (.pause(let reason), .waiting), (.pause(let reason), .active), (.pause(let reason), .paused):
            let wasActive = state == .active
            move(to: .paused)
            pauseReason = reason
            error = reason.error
            return wasActive ? [.stopTransfer] : []
        case (.pause, _):
            throw refusal("pause")

        case (.resume, .paused), (.resume, .failed), (.resume, .cancelled):
            move(to: .waiting)
            return []
        case (.resume, .waiting), (.resume, .active):
            return []
        case (.resume, _):
            throw refusal("resume")

        case (.cancel, .waiting), (.cancel, .paused), (.cancel, .failed):
            move(to: .cancelled)
            return [.removePartialData]
        case (.cancel, .active):
            move(to: .cancelled)
            return [.stopTransfer, .removePartialData]
        case (.cancel, .cancelled):
            return []
        case (.cancel, _):
            throw refusal("cancel")

        case (.discard, .waiting), (.discard, .paused), (.discard, .failed), (.discard, .cancelled):
            return [.removePartialData]
        case (.discard, .active):
            throw CourierError(
                .invalidState, "the download is active; its partial data is in use",
                hint: "pause it first, then discard")
        case (.discard, _):
            throw refusal("discard")

        case (.failed(let failure), .active):
            if failure.code == .cancelled {
                move(to: .cancelled)
                return [.removePartialData]
            }
            if Self.pausesInsteadOfFailing(failure.code) {
                move(to: .paused)
                pauseReason = failure.code == .paused ? .user : .insufficientSpace
                error = failure.code == .paused ? nil : failure
                return []
            }
            move(to: .failed)
            error = failure
            // Bytes that failed verification or belong to a hostile package are worthless.
            return failure.code == .integrity || failure.code == .hostilePackage ? [.removePartialData] : []
        case (.failed, .cancelled):
            // Cancelled by another process while this one worked it: the worker, which holds the
            // lease, drops the partial data the canceller could not.
            return [.removePartialData]
        case (.failed, _):
            // Someone else already moved it (a pause from another process): keep theirs.
            return []

        case (.installed(let url), .waiting), (.installed(let url), .active), (.installed(let url), .paused):
            move(to: .finished)
            contentURL = url
            return [.removePartialData]
        case (.installed, _):
            return []

        case (.ownerDied, .active):
            move(to: .waiting)
            return []
        case (.ownerDied, _):
            return []

        case (.retarget, .active):
            throw CourierError(.invalidState, "the download is active", hint: "pause it first, or let it finish")
        case (.retarget, _):
            move(to: .waiting)
            contentURL = nil
            return [.removePartialData]
        }
    }

    private mutating func move(to next: DownloadState) {
        state = next
        if next != .paused { pauseReason = nil }
        if next != .failed && next != .paused { error = nil }
    }

    private func refusal(_ operation: String) -> CourierError {
        CourierError(.invalidState, "cannot \(operation) a download that is \(state.rawValue)")
    }
}

extension DownloadRecord {
    /// Takes the state the machine moved to (with its pause reason, error and content URL) at
    /// `now`: the one place a stored download's state changes. Progress is complete once finished;
    /// the rate is zero until the next measurement.
    mutating func apply(_ machine: DownloadStateMachine, at now: Date) {
        state = machine.state
        pauseReason = machine.pauseReason
        errorCode = machine.error?.code
        errorMessage = machine.error?.message
        contentURL = machine.contentURL
        updatedAt = now
        rate = 0
        if state == .finished {
            progress = 1
            bytesReceived = length
            timeRemaining = 0
        }
    }
}
