//! A model of tandem's two-phase commit protocol, for the [`stateright`] model checker.
//!
//! [`TandemModel`] describes the protocol of `crates/tandem` (`engine.rs`,
//! `coordinator.rs`, `recovery.rs`, `document.rs`) as a nondeterministic state
//! machine whose every step is **one atomic single-document action**: one
//! compare-and-set on a transaction record, or one update of one participant
//! document. Every interleaving of those steps is explored, which covers
//! concurrent participant steps, workers that stall (any of their next steps
//! may happen arbitrarily late, after anybody else's), workers that crash, and
//! a recovery worker that claims a record while its owner is still alive.
//!
//! # What is modelled
//!
//! Two transactions, `T1` and `T2`, each with its own coordinator, change the
//! same two or three documents ([`TandemModel::participants`]). Every change is
//! an increment of a balance, as `DocumentChange::update(..).inc(..)` makes it:
//!
//! | participants | initial balances | `T1`                     | `T2`                     |
//! |--------------|------------------|--------------------------|--------------------------|
//! | 2            | A=1, B=1         | A−1 (needs A≥1), B+1     | B−2 (needs B≥2), A+2     |
//! | 3            | A=2, B=1, C=0    | A−2 (needs A≥2), B+1, C+1 | B−2 (needs B≥2), C+1, A+1 |
//!
//! `T2`'s guard holds only once `T1` has committed *and* cleared its credit to
//! `B`, so both outcomes of `T2` are reachable. All changes are shared
//! increments with `>=` guards, so (as in `DocumentChange::is_exclusive`) no
//! document lock is taken: debits apply early, and credits are deferred to the
//! clear step (`DocumentChange::applies_early`).
//!
//! # From the real protocol to model actions
//!
//! | model [`Action`]         | real step                                                                                   |
//! |--------------------------|---------------------------------------------------------------------------------------------|
//! | [`Action::Create`]       | `Coordinator::create_record`: insert the record, `initial`, epoch 0                          |
//! | [`Action::Begin`]        | `Engine::transition(initial → pending)`: CAS on (id, state, epoch)                           |
//! | [`Action::Apply`]        | `Participant::apply`: one guarded update, then `diagnose` (marker ⇒ ok, tombstone ⇒ fenced, guard ⇒ refused) |
//! | [`Action::Commit`]       | `Engine::apply_or_cancel`, all applied: `transition(pending → applied)`, the commit point    |
//! | [`Action::Cancel`]       | `Engine::cancel`: `transition(pending → canceling)` after a refusal, or recovery's roll back  |
//! | [`Action::Clear`]        | `Participant::clear_marker`: pull the marker, add the tombstone, land a deferred credit      |
//! | [`Action::Finish`]       | `Engine::finish_applied`: `transition(applied → done)`                                       |
//! | [`Action::Fence`]        | `Participant::compensate`, first update (`fence`): add the tombstone                        |
//! | [`Action::Undo`]         | `Participant::compensate`, second update: if the marker is there, pull it and undo the debit |
//! | [`Action::FinishCancel`] | `Engine::finish_canceling`: `transition(canceling → canceled)`                               |
//! | [`Action::Delete`]       | `RecoveryWorker::drive` on `initial`: delete the record, guarded by state and epoch          |
//! | [`Action::Claim`]        | `RecoveryWorker::claim`: CAS on (state, epoch, lastModified), epoch + 1, owner = recovery    |
//! | [`Action::Crash`]        | the process dies: the worker takes no further step                                          |
//!
//! A worker ([`Worker`]) is a program counter ([`Phase`]) plus what it knows:
//! its transaction, its epoch and the result of each of its participant steps
//! ([`Part`]). As in `Engine::step_all`, a worker runs its participant steps of
//! one phase in any order, and takes its next record step only when all of them
//! returned. A failed compare-and-set stops the worker: it was superseded.
//!
//! A claim starts a new recovery worker ([`Role::Recovery`]) that drives the
//! record from the state it claimed it in, as `RecoveryWorker::drive` does:
//! `initial` → delete; `pending` → roll back or roll forward
//! ([`PendingPolicy`]); `applied` → clear all, `done`; `canceling` →
//! compensate all, `canceled`. Reading a record and claiming it are one step in
//! the model: the claim's filter includes `lastModified`, so it only succeeds
//! if nothing changed since the read.
//!
//! # Bounds: leases, takeovers and crashes
//!
//! Leases are not timed: a lease may "expire" at any moment, which is the worst
//! case. Claims come in two kinds:
//!
//! * a **takeover** claims a record whose owner is still alive (its lease ran
//!   out while it was slow). These are bounded by [`TandemModel::takeovers`];
//! * a **rescue** claims a record whose owner crashed. Its lease is sure to run
//!   out, and recovery keeps making passes, so a rescue is always enabled: it
//!   is not bounded by a budget, yet finite, because each rescue needs a crash
//!   of the current owner and crashes are bounded by [`TandemModel::crashes`].
//!
//! Only a worker that owns its record (or a coordinator that has not created
//! it yet) may crash: a superseded worker that dies is, to everybody else,
//! the same as one stalled forever, which the interleavings already cover. A
//! stalled worker needs no action of its own.
//!
//! Every step makes progress (a program counter moves, a worker is added, or a
//! bounded counter grows), so the reachable state graph is finite and acyclic:
//! every behaviour ends in a state where nothing is enabled (quiescence).
//!
//! # Properties
//!
//! Safety, in every reachable state (`always`):
//!
//! * [`NEVER_BOTH`]: no transaction reaches both `applied` and `canceling`;
//! * [`ONE_EFFECTIVE_APPLY`]: no document is changed twice by one transaction;
//! * [`VALUES_CONSISTENT`]: once every transaction is finished, each balance is
//!   its initial value plus the changes of the committed transactions, and no
//!   marker is left (even while superseded workers still have steps to take);
//! * [`COMMIT_HOLDS_ALL`]: at the commit point every participant holds the change;
//! * [`CANCELED_LEAVES_NOTHING`]: a `canceled` transaction has no marker anywhere;
//! * [`NEVER_NEGATIVE`]: the guards keep every balance at zero or more.
//!
//! Liveness, once the bounded crashes have happened:
//!
//! * [`QUIESCENT_FINISHED`] (`always`): in a state where no step is enabled,
//!   every transaction is finished (`done`, `canceled`, removed from
//!   `initial`, or never created because its coordinator crashed first);
//! * [`EVENTUALLY_FINISHED`] (`eventually`): the same, on every path. The two
//!   agree because every path ends in quiescence.
//!
//! Non-vacuity (`sometimes`): [`SOMETIMES_COMMITS`], [`SOMETIMES_BOTH_COMMIT`],
//! [`SOMETIMES_GUARD_CANCELS`], [`SOMETIMES_TAKEOVER`], [`SOMETIMES_FENCED`]
//! and [`SOMETIMES_RESCUE`] (the last three only when the bounds allow a
//! takeover or a crash).
//!
//! The [`Variant`]s other than [`Variant::Faithful`] break the protocol (or,
//! for [`Variant::NoRescue`], recovery) on purpose, to show the checker finds
//! what they break.
//!
//! # Not modelled
//!
//! Transient store errors and their retries (a step that fails for good stops
//! its worker, like a crash), lost answers (the real code re-reads to tell its
//! own landed write from another's; in the model a step's result is never
//! lost), document locks of exclusive changes, inserts and deletes, and the
//! garbage collection of tombstones (`forget`), after which a worker stalled
//! for longer than the collection age could apply again.
#![warn(missing_docs)]

