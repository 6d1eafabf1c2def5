import Courier
import Foundation
import Testing

/// The lifecycle's reconciliation with the run's catalog (`.reconcile`, `reconcileMissing`), the
/// machine alone: the facts `PaymentQueue.reconcile` reads in, actions out. The shell's tests are
/// the CLI's (RestoreCLITests, AgentRedeliveryTests, MirrorCLITests).
extension DownloadLifecycleTests {
    typealias Facts = Machine.CatalogFacts

    /// Every lease fact; those that are not another live process's leave the decision as it is.
    static let leases: [Machine.LeaseFact] = [.none, .ours(acquiredAt: t0), .live(acquiredAt: t0), .stale]
    static let notLive: [Machine.LeaseFact] = [.none, .ours(acquiredAt: t0), .stale]

    /// Every stored state, with the pause reasons and errors that put a download there.
    static let stored: [Machine] = [
        machine(.waiting), machine(.active), machine(.paused, pauseReason: .user),
        machine(.paused, pauseReason: .interrupted, error: .interrupted),
        machine(.paused, pauseReason: .insufficientSpace, error: .insufficientSpace), machine(.failed, error: .network),
        machine(.failed, error: .integrity), machine(.cancelled),
        Machine(state: .finished, contentURL: URL(fileURLWithPath: "/c")),
    ]

    /// Every combination of the catalog's facts besides the lease and the transaction.
    static func catalogFacts(lease: Machine.LeaseFact, transaction: TransactionState) -> [Facts] {
        var all: [Facts] = []
        for redeliverMissing in [false, true] {
            for contentPlaced in [false, true] {
                for samePackage in [false, true] {
                    for changed in [[], Set(Machine.CatalogField.allCases), [.url]] as [Set<Machine.CatalogField>] {
                        for (validatorApplies, pendingUpdate) in [(true, false), (false, false), (true, true)] {
                            all.append(
                                Facts(
                                    lease: lease, transaction: transaction, contentPlaced: contentPlaced,
                                    redeliverMissing: redeliverMissing, samePackage: samePackage, pendingUpdate: pendingUpdate,
                                    changed: changed, validatorApplies: validatorApplies))
                        }
                    }
                }
            }
        }
        return all
    }

    /// One line of the table: a stored download, the facts, and the decision.
    struct Line: Sendable, CustomStringConvertible {
        var name: String
        var before: Machine
        var facts: Facts
        var actions: [Machine.Action]
        /// The state after; nil: the machine is unchanged.
        var after: DownloadState?

        var description: String { name }
    }

