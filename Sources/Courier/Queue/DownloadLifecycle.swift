import Foundation

/// The lifecycle of one download, `waiting -> active <-> paused -> finished | failed | cancelled`,
/// and every decision about it: the one place they are made (docs/architecture.md, "The
/// download lifecycle").
///
/// A value type with no I/O. Its inputs are events (a user's command, a worker's result), the
/// facts of the download's lease (`LeaseFact`: the shell reads /proc for them), the clock and the
/// free space (`Review`); `handle(_:)` moves the state and returns what the shell must do, as
/// actions, in order: `persist` the new state (in the same database transaction as the move),
/// `stopTransfer`, `removePartialData`, `takeLease`, or wait (`retry(at:)`,
/// `resumeWhenFree(atLeast:)`). The shell (`PaymentQueue`) performs each action and infers
/// nothing from the state. The agent's maintenance, `courier resume --stalled`, `courier list`'s
/// stall column, the pipeline's claim and the reconciliation with the run's catalog
/// (`reconcile`: keep, relocate, retarget or redeliver) all ask the same machine, so they
/// cannot disagree.
///
/// An event that does not apply throws `CourierError(.invalidState)`; one that is already
/// satisfied (pausing a paused download) changes nothing and returns no action.
public struct DownloadLifecycle: Sendable, Equatable {
    /// What the shell must do after a transition.
    public enum Action: Sendable, Equatable {
        /// Write the new state, pause reason, error and content URL, in the transaction that read them.
        case persist
        /// Stop the running transfer; its owner checkpoints the partial data.
        case stopTransfer
        /// Delete the partial file and reset the journal and progress.
        case removePartialData
        /// Take (or take over) the download's lease for this process: it is now this process's work.
        case takeLease
        /// Nothing to do before `at`: a retry of a failed download is due then (backoff).
        case retry(at: Date)
        /// Nothing to do until the storage's file system has `atLeast` bytes free
        /// (`SpaceRule.needed`): resuming sooner would only pause it again.
        case resumeWhenFree(atLeast: Int64)
        /// Take the run's catalog's URL, mirrors, manifest, placement, unpacked length and classes
        /// in place (`reconcile`, the same package): the state, journal and partial file stay.
        case relocate
        /// Forget the partial file's validator (ETag, Last-Modified): it came from another origin
        /// and says nothing of the new one's bytes (the range is asked for without `If-Range`,
        /// and the package's SHA-256 decides).
        case clearValidator
        /// Point the download at the run's catalog's package, another than the one it holds: all
        /// its fields, no lease, the journal reset (`reconcile`).
        case retarget
        /// As `retarget`, for content that was delivered once and is gone (a restore). Its
        /// transaction is not touched: finished once, announced once.
        case redeliver
        /// Add a download of the catalog's package, waiting: the store has none (`reconcileMissing`).
        case add
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
        /// The worker stopped because its process is shutting down (SIGTERM, SIGINT, a cancelled
        /// task): an active download pauses as `interrupted`; one someone else moved meanwhile is
        /// treated as after `failed` (a cancelled one's partial data goes).
        case interrupted
        /// The package was unpacked and placed at `contentURL`.
        case installed(contentURL: URL)
        /// The process that held the lease on an active download died or stopped its heartbeat.
        case ownerDied
        /// The download now names other content (an update to a newer version): whatever it
        /// held goes, and it waits for a worker. Refused while active.
        case retarget
        /// A worker of this process asks for the download, given its lease: waiting ones,
        /// ones paused by an interruption and active ones whose owner died are taken (`takeLease`,
        /// then active); anything else is left alone without an error.
        case claim(LeaseFact)
        /// What NetworkManager says of the connection (`NetworkMeter`), for a download that is
        /// `background` work (the agent's downloads, automatic updates, prefetch content, unless
        /// `transfer.allowMetered`: `MeteredPolicy`). Metered: background work that waits, runs
        /// or was interrupted pauses as `waitingForUnmetered` (an active transfer is stopped, so
        /// no byte moves). Not metered, or not background: a download waiting for an unmetered
        /// connection waits for a worker again. Anything else is left alone.
        case connection(metered: Bool, background: Bool)
        /// A look at a stopped or stalled download (the agent every second, `resume --stalled`
        /// and a re-run `deliver` once): resumes it if its stall reason allows, now or when
        /// `review` says.
        case review(Review)
        /// The run's catalog names the download's content (`PaymentQueue.reconcile`), with what
        /// the shell found around it. An active download, another live process's, and any of a
        /// failed transaction are left alone. With `redeliverMissing`, a finished download whose
        /// content is not in place, or a cancelled one whose transaction finished, waits again
        /// for the catalog's package (`redeliver`, its partial data dropped); a cancelled one
        /// whose content is in place stays as it is. Any other stopped download follows the
        /// catalog: for the same package it takes the changed fields in place (`relocate`,
        /// keeping its state and partial data; `clearValidator` first when the validator does not
        /// apply at the new URL); for another package it is pointed at it (`retarget`,
        /// `removePartialData`) and waits again, unless it was cancelled (the user's) or is a
        /// pending update (to the package `courier update` chose).
        case reconcile(CatalogFacts)
    }