use std::fmt;

use stateright::{Model, Property};

/// How many transactions the model runs.
pub const TXS: usize = 2;

/// The most documents (and participants per transaction) the model supports.
pub const MAX_DOCS: usize = 3;

/// The names of the documents, by index.
pub const DOC_NAMES: [&str; MAX_DOCS] = ["A", "B", "C"];

/// Property: no transaction ever reaches `applied` and also `canceling` or `canceled`.
pub const NEVER_BOTH: &str = "never both committed and canceled";
/// Property: each transaction changes each document at most once.
pub const ONE_EFFECTIVE_APPLY: &str = "at most one effective apply per transaction and document";
/// Property: once every transaction is finished, each balance is its initial
/// value plus the changes of the committed transactions, and no marker is left.
pub const VALUES_CONSISTENT: &str = "finished: balances are initial plus committed changes";
/// Property: at the commit point every participant holds the change.
pub const COMMIT_HOLDS_ALL: &str = "applied: every participant holds the change";
/// Property: a `canceled` transaction has no marker left on any document.
pub const CANCELED_LEAVES_NOTHING: &str = "canceled: no marker is left";
/// Property: the guards keep every balance at zero or more.
pub const NEVER_NEGATIVE: &str = "no balance goes negative";
/// Property: when no step is enabled any more, every transaction is finished.
pub const QUIESCENT_FINISHED: &str = "quiescent: every transaction is finished";
/// Property (on paths): every transaction eventually finishes.
pub const EVENTUALLY_FINISHED: &str = "every transaction eventually finishes";
/// Example: a transaction reaches `done`.
pub const SOMETIMES_COMMITS: &str = "sometimes a transaction commits";
/// Example: both transactions reach `done` (T2 after T1's credit landed).
pub const SOMETIMES_BOTH_COMMIT: &str = "sometimes both transactions commit";
/// Example: a guard refuses and the transaction ends `canceled`.
pub const SOMETIMES_GUARD_CANCELS: &str = "sometimes a refused guard cancels a transaction";
/// Example: recovery claims a record whose owner is still alive.
pub const SOMETIMES_TAKEOVER: &str = "sometimes recovery takes over from a live worker";
/// Example: recovery finishes a transaction whose owner crashed.
pub const SOMETIMES_RESCUE: &str = "sometimes recovery finishes a crashed worker's transaction";
/// Example: a late apply finds a tombstone and is fenced off.
pub const SOMETIMES_FENCED: &str = "sometimes a late apply is fenced off";

