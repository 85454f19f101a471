//! A model of the proposed **"decide by inserting"** protocol, checked
//! before anyone builds it.
//!
//! # The proposal
//!
//! Decide by inserting, not by updating: apply all participants at once,
//! with markers that carry what is needed to undo them and the step's
//! deadline, then insert the decision record directly as `committed`. If
//! the coordinator dies first, recovery finds orphaned markers after their
//! deadline (through a small registry of the namespaces that carry markers,
//! written once per namespace per process) and inserts the same `_id` as
//! `canceled`: the unique `_id` arbitrates between a late commit and a
//! recovery abort (presumed abort). The target: two round trips to the
//! commit point, at most five writes for a two-account transfer (two
//! applies in parallel, the insert, two clears in the background, no `done`
//! write).
//!
//! [`InsertDecideModel`] describes it as a state machine whose every step is
//! one atomic single-document action (one write, or one read followed at once
//! by its guarded write where the real step re-checks the read in its
//! filter), and `stateright` explores every interleaving: two coordinators
//! under one transaction id, recovery workers, answers lost with their
//! requests landing arbitrarily late, coordinators that stall, crash or give
//! up, three clocks (the records store `R`, the participant stores `P1`,
//! `P2`) with skew, drift and one step back, and GC.
//!
//! # The protocol as modelled, with the rules the model forced
//!
//! Times are readings of one store's clock; [`LEASE`] = 2, [`MARGIN`] = 1.
//! Every comparison that safety rests on is made **by the store, on its own
//! clock** (`$$NOW` in a filter or a read), never by a worker's clock.
//!
//! 1. **Begin** ([`Action::Begin`], no write). `D` = the coordinator's
//!    reading of `R`'s clock + `LEASE`. `D` is both the deadline of every
//!    apply (judged by each document's store) and the create deadline `C` of
//!    the decision insert (judged by `R`). (A stale reading only makes `D`
//!    earlier; every fence compares the same `D`, so safety never depends
//!    on how `D` relates to real time.)
//! 2. **Register** ([`Action::Register`]): before its *first* apply in a
//!    namespace, a process upserts the namespace into the registry **and
//!    waits for the answer** (once per namespace per process; entries are
//!    never removed). Mutation [`Variant::RegisterInParallel`]: a crash after
//!    the apply and before the registration leaves a marker no scan finds.
//! 3. **Apply** ([`Action::Apply`]; both participants at once: round trip
//!    1). One update filtered on `_id`, the guard, no marker `T#tag`, and
//!    **`P.now < D`**; it pushes the marker `{T#tag, D, undo, deferred}` (a
//!    debit applies at once; a credit is deferred to the clear, so the marker
//!    must also carry the *deferred* part: recovery rolls forward from the
//!    marker alone, the record carries no plan). On no match, a read says
//!    why: marker there ⇒ applied; `P.now ≥ D` ⇒ expired; else refused. A
//!    lost answer leaves the participant **in doubt** for good (a copy may
//!    still land, even after a retry answered).
//! 4. **A refusal** (guard or deadline): compensate what is applied or in
//!    doubt; no record is written (presumed abort); answer `Canceled`.
//! 5. **Decide** ([`Action::Commit`]; round trip 2, the commit point).
//!    Insert `{_id: T, tag, committed, C = D, participants}`. It is **live
//!    iff `R.now < C`**; at or after `C` the same insert writes an **inert**
//!    record ([`Outcome::Inert`]): it decides nothing, but keeps the `_id`
//!    taken until GC. (An upsert whose filter matches no existing document
//!    and whose pipeline computes the state from `$$NOW` does this in one
//!    statement; a duplicate `_id` still fails.) Then:
//!    * live ⇒ `Committed`;
//!    * inert ⇒ compensate; `Canceled`, or **`Unknown`** if an earlier insert
//!      of its own lost its answer (that one may have committed, been rolled
//!      forward by recovery and collected);
//!    * duplicate key ⇒ read the record: its own tag `committed` ⇒
//!      `Committed`; its own `canceled` ⇒ `Canceled`; its own inert ⇒ as
//!      above; **another tag** ⇒ `Duplicate` and compensate — but with an
//!      insert of its own in doubt, wait until **`R.now ≥ C + MARGIN`**
//!      (read from `R`), then compensate and answer **`Unknown`**, never
//!      `Duplicate` (mutations [`Variant::DuplicateAtOnce`],
//!      [`Variant::DuplicateAfterDoubt`]; the second is the flaw this model
//!      found in the proposal, see below).
//! 6. **Clear** (committed, in the background) and **compensate** (not
//!    committed) ([`Action::Remove`]): one update per participant filtered on
//!    the marker and, for a participant **in doubt**, on **`P.now ≥ D +
//!    MARGIN`** (mutation [`Variant::IgnoreDoubt`]). It pulls the marker and
//!    lands the credit (clear) or undoes the debit (compensate).
//! 7. **Recovery** ([`Action::Discover`], [`Action::Decide`],
//!    [`Action::Recover`]). The scan of each registered namespace finds
//!    markers with **`P.now ≥ D + MARGIN`** (the query's `$$NOW`, on the
//!    document's store). For each, it reads the record (and `R`'s clock):
//!    * its tag, `committed` ⇒ clear; its tag, `canceled` or inert ⇒ compensate;
//!    * none ⇒ insert `{_id: T, tag, canceled, C = D}` with **the same
//!      create deadline** (live iff `R.now < C`, else inert: mutation
//!      [`Variant::UnfencedCancel`]), then compensate (a duplicate key: read
//!      again);
//!    * **another tag** ⇒ wait until **`R.now ≥ C + MARGIN`**, then
//!      compensate (presumed abort by time; mutation
//!      [`Variant::ForeignAbortsAtOnce`]).
//!
//!    Its clear or compensate is filtered on the marker and on
//!    **`P.now ≥ D + MARGIN`**, always: recovery cannot know whether a copy
//!    of an apply is in flight (mutation [`Variant::RecoveryNoWait`]).
//!    Recovery takes no lease and claims nothing: there is no record to
//!    claim before the decision, and each of its steps is guarded (the
//!    marker, the unique `_id`), so workers that race on one marker only
//!    repeat each other.
//! 8. **GC** ([`Action::Collect`]) deletes the record once **`R.now ≥ C +
//!    MARGIN`** (in the delete's filter; mutation [`Variant::GcNoWait`]) and,
//!    for a `committed` record, once **none of its participants holds its
//!    marker** (reads of the participants the record lists; mutation
//!    [`Variant::GcIgnoresMarkers`]). `canceled` and inert records need no
//!    such read: a marker left behind is rolled back by the next scan.
//!
//! Cost of the everyday transfer (test
//! `happy_path_costs_five_writes_and_two_round_trips`): two applies (round
//! trip 1), the insert (round trip 2, the commit point), two clears in the
//! background: **five writes, two round trips**; no `done` write, GC reads
//! two documents per committed record instead (batchable per namespace). A
//! process's first transaction in a namespace adds the registry's upsert
//! and its round trip, before the applies.
//!
//! # Why it holds (the argument the model checks)
//!
//! * A decision for `(T, tag)` can only be *made* while `R.now < C`: both
//!   inserts are fenced by the same `C`. GC waits for `R.now ≥ C + MARGIN`,
//!   so once a record is gone, every later insert for that tag is inert
//!   (with `R` stepping back by at most `MARGIN`), and while it exists the
//!   unique `_id` makes every later insert a duplicate. So no transaction is
//!   ever decided twice, let alone both ways.
//! * A marker is pushed only while `P.now < D`, and removed (by anyone who
//!   may have a copy in flight) only once `P.now ≥ D + MARGIN`: no apply
//!   lands after its marker was removed, so nothing lands twice, and once a
//!   committed transaction's markers are gone they stay gone; GC of a
//!   committed record waits for that. So a marker found with no record, or
//!   with another tag's record once `R.now ≥ C + MARGIN`, never belongs to a
//!   committed transaction: rolling it back is right.
//!
//! # Findings
//!
//! 1. **A coordinator whose insert lost its answer cannot conclude
//!    `Duplicate` (nor `Canceled`) from another tag's record, however long
//!    it waits** ([`Variant::DuplicateAfterDoubt`], 20 steps, property
//!    [`ANSWERS_HOLD`]). The lost insert lands live; the coordinator is slow;
//!    recovery finds the markers after `D + MARGIN`, reads `committed`, rolls
//!    the transaction forward; GC collects the record; a second transaction
//!    under the same id inserts its record (here inert); the first
//!    coordinator's retry meets it and answers `Duplicate`, for a
//!    transaction that committed. The answer must be `Unknown` (as v2 does
//!    for a create found past its deadline after a lost attempt). The same
//!    holds for an inert record of its own.
//! 2. **The unique `_id` is not what keeps a late commit out; the create
//!    deadline is.** Without it ([`Variant::UnfencedCommit`]), a delayed
//!    `committed` insert lands after recovery's `canceled` record was
//!    collected, and a rolled-back transaction is committed. And recovery
//!    looks at a marker only once `P.now ≥ D + MARGIN`; with the
//!    participant's clock within `MARGIN` of `R`'s, `R.now ≥ D` by then, so
//!    recovery's `canceled` insert is *always inert*: the race the unique
//!    `_id` arbitrates happens only when `R`'s clock lags a participant
//!    store's by more than the margin (the configurations with clocks
//!    ticking together never see a live `canceled` record; the drifting ones
//!    do). "Presumed abort" is an abort by time.
//! 3. **Waiting for the deadline is for liveness, the time condition on the
//!    removal is for safety.** Recovery may insert `canceled` as soon as it
//!    sees a marker ([`Variant::RecoveryDecidesEarly`] holds: it only cancels
//!    transactions still running); but a clear or compensate that does not
//!    wait for `D + MARGIN` lets an in-flight copy of an apply land after it
//!    ([`Variant::RecoveryNoWait`]: applied twice).
//! 4. **No `done` write means GC must read the participants.** Collecting a
//!    `committed` record whose markers are still there turns them into
//!    orphans that recovery rolls back ([`Variant::GcIgnoresMarkers`]); the
//!    record must list its participants. GC also needs `R.now ≥ C + MARGIN`
//!    ([`Variant::GcNoWait`]), for `canceled` and inert records too.
//! 5. **Recovery's `canceled` insert needs the same create deadline**
//!    ([`Variant::UnfencedCancel`]): a recovery task that saw a marker,
//!    stalled while the coordinator committed and cleared and GC collected,
//!    then inserts `canceled` for a committed transaction (a record that
//!    lies to every later reader of the id: an idempotent retry would be
//!    told "canceled" and pay again).
//! 6. **An insert past its deadline must still write its (inert) record**,
//!    or every conclusion drawn from "no record and `R.now ≥ C`" must wait
//!    for `C + MARGIN`: with `R`'s clock stepping back by the margin, a
//!    late `committed` insert lands live after the coordinator rolled back
//!    ([`Variant::InertWritesNothing`]).
//! 7. **Recovery must not roll back a marker whose id another tag holds
//!    before `R.now ≥ C + MARGIN`** ([`Variant::ForeignAbortsAtOnce`]): the
//!    other record is collected and the marker's own coordinator commits.
//! 8. **The registry write must be acknowledged before the first apply**
//!    ([`Variant::RegisterInParallel`]), and entries must never be removed
//!    while a process may still hold them in its cache.
//! 9. **Duplicates are found at the end, not the start.** Two coordinators
//!    under one id both apply; the loser of the insert compensates. Safe
//!    (checked), but its changes are applied and visible until then, and its
//!    debits can make other transactions' guards refuse; v2 refuses the
//!    second coordinator before it writes anything.
//!
//! # Properties
//!
//! In every reachable state: [`ONE_APPLY`], [`ONE_REMOVAL`],
//! [`DECISIONS_AGREE`] (never a live `committed` and a live `canceled` record
//! for one tag, even at different times), [`COMMITTED_NEVER_UNDONE`],
//! [`CLEARED_ONLY_IF_COMMITTED`], [`ANSWERS_HOLD`] ("committed" ⇒ decided
//! committed; "canceled" and "duplicate" ⇒ never, now or later),
//! [`NEVER_NEGATIVE`], [`SETTLED_CONSISTENT`] (all or nothing once settled:
//! no marker, no task, nothing in flight, no coordinator mid-way) and
//! [`QUIESCENT_SETTLED`] (a state where no step is enabled is settled: no
//! marker is left anywhere; the state graph is acyclic, so this is
//! "eventually settled" once faults stop). Examples (`sometimes`) show that
//! the interesting paths happen (the `SOMETIMES_*` constants).
//!
//! # Variants (mutations)
//!
//! Each [`Variant`] but [`Variant::Proposed`] and
//! [`Variant::RecoveryDecidesEarly`] breaks one rule, and the tests find a
//! counterexample to each (shortest, in steps): the apply without its
//! deadline (10), recovery acting before `D + MARGIN` (8), GC not waiting
//! for `C + MARGIN` (11), the `committed` insert without create deadline
//! (14), no tags (8), GC ignoring markers (13), the `canceled` insert
//! without create deadline (16), the coordinator ignoring its own doubt
//! (9), the registry written in parallel (18), an inert insert writing
//! nothing under a step back of the margin (12), a clock stepping back by
//! the margin plus one (11), a duplicate taken at once with an insert in
//! doubt (15), a duplicate answered after waiting (20), a foreign record
//! taken for an abort at once (19).
//!
//! # Bounds, states and run times
//!
//! Scenarios ([`Scenario`]): `K1` transfers 1 from `A` (on `P1`, balance 1)
//! to `B` (on `P2`, balance 1); `K2` (in [`Scenario::SameId`]) transfers 1
//! from `B` to `A` under the same id, beginning at any time. One or two lost
//! answers, at most one crash; clocks over a few ticks; a coordinator begins
//! only while its `D + MARGIN` is within every clock's range. Configurations
//! of `tests/insert_decide.rs` (release build, 2 threads, a shared 2-core
//! machine; "no examples" drops the `sometimes` properties and their
//! events):
//!
//! | configuration | states | time |
//! |---|---:|---:|
//! | transfer, 1 lost answer, `R` 0..=4, `P1` 0..=5, `P2` 1..=6 (the fast check; 15 s in debug) | 655,883 | 2.9 s |
//! | the same, recovery deciding early | 1,193,341 | 5.5 s |
//! | transfer, 2 lost answers | 4,102,854 | 15.2 s |
//! | transfer, 2 lost answers, `R` 0..=5 (no examples) | 7,402,228 | 41.5 s |
//! | transfer, 1 crash, 1 / 2 lost answers | 946,222 / 3,813,374 | 2.4 s / 9.3 s |
//! | transfer, 2 recovery workers per marker | 2,611,320 | 13.9 s |
//! | transfer, a clock stepping back by `MARGIN` | 2,866,780 | 9.2 s |
//! | transfer, records on `P1`, 2 lost answers | 1,471,637 | 4.6 s |
//! | same id, clocks in step to `R` = 5, 1 lost insert | 14,452,518 | 74.0 s |
//! | same id, clocks in step, 1 lost apply (no examples) | 11,283,788 | 46.4 s |
//! | same id, clocks in step, 1 lost clear / recovery step (no examples) | 16,502,352 / 18,710,708 | 47.8 s / 59.0 s |
//! | same id, drifting clocks, no lost answer / 1 crash (no examples) | 15,424,854 / 23,527,833 | 101.8 s / 134.6 s |
//!
//! # Not modelled, and why that is safe
//!
//! * **Other transaction ids at once**: records of different ids are
//!   disjoint and markers carry their id, so transactions interact only
//!   through balances and guards; `K1` and `K2` share both documents (and
//!   the id, the harder case).
//! * **Inserts, deletes, exclusive changes, more participants**: not in
//!   this model. Each would carry the same marker and deadline and need the
//!   same fences (v2's model covers reserve and fill); the argument above
//!   is per participant.
//! * **GC's reads are one atomic step here**: for a `committed` record the
//!   set of participants holding its marker only shrinks after the commit
//!   (that is [`ONE_APPLY`]), so reading them one by one sees no more.
//! * **Concurrent recovery workers**: one task per marker at a time by
//!   default (a task that loses an answer ends, leaving its request in
//!   flight, and a new one may start); two per marker are checked on the
//!   transfer. Their steps are idempotent and guarded, so more only repeat.
//! * **Read-only steps losing answers**: a failed read changes nothing; it
//!   is retried or the worker stops (stall).
//! * **Registry pruning, index scans, batching**: the registry only grows;
//!   the scan's cost and the batching of clears and GC reads change how
//!   many requests carry the same single-document steps, not the steps.
//! * **Idempotency window and stubs**: records are deleted outright, the
//!   harder case for late steps.
//! * **Time**: bounded (see above); in reality time goes on, and every
//!   fence the model waits for is reached.
//!
//! The file is long because it is the proposal's whole argument in one place:
//! this description, the rules the model forced, and the transition relation
//! (state and properties live in their own modules).