    /// The lease on a download, as its shell found it.
    public enum LeaseFact: Sendable, Equatable {
        /// No lease.
        case none
        /// This process holds it, since `acquiredAt`.
        case ours(acquiredAt: Date)
        /// Another process holds it and is alive (its heartbeat is recent).
        case live(acquiredAt: Date)
        /// Another process held it and died, or its lease expired.
        case stale
    }

    /// Who asks for a review.
    public enum Trigger: Sendable, Equatable {
        /// The agent's maintenance loop: a retry waits for its backoff and a space shortage for the
        /// room, and an active download is its owner's (or the claim's) business.
        case automatic
        /// A user (`courier resume --stalled`): every stalled download goes back to waiting now,
        /// a silent owner's too; the transfer checks the space again and explains a shortage.
        case user
        /// A foreground run asked for its purchases again (`courier deliver` or `update` run
        /// again, as one runs curl again): every paused or failed download of its scope waits
        /// again now, whatever stopped it (a user's pause, a failed check, whose bytes went with
        /// it). An active one is left to the run's claim (a dead owner's) or followed (a live one's).
        case rerun
    }

    /// The inputs of a review besides the machine's own state.
    public struct Review: Sendable, Equatable {
        public var now: Date
        public var lease: LeaseFact
        /// The storage's free bytes, nil when they could not be read.
        public var freeSpace: Int64?
        /// Automatic retries of this download so far (the agent's count).
        public var retries: Int
        public var trigger: Trigger
        public var policy: Policy

        public init(
            now: Date, lease: LeaseFact, freeSpace: Int64? = nil, retries: Int = 0, trigger: Trigger, policy: Policy
        ) {
            self.now = now
            self.lease = lease
            self.freeSpace = freeSpace
            self.retries = retries
            self.trigger = trigger
            self.policy = policy
        }
    }

    /// The rules a review applies: when a download is stalled, when it is retried, how much room it needs.
    public struct Policy: Sendable, Equatable {
        /// Seconds without a byte after which an active download is stalled (`queue.stallTimeout`).
        public var stallTimeout: Double
        /// The delay before automatic retry number n of a download that failed for the network
        /// or was refused by the server (no jitter: one agent, one schedule).
        public var retryBackoff: RetryPolicy
        /// Automatic retries of a download the server refused (`serverRejected`: a 404 from a CDN
        /// that has not got the package yet heals; a wrong URL does not), after which it stays
        /// failed until a user resumes it. A network failure is retried without a cap. Default 8
        /// (with the default backoff, about 8 minutes).
        public var maxRejectedRetries: Int
        public var space: SpaceRule