/// Which protocol the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The protocol as implemented.
    Faithful,
    /// Apply checks only the marker and ignores tombstones, like the
    /// hand-written tutorial. Must violate [`ONE_EFFECTIVE_APPLY`] and
    /// [`VALUES_CONSISTENT`].
    NoTombstoneFence,
    /// Compensation undoes first and fences second, leaving a window in which
    /// a late apply lands. Must violate [`VALUES_CONSISTENT`] (and, with two
    /// appliers, [`ONE_EFFECTIVE_APPLY`]).
    UndoBeforeFence,
    /// Recovery never claims a record whose owner crashed (only the bounded
    /// takeovers). Not a protocol change: it shows the liveness properties
    /// [`QUIESCENT_FINISHED`] and [`EVENTUALLY_FINISHED`] are not vacuous.
    NoRescue,
}

/// What a recovery worker does with a record it claims in `pending`
/// (`tandem::PendingPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PendingPolicy {
    /// Cancel it: `pending → canceling`, compensate all, `canceled`.
    RollBack,
    /// Apply all; commit if every participant holds the change, else cancel.
    RollForward,
    /// Either, chosen at each claim (several recovery workers configured differently).
    Either,
}

/// The state of a transaction record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxState {
    /// Recorded; nothing applied yet.
    Initial,
    /// Participants are being applied.
    Pending,
    /// Every participant holds the change: the commit point.
    Applied,
    /// Committed and cleaned up.
    Done,
    /// Being compensated.
    Canceling,
    /// Rolled back and cleaned up.
    Canceled,
}

impl TxState {
    /// `done` or `canceled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, TxState::Done | TxState::Canceled)
    }
}

/// A transaction record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// Its state.
    pub state: TxState,
    /// The fencing epoch, raised by every claim.
    pub epoch: u8,
    /// The index in [`State::workers`] of the worker that owns it.
    pub owner: u8,
}

/// A set of transactions (a marker or tombstone array), as a bit set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TxSet(u8);

impl TxSet {
    /// Whether `tx` is in the set.
    pub fn contains(self, tx: usize) -> bool {
        self.0 & (1 << tx) != 0
    }

    /// Adds `tx` (`$addToSet`, `$push`).
    pub fn insert(&mut self, tx: usize) {
        self.0 |= 1 << tx;
    }

    /// Removes `tx` (`$pull`).
    pub fn remove(&mut self, tx: usize) {
        self.0 &= !(1 << tx);
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// A participant document.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Doc {
    /// The balance.
    pub value: i8,
    /// Transactions whose change is applied but neither committed nor undone.
    pub markers: TxSet,
    /// Transactions that are finished with this document.
    pub tombstones: TxSet,
}

/// Whose worker it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The coordinator that runs the transaction (epoch 0).
    Coordinator,
    /// A recovery worker that claimed the record.
    Recovery,
}

/// A worker's program counter: the kind of step it takes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Insert the record.
    Create,
    /// Move the record `initial → pending`.
    Begin,
    /// Apply every participant, then commit or cancel.
    Apply,
    /// Recovery rolling back a `pending` record: move it `pending → canceling`.
    RollBack,
    /// Clear every participant, then move the record `applied → done`.
    Clear,
    /// Compensate every participant, then move the record `canceling → canceled`.
    Compensate,
    /// Recovery on an `initial` record: delete it.
    Delete,
    /// A compare-and-set failed: superseded by a newer epoch.
    Stopped,
    /// Drove the record to its end.
    Finished,
    /// Crashed.
    Crashed,
}

impl Phase {
    /// Whether the worker may still take steps.
    pub fn is_alive(self) -> bool {
        !matches!(self, Phase::Stopped | Phase::Finished | Phase::Crashed)
    }
}

/// The progress of one participant step of a worker, in its current phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// Not run yet.
    Todo,
    /// Apply returned success (the change is held by the document).
    Ok,
    /// Apply was refused by the guard.
    Refused,
    /// Apply found a tombstone.
    Fenced,
    /// The first of compensation's two updates is done.
    Half,
    /// Clear, or both updates of compensation, done.
    Done,
}

/// A coordinator or a recovery worker driving one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Worker {
    /// The transaction (0 for T1, 1 for T2).
    pub tx: u8,
    /// Coordinator or recovery.
    pub role: Role,
    /// The epoch it owns the record at.
    pub epoch: u8,
    /// What it does next.
    pub phase: Phase,
    /// Its participant steps in the current phase.
    pub parts: [Part; MAX_DOCS],
}

impl Worker {
    fn dead(tx: u8, role: Role, phase: Phase) -> Worker {
        // Dead workers forget everything, so that equal outcomes are equal states.
        Worker {
            tx,
            role,
            epoch: 0,
            phase,
            parts: [Part::Todo; MAX_DOCS],
        }
    }
}

/// What happened to a transaction so far (for the properties).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TxHistory {
    /// The record reached `applied`.
    pub ever_applied: bool,
    /// The record reached `canceling`.
    pub ever_canceled: bool,
    /// Recovery deleted the record from `initial`.
    pub removed: bool,
    /// An apply of this transaction was refused by a guard.
    pub refused: bool,
    /// Applies that changed each document (per document index).
    pub effective_applies: [u8; MAX_DOCS],
}