mod properties;
mod state;

use std::fmt;

pub use properties::*;
pub use state::*;

use stateright::{Model, Property};

use crate::model::{Ticks, LEASE, MARGIN};
use crate::scenario::{P1, P2, R, STORES, STORE_NAMES};

/// Document `A`.
pub const A: usize = 0;
/// Document `B`.
pub const B: usize = 1;

/// A document: its name, its store and its initial balance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DocSpec {
    /// Its name in traces.
    pub name: &'static str,
    /// Its store ([`P1`] or [`P2`]).
    pub store: usize,
    /// Its balance at the start.
    pub initial: i8,
}

/// `A` (on `P1`, balance 1) and `B` (on `P2`, balance 1).
pub const DOC_SPECS: [DocSpec; DOCS] = [
    DocSpec {
        name: "A",
        store: P1,
        initial: 1,
    },
    DocSpec {
        name: "B",
        store: P2,
        initial: 1,
    },
];

/// Which coordinators run. Both use the transaction id `T` (the decision
/// record's `_id`); a coordinator's index is its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// `K1`: `A −1` (guard `A ≥ 1`), `B +1`.
    Transfer,
    /// `K1` as above and `K2`: `B −1` (guard `B ≥ 1`), `A +1`, under the same
    /// id, at any times: concurrently, or one after the other's record was
    /// collected (an id reused).
    SameId,
}