        public init(
            stallTimeout: Double = 60, retryBackoff: RetryPolicy = RetryPolicy(maxRetries: nil, backoffBase: 2, backoffMax: 300, jitter: false),
            maxRejectedRetries: Int = 8, space: SpaceRule = SpaceRule()
        ) {
            self.stallTimeout = stallTimeout
            self.retryBackoff = retryBackoff
            self.maxRejectedRetries = maxRejectedRetries
            self.space = space
        }
    }

    /// The one space formula of a download (the transfer's check, the agent's resume, the
    /// placement's room): the bytes still to download, plus the room the content takes unpacked,
    /// plus the reserve kept free. Saturating: lengths come from a catalog and the store.
    public struct SpaceRule: Sendable, Equatable {
        /// Bytes kept free on the storage's file system (`transfer.diskReserve`). Default 64 MiB.
        public var reserve: Int64
        /// The unpacked size where neither catalog nor package says: this × the package's
        /// length (`placement.unpackedSizeFactor`). Default 2.
        public var unpackedSizeFactor: Double

        public init(reserve: Int64 = 64 << 20, unpackedSizeFactor: Double = 2) {
            self.reserve = reserve
            self.unpackedSizeFactor = unpackedSizeFactor
        }

        /// The rule of a placement configuration (its `diskReserve` is `transfer.diskReserve`).
        public init(placement: PlacementConfiguration) {
            self.init(reserve: placement.diskReserve, unpackedSizeFactor: placement.unpackedSizeFactor)
        }

        /// The room content takes unpacked: `unpackedLength` where known, else the factor × `length`.
        public func unpacked(length: Int64, unpackedLength: Int64?) -> Int64 {
            if let unpackedLength { return max(unpackedLength, 0) }
            let estimate = Double(max(length, 0)) * unpackedSizeFactor
            return estimate.isNaN || estimate <= 0 ? 0 : estimate >= Double(Int64.max) ? .max : Int64(estimate)
        }

        /// What must fit besides the reserve once `downloaded` of `length` bytes are on disk
        /// (the transfer's `additionalSpaceNeeded` is `unpacked`).
        public func withoutReserve(length: Int64, downloaded: Int64, unpackedLength: Int64?) -> Int64 {
            SpaceCheck.sum(max(length, 0) - min(max(downloaded, 0), max(length, 0)), unpacked(length: length, unpackedLength: unpackedLength))
        }

        /// Free bytes the download needs to go on: remaining + unpacked + reserve.
        public func needed(length: Int64, downloaded: Int64, unpackedLength: Int64?) -> Int64 {
            SpaceCheck.sum(withoutReserve(length: length, downloaded: downloaded, unpackedLength: unpackedLength), reserve)
        }

        public func needed(for download: DownloadRecord) -> Int64 {
            needed(length: download.length, downloaded: download.durableOffset, unpackedLength: download.unpackedLength)
        }
    }

    public private(set) var state: DownloadState
    /// Why it is paused; nil unless paused.
    public private(set) var pauseReason: PauseReason?
    /// Set while failed or paused for an error.
    public private(set) var error: CourierError?
    public private(set) var contentURL: URL?
    /// What a review reads of the stored download besides its state: its length, the bytes
    /// durably on disk, its unpacked length, when bytes last came and when it last changed.
    public private(set) var facts: Facts

    /// The stored facts a review reads (see `facts`).
    public struct Facts: Sendable, Equatable {
        public var length: Int64
        public var durableOffset: Int64
        public var unpackedLength: Int64?
        public var lastProgressAt: Date?
        /// When its state last changed (a failure's time, from which a retry's backoff counts).
        public var changedAt: Date

        public init(
            length: Int64 = 0, durableOffset: Int64 = 0, unpackedLength: Int64? = nil, lastProgressAt: Date? = nil,
            changedAt: Date = Date(timeIntervalSince1970: 0)
        ) {
            self.length = length
            self.durableOffset = durableOffset
            self.unpackedLength = unpackedLength
            self.lastProgressAt = lastProgressAt
            self.changedAt = changedAt
        }
    }