/// The whole system: records, documents, workers, and history.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The record of each transaction, if it exists.
    pub records: [Option<Record>; TXS],
    /// The documents (only the first [`TandemModel::participants`] are used).
    pub docs: [Doc; MAX_DOCS],
    /// Coordinators of T1 and T2 (indexes 0 and 1), then recovery workers in claim order.
    pub workers: Vec<Worker>,
    /// Claims of records whose owner was alive.
    pub takeovers: u8,
    /// Claims of records whose owner had crashed.
    pub rescues: u8,
    /// Crashes so far.
    pub crashes: u8,
    /// A late apply was fenced off by a tombstone.
    pub fenced: bool,
    /// Per transaction.
    pub history: [TxHistory; TXS],
}

impl State {
    /// Whether transaction `tx` is over: its record is `done` or `canceled`,
    /// or was removed from `initial`, or its coordinator crashed before creating it.
    pub fn is_finished(&self, tx: usize) -> bool {
        match self.records[tx] {
            Some(r) => r.state.is_terminal(),
            None => self.history[tx].removed || self.workers[tx].phase == Phase::Crashed,
        }
    }

    /// Whether every transaction is over.
    pub fn all_finished(&self) -> bool {
        (0..TXS).all(|tx| self.is_finished(tx))
    }

    fn record_state(&self, tx: usize) -> Option<TxState> {
        self.records[tx].map(|r| r.state)
    }

    /// The record compare-and-set of `Engine::transition`: moves the record of
    /// worker `w` from `from` to `to` if it is in `from` at the worker's epoch.
    fn cas(&mut self, w: usize, from: TxState, to: TxState) -> bool {
        let worker = self.workers[w];
        match &mut self.records[usize::from(worker.tx)] {
            Some(r) if r.state == from && r.epoch == worker.epoch => {
                r.state = to;
                true
            }
            _ => false,
        }
    }

    fn stop(&mut self, w: usize, phase: Phase) {
        let worker = self.workers[w];
        self.workers[w] = Worker::dead(worker.tx, worker.role, phase);
    }

    fn enter(&mut self, w: usize, phase: Phase) {
        let worker = &mut self.workers[w];
        worker.phase = phase;
        worker.parts = [Part::Todo; MAX_DOCS];
    }
}

/// One atomic step. `worker` indexes [`State::workers`]; `part` a participant of its transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The coordinator inserts the record.
    Create {
        /// The worker.
        worker: usize,
    },
    /// CAS `initial → pending`.
    Begin {
        /// The worker.
        worker: usize,
    },
    /// Apply one participant.
    Apply {
        /// The worker.
        worker: usize,
        /// The participant.
        part: usize,
    },
    /// CAS `pending → applied` (every apply succeeded).
    Commit {
        /// The worker.
        worker: usize,
    },
    /// CAS `pending → canceling` (an apply failed, or recovery rolls back).
    Cancel {
        /// The worker.
        worker: usize,
    },
    /// Clear one participant.
    Clear {
        /// The worker.
        worker: usize,
        /// The participant.
        part: usize,
    },
    /// CAS `applied → done`.
    Finish {
        /// The worker.
        worker: usize,
    },
    /// Compensation's fencing update: add the tombstone.
    Fence {
        /// The worker.
        worker: usize,
        /// The participant.
        part: usize,
    },
    /// Compensation's undoing update: pull the marker and undo the debit, if the marker is there.
    Undo {
        /// The worker.
        worker: usize,
        /// The participant.
        part: usize,
    },
    /// CAS `canceling → canceled`.
    FinishCancel {
        /// The worker.
        worker: usize,
    },
    /// Recovery deletes an `initial` record (guarded by state and epoch).
    Delete {
        /// The worker.
        worker: usize,
    },
    /// Recovery claims a record in flight, starting a new recovery worker.
    Claim {
        /// The transaction.
        tx: usize,
        /// On `pending`: roll forward (`true`) or back.
        forward: bool,
    },
    /// A worker crashes.
    Crash {
        /// The worker.
        worker: usize,
    },
}

/// One change of one transaction: an increment of one document's balance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Change {
    /// The document.
    pub doc: usize,
    /// The increment. A negative one is a debit guarded by `balance >= -delta`
    /// and applied early; a positive one is a credit deferred to the clear step.
    pub delta: i8,
}

/// The model: its bounds and the protocol variant it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TandemModel {
    /// Documents, and participants per transaction: 2 or 3.
    pub participants: usize,
    /// The most claims of a record whose owner is alive.
    pub takeovers: u8,
    /// The most crashes.
    pub crashes: u8,
    /// What recovery does with a `pending` record.
    pub pending: PendingPolicy,
    /// The protocol variant.
    pub variant: Variant,
}

impl TandemModel {
    /// The faithful protocol over `participants` (2 or 3) documents, with 2
    /// takeovers, 1 crash and either recovery policy.
    ///
    /// # Panics
    /// If `participants` is not 2 or 3.
    pub fn new(participants: usize) -> Self {
        assert!(
            (2..=MAX_DOCS).contains(&participants),
            "participants must be 2 or 3"
        );
        TandemModel {
            participants,
            takeovers: 2,
            crashes: 1,
            pending: PendingPolicy::Either,
            variant: Variant::Faithful,
        }
    }