impl Scenario {
    /// How many coordinators.
    pub fn coords(self) -> usize {
        match self {
            Scenario::Transfer => 1,
            Scenario::SameId => 2,
        }
    }

    /// Coordinator `coord`'s change of document `doc` (every coordinator
    /// changes both): a negative delta is a debit (guarded, applied at once,
    /// undone by a compensation), a positive one a credit (deferred: it lands
    /// with the clear).
    pub fn delta(self, coord: usize, doc: usize) -> i8 {
        match (coord, doc) {
            (0, A) | (1, B) => -1,
            _ => 1,
        }
    }

    /// A coordinator's name in traces.
    pub fn name(self, coord: usize) -> &'static str {
        ["K1", "K2"][coord]
    }
}

/// The protocol as proposed (with the rules the model forced), or one rule
/// broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The protocol with every rule of the module docs.
    Proposed,
    /// (1) The apply's filter has no deadline.
    NoApplyDeadline,
    /// (2) Recovery acts on a marker at once: it decides without waiting
    /// for the marker's deadline plus the margin, and its clear or
    /// compensate has no time condition.
    RecoveryNoWait,
    /// (3) GC deletes a record without waiting for `R.now ≥ C + MARGIN`.
    GcNoWait,
    /// (4) The `committed` insert carries no create deadline: it is live whenever it lands.
    UnfencedCommit,
    /// (5) Markers hold the bare id `T`, and the record has no tag to compare.
    NoTags,
    /// GC deletes a `committed` record without checking that its markers are gone.
    GcIgnoresMarkers,
    /// Recovery's `canceled` insert carries no create deadline.
    UnfencedCancel,
    /// The coordinator clears or compensates a participant whose apply
    /// lost an answer at once, without waiting for `D + MARGIN`.
    IgnoreDoubt,
    /// A coordinator whose insert lost an answer takes a record of another
    /// tag as a definite `Duplicate` at once (instead of waiting for
    /// `R.now ≥ C + MARGIN` and answering "unknown").
    DuplicateAtOnce,
    /// A coordinator whose insert lost an answer waits for `R.now ≥ C +
    /// MARGIN` on a record of another tag, then answers `Duplicate` (instead
    /// of "unknown").
    DuplicateAfterDoubt,
    /// Recovery rolls back a marker whose id is held by another tag's record
    /// at once (instead of once `R.now ≥ C + MARGIN`).
    ForeignAbortsAtOnce,
    /// An insert that lands at or after its create deadline writes nothing
    /// (instead of an inert record that keeps the `_id` taken).
    InertWritesNothing,
    /// The namespace registry's write goes in parallel with the first apply
    /// (instead of before it).
    RegisterInParallel,
    /// A relaxation, expected to hold: recovery decides (inserts
    /// `canceled`) as soon as it sees a marker, without waiting for the
    /// deadline; its clear and compensate keep their time condition.
    RecoveryDecidesEarly,
}

/// Which steps may lose their answer (the request lands whenever it is delivered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lose {
    /// Coordinators' applies.
    pub apply: bool,
    /// Coordinators' `committed` inserts.
    pub commit: bool,
    /// Coordinators' clears and compensations.
    pub remove: bool,
    /// Recovery's `canceled` inserts, clears and compensations.
    pub recovery: bool,
    /// Registry writes.
    pub register: bool,
}

impl Lose {
    /// Every kind of step.
    pub const ALL: Lose = Lose {
        apply: true,
        commit: true,
        remove: true,
        recovery: true,
        register: true,
    };
}

