//! A model of tandem's protocol **v2 (deadline fencing)**, for the
//! [`stateright`] model checker.
//!
//! [`TandemModel`] describes the protocol (transaction record, marker arrays
//! on documents, deadline-fenced applies, time-fenced marker removals,
//! recovery claims, GC) as a nondeterministic state machine whose every step
//! is **one atomic single-document action**: one write to one record or one
//! document, or one read followed at once by its guarded write where the
//! real step re-checks the read in its filter. The checker explores every
//! interleaving of those steps: concurrent participant steps, workers that
//! stall (any of their next steps may happen arbitrarily late), workers that
//! crash or give up, recovery claiming a record whose owner is alive, lost
//! answers whose requests land arbitrarily late, clocks that advance at
//! arbitrary relative rates, GC, and an application inserting and deleting
//! documents with the same `_id`s.
//!
//! A second model, [`insert_decide`], checks a proposed protocol that is
//! not built: "decide by inserting" (apply every participant, then insert
//! the decision record as committed; recovery inserts it canceled). Its
//! module docs give the rules the model forced on it and what it found.
//!
//! # Stores, clocks and time
//!
//! The records store `R` ([`R`]) and two participant stores `P1`, `P2`
//! ([`P1`], [`P2`]; [`TandemModel::records_on_p1`] puts the records in `P1`,
//! with one clock for both). Each store has its own clock
//! ([`State::clocks`]): a small integer that starts at
//! [`TandemModel::clock_start`] (the skew) and advances by explicit
//! [`Action::Tick`]s up to [`TandemModel::clock_end`], each store on its own
//! ([`Ticks::PerStore`]: arbitrary skew and drift) or all together
//! ([`Ticks::Global`]: fixed skew, far fewer states). Clocks never go back,
//! except by [`Action::StepBack`] when [`TandemModel::step_back`] is set
//! (once, by that amount). [`LEASE`] = 2, [`MARGIN`] = 1.
//!
//! `D_e` and `NB` are times of `R`'s clock compared with a participant store's
//! clock. Safety never depends on the skew: an apply and a removal on the
//! same document compare against the same (monotonic) clock. (Liveness
//! does: finding 3 below.)
//!
//! # Scenarios
//!
//! Documents `A` (P1, balance 1), `B` (P2, balance 1), `C` (P1, absent), `D`
//! (P2, present). [`Scenario`]:
//!
//! | scenario | coordinators (index = token) |
//! |----------|-------------------------------|
//! | [`Scenario::Transfer`] | `T1`: `A −1` (guard `A ≥ 1`), `B +1` |
//! | [`Scenario::InsertDelete`] | `T2`: insert `C`, delete `D`, `B −1`; the application may insert/delete `C`, `D` |
//! | [`Scenario::Mixed`] | `T1` and `T2`: insert `C`, delete `D`, `B −2` (holds only after `T1` cleared its credit); application as above |
//! | [`Scenario::Conflict`] | `T1`: `A −1`, `D +1`; `T2`: insert `C`, delete `D`, `B −1`: the delete's exclusivity against `T1`'s shared credit; application as above |
//! | [`Scenario::SameId`] | `K1` (`A −1`, `B +1`) and `K2` (`B −1`, `A +1`): same transaction id, same owner name, different tokens |
//!
//! Debits apply at once; credits are deferred to the clear step; inserts and
//! deletes are exclusive (lock + marker, and no other marker allowed).
//!
//! # From the protocol to model actions
//!
//! | model [`Action`] | real step (v2) |
//! |------------------|----------------|
//! | [`Action::Create`] | insert the record `pending`, epoch 0, token, `D_0 = R.now + LEASE`, `NB = 0`. On a duplicate `_id`: the token decides "ours" (continue if `pending`@0) or `Duplicate` |
//! | [`Action::Reserve`] | an insert's reserve: upsert a ghost if no document has the `_id` (unfenced) |
//! | [`Action::Apply`] | one guarded update: lands iff `S.now < D_e`, no marker of `T`, guards hold, not locked by another transaction (exclusive: no other marker). Pushes the marker; a debit applies; a credit waits; a delete locks; an insert's fill turns the ghost into the real document, locked and marked. On no match, the re-read: marker ⇒ applied, `S.now ≥ D_e` ⇒ Expired, else a definite refusal (guard, not found, `AlreadyExists`, lock conflict); a fill that finds no document goes back to its reserve |
//! | [`Action::Commit`] | CAS `pending → applied` on (id, state, epoch), once every apply of this worker answered "applied" |
//! | [`Action::Cancel`] | CAS `pending → canceling`, after a definite refusal (once every apply returned), or recovery's roll back |
//! | [`Action::Remove`] | clear (in `applied`) or compensate (in `canceling`): `nb_p = max(NB, p in doubt this epoch ? D_e + MARGIN : 0)`; read `S.now`: `< nb_p` ⇒ `NotYet` (the worker stops once nothing else is left to send); else one update filtered on marker `T` and `S.now ≥ nb_p`. Clear: pull, unlock, land a credit, or delete the document (delete). Compensate: pull, unlock, undo a debit, or delete the document (insert). No match ⇒ already done |
//! | [`Action::Finish`] | CAS `applied → done` / `canceling → canceled`, once every removal answered done |
//! | [`Action::Claim`] | recovery reads and claims in one step (the CAS filter has `lastModified`): epoch + 1, `NB := max(NB, D_old + MARGIN)`, `leaseStart := R.now`, `D := R.now + LEASE`; then drives the record: `pending` → roll back or forward ([`PendingPolicy`]); `applied` → clear all, `done`; `canceling` → compensate all, `canceled` |
//! | [`Action::Deliver`] | a request whose answer was lost lands now, as the same guarded step |
//! | [`Action::GiveUp`] | a worker with a step in doubt stops (retries exhausted); a coordinator answers "unknown" |
//! | [`Action::Crash`] | the process dies |
//! | [`Action::Collect`] | GC deletes a `done`/`canceled` record once `R.now ≥ finishedAt + LEASE + MARGIN` (nothing is left on documents: no tombstones) |
//! | [`Action::AppInsert`], [`Action::AppDelete`] | the application inserts a document whose `_id` is free (or a ghost), or deletes an unlocked, unmarked one |
//!
//! A worker ([`Worker`]) is a program counter ([`Phase`]) plus what it
//! knows: its coordinator (whose changes it drives), epoch, `D_e`, the `NB`
//! it read, the result of each participant step ([`Part`]), and which
//! participants' applies are **in doubt** in its epoch (sticky: a later
//! successful retry does not clear it, since the lost attempt may still be in
//! flight). As in the engine, a worker sends its participant steps of one
//! phase in any order and takes its record step once all of them returned. A
//! failed compare-and-set is followed by the re-read: the record in the
//! target state at the worker's epoch means an earlier attempt landed;
//! anything else stops the worker (a coordinator answers from the record it
//! reads: `applied`/`done` "committed", `canceling`/`canceled` "canceled",
//! else "unknown").
//!
//! **Lost answers.** Any step that sends a request may lose its answer
//! (bounded by [`TandemModel::lost`], per kind by [`Lose`]): the request goes
//! in flight ([`State::flight`]) and the worker sees an error (the step is in
//! doubt; it may retry, each attempt a separate request, or give up). A
//! request that landed and lost its answer is the same as one delivered at
//! once. Lost answers of claims and of GC are not separate cases: a lost
//! claim is a claim followed by the claimant's crash, a lost GC delete lands
//! only on a finished record.
//!
//! **Claims** ([`ClaimKind`]): a *takeover* claims a record whose owner is
//! alive (its lease ran out while it was slow; at any time, bounded by
//! [`TandemModel::takeovers`] — claiming early is the worst case for safety);
//! a *forced cancel* (`tandem cancel`) claims a `pending` record at any time
//! (bounded by [`TandemModel::forced_cancels`]); a *rescue* claims a record
//! whose owner is gone (crashed, gave up, stopped on `NotYet`), unbounded, as
//! `RecoveryWorker::run_once` does: once the lease ran out and the deadline
//! plus the margin passed on `R`'s clock, or once `R`'s clock is at its end
//! (in reality time goes on). Epochs are renumbered densely after every step
//! (only equality and order matter), so repeated rescues that change nothing
//! else revisit states instead of growing them.
//!
//! # Properties
//!
//! Safety (`always`), in every reachable state:
//!
//! * [`ONE_EFFECTIVE_APPLY`]: per coordinator and participant, at most one
//!   apply lands (no debit taken twice, no insert landing twice, no delete
//!   marking a second document);
//! * [`ONE_EFFECTIVE_REMOVAL`]: per coordinator and participant, at most one
//!   removal finds the marker (no credit landing twice, no debit undone twice,
//!   no delete removing a re-created document);
//! * [`NEVER_BOTH`]: no transaction reaches both `applied` and `canceling`;
//! * [`NEVER_NEGATIVE`]: no balance below zero;
//! * [`MARKERS_HAVE_LIVE_OWNER`]: a marker or lock of `T` on a document
//!   implies a record of `T` (of that token, with token fencing) exists, is
//!   not terminal, and has the document among its participants. This holds
//!   at *every* instant, with no transient exception: the terminal move comes
//!   only after every removal answered, and no marker can appear afterwards
//!   (late applies are past their deadline). So no marker or lock outlives
//!   its transaction, a GC'd transaction leaves nothing, and a re-created
//!   document is never marked or locked by a finished transaction;
//! * [`COMMIT_HOLDS_ALL`]: while `applied`, every participant holds the
//!   marker or was cleared;
//! * [`ANSWERS_HOLD`]: "committed" ⇒ reached `applied`, never `canceling`,
//!   and once finished it is `done`; "canceled" ⇒ never `applied`, and once
//!   finished not `done`; "duplicate" ⇒ the coordinator wrote nothing (a ghost
//!   aside); "unknown" may end either way;
//! * [`FINISHED_CONSISTENT`] (all-or-nothing): whenever every transaction is
//!   finished, every document is exactly what the serial execution holds —
//!   the committed transactions applied whole at their commit points, the
//!   application's inserts and deletes in their order — with no marker and no
//!   lock: balances are the initial ones plus the committed changes, a
//!   document deleted by a committed transaction is gone unless the
//!   application re-created it, a canceled insert left nothing (a ghost is not
//!   a document).
//!
//! Liveness: [`QUIESCENT_FINISHED`] (`always`): in a state where no step is
//! enabled, every transaction is finished (`done`, `canceled`, collected, or
//! never created). [`EVENTUALLY_FINISHED`] (`eventually`) says the same on
//! paths, as far as stateright's `eventually` sees: the state graph has
//! cycles (rescues that meet `NotYet` while no clock moves), which it does
//! not follow. Under fair time those cycles are left. The unbounded-time
//! liveness problem of v2 is shown by a separate test
//! (`prompt_recovery_chases_not_before`, see below).
//!
//! Non-vacuity (`sometimes`, each only when the bounds allow it):
//! [`SOMETIMES_COMMITS`], [`SOMETIMES_ALL_COMMIT`],
//! [`SOMETIMES_REFUSAL_CANCELS`], [`SOMETIMES_LATE_APPLY_FENCED`] (a late
//! in-flight apply is refused by its deadline alone),
//! [`SOMETIMES_WAITS_FOR_DOUBT`] (a removal meets `NotYet` for its own
//! in-doubt apply), [`SOMETIMES_LANDS_AFTER_GC`], [`SOMETIMES_RECREATED`],
//! [`SOMETIMES_FORCED_CANCEL`], [`SOMETIMES_TAKEOVER`], [`SOMETIMES_RESCUE`],
//! [`SOMETIMES_UNKNOWN_COMMITTED`], [`SOMETIMES_UNKNOWN_CANCELED`],
//! [`SOMETIMES_DUPLICATE`], [`SOMETIMES_ID_REUSED`], [`SOMETIMES_STEPPED_BACK`].
//!
//! # Findings about v2, and the fixes
//!
//! 1. **The create is not fenced** ([`Fixes::fenced_create`]). A create whose
//!    answer was lost can land after the transaction finished and its record
//!    was collected (or a coordinator that lost the answer retries after a
//!    takeover drove and collected it): the record is back, `pending` at
//!    epoch 0; recovery rolls it forward (every debit again) or back (a
//!    committed transaction ends `canceling`). The same lets a coordinator
//!    that answered `Duplicate` have its transaction run after all. GC's age
//!    does not help: nothing fences a create. Fix: the create carries `D_0`
//!    (the coordinator's reading of `R`'s clock plus `LEASE`, also epoch 0's
//!    apply deadline) and inserts a live record only while `R.now < D_0`
//!    (tandem writes the record anyway, with `createBy = D_0`, and every reader
//!    treats a record stamped `created ≥ createBy` as inert: never applied,
//!    canceled without a document step; the model's create writes nothing,
//!    which differs only in the `_id` staying taken until collection); a coordinator
//!    that lost a create's answer takes `Duplicate` as definite only once
//!    `R.now ≥ D_0`, and a create found past its deadline means "unknown" if
//!    an earlier attempt was lost. GC after `finishedAt + LEASE + MARGIN` is
//!    then what keeps late creates out ([`Variant::EarlyGc`] breaks it).
//! 2. **Ids are reusable after GC, but markers and CAS filters name only the
//!    id** ([`Fixes::token_fencing`]). Once a record is collected, a new
//!    transaction may use the same id (an idempotency key retried, another
//!    process with the same owner name). A late or merely stalled step of the
//!    old one then acts on the new one: a clear pulls the new transaction's
//!    marker and lands the old credit a second time; a commit or finish CAS on
//!    (id, state, epoch) moves the new record (`pending@0` again) to
//!    `applied` before it applied anything, or to `done` with its markers
//!    left. Fix: markers, locks and every record CAS carry the creation token
//!    (built: markers hold `<id>#<tag>`, `TxId::marker`).
//! 3. **Liveness: `NB` chases the clock** ([`Fixes::stable_deadline`]). Every
//!    claim sets a new `D` and raises `NB` to the previous `D + MARGIN`, also
//!    for epochs that never apply. A worker that meets `NotYet` stops and
//!    leaves it to the next claim, which raises `NB` again. With recovery
//!    claiming promptly (once the lease ran out and `D + MARGIN` passed on
//!    `R`'s clock, as `RecoveryWorker::run_once` does) and a participant
//!    store whose clock lags `R`'s by more than the pass' lateness (the
//!    recovery interval at worst; with the lease-only claim condition, even
//!    with no lag at all), every new owner finds `S.now` just below `NB`: the
//!    record stays `applied`/`canceling`, its markers and locks stay, forever.
//!    No lost answer is needed: a coordinator that crashes after its commit
//!    is enough (test `prompt_recovery_chases_not_before`). So a constant
//!    skew between stores does matter, for liveness. Fix: a claim sets a new
//!    deadline only when the new epoch rolls forward (the only epochs that
//!    apply); `NB` then stops rising once nobody can apply. (Or: a recovery
//!    worker sleeps until `nb_p` instead of stopping.)
//!
//! # Variants (mutations)
//!
//! [`Variant`] breaks one step on purpose; the tests assert the checker
//! finds a counterexample to each, against v2 with the safety fixes
//! ([`Fixes::SAFETY`], which holds in every configuration checked).
//!
//! # Bounds
//!
//! Two transactions at most, two or three participants each; one or two
//! lost answers; at most one crash, one takeover, one forced cancel; up to
//! two application steps; clocks over a few ticks (`R` 0..=4, `P1` 0..=7,
//! `P2` 1..=7 by default: long enough for GC after `LEASE + MARGIN`, and for
//! participant clocks to pass every `NB` once `R` stops; [`Ticks::Global`]
//! configurations start `R` at 1, `P1` at 0, `P2` at 2). The configurations
//! of `tests/model_check.rs`, with v2 plus the safety fixes unless noted
//! (unique states, release build):
//!
//! | configuration | states |
//! |---------------|--------|
//! | transfer, 1 lost answer, `R` 0..=3, `P` ..=6 (the fast debug check) | 0.27 M |
//! | transfer, 2 lost answers | 4.7 M |
//! | transfer, 1 takeover, 1 lost answer, `R` 0..=3 | 7.7 M |
//! | transfer, 1 crash + 1 takeover (or + 1 forced cancel), 1 lost answer, global ticks | 1.3 M, 0.5 M |
//! | transfer, records on `P1`, 2 lost answers | 2.3 M |
//! | transfer, a clock steps back by `MARGIN` | 1.5 M |
//! | insert/delete/debit, 2 application steps, 1 lost answer, global / per-store ticks | 0.4 M / 6.4 M |
//! | two transactions (mixed), 1 lost answer, global ticks | 9.7 M |
//! | mixed, 1 crash + 1 application step / 1 forced cancel, no lost answer, global ticks | 4.0 M / 10.7 M |
//! | conflict on `D`, 1 lost answer, global ticks | 14.0 M |
//! | same id, 1 lost answer | 4.3 M |
//! | v2 as specified: transfer without GC, 2 lost answers; same id without GC | 4.5 M; 2.8 M |
//! | v2 as specified: transfer, no create answer lost, GC after `LEASE + MARGIN` / at any age | 3.9 M / 4.0 M |
//!
//! # Not modelled, and why that is safe
//!
//! * **Custom participants**: only document changes (shared increments with a
//!   guard, exclusive inserts and deletes) are modelled. The protocol's
//!   safety rests on two obligations of every participant: its apply lands
//!   only before `D_e` (by the clock of the store it writes to) and never
//!   twice (marker), and its removals take effect only at `S.now ≥ nb_p` and
//!   only where its marker is. A custom participant that keeps them is
//!   covered by the same argument; one that does not is outside the protocol.
//!   Other exclusive updates (`$set` under a lock) behave like the delete's
//!   apply (lock and marker, effect at clear).
//! * **Store errors other than lost answers**: a failed request either did
//!   not land (the same as a step not taken yet, or a worker that stalls or
//!   gives up) or may have landed (a lost answer). Retries are new attempts,
//!   each seen by the coordinator: in the code only the coordinator repeats
//!   a request (its `RetryPolicy`); stores send each request once, so each
//!   request of the model is one request of the code. (A store that
//!   repeated inside one call would hide a lost answer from the coordinator:
//!   the mutation "a successful retry clearing the doubt" is what that
//!   costs, and `tandem-mongodb/tests/lost_answers.rs` shows it on a server.)
//!   Batched requests (`update_each`) are several single-document
//!   statements: each is atomic on its own, and a lost batch answer is
//!   several lost answers.
//! * **The record's `initial` state**: the coordinator writes a record
//!   `pending` from the start, so no state of the model stands for it
//!   (`tests/states_match_the_record.rs` pins the other five against the
//!   record's).
//! * **The native strategy** (MongoDB's multi-document transactions) uses
//!   neither records nor markers: it is not this protocol.
//! * **Reads for guards on other documents, read-only participants, more
//!   transactions or participants, longer time**: bounded away; the
//!   properties are per transaction and per document, and the interleavings
//!   of two transactions sharing documents (`B`) and ids cover the
//!   interactions.
//! * **Reserving before the create** (the code reserves while preparing): a
//!   ghost is invisible and harmless, so a coordinator that then gets
//!   `Duplicate` leaves at most a ghost. The model reserves after the create.
//! * **Ghost collection**: ghosts are never removed here (the application's
//!   insert replaces one); removing an unlocked, unmarked ghost changes
//!   nothing anyone sees.
//! * **Bookkeeping counters** (`_tandem.pending`, `_tandem.credit.<path>`):
//!   the model's exclusive change requires no marker of any transaction,
//!   which is what the pending count stands for in the code (it counts the
//!   markers under every marker field); the credit sums only make more
//!   applies refuse (a credit that would overflow), and a refused apply is
//!   a path the model has (guard failure). Their arithmetic is tested on
//!   both stores by the safety scenarios instead.
//! * **Undo around outside writes, history cap, back-off, stubs**: they change
//!   what an undo writes when the application wrote the same field (the
//!   model's application never writes a document in flight), how much of a
//!   record's history is kept, how long a claim waits, and how long an id
//!   stays taken after collection (the model removes a collected record
//!   outright, with no stub: the harder case for late steps).
//! * **How the coordinator reads `R`'s clock for `D_0`**: the code uses a
//!   `hello` reading at most ten seconds old plus local elapsed time, which
//!   is behind `R.now` by up to a round trip: `D_0` only comes earlier,
//!   making more creates inert, never fewer.
//! * **Operation outside the rules**: the application respects locks and
//!   markers (it inserts only a free `_id` or over a ghost, deletes only
//!   unlocked, unmarked documents); clocks step back at most once.
#![warn(missing_docs)]

pub mod insert_decide;
mod model;
mod properties;
mod scenario;
mod state;

pub use model::*;
pub use properties::*;
pub use scenario::*;
pub use state::*;