    /// Sets the most takeovers of live workers.
    pub fn with_takeovers(mut self, takeovers: u8) -> Self {
        self.takeovers = takeovers;
        self
    }

    /// Sets the most crashes.
    pub fn with_crashes(mut self, crashes: u8) -> Self {
        self.crashes = crashes;
        self
    }

    /// Sets recovery's policy for `pending` records.
    pub fn with_pending(mut self, pending: PendingPolicy) -> Self {
        self.pending = pending;
        self
    }

    /// Sets the protocol variant.
    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// The initial balances.
    pub fn initial_values(&self) -> [i8; MAX_DOCS] {
        if self.participants == 2 {
            [1, 1, 0]
        } else {
            [2, 1, 0]
        }
    }

    /// The change transaction `tx` makes through its participant `part`.
    pub fn change(&self, tx: usize, part: usize) -> Change {
        const TWO: [[Change; 2]; TXS] = [
            [Change { doc: 0, delta: -1 }, Change { doc: 1, delta: 1 }],
            [Change { doc: 1, delta: -2 }, Change { doc: 0, delta: 2 }],
        ];
        const THREE: [[Change; 3]; TXS] = [
            [
                Change { doc: 0, delta: -2 },
                Change { doc: 1, delta: 1 },
                Change { doc: 2, delta: 1 },
            ],
            [
                Change { doc: 1, delta: -2 },
                Change { doc: 2, delta: 1 },
                Change { doc: 0, delta: 1 },
            ],
        ];
        if self.participants == 2 {
            TWO[tx][part]
        } else {
            THREE[tx][part]
        }
    }

    /// The balance document `doc` should have once every transaction is
    /// finished: its initial value plus the changes of the committed ones.
    pub fn expected_value(&self, state: &State, doc: usize) -> i8 {
        let mut value = self.initial_values()[doc];
        for tx in 0..TXS {
            if state.history[tx].ever_applied {
                for part in 0..self.participants {
                    let c = self.change(tx, part);
                    if c.doc == doc {
                        value += c.delta;
                    }
                }
            }
        }
        value
    }

    /// Whether no step is enabled in `state`.
    pub fn is_quiescent(&self, state: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(state, &mut actions);
        actions.is_empty()
    }

    /// A readable line for `action` taken in `state`, e.g. `recovery#2 (T1 @1): apply A`.
    pub fn describe(&self, state: &State, action: &Action) -> String {
        let who = |w: usize| {
            let worker = state.workers[w];
            let role = match worker.role {
                Role::Coordinator => "coordinator",
                Role::Recovery => "recovery",
            };
            format!("{role}#{w} (T{} @{})", worker.tx + 1, worker.epoch)
        };
        let doc = |w: usize, part: usize| {
            let tx = usize::from(state.workers[w].tx);
            DOC_NAMES[self.change(tx, part).doc]
        };
        match *action {
            Action::Create { worker } => format!("{}: insert record (initial)", who(worker)),
            Action::Begin { worker } => format!("{}: initial -> pending", who(worker)),
            Action::Apply { worker, part } => {
                format!("{}: apply {}", who(worker), doc(worker, part))
            }
            Action::Commit { worker } => format!("{}: pending -> applied", who(worker)),
            Action::Cancel { worker } => format!("{}: pending -> canceling", who(worker)),
            Action::Clear { worker, part } => {
                format!("{}: clear {}", who(worker), doc(worker, part))
            }
            Action::Finish { worker } => format!("{}: applied -> done", who(worker)),
            Action::Fence { worker, part } => {
                format!(
                    "{}: compensate {}: add tombstone",
                    who(worker),
                    doc(worker, part)
                )
            }
            Action::Undo { worker, part } => {
                format!("{}: compensate {}: undo", who(worker), doc(worker, part))
            }
            Action::FinishCancel { worker } => {
                format!("{}: canceling -> canceled", who(worker))
            }
            Action::Delete { worker } => format!("{}: delete initial record", who(worker)),
            Action::Claim { tx, forward } => {
                let how = match state.record_state(tx) {
                    Some(TxState::Pending) if forward => " to roll forward",
                    Some(TxState::Pending) => " to roll back",
                    _ => "",
                };
                format!(
                    "recovery#{}: claims T{} in {:?}{how}",
                    state.workers.len(),
                    tx + 1,
                    state.record_state(tx).unwrap_or(TxState::Initial)
                )
            }
            Action::Crash { worker } => format!("{}: crashes", who(worker)),
        }
    }

    /// A path of actions from the initial state, one readable line each.
    pub fn explain(&self, actions: &[Action]) -> String {
        let mut state = self.init_states().remove(0);
        let mut out = String::new();
        for action in actions {
            out.push_str("  ");
            out.push_str(&self.describe(&state, action));
            out.push('\n');
            match self.next_state(&state, *action) {
                Some(next) => state = next,
                None => break,
            }
        }
        out.push_str(&format!("  final: {}\n", Summary(self, &state)));
        out
    }