    public init(
        state: DownloadState = .waiting, pauseReason: PauseReason? = nil, error: CourierError? = nil, contentURL: URL? = nil,
        facts: Facts = Facts()
    ) {
        self.state = state
        self.pauseReason = pauseReason
        self.error = error
        self.contentURL = contentURL
        self.facts = facts
    }

    /// The machine of a stored download.
    public init(record: DownloadRecord) {
        self.init(
            state: record.state, pauseReason: record.pauseReason, error: record.error, contentURL: record.contentURL,
            facts: Facts(
                length: record.length, durableOffset: record.durableOffset, unpackedLength: record.unpackedLength,
                lastProgressAt: record.lastProgressAt, changedAt: record.updatedAt))
    }

    /// Errors that pause a download rather than fail it: it can continue once the cause is gone.
    public static func pausesInsteadOfFailing(_ code: CourierError.Code) -> Bool {
        code == .paused || code == .insufficientSpace
    }

    /// Why the download is stalled (DESIGN.md, "CLI for stalled downloads") given its lease at
    /// `now`, or nil when it is not: what `courier list` shows and what a review acts on.
    public func stallReason(lease: LeaseFact, now: Date, stallTimeout: Double) -> StallReason? {
        switch state {
        case .active:
            switch lease {
            case .none, .stale: return .ownerDied
            case .ours(let acquiredAt), .live(let acquiredAt):
                let lastBytes = facts.lastProgressAt ?? acquiredAt
                return now.timeIntervalSince(lastBytes) > stallTimeout ? .noBytes : nil
            }
        case .paused:
            switch pauseReason {
            case .interrupted?: return .interrupted
            case .insufficientSpace?: return .insufficientSpace
            // Waits for the connection, not stalled: `.connection` moves it, not a review.
            case .user?, .waitingForUnmetered?, nil: return nil
            }
        case .failed:
            switch error?.code {
            // A 404 may be a CDN that has not got the package yet: stalled like the network, and
            // retried (with a cap: `Policy.maxRejectedRetries`).
            case .network?, .serverRejected?: return .network
            case .insufficientSpace?: return .insufficientSpace
            case .leased?: return .partialFileBusy
            default: return nil
            }
        case .waiting, .finished, .cancelled:
            return nil
        }
    }

    /// Moves the machine for `event` and returns the shell's actions, in order.
    public mutating func handle(_ event: Event) throws -> [Action] {
        let before = self
        let actions = try transition(event)
        // A claim always writes the record, a dead owner's active one too (same state, new start).
        return self == before && !actions.contains(.takeLease) ? actions : [.persist] + actions
    }