    /// The decisions that matter, each for every lease but a live process's: a table of state ×
    /// transaction × catalog facts.
    static let table: [Line] = {
        let paused = machine(.paused, pauseReason: .user)
        let failed = machine(.failed, error: .network)
        let finished = Machine(state: .finished, contentURL: URL(fileURLWithPath: "/content"))
        let cancelled = machine(.cancelled)
        let redeliver: [Machine.Action] = [.persist, .redeliver, .removePartialData]
        let retarget: [Machine.Action] = [.persist, .retarget, .removePartialData]
        return [
            // Finished: delivered again only when its content is gone and the caller restores.
            Line(
                name: "finished, content gone, redeliverMissing: redelivered", before: finished,
                facts: Facts(transaction: .finished, redeliverMissing: true), actions: redeliver, after: .waiting),
            Line(
                name: "finished, content gone, another package: redelivered for it", before: finished,
                facts: Facts(transaction: .finished, redeliverMissing: true, samePackage: false), actions: redeliver,
                after: .waiting),
            Line(
                name: "finished, restored transaction, content gone: redelivered", before: finished,
                facts: Facts(transaction: .restored, redeliverMissing: true), actions: redeliver, after: .waiting),
            Line(
                name: "finished, content in place: kept", before: finished,
                facts: Facts(transaction: .finished, contentPlaced: true, redeliverMissing: true, samePackage: false),
                actions: [], after: nil),
            Line(
                name: "finished, content gone, no redeliverMissing: kept (deleting it was the user's choice)", before: finished,
                facts: Facts(transaction: .finished, samePackage: false, changed: [.url]), actions: [], after: nil),

            // Cancelled: the user's, kept unless a restore finds its finished purchase's content gone.
            Line(
                name: "cancelled, transaction finished, content gone, redeliverMissing: redelivered", before: cancelled,
                facts: Facts(transaction: .finished, redeliverMissing: true), actions: redeliver, after: .waiting),
            Line(
                name: "cancelled, transaction finished, content in place, redeliverMissing: kept", before: cancelled,
                facts: Facts(
                    transaction: .finished, contentPlaced: true, redeliverMissing: true, samePackage: false, changed: [.url]),
                actions: [], after: nil),
            Line(
                name: "cancelled, transaction finished, content gone, no redeliverMissing: kept", before: cancelled,
                facts: Facts(transaction: .finished), actions: [], after: nil),
            Line(
                name: "cancelled, transaction purchased, content gone, redeliverMissing: kept", before: cancelled,
                facts: Facts(transaction: .purchased, redeliverMissing: true), actions: [], after: nil),
            Line(
                name: "cancelled, same package, new URL: relocated, still cancelled", before: cancelled,
                facts: Facts(transaction: .purchased, changed: [.url, .mirrors]), actions: [.relocate], after: nil),
            Line(
                name: "cancelled, another package: retargeted, its data dropped, still cancelled", before: cancelled,
                facts: Facts(transaction: .purchased, samePackage: false), actions: [.retarget, .removePartialData],
                after: nil),

            // Stopped downloads follow the catalog: the same package keeps its bytes, another drops them.
            Line(
                name: "paused, same package, new URL, validator applies: relocated, bytes kept", before: paused,
                facts: Facts(transaction: .purchased, changed: [.url]), actions: [.relocate], after: nil),
            Line(
                name: "paused, same package, URL on another origin: validator cleared, relocated", before: paused,
                facts: Facts(transaction: .purchased, changed: [.url], validatorApplies: false),
                actions: [.clearValidator, .relocate], after: nil),
            Line(
                name: "failed, same package, new placement: relocated, still failed", before: failed,
                facts: Facts(transaction: .restored, changed: [.placement]), actions: [.relocate], after: nil),
            Line(
                name: "waiting, same package, nothing changed: nothing to do", before: machine(.waiting),
                facts: Facts(transaction: .purchased, validatorApplies: false), actions: [], after: nil),
            Line(
                name: "paused, another package: retargeted, its data dropped, waiting", before: paused,
                facts: Facts(transaction: .purchased, samePackage: false), actions: retarget, after: .waiting),
            Line(
                name: "failed, another package: retargeted, waiting, its error gone", before: failed,
                facts: Facts(transaction: .purchased, samePackage: false, changed: [.url]), actions: retarget, after: .waiting),
            Line(
                name: "waiting, another package: retargeted, its data dropped", before: machine(.waiting),
                facts: Facts(transaction: .purchased, samePackage: false), actions: [.retarget, .removePartialData],
                after: nil),
            Line(
                name: "paused for space, finished transaction (an update), another package: retargeted", before: machine(
                    .paused, pauseReason: .insufficientSpace, error: .insufficientSpace),
                facts: Facts(transaction: .finished, samePackage: false), actions: retarget, after: .waiting),
            Line(
                name: "pending update, another package: kept (courier update chose it)", before: paused,
                facts: Facts(transaction: .finished, samePackage: false, pendingUpdate: true, changed: [.url]), actions: [],
                after: nil),
            Line(
                name: "pending update, same package, new mirrors: relocated", before: paused,
                facts: Facts(transaction: .finished, pendingUpdate: true, changed: [.mirrors]), actions: [.relocate],
                after: nil),
            Line(
                name: "paused, restore of placed content, another package: retargeted like any stopped download",
                before: paused,
                facts: Facts(transaction: .restored, contentPlaced: true, redeliverMissing: true, samePackage: false),
                actions: retarget, after: .waiting),
        ]
    }()

    @Test("the run's catalog: each decision of the table, the same for no lease, ours and a stale one")
    func reconcileTable() throws {
        for line in Self.table {
            for lease in Self.notLive {
                var facts = line.facts
                facts.lease = lease
                var machine = line.before
                let actions = try machine.handle(.reconcile(facts))
                #expect(actions == line.actions, "\(line), lease \(lease)")
                if let after = line.after {
                    #expect(machine.state == after, "\(line), lease \(lease)")
                    #expect(machine.contentURL == nil && machine.error == nil && machine.pauseReason == nil, "\(line)")
                } else {
                    #expect(machine == line.before, "\(line), lease \(lease)")
                }
            }
        }
    }