/// One atomic step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A store's clock advances by one (`store == STORES`: every clock not at its end).
    Tick {
        /// The store.
        store: usize,
    },
    /// A store's clock steps back by [`InsertDecideModel::step_back`] (once).
    StepBack {
        /// The store.
        store: usize,
    },
    /// A coordinator reads the records store's clock: `D = R.now + LEASE`.
    Begin {
        /// The coordinator.
        coord: usize,
    },
    /// A coordinator registers a namespace for recovery's scan.
    Register {
        /// The coordinator.
        coord: usize,
        /// The namespace.
        ns: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// A coordinator's apply; on no match, the read that says why.
    Apply {
        /// The coordinator.
        coord: usize,
        /// The participant.
        part: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// A coordinator inserts the decision record `committed`; on a duplicate
    /// key, it reads the record.
    Commit {
        /// The coordinator.
        coord: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// A coordinator clears (committed) or compensates (not) a participant.
    Remove {
        /// The coordinator.
        coord: usize,
        /// The participant.
        part: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// A coordinator with a step in doubt stops (answers "unknown" if it has not answered).
    GiveUp {
        /// The coordinator.
        coord: usize,
    },
    /// A coordinator crashes.
    Crash {
        /// The coordinator.
        coord: usize,
    },
    /// Recovery's scan finds a marker and starts a task for it.
    Discover {
        /// The document.
        doc: usize,
        /// The marker's identity.
        ident: usize,
    },
    /// A task reads the record (with the records store's clock); if there
    /// is none it inserts it `canceled` (on a duplicate key: reads it).
    Decide {
        /// The task's index in [`State::tasks`].
        task: usize,
        /// The insert's answer is lost (the task ends, the request stays in flight).
        lose: bool,
    },
    /// A task clears or compensates its marker, and ends.
    Recover {
        /// The task's index in [`State::tasks`].
        task: usize,
        /// The answer is lost (the task ends, the request stays in flight).
        lose: bool,
    },
    /// A request in flight lands.
    Deliver {
        /// Its index in [`State::flight`].
        index: usize,
    },
    /// GC deletes the decision record.
    Collect,
}

/// What an apply found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ApplyResult {
    Landed,
    Present,
    Refused,
    Expired { would_land: bool },
}

/// What a decision insert found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inserted {
    Live,
    Inert,
    Exists(Record),
}

/// The model: the scenario, the bounds, and the protocol variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsertDecideModel {
    /// Which coordinators run.
    pub scenario: Scenario,
    /// The decision records live in `P1`'s store (one clock for both).
    pub records_on_p1: bool,
    /// Each clock's start (the skew).
    pub clock_start: [u8; STORES],
    /// Each clock's end.
    pub clock_end: [u8; STORES],
    /// How clocks advance.
    pub ticks: Ticks,
    /// The most lost answers.
    pub lost: u8,
    /// Which steps may lose their answer.
    pub lose: Lose,
    /// The most coordinator crashes.
    pub crashes: u8,
    /// GC deletes decision records.
    pub gc: bool,
    /// Namespaces start unregistered and coordinators register them
    /// (otherwise they are registered from the start).
    pub registry: bool,
    /// A clock may step back once by this much (0: never).
    pub step_back: u8,
    /// The protocol variant.
    pub variant: Variant,
    /// The most recovery tasks working on one marker at once (concurrent
    /// recovery workers).
    pub workers_per_marker: u8,
    /// Track the events the examples (`sometimes` properties) need; off,
    /// the state space is smaller and only the safety and liveness
    /// properties are checked.
    pub examples: bool,
}

/// What [`InsertDecideModel::search`] found.
#[derive(Clone, Debug)]
pub struct Search {
    /// The property first violated (or, for a `sometimes` property,
    /// satisfied), and a shortest path to it.
    pub found: Option<(&'static str, Vec<Action>)>,
    /// The states visited.
    pub states: usize,
}

impl InsertDecideModel {
    /// The proposed protocol for `scenario` with small bounds: records in
    /// their own store; clocks `R` 0..=4, `P1` 0..=5, `P2` 1..=6 ticking on
    /// their own; one lost answer (any step); no crash; GC on; the registry
    /// modelled; no clock stepping back.
    pub fn new(scenario: Scenario) -> Self {
        InsertDecideModel {
            scenario,
            records_on_p1: false,
            clock_start: [0, 0, 1],
            clock_end: [4, 5, 6],
            ticks: Ticks::PerStore,
            lost: 1,
            lose: Lose::ALL,
            crashes: 0,
            gc: true,
            registry: true,
            step_back: 0,
            variant: Variant::Proposed,
            workers_per_marker: 1,
            examples: true,
        }
    }

    /// Sets the clocks' starts and ends.
    pub fn with_clocks(mut self, start: [u8; STORES], end: [u8; STORES]) -> Self {
        self.clock_start = start;
        self.clock_end = end;
        self
    }

    /// Sets how clocks advance.
    pub fn with_ticks(mut self, ticks: Ticks) -> Self {
        self.ticks = ticks;
        self
    }

    /// Puts the decision records in `P1`'s store.
    pub fn with_records_on_p1(mut self, on_p1: bool) -> Self {
        self.records_on_p1 = on_p1;
        self
    }

    /// Sets the most lost answers and which steps may lose them.
    pub fn with_lost(mut self, lost: u8, lose: Lose) -> Self {
        self.lost = lost;
        self.lose = lose;
        self
    }

    /// Sets the most coordinator crashes.
    pub fn with_crashes(mut self, crashes: u8) -> Self {
        self.crashes = crashes;
        self
    }

    /// Switches GC on or off.
    pub fn with_gc(mut self, gc: bool) -> Self {
        self.gc = gc;
        self
    }

    /// Models the registry's writes (or starts with every namespace registered).
    pub fn with_registry(mut self, registry: bool) -> Self {
        self.registry = registry;
        self
    }

    /// Lets one clock step back once by `amount`.
    pub fn with_step_back(mut self, amount: u8) -> Self {
        self.step_back = amount;
        self
    }

    /// Sets the protocol variant.
    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// Sets the most recovery tasks working on one marker at once.
    pub fn with_workers_per_marker(mut self, workers: u8) -> Self {
        self.workers_per_marker = workers;
        self
    }

    /// Tracks the examples' events (and checks the examples) or not.
    pub fn with_examples(mut self, examples: bool) -> Self {
        self.examples = examples;
        self
    }

    /// The index of the clock `store` reads.
    pub fn clock_index(&self, store: usize) -> usize {
        if store == R && self.records_on_p1 {
            P1
        } else {
            store
        }
    }

    /// What `store`'s clock reads in `s`.
    pub fn now(&self, s: &State, store: usize) -> u8 {
        s.clocks[self.clock_index(store)]
    }

    /// What the clock of document `doc`'s store reads.
    fn doc_now(&self, s: &State, doc: usize) -> u8 {
        self.now(s, DOC_SPECS[doc].store)
    }

    fn stores(&self) -> impl Iterator<Item = usize> + '_ {
        (0..STORES).filter(move |&i| !(i == R && self.records_on_p1))
    }

    fn coords(&self) -> std::ops::Range<usize> {
        0..self.scenario.coords()
    }

    /// The slot a coordinator's marker takes on a document: its tag, or `T` alone without tags.
    pub fn ident(&self, coord: usize) -> usize {
        if self.variant == Variant::NoTags {
            0
        } else {
            coord
        }
    }

    /// Whether a record with `tag` is coordinator `coord`'s (always, without tags).
    fn same_tag(&self, tag: u8, coord: usize) -> bool {
        self.variant == Variant::NoTags || usize::from(tag) == coord
    }

    /// Whether the clear or compensate of coordinator `coord`'s participant
    /// `part` must wait, and until when (by the document's store clock).
    fn coord_not_before(&self, c: &Coord, part: usize) -> u8 {
        if c.doubt & (1 << part) != 0 && self.variant != Variant::IgnoreDoubt {
            c.deadline + MARGIN
        } else {
            0
        }
    }

    /// The time fence of recovery's clear or compensate of a marker with deadline `d`.
    fn task_not_before(&self, d: u8) -> u8 {
        if self.variant == Variant::RecoveryNoWait {
            0
        } else {
            d + MARGIN
        }
    }

    /// Whether a coordinator may begin now: its deadline plus the margin
    /// must be reachable on every clock (the model's time is bounded).
    fn may_begin(&self, s: &State) -> bool {
        let d = self.now(s, R) + LEASE + MARGIN;
        self.stores().all(|i| d <= self.clock_end[i])
    }

    /// Whether nothing is left to do: no marker, no task, nothing in
    /// flight, no coordinator in the middle of a transaction.
    pub fn is_settled(&self, s: &State) -> bool {
        s.docs.iter().all(|d| d.markers.iter().all(Option::is_none))
            && s.tasks.is_empty()
            && s.flight.is_empty()
            && s.coords.iter().all(|c| !c.is_active())
    }