    private mutating func transition(_ event: Event) throws -> [Action] {
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

        case (.interrupted, .active):
            return try transition(.pause(.interrupted)).filter { $0 != .stopTransfer }
        case (.interrupted, _):
            // Moved by someone else meanwhile: as for any failure (a cancel's data is dropped here).
            return try transition(.failed(CourierError(.interrupted, "interrupted")))

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

        case (.connection(let metered, let background), _):
            return connection(metered: metered, background: background)
        case (.claim(let lease), _):
            return claim(lease)
        case (.review(let review), _):
            return self.review(review)
        case (.reconcile(let facts), _):
            return reconcile(facts)
        }
    }

    /// `.reconcile`: whether and how a stored download follows the run's catalog.
    private mutating func reconcile(_ facts: CatalogFacts) -> [Action] {
        guard facts.transaction != .failed else { return [] }
        if case .live = facts.lease { return [] }  // another live process works it (or is about to)
        switch state {
        case .active:
            return []
        case .finished:
            guard facts.redeliverMissing, !facts.contentPlaced else { return [] }
        case .cancelled where facts.redeliverMissing && facts.transaction == .finished:
            guard !facts.contentPlaced else { return [] }
        case .waiting, .paused, .failed, .cancelled:
            if facts.samePackage {
                guard !facts.changed.isEmpty else { return [] }
                return facts.validatorApplies ? [.relocate] : [.clearValidator, .relocate]
            }
            guard !facts.pendingUpdate else { return [] }
            if state != .cancelled {
                move(to: .waiting)
                contentURL = nil
            }
            return [.retarget, .removePartialData]
        }
        // Content delivered once and gone: the catalog's package again, from zero.
        move(to: .waiting)
        contentURL = nil
        return [.redeliver, .removePartialData]
    }

    /// `.claim`: a waiting download, one paused by an interruption, or an active one whose owner
    /// is gone, is this process's to work once no live process holds it.
    private mutating func claim(_ lease: LeaseFact) -> [Action] {
        switch lease {
        case .ours, .live: return []
        case .none, .stale: break
        }
        switch state {
        case .waiting:
            break
        case .paused where pauseReason == .interrupted:
            break
        case .active:
            move(to: .waiting)  // its owner died
        default:
            return []
        }
        move(to: .active)
        return [.takeLease]
    }

    /// `.connection`: background work pauses while the connection is metered and waits for a
    /// worker again once it is not.
    private mutating func connection(metered: Bool, background: Bool) -> [Action] {
        if metered && background {
            switch state {
            case .waiting, .active:
                break
            case .paused where pauseReason == .interrupted:
                break
            default:
                return []
            }
            let wasActive = state == .active
            move(to: .paused)
            pauseReason = .waitingForUnmetered
            error = PauseReason.waitingForUnmetered.error
            return wasActive ? [.stopTransfer] : []
        }
        guard state == .paused, pauseReason == .waitingForUnmetered else { return [] }
        move(to: .waiting)
        return []
    }

    /// `.review`: what to do with a stalled download (nothing when it is not stalled).
    private mutating func review(_ review: Review) -> [Action] {
        if review.trigger == .rerun {
            guard state == .paused || state == .failed else { return [] }
            move(to: .waiting)
            return []
        }
        let policy = review.policy
        guard let reason = stallReason(lease: review.lease, now: review.now, stallTimeout: policy.stallTimeout) else { return [] }
        let automatic = review.trigger == .automatic
        switch reason {
        case .ownerDied:
            // The pipeline's claim takes a dead owner's download over by itself.
            if automatic { return [] }
            move(to: .waiting)
            return []
        case .noBytes:
            // A live owner's silent transfer is its own watchdog's business, unless a user says.
            if automatic { return [] }
            move(to: .waiting)
            return [.stopTransfer]
        case .interrupted:
            // The pipeline's claim picks an interrupted download up by itself.
            if automatic { return [] }
            move(to: .waiting)
            return []
        case .network, .partialFileBusy:
            if automatic {
                if error?.code == .serverRejected && review.retries >= policy.maxRejectedRetries { return [] }
                let delay = policy.retryBackoff.delay(retry: review.retries + 1, random: 1)
                let due = facts.changedAt.addingTimeInterval(delay)
                if review.now < due { return [.retry(at: due)] }
            }
            move(to: .waiting)
            return []
        case .insufficientSpace:
            let needed = policy.space.needed(
                length: facts.length, downloaded: facts.durableOffset, unpackedLength: facts.unpackedLength)
            if automatic {
                guard let free = review.freeSpace, free >= needed else { return [.resumeWhenFree(atLeast: needed)] }
            }
            move(to: .waiting)
            return []
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
    /// the rate is zero until the next measurement, and
    /// only an active download has a time remaining.
    mutating func apply(_ machine: DownloadLifecycle, at now: Date) {
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
        } else if state != .active {
            // A paused, waiting, failed or cancelled download has no time left to show: the last
            // estimate of its transfer would be stale (issue 31, item 6).
            timeRemaining = nil
        }
    }
}
