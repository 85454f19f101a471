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
//! The model runs the **early commit** (commit at the applies, the record
//! flag `earlyCommit`, [`Fixes::early_commit`]) or the late commit (the
//! answer after the record's move to `applied`, which the code keeps for
//! transactions it cannot probe); see [Early commit](#early-commit-commit-at-the-applies).
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
//! (once, by that amount). [`LEASE`] = 2 (every process's lease, but
//! `Long`'s in [`Scenario::KeyedRetry`]: [`LONG_LEASE`] = 4), [`MARGIN`] = 1.
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
//! | [`Scenario::KeyedRetry`] | `Long` (lease [`LONG_LEASE`] = 4) and `Short` (lease [`LEASE`] = 2): one request under one idempotency key (the transaction id), run twice, each paying out `A +1`, `B +1`; each registers its lease before its first create |
//!
//! Debits apply at once; credits are deferred to the clear step; inserts and
//! deletes are exclusive (lock + marker, and no other marker allowed).
//!
//! # From the protocol to model actions
//!
//! | model [`Action`] | real step (v2) |
//! |------------------|----------------|
//! | [`Action::Register`] | a keyed coordinator, before its first create (`Engine::register_lease`): the `$max` upsert of its lease into `tandem_leases` ([`State::registry`], which only grows) |
//! | [`Action::Create`] | insert the record `pending`, epoch 0, token, `D_0 = R.now +` the coordinator's lease, `NB = 0`. On a duplicate `_id`: the token decides "ours" (continue if `pending`@0) or `Duplicate` |
//! | [`Action::Reserve`] | an insert's reserve: upsert a ghost if no document has the `_id` (unfenced) |
//! | [`Action::Apply`] | one guarded update: lands iff `S.now < D_e`, no marker of `T`, guards hold, not locked by another transaction (exclusive: no other marker). Pushes the marker; a debit applies; a credit waits; a delete locks; an insert's fill turns the ghost into the real document, locked and marked. On no match, the re-read: marker ⇒ applied, `S.now ≥ D_e` ⇒ Expired, else a definite refusal (guard, not found, `AlreadyExists`, lock conflict); a fill that finds no document goes back to its reserve |
//! | [`Action::Commit`] | CAS `pending → applied` on (id, state, epoch), once every apply of this worker answered "applied" (or, early commit, every probe found the marker). Late commit: the coordinator answers "committed" here; early commit: it answered already, at its last apply |
//! | [`Action::Probe`] | early commit, after a claim of a `pending` record: read `S.now`: `< NB` ⇒ `NotYet` (the worker stops, the record stays `pending`); else whether the marker is on the document |
//! | [`Action::Reclaim`] | early commit, roll forward after a probe found a marker missing: CAS on (id, state, epoch, token): epoch + 1, `NB := max(NB, D + MARGIN)`, `D := R.now + LEASE`, then apply |
//! | [`Action::Cancel`] | CAS `pending → canceling`, after a definite refusal (once every apply returned), or recovery's roll back (early commit: once a probe found a marker missing) |
//! | [`Action::Remove`] | clear (in `applied`) or compensate (in `canceling`): `nb_p = max(NB, p in doubt this epoch ? D_e + MARGIN : 0)`; read `S.now`: `< nb_p` ⇒ `NotYet` (the worker stops once nothing else is left to send); else one update filtered on marker `T` and `S.now ≥ nb_p`. Clear: pull, unlock, land a credit, or delete the document (delete). Compensate: pull, unlock, undo a debit, or delete the document (insert). No match ⇒ already done |
//! | [`Action::Finish`] | CAS `applied → done` / `canceling → canceled`, once every removal answered done |
//! | [`Action::Claim`] | recovery reads and claims in one step (the CAS filter has `lastModified`): epoch + 1, `NB := max(NB, D_old + MARGIN)`, `leaseStart := R.now`, `D := R.now + LEASE`; then drives the record: `pending` → roll back or forward ([`PendingPolicy`]); `applied` → clear all, `done`; `canceling` → compensate all, `canceled`. Early commit: a claim of a `pending` record (either policy, and a forced cancel) keeps `D` and probes first |
//! | [`Action::Deliver`] | a request whose answer was lost lands now, as the same guarded step |
//! | [`Action::GiveUp`] | a worker with a step in doubt stops (retries exhausted); a coordinator answers "unknown" |
//! | [`Action::Crash`] | the process dies |
//! | [`Action::Collect`] | GC deletes a `done`/`canceled` record once `R.now ≥ finishedAt + age + MARGIN`, the age the longest of the collector's lease ([`LEASE`]), the record's creator's lease and, for a keyed record, the registry (`collect_garbage`'s floor); with one lease for every process, `finishedAt + LEASE + MARGIN` (nothing is left on documents: no tombstones) |
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
//! (bounded by [`TandemModel::forced_cancels`]; with the early commit it
//! probes like recovery, and commits if every marker is there); a *rescue* claims a record
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
//! * [`ANSWERS_HOLD`]: "committed" ⇒ every participant's apply landed,
//!   the record reached `applied` (early commit: not necessarily yet), never
//!   `canceling`, no change of it was compensated, and once finished it is
//!   `done` (with [`QUIESCENT_FINISHED`] and [`FINISHED_CONSISTENT`]: in a
//!   settled state a transaction answered "committed" is done, its changes
//!   whole on the documents, its markers cleared); "canceled" ⇒ never
//!   `applied`, and once finished not `done`; "canceled, every change
//!   undone" (the code's `undone: true`, given at the coordinator's own move
//!   to `canceled`) ⇒ that too, and every apply of it that landed is undone,
//!   none landing after; "duplicate" ⇒ the coordinator
//!   wrote nothing (a ghost aside); "unknown" may end either way;
//! * [`COMMITTED_NEVER_UNDONE`]: a transaction answered "committed", or
//!   whose record reached `applied`, never reaches `canceling` and no change
//!   of it is compensated;
//! * [`FINISHED_CONSISTENT`] (all-or-nothing): whenever every transaction is
//!   finished, every document is exactly what the serial execution holds —
//!   the committed transactions applied whole at their commit points, the
//!   application's inserts and deletes in their order — with no marker and no
//!   lock: balances are the initial ones plus the committed changes, a
//!   document deleted by a committed transaction is gone unless the
//!   application re-created it, a canceled insert left nothing (a ghost is not
//!   a document);
//! * [`KEY_PAYS_ONCE`] (keyed scenarios only): of two runs under one key,
//!   one of which began (fixed its create deadline) while the other had
//!   begun and not finished (no record of it terminal), at most one pays
//!   (reaches `applied` or answers "committed"). Runs that did not overlap
//!   may both pay: the model's idempotency window is zero, so nothing but
//!   the leases keeps the key taken.
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
//! [`SOMETIMES_DUPLICATE`], [`SOMETIMES_ID_REUSED`], [`SOMETIMES_STEPPED_BACK`],
//! [`SOMETIMES_PROBE_COMMITS`] (early commit: recovery's probes find every
//! marker and it moves the record to `applied`),
//! [`SOMETIMES_KEPT_FOR_LATE_CREATE`] (keyed: a create that would land
//! live meets the other run's finished record, past the collector's lease
//! and the record's own plus the margin, kept only by the registry).
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
//!    which differs only in the `_id` staying taken until collection, because
//!    no move meant for the live record can land on the inert copy: each names
//!    the live record's `created` stamp, and a batch of moves requires
//!    `created` before the group's earliest `createBy`); a coordinator
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
//! # Early commit (commit at the applies)
//!
//! [`Fixes::early_commit`] models a record created with `earlyCommit`: the
//! commit point is the applies. [`Fixes::EARLY_COMMIT`] (the safety fixes,
//! the early commit and its fix [`Fixes::timely_marker`]) is what every
//! `fixed` configuration of `tests/model_check.rs` runs; [`Fixes::SAFETY`]
//! is the late commit (answer after the move), checked beside it. The split
//! between the two by whether a transaction can be probed is not modelled:
//! a model runs one rule for every transaction.
//!
//! * **Coordinator.** In the step where its last apply answers "applied"
//!   (landed, or its re-read found the marker: [`Part::Ok`]) with every
//!   other apply of its epoch "applied", it answers "committed", while the
//!   record still says `pending`. The move `pending → applied`
//!   ([`Action::Commit`], guarded by state, epoch and token) is a later
//!   step, possibly never taken (crash, give up, stall); if it fails (the
//!   record was claimed) the answer stands and the coordinator stops.
//!   Markers are cleared only after a successful move, by whoever made it.
//!   A refusal moves `pending → canceling` and compensates, as before.
//! * **Claims of a `pending` record** (rescue, takeover, either policy, and
//!   a forced cancel, `tandem cancel`) keep the deadline `D`, so
//!   `NB = max(NB, D + MARGIN)` stays put over repeated claims, and probe
//!   ([`Phase::ProbeBack`], [`Phase::ProbeForward`]): [`Action::Probe`] of a
//!   participant is `NotYet` until its store's clock reads `NB` (the worker
//!   stops; the record stays `pending` and is claimed again later), then
//!   reads whether the marker is on the document ([`Part::Ok`],
//!   [`Part::Missing`]). Every marker there ⇒ [`Action::Commit`] at the
//!   claim's epoch, then clear (a forced cancel commits too). Else roll
//!   back: [`Action::Cancel`], compensate; or roll forward:
//!   [`Action::Reclaim`] (epoch + 1, a new deadline) and apply-or-cancel,
//!   whose refusals are decisive since the older epochs' applies can no
//!   longer land.
//!
//! Why it holds: an epoch's apply lands on a document only while its store
//! reads below that epoch's `D`; a probe reads a document only once its
//! store reads `NB`, past every deadline given so far plus the margin (a
//! claim of a `pending` record keeps the deadline; only [`Action::Reclaim`]
//! renews it, after every probe and with `NB` raised first). So after a
//! participant's probe no apply of an epoch up to the probing one lands
//! there: a missing marker stays missing, and a marker present stays until
//! a decision (markers are removed only in `applied` or `canceling`). A
//! coordinator's "committed" rests on markers of its own epoch, each on
//! before any probe could read its document, so every later probe finds
//! them all; and a cancel needs either a probe that missed a marker, or a
//! refusal seen by the coordinator itself (it saw none), or one seen in an
//! epoch that only such a probe can start.
//!
//! **Finding 4: the early commit as first specified is unsafe**
//! ([`Fixes::EARLY_COMMIT_AS_GIVEN`]; test
//! `early_commit_as_given_answers_from_a_later_epochs_marker`, 23 steps,
//! found by the full check of insert/delete/debit with two application
//! steps, one takeover and one lost answer). "An apply retry that finds the
//! marker already there counts as applied" is wrong for the early answer
//! once the apply's deadline has passed: the marker may be a later
//! epoch's. The trace: `T2`'s coordinator (`D_0 = 3`) deletes `D` and
//! debits `B`, then stalls before inserting `C`; recovery takes the record
//! over (roll forward), probes at `NB = 4` (`C` has no marker; `D`, `B`
//! have), claims again with `D = 6`, reserves `C` and fills it, the fill's
//! answer is lost; the application inserts `C`; recovery's retry of the
//! fill is refused (`AlreadyExists`), so it moves the record to
//! `canceling`; the application deletes `C`; the coordinator wakes up and
//! reserves `C` (a ghost); the lost fill (deadline 6, `P1` at 4) lands on
//! the ghost; the coordinator's own fill (past `D_0`: `P1` at 4) finds the marker,
//! counts it as applied, and with `D` and `B` applied too answers
//! "committed": the transaction is `canceling`, and its changes are then
//! compensated. The fix, [`Fixes::timely_marker`]: a marker found by the
//! re-read counts toward the early answer only if the same read finds the
//! store's clock below the apply's deadline (the clock read together with
//! the marker, as the apply's filter does with `$$NOW`, or after it): before
//! `D_e` on that store no probe has read it, so no later epoch exists that
//! could have pushed it. A marker found later ([`Part::Late`]) counts for
//! the move only: the coordinator answers after the move, or from the
//! record. (The alternative, an epoch in the marker, changes every marker
//! filter.)
//!
//! **Note: the markers alone do not decide.** "Committed iff every
//! participant's apply landed" describes the answers, not the documents: a
//! coordinator whose apply lost its answer and whose retry was refused
//! (the application deleted the document) cancels, and the lost attempt
//! then lands before the deadline (the application re-created the
//! document): every marker of the transaction is on at once while the
//! record is `pending`, and it ends canceled (test
//! `early_commit_markers_alone_do_not_decide`, 10 steps). The answers are
//! right (the coordinator answers "canceled"; a probe needs a claim, whose
//! epoch fences that cancel), but no reader may infer a commit from the
//! markers without owning the record's epoch.
//!
//! # Variants (mutations)
//!
//! [`Variant`] breaks one step on purpose; the tests assert the checker
//! finds a counterexample to each, against v2 with the safety fixes and the
//! early commit ([`Fixes::EARLY_COMMIT`], which holds in every
//! configuration checked). Besides the mutations (1)–(7),
//! [`Variant::RetryClearsDoubt`] and [`Variant::UndoneWhileWaiting`], the
//! early commit's own (shortest counterexamples, to [`ANSWERS_HOLD`]):
//!
//! | variant | configuration | steps |
//! |---------|---------------|-------|
//! | [`Variant::NoProbe`]: recovery rolls a `pending` record back without probing | transfer, 1 lost answer: the commit's answer is lost, the coordinator (which answered "committed") gives up, a rescue rolls back | 10 |
//! | [`Variant::ProbeBeforeFence`]: the probe ignores `NB` | transfer, 1 takeover: the probe finds `B` without marker, the coordinator's apply of `B` lands, it answers, recovery cancels | 7 |
//! | [`Variant::RefuseBeforeFence`]: roll forward re-applies at once and a refusal cancels | insert/delete/debit, 2 application steps, 1 takeover, roll forward, global ticks: the application deletes `D`, recovery's delete is refused, it cancels; the application re-inserts `D`, the coordinator's delete lands, it answers | 13 |
//!
//! In the transfer `RefuseBeforeFence` is harmless: a re-apply there is
//! refused only by its deadline, and a deadline that passed passed for
//! the older epochs too; a guard refusal needs another writer.
//!
//! And the lease registry's ([`Scenario::KeyedRetry`], one lost create
//! answer, global ticks, `R` 1..=5; shortest counterexamples, to
//! [`KEY_PAYS_ONCE`]):
//!
//! | variant | counterexample | steps |
//! |---------|----------------|-------|
//! | [`Variant::GcIgnoresRegistry`]: GC waits for the collector's lease and the record's own, not the registry | `Long` registers (4) and sends its create at `R.now = 1` (`D_0 = 5`), the answer lost; `Short` registers, creates, pays and finishes at 1; at 4 GC removes the record (past `Short`'s lease plus the margin); `Long` sends its create again, it lands live (4 < 5), and `Long` applies both credits and answers "committed": the key paid twice | 17 |
//! | [`Variant::CreateBeforeRegister`]: a keyed coordinator registers once its create landed | the same, `Long`'s lost create sent before it registered: the registry holds `Short`'s 2 when GC runs | 17 |
//!
//! # Bounds
//!
//! Two transactions at most, two or three participants each; one or two
//! lost answers; at most one crash, one takeover, one forced cancel; up to
//! two application steps; clocks over a few ticks (`R` 0..=4, `P1` 0..=7,
//! `P2` 1..=7 by default: long enough for GC after `LEASE + MARGIN`, and for
//! participant clocks to pass every `NB` once `R` stops; [`Ticks::Global`]
//! configurations start `R` at 1, `P1` at 0, `P2` at 2; the keyed retry's
//! `R` runs to 5, past the earliest finish plus [`LONG_LEASE`] plus the
//! margin, and its global ticks start `R` and `P2` at 1). The configurations
//! of `tests/model_check.rs`, with v2, the safety fixes and the early commit
//! ([`Fixes::EARLY_COMMIT`]) unless noted; "late" is the same with the late
//! commit ([`Fixes::SAFETY`]). Unique states, release build, two threads:
//!
//! | configuration | states | time |
//! |---------------|--------|------|
//! | transfer, 1 lost answer, `R` 0..=3, `P` ..=6 (the fast debug check) | 0.26 M (late 0.27 M) | 0.6 s |
//! | transfer, 2 lost answers | 4.3 M (late 4.7 M) | 24 s |
//! | transfer, 1 takeover, 1 lost answer, `R` 0..=3 | 3.9 M (late 7.7 M) | 15 s |
//! | transfer, 1 crash + 1 takeover / + 1 forced cancel, 1 lost answer, global ticks | 0.62 M / 0.36 M (late 0.52 M) | 2 s / 1 s |
//! | transfer, 1 takeover + 1 forced cancel, 1 lost answer, global ticks | 1.5 M | 5 s |
//! | transfer, 1 crash + 1 takeover, 1 lost answer, global ticks, with [`Fixes::stable_deadline`] | 0.54 M (late 1.2 M) | 2 s |
//! | transfer, records on `P1`, 2 lost answers | 2.1 M | 5 s |
//! | transfer, a clock steps back by `MARGIN` | 1.5 M | 4 s |
//! | insert/delete/debit, 2 application steps, 1 lost answer, global / per-store ticks | 0.38 M (late 0.39 M) / 6.2 M | 2 s / 40 s |
//! | insert/delete/debit, 1 application step, 1 crash, 1 lost answer, global ticks | 0.57 M | 4 s |
//! | insert/delete/debit, 2 application steps, 1 takeover, roll forward, no lost answer, global ticks | 0.39 M | 1 s |
//! | insert/delete/debit, 2 application steps, 1 takeover, 1 lost answer, global ticks, either policy / roll forward | 12.3 M / 10.8 M | 37 s / 43 s |
//! | two transactions (mixed), 1 lost answer, global ticks | 9.6 M (late 9.7 M) | 29 s |
//! | mixed, 1 crash + 1 application step / 1 forced cancel, no lost answer, global ticks | 3.7 M / 4.2 M | 10 s / 12 s |
//! | mixed, 1 takeover, no lost answer, global ticks | 10.4 M | 27 s |
//! | conflict on `D`, 1 lost answer, global ticks | 13.6 M | 62 s |
//! | conflict on `D`, 1 takeover, no lost answer, global ticks | 14.6 M | 49 s |
//! | mixed, 1 takeover, 1 lost apply answer, roll forward, global ticks: too large for a full check here (over 12 GB); `TandemModel::search` for every safety property over the first 60 M states (breadth-first) found none (run once by hand; no test repeats it) | > 60 M | 272 s |
//! | same id, 1 lost answer | 4.1 M | 20 s |
//! | keyed retry (leases 4 and 2), 1 lost create answer, global ticks (fast check) | 58 K (late 60 K) | 0.8 s |
//! | keyed retry, 1 lost answer of any step, global ticks (fast check) | 0.15 M | 0.7 s |
//! | keyed retry, 1 lost create answer / 1 lost answer of any step, per-store ticks | 3.1 M / 7.3 M | 17 s / 46 s |
//! | keyed retry, 1 lost create answer, 1 crash + 1 takeover / 1 forced cancel, global ticks | 3.2 M / 0.43 M | 19 s / 3 s |
//! | v2 as specified: transfer without GC, 2 lost answers; same id without GC | 4.5 M; 2.8 M | 16 s; 12 s |
//! | v2 as specified: transfer, no create answer lost, GC after `LEASE + MARGIN` / at any age | 3.9 M / 4.0 M | 14 s / 14 s |
//!
//! # Not modelled, and why that is safe
//!
//! * **Custom participants**: only document changes (shared increments with a
//!   guard, exclusive inserts and deletes) are modelled. The protocol's
//!   safety rests on two obligations of every participant: its apply lands
//!   only before `D_e` (by the clock of the store it writes to) and never
//!   twice (marker), and its removals take effect only at `S.now ≥ nb_p` and
//!   only where its marker is. A participant that commits at its
//!   applies has one more: a re-read that tells recovery whether its apply
//!   landed, fenced like the apply (in time, or not counted), and its
//!   removals wait for the not-before time (`Participant` in
//!   `tandem::participant`). A custom participant that keeps them is covered
//!   by the same argument; one that does not is outside the protocol.
//! * **Exclusive updates other than insert and delete** (`$set`, `$unset`,
//!   `$push`, `$pull` under a lock) take effect at their apply, not at the
//!   clear as the model's delete does, and are undone by restoring the
//!   before-image the record keeps. Under the lock and a pending count of
//!   zero (the model's "no other marker") no other transaction's change
//!   applies to the document until the clear or the undo, so the only writer
//!   in between is the application, which the undo checks for ("Undo around
//!   outside writes" below); the model's exclusive change stands for the
//!   lock and marker discipline, not for what is written under it. An
//!   exclusive change's increments are restored from the before-image too
//!   (adding an amount back can leave a created field, or a wider type).
//! * **Values and their types**: the model's shared debit is undone by
//!   adding the amount back, which restores an integer. The code refuses a
//!   shared debit where adding back would not restore the field's type (a
//!   missing field, a type narrower than the amount's, a 32-bit integer
//!   leaving its range: the `$type` conditions of the apply's filter), so
//!   its undo is the model's for integers, and a refusal is the model's
//!   refused guard. Floating-point values are outside: `(a - x) + x` need
//!   not be `a`, so a debit of a double holds its document alone and is
//!   restored from its before-image. The model's balances are unbounded;
//!   the code's stop at the 64-bit limit, so adding the amount back must
//!   also fit: a shared debit counts what its undo gives back in the
//!   field's pending sum, which every credit leaves room for, and a debit
//!   of a field whose path has a numeric segment (which the sums do not
//!   count) holds its document alone. Tested on the embedded store
//!   (`tandem/tests/compensation.rs`, `numbered_give_back.rs`); the
//!   filter's conditions on both stores by the store contract.
//!   `Decimal128` amounts are exact to 34 significant digits, so within
//!   them a decimal amount is an integer count of its smallest unit and
//!   `(a - x) + x` is `a` (the value, not always the exponent: an undo may
//!   leave trailing zeros, which no guard or comparison tells apart);
//!   their steps are the model's integer ones (a sum past 34 digits rounds:
//!   a limit the Reliability chapter states, as the 64-bit one above is
//!   kept). The code keeps the undo exact: a shared decimal debit requires
//!   a decimal field at or above a floor the amount can be taken from
//!   without reaching `-Infinity` (from which adding it back restores
//!   nothing), and a shared decimal
//!   credit a field that is not a double (a double debit pending there
//!   could not be undone exactly once the field became a decimal); either
//!   refusal is the model's refused guard. Tested on the embedded store
//!   (`tandem/tests/decimal_amounts.rs`, `decimal_attacks.rs`) and by the
//!   conformance scenario `decimal_transfers` on both stores.
//! * **Shapes**: the model's fields are flat numbers. In the code a field
//!   has a path, and a credit deferred to its clear can land only where
//!   every parent of its field is missing or a document; a credit landing
//!   on a related path (`a` and `a.b`) changes that. Every shared credit
//!   requires its field's parents to be missing or documents, and no
//!   credit pending on a parent or below the field (the pending sums in
//!   `_tandem.credit` say so); a shared debit carries no such condition but
//!   requires its field to exist and hold a number, so its parents are
//!   documents and no credit can be pending on a parent or below it (either
//!   one would have refused the other); no exclusive change applies where
//!   anything is pending. So what a pending credit needs to land holds until its
//!   clear (writes outside tandem excepted), and its clear is the model's.
//!   A zero sum left by a credit that landed or was undone is dropped by
//!   an increment it stands in the way of, guarded by the value read: a sum
//!   totals positive integer amounts, so a zero one counts nothing pending
//!   and a missing one reads as zero; dropping it changes nothing a step of
//!   the model reads, and it is left out. The increment is then sent once
//!   more within the same step (also when it found the zero already
//!   dropped, or a sum changed, by another increment): its first send
//!   matched nothing, a definite refusal that changed nothing, so the
//!   second is the model's apply taken later, as under
//!   `ConflictPolicy::Wait`; a lost answer of either send leaves the apply
//!   in doubt, as in the model.
//!   Tested on both stores (`tandem/tests/nested_credits.rs`, the safety
//!   scenarios `credits_keep_each_others_shapes` and `zero_sums_make_way`).
//! * **Sizes**: the model's documents have no size, so no step of it is
//!   refused as too large. In the code the apply is the only step a store
//!   may refuse for size (a refusal like a failed guard: nothing applied),
//!   because every apply reserves the most its clear or undo can add
//!   (`_tandem.room`) and requires the document, all reservations, its own
//!   growth and reservation to fit in 16 MiB; each clear or undo adds at
//!   most what it reserved and takes it off in the same statement. So
//!   `size + room <= 16 MiB` holds on every held document after every step,
//!   and the clears and undos of the model cannot be refused in the code
//!   either (writes outside tandem excepted, as for every field they
//!   touch). What an exclusive change adds or its undo restores is worked
//!   out from its before-image where the apply's filter pins the image
//!   byte for byte, and with twelve bytes a number more where it pins it
//!   by value only (an equal number of another type); a shared increment may not pad an array; a change an
//!   earlier version recorded reserves nothing but checks the room. Tested
//!   on the embedded store (`tandem/tests/size_limits.rs`, `room.rs`,
//!   `shared_types.rs`, `stale_images.rs`), the size measure on both stores
//!   by the store contract.
//! * **Guard kinds**: the model's shared change carries a lower bound
//!   (`A ≥ 1`). Which guards may share a document is a per-guard argument
//!   the model leaves to the code: a shared guard must stay true while other
//!   transactions' credits land (deferred to their clears) and their
//!   reservations are undone. Lower bounds (`≥`, `>`) and presence do;
//!   `==`, `!=`, `<`, `≤` and "missing" do not (a deferred credit creates a
//!   missing field when it lands), so those changes are exclusive, as the
//!   model's delete is (`DocumentChange::is_exclusive`; an adversarial
//!   review found "missing" shared, and a one-time bonus paid twice:
//!   `a_missing_guard_sees_a_committed_credit_still_to_land`).
//! * **One document, one marker per participant**: the model's markers are
//!   per transaction and document, each participant's on its own. The code
//!   refuses two changes of one document through one store name, and gives
//!   a change through another name to a document an earlier one changes (one
//!   database under two names) a marker of its own (`<marker>/<index>`);
//!   sharing the transaction's, the second apply took the first's marker for
//!   its own (an adversarial review;
//!   `one_database_under_two_store_names_names_a_document_twice`).
//! * **One meaning per store name**: the model has one `P1` and one `P2`,
//!   the same for every worker. In the code a store name is registered per
//!   process, and another application sharing the records could register it
//!   as another database; the code now checks it: the record keeps each
//!   named store's identity, and a worker whose store under that name has
//!   another does not drive the record (found by an adversarial review;
//!   `a_store_name_meaning_another_cluster_in_another_application`).
//! * **Store errors other than lost answers**: a failed request either did
//!   not land (the same as a step not taken yet, or a worker that stalls or
//!   gives up) or may have landed (a lost answer). Retries are new attempts,
//!   each seen by the coordinator: in the code only the coordinator repeats
//!   a request whose answer it lacks (its `RetryPolicy`); stores send each
//!   request once, so each request of the model is one request of the code.
//!   (A document change sends its apply a second time within one step only
//!   after the first matched nothing, a definite answer: the zero sums under
//!   **Shapes**.) (A store that
//!   repeated inside one call would hide a lost answer from the coordinator:
//!   the mutation "a successful retry clearing the doubt" is what that
//!   costs, and `tandem-mongodb/tests/lost_answers.rs` shows it on a server.)
//!   Batched requests (`update_each`) are several single-document
//!   statements: each is atomic on its own, and a lost batch answer is
//!   several lost answers. Batched record moves (the finisher's and
//!   recovery's `update_many` by `_id: {$in}`) name each record's creation
//!   token and stay below the earliest create deadline among them, so an
//!   inert copy is not moved; a move that matched fewer records than it
//!   named falls back to one compare-and-set per record, the model's move.
//! * **`ConflictPolicy::Wait`**: an apply refused by a definite conflict is
//!   sent again later. A refused apply changed nothing, so the repeat is the
//!   model's first attempt, taken later (for the native strategy, a whole
//!   native transaction run again, which wrote nothing the first time).
//!   So is the repeat of a transaction that met the marker of its own
//!   coordinator's committed transaction still waiting for background
//!   finishing, or was refused by a guard while such transactions waited
//!   (a credit lands at its finishing): it waits for that finishing (the
//!   model's finishing steps of the other transactions) and prepares or
//!   applies again in the same epoch, under the same deadline, once; a
//!   before-image read again is the model's read, taken later.
//! * **The record's `initial` state**: the coordinator writes a record
//!   `pending` from the start, so no state of the model stands for it
//!   (`tests/states_match_the_record.rs` pins the other five against the
//!   record's).
//! * **The native strategy** (MongoDB's multi-document transactions) uses
//!   no markers, and a record only under a caller-chosen id: `done`, written
//!   inside the native transaction, or `canceled`, inserted after a refusal
//!   aborted it. Such a record is final from the start and names no
//!   participants, so nothing late can act on a document through it; a
//!   `canceled` one landing late (its insert's answer lost, repeated) can
//!   only make a later retry under the id answer `Duplicate`. To the
//!   documents, the native strategy is close to the application, but not
//!   the model's: that one never writes a document with a marker on it,
//!   while a native shared increment does (a shared change applied and
//!   cleared in one step, with no marker). What keeps that safe is the
//!   argument for shared changes (increments commute, and a shared guard is
//!   a lower bound that pending credits and undone debits only keep true:
//!   **Guard kinds**), checked by tests, not by the model. Its writes run only where
//!   no lock is held (an exclusive change also only where no change is
//!   pending), its guards read the stored value, which holds pending debits
//!   and not pending credits (deferred to their clears), and its increments
//!   leave room for the pending credit sums; a native insert may take over an unlocked, unmarked placeholder (a
//!   ghost), as the model's application insert does. Those conditions are
//!   tested on the embedded store (`tests/native.rs`,
//!   `native_respects_documents_held_by_two_phase_transactions`), not
//!   explored here. A native commit that failed is never followed by a
//!   second run of the transaction, whatever its repeat is answered
//!   (`tandem-mongodb/tests/failpoints.rs`), nor whatever its own error says
//!   (the driver repeats a failed commit once on its own and returns the
//!   repeat's error: `tandem-mongodb/tests/native_commit_retry.rs`): the
//!   same rule as the model's lost answers, whose doubt no later answer
//!   clears.
//! * **Canceling on doubt alone**: the model's coordinator cancels only
//!   after a definite refusal, and gives up when it only lacks answers. The
//!   code also cancels after an apply whose outcome is unknown (a store error
//!   after retries) or that answers `Expired` (its own marker found past the
//!   deadline, where the model's `Late` part could still commit). Either is
//!   the model's cancel with parts in doubt: the move to `canceling` is the
//!   decision, taken before any "committed" answer and only while the record
//!   is `pending` in this epoch (a recovery that probed and committed first
//!   makes the move miss, and the answer is `Superseded`), and every in-doubt
//!   part is compensated only once its store reads `D + margin`, as in the
//!   model.
//! * **Which configurations run the code's exact rules**: the code keeps a
//!   `pending` record's deadline when a claim does not apply (the model's
//!   `stable_deadline`); most configurations of the table renew it at every
//!   claim (`Fixes::EARLY_COMMIT`, `Fixes::SAFETY`), and one, a transfer
//!   committing at its applies, runs with `stable_deadline` on. Every fence
//!   reads the deadline of the epoch that applied, so keeping it changes
//!   when recovery may act, not what a fence admits.
//! * **Two deadlines where the model has one `D_0`**: the code's create
//!   deadline (`createBy`, the coordinator's estimate of the records store's
//!   clock plus the lease) decides inert creates and when garbage collection
//!   may run; the applies of epoch 0 are fenced by the store's own stamp
//!   (`leaseStart`) plus the lease. Each rule of the model that reads `D_0`
//!   reads, in the code, the one of the two it is about, and each is fixed
//!   before the step it fences.
//! * **Reads for guards on other documents, read-only participants, more
//!   transactions or participants, longer time**: bounded away; the
//!   properties are per transaction and per document, and the interleavings
//!   of two transactions sharing documents (`B`) and ids cover the
//!   interactions.
//! * **Reserving before the create** (the code reserves while preparing): a
//!   ghost is invisible and harmless, so a coordinator that then gets
//!   `Duplicate` leaves at most a ghost. The model reserves after the create.
//! * **Ghost collection**: ghosts are never removed here (the application's
//!   insert replaces one). The code removes a placeholder once it is no
//!   longer a reservation, by its own fields on its store's clock
//!   (`reservedAt + leaseMillis`: `collect_placeholders`, `put`; a TTL
//!   index by the lease plus the margin), and an insert's undo (and a
//!   coordinator giving back what it reserved for a transaction refused
//!   before its record) takes its own marker off the placeholder's
//!   reservers (`_tandem.reservers`) and deletes an unlocked, unmarked
//!   placeholder of its `_id` only where no other transaction's marker is
//!   left there, at any age: a reservation can land after its transaction
//!   ended and leave one that nothing fills. Removing an unlocked, unmarked
//!   ghost changes nothing the properties rest on: an insert whose fill
//!   finds none, or finds one no longer a reservation (the fill is fenced
//!   by it), reserves its `_id` again. It would only leave the `_id` free
//!   meanwhile for a plain insert, which then wins and the transaction's
//!   insert is refused as `AlreadyExists` (the outcome the model has for an
//!   insert that meets a document): an availability matter, which the
//!   reservers keep from happening through another transaction's undo.
//! * **Bookkeeping counters** (`_tandem.pending`, `_tandem.marks.<field>`,
//!   `_tandem.marked`, `_tandem.credit.<path>`):
//!   the model's exclusive change requires no marker of any transaction,
//!   which is what the pending count stands for in the code (it counts the
//!   markers under every marker field); the credit sums only make more
//!   applies refuse (a credit that would overflow), and a refused apply is
//!   a path the model has (guard failure). So does the shared apply's
//!   condition that the marker field holds no more entries than the
//!   changes pending under it (for a field of its own name, its count;
//!   for the default field, those no count names, `_tandem.pending` less
//!   `_tandem.marked`; refusing a field of the application's under the
//!   marker's name, also while changes are pending under another marker
//!   field): on tandem's own data it always
//!   holds, as every apply pushes its marker and counts itself in one
//!   statement, and every clear or undo takes both off together. Their arithmetic is tested on
//!   both stores by the safety scenarios instead. Every statement that moves
//!   a sum moves the pending count with it, so at a pending count of zero
//!   every sum is zero; two writes drop the sums then, filtered on it: an
//!   exclusive change (either strategy) and garbage collection's tidy of the
//!   documents its records credited (`_tandem.pending: 0`). A third drops,
//!   at any pending count, only sums it read as zero, guarded by the values
//!   read: the increment they stand in the way of (**Shapes**). None changes
//!   a field the model has, nor a sum that is not zero
//!   (`tests/credit_sums.rs`, `garbage_collection_keeps_a_pending_sum`).
//! * **Undo around outside writes, history cap, back-off, stubs**: they change
//!   what an undo writes when the application wrote the same field (the
//!   model's application never writes a document in flight), how much of a
//!   record's history is kept, how long a claim waits, and how long an id
//!   stays taken after collection (the model removes a collected record
//!   outright, with no stub: the harder case for late steps). A stub update
//!   is a collection step and carries the delete's conditions (age, create
//!   deadline, state, creation token), so it acts only on a record the
//!   model's `Collect` could remove.
//! * **How the coordinator reads `R`'s clock for `D_0`**: the code uses a
//!   `hello` reading at most ten seconds old plus local elapsed time, which
//!   is behind `R.now` by up to a round trip: `D_0` only comes earlier,
//!   making more creates inert, never fewer.
//! * **Stale reads**: every read of the model sees the latest write to its
//!   record or document, acknowledged or not. The code holds the reads it
//!   decides on to that: a probe and a coordinator's "is the record under
//!   this id mine?" use `Store::exists`, which `MongoStore` reads
//!   `linearizable` on the primary (a `majority` snapshot could miss an
//!   apply that landed but is not yet held by a majority, whose
//!   acknowledgement then arrives after recovery rolled it back); every
//!   other command goes to the primary too; the embedded store has one copy.
//!   A document read that explains an apply that matched nothing, and finds
//!   this transaction's marker there (the apply landed, its answer lost),
//!   reads at the store's read concern, which may be `local`; before it
//!   counts as landed (and so towards a "committed" answer), `Store::exists`
//!   confirms the marker, in time (an adversarial review: a `local` read
//!   showed a write a failover then rolled back;
//!   `tests/lagging_reads.rs`). Other reads of the code (a record read
//!   after a move matched nothing, a document read to explain a refusal)
//!   only ever lead to a weaker answer when they lag (`Superseded`,
//!   `Interrupted`, a refusal whose apply is undone with its doubt).
//! * **Leases of their own, and the lease registry**: in
//!   [`Scenario::KeyedRetry`] the two coordinators have leases of their
//!   own (`Long` [`LONG_LEASE`] = 4, `Short` [`LEASE`] = 2); the other
//!   scenarios' coordinators, recovery and the collector have [`LEASE`]
//!   (the collector's is the shortest, its worst case). What the model
//!   covers: each coordinator's create deadline is its reading of `R`'s
//!   clock plus its own lease; a keyed coordinator raises the registry
//!   (`tandem_leases`, a `$max`: [`Action::Register`]) before its first
//!   create; GC keeps a finished record for the longest of the collector's
//!   lease, its creator's and, for a keyed record, the registry, plus the
//!   margin. The interleaving the registry stops (a long-leased run's
//!   create stalls; the retry through a short-leased coordinator pays and
//!   finishes; its record is collected once the short leases passed; the
//!   stalled create lands live and pays again: the code's
//!   `a_keyed_id_stays_taken_for_the_longest_lease_of_any_coordinator`)
//!   violates [`KEY_PAYS_ONCE`] under either mutation
//!   ([`Variant::GcIgnoresRegistry`], [`Variant::CreateBeforeRegister`]),
//!   and with the rule no state does. What it leaves out, and why that is
//!   safe:
//!   - *GC's wait for a record's own create deadline*: the code waits for
//!     the record's `createBy` plus the margin, the model for its creator's
//!     lease after the record finished, which is no earlier (the deadline
//!     was fixed before the create, and the create came before the
//!     finish). For a keyed record the registry's floor covers both (its
//!     creator registered before its create), so there the model's
//!     collector is the code's; only the mutation's collector is later
//!     than the code's would be, and it is caught all the same.
//!   - *The registry read and the delete are one step* in the model. The
//!     code reads the registry once per pass, after the scan that found
//!     the records finished, and deletes after. A registration landing
//!     after that read is one whose coordinator fixes its create deadline
//!     only after it (`create_record` reads the clock once
//!     `register_lease` returned), so after the finish: a run that began
//!     after the other finished, which the key does not hold back with a
//!     window of zero (a window keeps the stub for it).
//!   - *The idempotency window* is zero in the model. With a window `W`
//!     the code keeps a keyed record's stub until `W` after the finish and
//!     then for the registered lease plus the margin (a sum: a retry sent
//!     just before the window ended fixes its create deadline up to its
//!     lease after that, and its create must meet the id taken; the code's
//!     `a_retry_inside_the_window_whose_create_lands_after_it_pays_nothing`).
//!     A stub answers a create as its record does, so that is the model's
//!     rule with the finish moved `W` later: the runs it holds back are
//!     those begun before `finish + W`, as the model's are those begun
//!     before the finish (a stub update is a collection step with the
//!     delete's conditions, below). The registry read that goes with the
//!     moved finish is the one before the stub's removal, after
//!     `finish + W`: the floor read when the stub was written, before
//!     `finish + W`, misses a coordinator that registered a longer lease
//!     in between and retried inside the window (the code's
//!     `a_stub_outlives_a_longer_lease_registered_after_it_was_written`,
//!     which paid twice when the removal trusted the stub's own end), so
//!     the code reads the registry again before removing stubs.
//!   - *A registration's lost answer*: the `$max` is idempotent and only
//!     raises, and a coordinator sends no create before one registration
//!     answered (else it answers with no record written), so a late copy
//!     changes nothing. The code registers once per coordinator, before its
//!     first keyed create; its later runs find their lease there, as the
//!     model's registry, which only grows, gives it (a coordinator started
//!     again with a shorter lease leaves the longer one, which only keeps
//!     ids longer).
//!   - *More runs under a key, more lease lengths*: the property is per
//!     pair of runs and the registry holds the longest lease of all, so
//!     each pair is the model's two runs with the registry at least their
//!     longer lease.
//!   - *Ids the caller did not choose* get no floor: two coordinators under
//!     such an id ([`Scenario::SameId`], one lease) run different
//!     transactions, and a coordinator takes `Duplicate` as definite only
//!     past its own create deadline, whatever its lease.
//!   - *The TTL index* on finished records (`Coordinator::ensure_ttl`) is a
//!     second collector that reads neither a record's create deadline nor
//!     the registry: it is safe only with an age of at least the longest
//!     lease of any coordinator writing those records plus the margin,
//!     which its documentation requires and `ensure_ttl` checks against
//!     the leases registered when the index is made; with a shorter one, a
//!     late create of a longer-leased coordinator could land live.
//!   - *Claims' leases*: a claim's deadline is the claimant's lease (the
//!     model's recovery has [`LEASE`]), and a claim that backs off after
//!     failed attempts takes a longer one (up to eight times), which also
//!     gives its applies a later deadline; every fence reads the record's
//!     own deadline, so a longer one only delays recovery.
//! * **Looking again after the create deadline**: the model's coordinator
//!   that met another record under its id after a lost create answer tries
//!   the create again once `R.now >= D_0`; the code reads instead whether
//!   the record under the id is its own (its creation token, read as
//!   above), which tells the same, without writing an inert record.
//! * **An operator's cancel of a record not `pending`**: the model's forced
//!   cancel claims `pending` records; the code's `RecoveryWorker::cancel`
//!   also claims a `canceling` record (and removes a legacy `initial` one),
//!   which is the model's takeover of that record.
//! * **Reporting**: events and counts are not state; a move that matches
//!   nothing takes the record as moved by its own earlier attempt only
//!   under its epoch and creation token, as the model's moves name them.
//! * **Records of older versions**: records written before creation tokens,
//!   create stamps, tagged markers, counted debits or "missing" guards held
//!   alone are driven by the rules they were written under, which the model
//!   shows unsafe when a stalled step of that version lands late (its
//!   findings 1 and 2). While coordinators of that version run, or within
//!   a lease plus the margin after the last stopped, such a step can still
//!   arrive; after that none can, and finishing their records is safe (the
//!   production checklist's upgrade notes).
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