    /// Apply, as one guarded update of the document (`Participant::apply`).
    fn apply(&self, s: &mut State, w: usize, part: usize) -> Part {
        let tx = usize::from(s.workers[w].tx);
        let change = self.change(tx, part);
        let doc = &mut s.docs[change.doc];
        if doc.markers.contains(tx) {
            return Part::Ok; // applied already, by this or another worker of the transaction
        }
        if self.variant != Variant::NoTombstoneFence && doc.tombstones.contains(tx) {
            s.fenced = true;
            return Part::Fenced;
        }
        if change.delta < 0 && doc.value < -change.delta {
            s.history[tx].refused = true;
            return Part::Refused;
        }
        if change.delta < 0 {
            doc.value += change.delta; // a debit applies early; a credit waits for the clear
        }
        doc.markers.insert(tx);
        let count = &mut s.history[tx].effective_applies[change.doc];
        *count = count.saturating_add(1);
        Part::Ok
    }

    fn fence(&self, s: &mut State, w: usize, part: usize) {
        let tx = usize::from(s.workers[w].tx);
        s.docs[self.change(tx, part).doc].tombstones.insert(tx);
    }

    fn undo(&self, s: &mut State, w: usize, part: usize) {
        let tx = usize::from(s.workers[w].tx);
        let change = self.change(tx, part);
        let doc = &mut s.docs[change.doc];
        if doc.markers.contains(tx) {
            doc.markers.remove(tx);
            if change.delta < 0 {
                doc.value -= change.delta;
            }
        }
    }

    fn clear(&self, s: &mut State, w: usize, part: usize) {
        let tx = usize::from(s.workers[w].tx);
        let change = self.change(tx, part);
        let doc = &mut s.docs[change.doc];
        if doc.markers.contains(tx) {
            doc.markers.remove(tx);
            doc.tombstones.insert(tx);
            if change.delta > 0 {
                doc.value += change.delta; // the deferred credit, exactly once
            }
        }
    }

    /// Whether worker `w` may crash: it owns its record, or is a coordinator
    /// that has not created it. (A superseded worker that crashes is, to
    /// everyone else, one that stalls forever.)
    fn may_crash(&self, s: &State, w: usize) -> bool {
        let worker = s.workers[w];
        if !worker.phase.is_alive() || s.crashes >= self.crashes {
            return false;
        }
        match s.records[usize::from(worker.tx)] {
            Some(r) => usize::from(r.owner) == w,
            None => worker.phase == Phase::Create,
        }
    }
}

struct Summary<'a>(&'a TandemModel, &'a State);

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (model, s) = (self.0, self.1);
        for tx in 0..TXS {
            match s.records[tx] {
                Some(r) => write!(f, "T{}={:?}@{} ", tx + 1, r.state, r.epoch)?,
                None if s.history[tx].removed => write!(f, "T{}=removed ", tx + 1)?,
                None => write!(f, "T{}=absent ", tx + 1)?,
            }
        }
        for (d, doc) in s.docs.iter().enumerate().take(model.participants) {
            let list = |set: TxSet| {
                (0..TXS)
                    .filter(|&tx| set.contains(tx))
                    .map(|tx| format!("T{}", tx + 1))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            write!(
                f,
                "{}={} (expected {}, markers [{}], tombstones [{}]) ",
                DOC_NAMES[d],
                doc.value,
                model.expected_value(s, d),
                list(doc.markers),
                list(doc.tombstones)
            )?;
        }
        write!(f, "effective applies {:?}", {
            let v: Vec<_> = s
                .history
                .iter()
                .map(|h| &h.effective_applies[..model.participants])
                .collect();
            v
        })
    }
}