    /// Whether no step is enabled.
    pub fn is_quiescent(&self, s: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(s, &mut actions);
        actions.is_empty()
    }

    /// All-or-nothing, per coordinator: committed ⇒ each participant
    /// applied once and cleared once, never undone; not committed ⇒ every
    /// apply undone, nothing cleared. And the balances are the initial ones
    /// plus the committed changes.
    pub fn is_consistent(&self, s: &State) -> bool {
        let per_coord = self.coords().all(|c| {
            let h = s.history[c];
            (0..DOCS).all(|p| {
                if h.committed {
                    h.applies[p] == 1 && h.clears[p] == 1 && h.undos[p] == 0
                } else {
                    h.applies[p] == h.undos[p] && h.clears[p] == 0
                }
            })
        });
        let values = (0..DOCS).all(|d| {
            let committed: i8 = self
                .coords()
                .filter(|&c| s.history[c].committed)
                .map(|c| self.scenario.delta(c, d))
                .sum();
            s.docs[d].value == DOC_SPECS[d].initial + committed
        });
        per_coord && values
    }

    fn may_lose(&self, s: &State, kind: bool) -> &'static [bool] {
        if kind && s.lost < self.lost {
            &[false, true]
        } else {
            &[false]
        }
    }

    // ----- landing single-document steps -----

    fn land_apply(&self, s: &mut State, coord: usize, part: usize, deadline: u8) -> ApplyResult {
        let now = self.doc_now(s, part);
        let id = self.ident(coord);
        let delta = self.scenario.delta(coord, part);
        let doc = &mut s.docs[part];
        if doc.markers[id].is_some() {
            return ApplyResult::Present;
        }
        let in_time = self.variant == Variant::NoApplyDeadline || now < deadline;
        let guard = delta >= 0 || doc.value >= -delta;
        if !in_time {
            return ApplyResult::Expired { would_land: guard };
        }
        if !guard {
            return ApplyResult::Refused;
        }
        if delta < 0 {
            doc.value += delta; // a debit applies at once; a credit waits for the clear
        }
        doc.markers[id] = Some(Marker {
            owner: coord as u8,
            deadline,
        });
        let h = &mut s.history[coord];
        h.applies[part] = (h.applies[part] + 1).min(2);
        ApplyResult::Landed
    }

    /// A clear or compensate of `coord`'s change of `part`: one update
    /// filtered on the marker and on the store's clock reading `not_before`
    /// or later. Returns whether it matched.
    fn land_remove(
        &self,
        s: &mut State,
        coord: usize,
        part: usize,
        not_before: u8,
        clear: bool,
    ) -> bool {
        let now = self.doc_now(s, part);
        let id = self.ident(coord);
        let delta = self.scenario.delta(coord, part);
        let doc = &mut s.docs[part];
        if doc.markers[id].is_none() || now < not_before {
            return false;
        }
        doc.markers[id] = None;
        let h = &mut s.history[coord];
        if clear {
            if delta > 0 {
                doc.value += delta; // the deferred credit
            }
            h.clears[part] = (h.clears[part] + 1).min(2);
        } else {
            if delta < 0 {
                doc.value -= delta; // undo the debit
            }
            h.undos[part] = (h.undos[part] + 1).min(2);
        }
        true
    }

    /// The insert of the decision record: live while the records store's
    /// clock is before its create deadline, inert after.
    fn land_insert(
        &self,
        s: &mut State,
        tag: usize,
        deadline: u8,
        outcome: Outcome,
        fenced: bool,
    ) -> Inserted {
        if let Some(r) = s.record {
            return Inserted::Exists(r);
        }
        let live = !fenced || self.now(s, R) < deadline;
        let outcome = if live { outcome } else { Outcome::Inert };
        if outcome == Outcome::Inert && self.variant == Variant::InertWritesNothing {
            return Inserted::Inert;
        }
        s.record = Some(Record {
            tag: tag as u8,
            outcome,
            deadline,
        });
        match outcome {
            Outcome::Committed => s.history[tag].committed = true,
            Outcome::Canceled => s.history[tag].canceled = true,
            Outcome::Inert => {}
        }
        if live {
            Inserted::Live
        } else {
            Inserted::Inert
        }
    }

    fn land_commit(&self, s: &mut State, coord: usize, deadline: u8) -> Inserted {
        let fenced = self.variant != Variant::UnfencedCommit;
        self.land_insert(s, coord, deadline, Outcome::Committed, fenced)
    }

    fn land_cancel(&self, s: &mut State, owner: usize, deadline: u8) -> Inserted {
        let fenced = self.variant != Variant::UnfencedCancel;
        self.land_insert(s, owner, deadline, Outcome::Canceled, fenced)
    }

    // ----- coordinators -----

    fn answer(&self, s: &mut State, c: usize, answer: Answer) {
        if s.answers[c] == Answer::None {
            s.answers[c] = answer;
        }
    }

    fn enter_clear(&self, s: &mut State, c: usize) {
        let coord = &mut s.coords[c];
        coord.phase = Phase::Clear;
        coord.parts = [Part::Todo; DOCS];
    }

    /// Compensate what may have landed: participants applied, or whose apply lost an answer.
    fn enter_compensate(&self, s: &mut State, c: usize) {
        let coord = &mut s.coords[c];
        coord.phase = Phase::Compensate;
        for p in 0..DOCS {
            coord.parts[p] = if coord.parts[p] == Part::Ok || coord.doubt & (1 << p) != 0 {
                Part::Todo
            } else {
                Part::Done
            };
        }
        self.finish_if_done(s, c);
    }

    fn finish_if_done(&self, s: &mut State, c: usize) {
        if s.coords[c].parts.iter().all(|p| *p == Part::Done) {
            s.coords[c] = Coord::DEAD;
        }
    }

    /// After an apply answered (or lost its answer): once every participant
    /// answered, a refusal cancels, all applied moves on to the decision.
    fn after_apply(&self, s: &mut State, c: usize) {
        let parts = s.coords[c].parts;
        if parts.contains(&Part::Todo) {
            return;
        }
        if parts.contains(&Part::Refused) {
            self.answer(s, c, Answer::Canceled);
            self.enter_compensate(s, c);
        } else if parts.iter().all(|p| *p == Part::Ok) {
            s.coords[c].phase = Phase::Decide;
        }
    }

    /// Whether coordinator `c`'s insert, answered now, would change nothing:
    /// a record of another tag while an earlier insert of its own may still land.
    fn commit_must_wait(&self, s: &State, c: usize) -> bool {
        let coord = s.coords[c];
        matches!(s.record, Some(r) if !self.same_tag(r.tag, c))
            && coord.decide_doubt
            && self.variant != Variant::DuplicateAtOnce
            && self.now(s, R) < coord.deadline + MARGIN
    }

    /// What a coordinator does with its insert's answer.
    fn after_commit(&self, s: &mut State, c: usize, result: Inserted) {
        let doubt = s.coords[c].decide_doubt;
        let unknown_or_canceled = if doubt {
            Answer::Unknown
        } else {
            Answer::Canceled
        };
        match result {
            Inserted::Live => {
                self.answer(s, c, Answer::Committed);
                self.enter_clear(s, c);
            }
            Inserted::Inert => {
                self.answer(s, c, unknown_or_canceled);
                self.enter_compensate(s, c);
            }
            Inserted::Exists(r) if self.same_tag(r.tag, c) => match r.outcome {
                Outcome::Committed => {
                    self.answer(s, c, Answer::Committed);
                    self.enter_clear(s, c);
                }
                Outcome::Canceled => {
                    self.answer(s, c, Answer::Canceled);
                    s.event = Event::CommitLostRace;
                    self.enter_compensate(s, c);
                }
                Outcome::Inert => {
                    self.answer(s, c, unknown_or_canceled);
                    self.enter_compensate(s, c);
                }
            },
            Inserted::Exists(_) => {
                // Another transaction holds the id. With an insert of its
                // own in doubt, that insert may have landed live, been
                // cleared by recovery and collected: unknown.
                let answer = if doubt && self.variant != Variant::DuplicateAfterDoubt {
                    Answer::Unknown
                } else {
                    Answer::Duplicate
                };
                self.answer(s, c, answer);
                self.enter_compensate(s, c);
            }
        }
    }

    // ----- recovery -----

    /// Whether a task's decision read, now, would change nothing: another
    /// tag holds the id and this marker's transaction may still commit.
    fn task_must_wait(&self, s: &State, t: &Task) -> bool {
        matches!(s.record, Some(r) if !self.same_tag(r.tag, usize::from(t.owner)))
            && self.variant != Variant::ForeignAbortsAtOnce
            && self.now(s, R) < t.deadline + MARGIN
    }

    /// Whether GC may delete the record now.
    fn collectable(&self, s: &State) -> bool {
        let Some(r) = s.record else {
            return false;
        };
        let aged = self.variant == Variant::GcNoWait || self.now(s, R) >= r.deadline + MARGIN;
        let id = self.ident(usize::from(r.tag));
        let cleared = r.outcome != Outcome::Committed
            || self.variant == Variant::GcIgnoresMarkers
            || s.docs.iter().all(|d| d.markers[id].is_none());
        aged && cleared
    }

    /// Puts the state in a canonical form: requests that can no longer
    /// change anything are dropped (an apply whose deadline has passed on
    /// its store's clock by more than any step back still to come, a
    /// registration already made), tasks and requests are sorted, and
    /// without examples the event is forgotten.
    fn normalize(&self, s: &mut State) {
        let back = if s.steps_back < 1 { self.step_back } else { 0 };
        let mut fenced = false;
        let mut flight = std::mem::take(&mut s.flight);
        flight.retain(|r| match *r {
            Request::Apply {
                coord,
                part,
                deadline,
            } if self.variant != Variant::NoApplyDeadline => {
                let (c, p) = (usize::from(coord), usize::from(part));
                let dead = self.doc_now(s, p) >= deadline + back;
                if dead {
                    let doc = s.docs[p];
                    let delta = self.scenario.delta(c, p);
                    fenced |=
                        doc.markers[self.ident(c)].is_none() && (delta >= 0 || doc.value >= -delta);
                }
                !dead
            }
            Request::Register { ns } => !s.registry[usize::from(ns)],
            _ => true,
        });
        s.flight = flight;
        if fenced && s.event == Event::None {
            s.event = Event::LateApplyFenced;
        }
        if !self.examples {
            s.event = Event::None;
        }
        s.tasks.sort_unstable();
        s.flight.sort_unstable();
    }

    /// Breadth-first search, on one thread, for a shortest path from the
    /// initial state to a state where one of the properties `names` is
    /// violated (an `always` property) or holds (a `sometimes` property).
    /// Gives up after `limit` states.
    ///
    /// # Panics
    /// If the model has no property of one of the `names`, or it is an
    /// `eventually` property.
    pub fn search(&self, names: &[&str], limit: usize) -> Search {
        use std::collections::hash_map::{DefaultHasher, Entry, HashMap};
        use std::collections::VecDeque;
        use std::hash::{Hash, Hasher};
        let all = self.properties();
        let targets: Vec<_> = names
            .iter()
            .map(|name| {
                let p = all
                    .iter()
                    .find(|p| p.name == *name)
                    .unwrap_or_else(|| panic!("no property {name:?}"));
                assert!(
                    p.expectation != stateright::Expectation::Eventually,
                    "{name:?} is an eventually property"
                );
                p.clone()
            })
            .collect();
        let hit = |s: &State| {
            targets.iter().find(|p| {
                let holds = (p.condition)(self, s);
                match p.expectation {
                    stateright::Expectation::Sometimes => holds,
                    _ => !holds,
                }
            })
        };
        let fingerprint = |s: &State| {
            let mut h = DefaultHasher::new();
            s.hash(&mut h);
            h.finish()
        };
        let mut parents: HashMap<u64, Option<(u64, Action)>> = HashMap::new();
        let mut queue = VecDeque::new();
        for s in self.init_states() {
            parents.insert(fingerprint(&s), None);
            queue.push_back(s);
        }
        let mut actions = Vec::new();
        while let Some(s) = queue.pop_front() {
            if let Some(p) = hit(&s) {
                let mut path = Vec::new();
                let mut fp = fingerprint(&s);
                while let Some(Some((parent, action))) = parents.get(&fp) {
                    path.push(*action);
                    fp = *parent;
                }
                path.reverse();
                return Search {
                    found: Some((p.name, path)),
                    states: parents.len(),
                };
            }
            if parents.len() >= limit {
                break;
            }
            let fp = fingerprint(&s);
            actions.clear();
            self.actions(&s, &mut actions);
            for &action in &actions {
                if let Some(next) = self.next_state(&s, action) {
                    if let Entry::Vacant(e) = parents.entry(fingerprint(&next)) {
                        e.insert(Some((fp, action)));
                        queue.push_back(next);
                    }
                }
            }
        }
        Search {
            found: None,
            states: parents.len(),
        }
    }

    // ----- traces -----

    /// A readable line for `action` taken in `s`.
    pub fn describe(&self, s: &State, action: &Action) -> String {
        let who = |c: usize| {
            format!(
                "coordinator {} (D={})",
                self.scenario.name(c),
                s.coords[c].deadline
            )
        };
        let doc = |c: usize, p: usize| {
            let d = self.scenario.delta(c, p);
            format!(
                "{} {} [{}.now={}]",
                if d < 0 { "debit" } else { "credit" },
                DOC_SPECS[p].name,
                STORE_NAMES[DOC_SPECS[p].store],
                self.doc_now(s, p)
            )
        };
        let lost = |lose: bool| {
            if lose {
                " -- answer LOST, request in flight"
            } else {
                ""
            }
        };
        let r_now = self.now(s, R);
        match *action {
            Action::Tick { store } if store == STORES => "tick all clocks".into(),
            Action::Tick { store } => format!("tick {}", STORE_NAMES[store]),
            Action::StepBack { store } => format!(
                "{}'s clock steps back by {}",
                STORE_NAMES[store], self.step_back
            ),
            Action::Begin { coord } => format!(
                "coordinator {} begins [R.now={r_now}]: D = {}",
                self.scenario.name(coord),
                r_now + LEASE
            ),
            Action::Register { coord, ns, lose } => format!(
                "{}: registers namespace of {}{}",
                who(coord),
                DOC_SPECS[ns].name,
                lost(lose)
            ),
            Action::Apply { coord, part, lose } => {
                format!("{}: apply {}{}", who(coord), doc(coord, part), lost(lose))
            }
            Action::Commit { coord, lose } => format!(
                "{}: insert decision committed [R.now={r_now}]{}",
                who(coord),
                lost(lose)
            ),
            Action::Remove { coord, part, lose } => format!(
                "{}: {} {}{}",
                who(coord),
                if s.coords[coord].phase == Phase::Clear {
                    "clear"
                } else {
                    "compensate"
                },
                doc(coord, part),
                lost(lose)
            ),
            Action::GiveUp { coord } => format!("{}: gives up", who(coord)),
            Action::Crash { coord } => format!("{}: crashes", who(coord)),
            Action::Discover { doc, ident } => {
                let m = s.docs[doc].markers[ident];
                format!(
                    "recovery finds marker {:?} on {} [{}.now={}]",
                    m,
                    DOC_SPECS[doc].name,
                    STORE_NAMES[DOC_SPECS[doc].store],
                    self.doc_now(s, doc)
                )
            }
            Action::Decide { task, lose } => {
                let t = s.tasks[task];
                format!(
                    "recovery (marker of {} on {}, D={}): reads record {:?} [R.now={r_now}]{}{}",
                    self.scenario.name(usize::from(t.owner)),
                    DOC_SPECS[usize::from(t.doc)].name,
                    t.deadline,
                    s.record,
                    if s.record.is_none() {
                        ", inserts canceled"
                    } else {
                        ""
                    },
                    lost(lose)
                )
            }
            Action::Recover { task, lose } => {
                let t = s.tasks[task];
                format!(
                    "recovery: {} marker of {} on {} [{}.now={}]{}",
                    if t.phase == TaskPhase::Clear {
                        "clears"
                    } else {
                        "compensates"
                    },
                    self.scenario.name(usize::from(t.owner)),
                    DOC_SPECS[usize::from(t.doc)].name,
                    STORE_NAMES[DOC_SPECS[usize::from(t.doc)].store],
                    self.doc_now(s, usize::from(t.doc)),
                    lost(lose)
                )
            }
            Action::Deliver { index } => format!(
                "the network delivers {:?} [R.now={r_now}, P1.now={}, P2.now={}]",
                s.flight[index],
                self.now(s, P1),
                self.now(s, P2)
            ),
            Action::Collect => format!("GC deletes the record {:?} [R.now={r_now}]", s.record),
        }
    }

    /// A path of actions from the initial state, one readable line each, and the final state.
    pub fn explain(&self, actions: &[Action]) -> String {
        let mut state = self.init_states().remove(0);
        let mut out = String::new();
        for (i, action) in actions.iter().enumerate() {
            out.push_str(&format!(
                "  {:2}. {}\n",
                i + 1,
                self.describe(&state, action)
            ));
            match self.next_state(&state, *action) {
                Some(next) => state = next,
                None => break,
            }
        }
        out.push_str(&format!("  final: {}\n", Summary(self, &state)));
        out
    }
}