    @Test("left alone whatever the catalog says: an active download, another live process's, a failed purchase's")
    func reconcileLeftAlone() throws {
        for before in Self.stored {
            for lease in Self.leases {
                for transaction in TransactionState.allCases {
                    let untouchable: Bool
                    if case .live = lease {
                        untouchable = true
                    } else {
                        untouchable = before.state == .active || transaction == .failed
                    }
                    guard untouchable else { continue }
                    for facts in Self.catalogFacts(lease: lease, transaction: transaction) {
                        var machine = before
                        #expect(try machine.handle(.reconcile(facts)) == [], "\(before.state) \(lease) \(transaction) \(facts)")
                        #expect(machine == before)
                    }
                }
            }
        }
    }

    @Test("partial data survives a catalog change only for the same package, and never moves an active download")
    func reconcilePartialData() throws {
        for before in Self.stored {
            for lease in Self.notLive {
                for transaction in TransactionState.allCases where transaction != .failed {
                    for facts in Self.catalogFacts(lease: lease, transaction: transaction) {
                        var machine = before
                        let actions = try machine.handle(.reconcile(facts))
                        let label = "\(before.state) \(lease) \(transaction) \(facts)"
                        // The same package's bytes are the package's: kept, unless the content is
                        // delivered again from zero (its old bytes went into the placed content).
                        if facts.samePackage && !actions.contains(.redeliver) {
                            #expect(!actions.contains(.removePartialData), "\(label): \(actions)")
                        }
                        // Pointed at another package, it never keeps the old one's bytes.
                        if actions.contains(.retarget) || actions.contains(.redeliver) {
                            #expect(actions.last == .removePartialData, "\(label): \(actions)")
                        }
                        // Only the same package is relocated in place; the validator goes only with it.
                        if actions.contains(.relocate) {
                            #expect(facts.samePackage && !facts.changed.isEmpty, "\(label)")
                            #expect(actions.contains(.clearValidator) == !facts.validatorApplies, "\(label): \(actions)")
                            #expect(machine == before, "\(label)")
                        }
                        #expect(!actions.contains(.clearValidator) || actions.contains(.relocate), "\(label): \(actions)")
                        if before.state == .active { #expect(actions.isEmpty, "\(label)") }
                        // A cancelled download waits again only when a restore brings its content back.
                        if before.state == .cancelled && machine.state != .cancelled {
                            #expect(actions.contains(.redeliver), "\(label): \(actions)")
                            #expect(facts.redeliverMissing && transaction == .finished && !facts.contentPlaced, "\(label)")
                        }
                        #expect(!actions.contains(.add), "\(label): a stored download is not added again")
                    }
                }
            }
        }
    }

    @Test("content the store has no download of is added only for a restore, not placed, asked for if on demand")
    func reconcileMissing() {
        let added: [Facts] = [
            Facts(transaction: .finished, redeliverMissing: true),
            Facts(transaction: .restored, redeliverMissing: true),
            Facts(transaction: .purchased, redeliverMissing: true),
            Facts(transaction: .finished, redeliverMissing: true, onDemand: true, requested: true),
        ]
        for facts in added {
            #expect(Machine.reconcileMissing(facts) == [.add], "\(facts)")
        }
        // Requested but not on demand: added like any restored content.
        #expect(Machine.reconcileMissing(Facts(transaction: .finished, redeliverMissing: true, requested: true)) == [.add])
        let skipped: [Facts] = [
            Facts(transaction: .finished),
            Facts(transaction: .finished, onDemand: true, requested: true),
            Facts(transaction: .finished, contentPlaced: true, redeliverMissing: true),
            Facts(transaction: .finished, redeliverMissing: true, onDemand: true),
            Facts(transaction: .failed, redeliverMissing: true),
            Facts(transaction: .failed, redeliverMissing: true, onDemand: true, requested: true),
        ]
        for facts in skipped {
            #expect(Machine.reconcileMissing(facts).isEmpty, "\(facts)")
        }
    }
}