impl Model for TandemModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let values = self.initial_values();
        let mut docs = [Doc::default(); MAX_DOCS];
        for (doc, value) in docs.iter_mut().zip(values) {
            doc.value = value;
        }
        let coordinator = |tx: u8| Worker {
            tx,
            role: Role::Coordinator,
            epoch: 0,
            phase: Phase::Create,
            parts: [Part::Todo; MAX_DOCS],
        };
        vec![State {
            records: [None; TXS],
            docs,
            workers: vec![coordinator(0), coordinator(1)],
            takeovers: 0,
            rescues: 0,
            crashes: 0,
            fenced: false,
            history: [TxHistory::default(); TXS],
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let n = self.participants;
        for (w, worker) in s.workers.iter().enumerate() {
            let parts = &worker.parts[..n];
            match worker.phase {
                Phase::Create => actions.push(Action::Create { worker: w }),
                Phase::Begin => actions.push(Action::Begin { worker: w }),
                Phase::Apply => {
                    for (part, p) in parts.iter().enumerate() {
                        if *p == Part::Todo {
                            actions.push(Action::Apply { worker: w, part });
                        }
                    }
                    if parts.iter().all(|p| *p != Part::Todo) {
                        if parts.iter().all(|p| *p == Part::Ok) {
                            actions.push(Action::Commit { worker: w });
                        } else {
                            actions.push(Action::Cancel { worker: w });
                        }
                    }
                }
                Phase::RollBack => actions.push(Action::Cancel { worker: w }),
                Phase::Clear => {
                    for (part, p) in parts.iter().enumerate() {
                        if *p == Part::Todo {
                            actions.push(Action::Clear { worker: w, part });
                        }
                    }
                    if parts.iter().all(|p| *p == Part::Done) {
                        actions.push(Action::Finish { worker: w });
                    }
                }
                Phase::Compensate => {
                    let undo_first = self.variant == Variant::UndoBeforeFence;
                    for (part, p) in parts.iter().enumerate() {
                        let fence = Action::Fence { worker: w, part };
                        let undo = Action::Undo { worker: w, part };
                        match (p, undo_first) {
                            (Part::Todo, false) | (Part::Half, true) => actions.push(fence),
                            (Part::Todo, true) | (Part::Half, false) => actions.push(undo),
                            _ => {}
                        }
                    }
                    if parts.iter().all(|p| *p == Part::Done) {
                        actions.push(Action::FinishCancel { worker: w });
                    }
                }
                Phase::Delete => actions.push(Action::Delete { worker: w }),
                Phase::Stopped | Phase::Finished | Phase::Crashed => {}
            }
            if self.may_crash(s, w) {
                actions.push(Action::Crash { worker: w });
            }
        }
        for tx in 0..TXS {
            let Some(record) = s.records[tx] else {
                continue;
            };
            if record.state.is_terminal() {
                continue;
            }
            let owner_alive = s.workers[usize::from(record.owner)].phase.is_alive();
            let allowed = if owner_alive {
                s.takeovers < self.takeovers
            } else {
                self.variant != Variant::NoRescue
            };
            if !allowed {
                continue;
            }
            if record.state == TxState::Pending {
                if self.pending != PendingPolicy::RollForward {
                    actions.push(Action::Claim { tx, forward: false });
                }
                if self.pending != PendingPolicy::RollBack {
                    actions.push(Action::Claim { tx, forward: true });
                }
            } else {
                actions.push(Action::Claim { tx, forward: false });
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Create { worker } => {
                let tx = usize::from(s.workers[worker].tx);
                s.records[tx] = Some(Record {
                    state: TxState::Initial,
                    epoch: 0,
                    owner: worker as u8,
                });
                s.enter(worker, Phase::Begin);
            }
            Action::Begin { worker } => {
                if s.cas(worker, TxState::Initial, TxState::Pending) {
                    s.enter(worker, Phase::Apply);
                } else {
                    s.stop(worker, Phase::Stopped);
                }
            }
            Action::Apply { worker, part } => {
                let result = self.apply(&mut s, worker, part);
                s.workers[worker].parts[part] = result;
            }
            Action::Commit { worker } => {
                if s.cas(worker, TxState::Pending, TxState::Applied) {
                    s.history[usize::from(s.workers[worker].tx)].ever_applied = true;
                    s.enter(worker, Phase::Clear);
                } else {
                    s.stop(worker, Phase::Stopped);
                }
            }
            Action::Cancel { worker } => {
                if s.cas(worker, TxState::Pending, TxState::Canceling) {
                    s.history[usize::from(s.workers[worker].tx)].ever_canceled = true;
                    s.enter(worker, Phase::Compensate);
                } else {
                    s.stop(worker, Phase::Stopped);
                }
            }
            Action::Clear { worker, part } => {
                self.clear(&mut s, worker, part);
                s.workers[worker].parts[part] = Part::Done;
            }
            Action::Finish { worker } => {
                let phase = if s.cas(worker, TxState::Applied, TxState::Done) {
                    Phase::Finished
                } else {
                    Phase::Stopped
                };
                s.stop(worker, phase);
            }
            Action::Fence { worker, part } | Action::Undo { worker, part } => {
                if matches!(action, Action::Fence { .. }) {
                    self.fence(&mut s, worker, part);
                } else {
                    self.undo(&mut s, worker, part);
                }
                let p = &mut s.workers[worker].parts[part];
                *p = if *p == Part::Todo {
                    Part::Half
                } else {
                    Part::Done
                };
            }
            Action::FinishCancel { worker } => {
                let phase = if s.cas(worker, TxState::Canceling, TxState::Canceled) {
                    Phase::Finished
                } else {
                    Phase::Stopped
                };
                s.stop(worker, phase);
            }
            Action::Delete { worker } => {
                let w = s.workers[worker];
                let tx = usize::from(w.tx);
                match s.records[tx] {
                    Some(r) if r.state == TxState::Initial && r.epoch == w.epoch => {
                        s.records[tx] = None;
                        s.history[tx].removed = true;
                        s.stop(worker, Phase::Finished);
                    }
                    _ => s.stop(worker, Phase::Stopped),
                }
            }
            Action::Claim { tx, forward } => {
                let new_worker = s.workers.len() as u8;
                let record = s.records[tx].as_mut()?;
                let owner_alive = last.workers[usize::from(record.owner)].phase.is_alive();
                record.epoch += 1;
                record.owner = new_worker;
                let (epoch, state) = (record.epoch, record.state);
                if owner_alive {
                    s.takeovers += 1;
                } else {
                    s.rescues += 1;
                }
                let phase = match state {
                    TxState::Initial => Phase::Delete,
                    TxState::Pending if forward => Phase::Apply,
                    TxState::Pending => Phase::RollBack,
                    TxState::Applied => Phase::Clear,
                    TxState::Canceling => Phase::Compensate,
                    TxState::Done | TxState::Canceled => return None,
                };
                s.workers.push(Worker {
                    tx: tx as u8,
                    role: Role::Recovery,
                    epoch,
                    phase,
                    parts: [Part::Todo; MAX_DOCS],
                });
            }
            Action::Crash { worker } => {
                s.crashes += 1;
                s.stop(worker, Phase::Crashed);
            }
        }
        Some(s)
    }

    fn format_step(&self, last: &State, action: Action) -> Option<String> {
        let line = self.describe(last, &action);
        self.next_state(last, action)
            .map(|next| format!("{line}\n{}", Summary(self, &next)))
    }

    /// The properties checked.
    ///
    /// Safety (`always`):
    /// * [`NEVER_BOTH`]: no record reaches both `applied` and `canceling`.
    /// * [`ONE_EFFECTIVE_APPLY`]: no apply changes a document a second time for the same transaction.
    /// * [`VALUES_CONSISTENT`]: once every transaction is finished, each balance
    ///   is its initial value plus the committed changes, and no marker is left.
    /// * [`COMMIT_HOLDS_ALL`]: while a record is `applied`, each participant
    ///   holds the change (marker) or has been cleared (tombstone).
    /// * [`CANCELED_LEAVES_NOTHING`]: a `canceled` transaction has no marker anywhere.
    /// * [`NEVER_NEGATIVE`]: no balance is ever below zero.
    ///
    /// Liveness (all paths end in quiescence, so both forms are exact):
    /// * [`QUIESCENT_FINISHED`] (`always`): when no step is enabled, every transaction is finished.
    /// * [`EVENTUALLY_FINISHED`] (`eventually`): every transaction finishes.
    ///
    /// Non-vacuity (`sometimes`): [`SOMETIMES_COMMITS`], [`SOMETIMES_BOTH_COMMIT`],
    /// [`SOMETIMES_GUARD_CANCELS`], [`SOMETIMES_TAKEOVER`], [`SOMETIMES_RESCUE`],
    /// [`SOMETIMES_FENCED`]. Those that need a crash or a takeover are left out
    /// when the bounds allow none.
    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::<Self>::always(NEVER_BOTH, |_, s| {
                s.history
                    .iter()
                    .all(|h| !(h.ever_applied && h.ever_canceled))
            }),
            Property::<Self>::always(ONE_EFFECTIVE_APPLY, |_, s| {
                s.history
                    .iter()
                    .all(|h| h.effective_applies.iter().all(|&n| n <= 1))
            }),
            Property::<Self>::always(VALUES_CONSISTENT, |m, s| {
                !s.all_finished()
                    || (0..m.participants).all(|d| {
                        s.docs[d].value == m.expected_value(s, d) && s.docs[d].markers.is_empty()
                    })
            }),
            Property::<Self>::always(COMMIT_HOLDS_ALL, |m, s| {
                (0..TXS).all(|tx| {
                    s.record_state(tx) != Some(TxState::Applied)
                        || (0..m.participants).all(|part| {
                            let doc = s.docs[m.change(tx, part).doc];
                            doc.markers.contains(tx) || doc.tombstones.contains(tx)
                        })
                })
            }),
            Property::<Self>::always(CANCELED_LEAVES_NOTHING, |m, s| {
                (0..TXS).all(|tx| {
                    s.record_state(tx) != Some(TxState::Canceled)
                        || s.docs[..m.participants]
                            .iter()
                            .all(|d| !d.markers.contains(tx))
                })
            }),
            Property::<Self>::always(NEVER_NEGATIVE, |m, s| {
                s.docs[..m.participants].iter().all(|d| d.value >= 0)
            }),
            Property::<Self>::always(QUIESCENT_FINISHED, |m, s| {
                s.all_finished() || !m.is_quiescent(s)
            }),
            Property::<Self>::eventually(EVENTUALLY_FINISHED, |_, s| s.all_finished()),
            Property::<Self>::sometimes(SOMETIMES_COMMITS, |_, s| {
                (0..TXS).any(|tx| s.record_state(tx) == Some(TxState::Done))
            }),
            Property::<Self>::sometimes(SOMETIMES_BOTH_COMMIT, |_, s| {
                (0..TXS).all(|tx| s.record_state(tx) == Some(TxState::Done))
            }),
            Property::<Self>::sometimes(SOMETIMES_GUARD_CANCELS, |_, s| {
                (0..TXS).any(|tx| {
                    s.history[tx].refused && s.record_state(tx) == Some(TxState::Canceled)
                })
            }),
        ];
        if self.takeovers > 0 {
            properties.push(Property::<Self>::sometimes(SOMETIMES_TAKEOVER, |_, s| {
                s.takeovers > 0 && s.all_finished()
            }));
            properties.push(Property::<Self>::sometimes(SOMETIMES_FENCED, |_, s| {
                s.fenced
            }));
        }
        if self.crashes > 0 && self.variant != Variant::NoRescue {
            properties.push(Property::<Self>::sometimes(SOMETIMES_RESCUE, |_, s| {
                s.rescues > 0 && s.all_finished()
            }));
        }
        properties
    }
}