/// A one-line summary of a state.
pub struct Summary<'a>(pub &'a InsertDecideModel, pub &'a State);

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (m, s) = (self.0, self.1);
        write!(f, "clocks {:?}; record {:?}; ", s.clocks, s.record)?;
        for (doc, spec) in s.docs.iter().zip(DOC_SPECS) {
            write!(f, "{}={} markers {:?}; ", spec.name, doc.value, doc.markers)?;
        }
        for c in m.coords() {
            let h = s.history[c];
            write!(
                f,
                "{}: answer {:?}, committed {} canceled {} applies {:?} clears {:?} undos {:?}; ",
                m.scenario.name(c),
                s.answers[c],
                h.committed,
                h.canceled,
                h.applies,
                h.clears,
                h.undos
            )?;
        }
        write!(f, "tasks {:?}; in flight {:?}", s.tasks, s.flight)
    }
}

impl Model for InsertDecideModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut clocks = self.clock_start;
        if self.records_on_p1 {
            clocks[R] = 0;
        }
        let all = (1u8 << DOCS) - 1;
        let mut coords = [Coord::DEAD; COORDS];
        for c in self.coords() {
            coords[c] = Coord {
                known: if self.registry { 0 } else { all },
                ..Coord::START
            };
        }
        vec![State {
            clocks,
            record: None,
            registry: [!self.registry; DOCS],
            docs: DOC_SPECS.map(|d| Doc {
                value: d.initial,
                markers: [None; COORDS],
            }),
            coords,
            tasks: Vec::new(),
            answers: [Answer::None; COORDS],
            flight: Vec::new(),
            lost: 0,
            crashes: 0,
            steps_back: 0,
            collected: false,
            history: [History::default(); COORDS],
            event: Event::None,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        // Time.
        match self.ticks {
            Ticks::PerStore => {
                for store in self.stores() {
                    if s.clocks[store] < self.clock_end[store] {
                        actions.push(Action::Tick { store });
                    }
                }
            }
            Ticks::Global => {
                if self.stores().any(|i| s.clocks[i] < self.clock_end[i]) {
                    actions.push(Action::Tick { store: STORES });
                }
            }
        }
        if self.step_back > 0 && s.steps_back == 0 {
            for store in self.stores() {
                if s.clocks[store] >= self.step_back {
                    actions.push(Action::StepBack { store });
                }
            }
        }
        // Coordinators.
        let all = (1u8 << DOCS) - 1;
        for c in self.coords() {
            let coord = s.coords[c];
            let parallel = self.variant == Variant::RegisterInParallel;
            let register = |actions: &mut Vec<Action>, ns: usize| {
                for &lose in self.may_lose(s, self.lose.register) {
                    actions.push(Action::Register { coord: c, ns, lose });
                }
            };
            match coord.phase {
                Phase::Begin => {
                    if self.may_begin(s) {
                        actions.push(Action::Begin { coord: c });
                    }
                }
                Phase::Apply => {
                    for p in 0..DOCS {
                        let known = coord.known & (1 << p) != 0;
                        if !known
                            && (parallel || matches!(coord.parts[p], Part::Todo | Part::Doubt))
                        {
                            register(actions, p);
                        }
                        if matches!(coord.parts[p], Part::Todo | Part::Doubt) && (known || parallel)
                        {
                            for &lose in self.may_lose(s, self.lose.apply) {
                                actions.push(Action::Apply {
                                    coord: c,
                                    part: p,
                                    lose,
                                });
                            }
                        }
                    }
                }
                Phase::Decide => {
                    if coord.known != all {
                        for p in 0..DOCS {
                            if coord.known & (1 << p) == 0 {
                                register(actions, p);
                            }
                        }
                    } else {
                        for &lose in self.may_lose(s, self.lose.commit) {
                            if lose || !self.commit_must_wait(s, c) {
                                actions.push(Action::Commit { coord: c, lose });
                            }
                        }
                    }
                }
                Phase::Clear | Phase::Compensate => {
                    for p in 0..DOCS {
                        if matches!(coord.parts[p], Part::Todo | Part::Doubt)
                            && self.doc_now(s, p) >= self.coord_not_before(&coord, p)
                        {
                            for &lose in self.may_lose(s, self.lose.remove) {
                                actions.push(Action::Remove {
                                    coord: c,
                                    part: p,
                                    lose,
                                });
                            }
                        }
                    }
                }
                Phase::Dead => {}
            }
            let in_doubt = coord.parts.contains(&Part::Doubt)
                || (coord.phase == Phase::Decide && coord.decide_doubt);
            if coord.is_active() && in_doubt {
                actions.push(Action::GiveUp { coord: c });
            }
            if coord.is_active() && s.crashes < self.crashes {
                actions.push(Action::Crash { coord: c });
            }
        }
        // Recovery: the scan.
        let early = matches!(
            self.variant,
            Variant::RecoveryNoWait | Variant::RecoveryDecidesEarly
        );
        for (d, doc) in s.docs.iter().enumerate() {
            if !s.registry[d] {
                continue;
            }
            for (ident, m) in doc.markers.iter().enumerate() {
                let Some(m) = m else { continue };
                let busy = s
                    .tasks
                    .iter()
                    .filter(|t| usize::from(t.doc) == d && usize::from(t.ident) == ident)
                    .count()
                    >= usize::from(self.workers_per_marker);
                if !busy && (early || self.doc_now(s, d) >= m.deadline + MARGIN) {
                    actions.push(Action::Discover { doc: d, ident });
                }
            }
        }
        // Recovery: the tasks.
        for (i, t) in s.tasks.iter().enumerate() {
            match t.phase {
                TaskPhase::Decide => {
                    if s.record.is_none() {
                        for &lose in self.may_lose(s, self.lose.recovery) {
                            actions.push(Action::Decide { task: i, lose });
                        }
                    } else if !self.task_must_wait(s, t) {
                        actions.push(Action::Decide {
                            task: i,
                            lose: false,
                        });
                    }
                }
                TaskPhase::Clear | TaskPhase::Compensate => {
                    if self.doc_now(s, usize::from(t.doc)) >= self.task_not_before(t.deadline) {
                        for &lose in self.may_lose(s, self.lose.recovery) {
                            actions.push(Action::Recover { task: i, lose });
                        }
                    }
                }
            }
        }
        // The network.
        for index in 0..s.flight.len() {
            if index == 0 || s.flight[index] != s.flight[index - 1] {
                actions.push(Action::Deliver { index });
            }
        }
        // GC.
        if self.gc && self.collectable(s) {
            actions.push(Action::Collect);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        s.event = Event::None;
        match action {
            Action::Tick { store } => {
                for i in self.stores() {
                    if (store == STORES || store == i) && s.clocks[i] < self.clock_end[i] {
                        s.clocks[i] += 1;
                    }
                }
            }
            Action::StepBack { store } => {
                s.clocks[store] -= self.step_back;
                s.steps_back += 1;
                s.event = Event::SteppedBack;
            }
            Action::Begin { coord: c } => {
                let coord = &mut s.coords[c];
                coord.phase = Phase::Apply;
                coord.deadline = self.now(last, R) + LEASE;
            }
            Action::Register { coord: c, ns, lose } => {
                if lose {
                    s.lost += 1;
                    s.flight.push(Request::Register { ns: ns as u8 });
                } else {
                    s.registry[ns] = true;
                    s.coords[c].known |= 1 << ns;
                }
            }
            Action::Apply {
                coord: c,
                part,
                lose,
            } => {
                if lose {
                    s.lost += 1;
                    s.flight.push(Request::Apply {
                        coord: c as u8,
                        part: part as u8,
                        deadline: s.coords[c].deadline,
                    });
                    s.coords[c].parts[part] = Part::Doubt;
                    s.coords[c].doubt |= 1 << part;
                } else {
                    let deadline = s.coords[c].deadline;
                    s.coords[c].parts[part] = match self.land_apply(&mut s, c, part, deadline) {
                        ApplyResult::Landed | ApplyResult::Present => Part::Ok,
                        ApplyResult::Refused | ApplyResult::Expired { .. } => Part::Refused,
                    };
                }
                self.after_apply(&mut s, c);
            }
            Action::Commit { coord: c, lose } => {
                let deadline = s.coords[c].deadline;
                if lose {
                    s.lost += 1;
                    s.flight.push(Request::Commit {
                        coord: c as u8,
                        deadline,
                    });
                    s.coords[c].decide_doubt = true;
                } else {
                    let result = self.land_commit(&mut s, c, deadline);
                    self.after_commit(&mut s, c, result);
                }
            }
            Action::Remove {
                coord: c,
                part,
                lose,
            } => {
                let coord = s.coords[c];
                let clear = coord.phase == Phase::Clear;
                let not_before = self.coord_not_before(&coord, part);
                if lose {
                    s.lost += 1;
                    s.flight.push(Request::Remove {
                        coord: c as u8,
                        part: part as u8,
                        not_before,
                        clear,
                    });
                    s.coords[c].parts[part] = Part::Doubt;
                } else {
                    self.land_remove(&mut s, c, part, not_before, clear);
                    s.coords[c].parts[part] = Part::Done;
                    self.finish_if_done(&mut s, c);
                }
            }
            Action::GiveUp { coord: c } => {
                self.answer(&mut s, c, Answer::Unknown);
                s.coords[c] = Coord::DEAD;
            }
            Action::Crash { coord: c } => {
                s.crashes += 1;
                s.coords[c] = Coord::DEAD;
            }
            Action::Discover { doc, ident } => {
                let m = s.docs[doc].markers[ident]?;
                s.tasks.push(Task {
                    doc: doc as u8,
                    ident: ident as u8,
                    owner: m.owner,
                    deadline: m.deadline,
                    phase: TaskPhase::Decide,
                });
            }
            Action::Decide { task, lose } => {
                let t = s.tasks[task];
                let owner = usize::from(t.owner);
                match s.record {
                    Some(r) if self.same_tag(r.tag, owner) => {
                        s.tasks[task].phase = if r.outcome == Outcome::Committed {
                            TaskPhase::Clear
                        } else {
                            TaskPhase::Compensate
                        };
                    }
                    Some(_) => {
                        if self.task_must_wait(&s, &t) {
                            return None;
                        }
                        s.tasks[task].phase = TaskPhase::Compensate;
                        s.event = Event::PresumedAbortByTime;
                    }
                    None if lose => {
                        s.lost += 1;
                        s.flight.push(Request::Cancel {
                            owner: t.owner,
                            deadline: t.deadline,
                        });
                        s.tasks.remove(task);
                    }
                    None => {
                        if self.land_cancel(&mut s, owner, t.deadline) == Inserted::Live {
                            s.event = Event::RecoveryCanceled;
                        }
                        s.tasks[task].phase = TaskPhase::Compensate;
                    }
                }
            }
            Action::Recover { task, lose } => {
                let t = s.tasks.remove(task);
                let clear = t.phase == TaskPhase::Clear;
                let not_before = self.task_not_before(t.deadline);
                if lose {
                    s.lost += 1;
                    s.flight.push(Request::Remove {
                        coord: t.owner,
                        part: t.doc,
                        not_before,
                        clear,
                    });
                } else if self.land_remove(
                    &mut s,
                    usize::from(t.owner),
                    usize::from(t.doc),
                    not_before,
                    clear,
                ) && clear
                {
                    s.event = Event::RecoveryCleared;
                }
            }
            Action::Deliver { index } => {
                let request = s.flight.remove(index);
                let after_gc = s.collected && s.record.is_none();
                match request {
                    Request::Register { ns } => s.registry[usize::from(ns)] = true,
                    Request::Apply {
                        coord,
                        part,
                        deadline,
                    } => {
                        let result = self.land_apply(
                            &mut s,
                            usize::from(coord),
                            usize::from(part),
                            deadline,
                        );
                        if result == (ApplyResult::Expired { would_land: true }) {
                            s.event = Event::LateApplyFenced;
                        }
                    }
                    Request::Commit { coord, deadline } => {
                        if self.land_commit(&mut s, usize::from(coord), deadline) == Inserted::Inert
                        {
                            s.event = Event::LateCommitInert;
                        }
                    }
                    Request::Cancel { owner, deadline } => {
                        self.land_cancel(&mut s, usize::from(owner), deadline);
                    }
                    Request::Remove {
                        coord,
                        part,
                        not_before,
                        clear,
                    } => {
                        self.land_remove(
                            &mut s,
                            usize::from(coord),
                            usize::from(part),
                            not_before,
                            clear,
                        );
                    }
                }
                if after_gc && s.event == Event::None {
                    s.event = Event::LandedAfterGc;
                }
            }
            Action::Collect => {
                s.record = None;
                s.collected = true;
                s.event = Event::Collected;
            }
        }
        self.normalize(&mut s);
        Some(s)
    }

    fn format_step(&self, last: &State, action: Action) -> Option<String> {
        let line = self.describe(last, &action);
        self.next_state(last, action)
            .map(|next| format!("{line}\n{}", Summary(self, &next)))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::properties(self)
    }
}
