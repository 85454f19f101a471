//! The model's configuration, its actions, and the protocol's steps.
//!
//! The file is long because it holds one concern only: the transition
//! relation of the model (which actions are enabled in a state, and what
//! each does), every step of the protocol beside the others so that they
//! can be compared with the code's steps one by one.
//!
//! The early commit ([`Fixes::early_commit`]) adds the coordinator's answer
//! at its last apply (in [`Action::Apply`]), the probes of a claimed
//! `pending` record ([`Action::Probe`]) and the roll forward's second claim
//! ([`Action::Reclaim`]); the crate docs give its rules.

use std::fmt;

use stateright::{Model, Property};

use crate::scenario::{
    Change, CoordSpec, Op, Scenario, DOCS, MAX_COORDS, MAX_DOCS, MAX_PARTS, MAX_TXS, P1, R, STORES,
    STORE_NAMES,
};
use crate::state::{
    Answer, Doc, Event, History, MarkerSet, Part, Phase, Presence, Record, Request, Role,
    SerialDoc, State, TxState, Worker,
};

/// The lease, in clock units: `D_e = leaseStart + LEASE`. Every process's
/// but the long-leased coordinator of [`Scenario::KeyedRetry`]
/// ([`crate::LONG_LEASE`]): recovery's and the garbage collector's always.
pub const LEASE: u8 = 2;
/// The clock margin: markers of an epoch whose applies may still be in
/// flight are removed only once the store's clock reads `D_e + MARGIN`.
pub const MARGIN: u8 = 1;

/// Which protocol the model runs: v2 as specified, or v2 with one step
/// broken on purpose (a mutation the checker must catch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Protocol v2 as specified.
    Faithful,
    /// (1) The apply's filter has no deadline: a late apply lands whenever
    /// the marker is absent and the guards hold.
    NoApplyDeadline,
    /// (2) Clear and compensate ignore `nb_p`: no `NotYet`, no time condition in the filter.
    NoRemovalFence,
    /// (3) A claim does not raise `NB`.
    ClaimKeepsNotBefore,
    /// (4) `nb_p` ignores this epoch's own doubt: `nb_p = NB`.
    IgnoreDoubt,
    /// (5) An insert is one plain insert (no reserve, no fill): it cannot
    /// carry a deadline, so a late one lands whenever the `_id` is free.
    UnfencedInsert,
    /// (6) GC deletes a finished record at any age, not only after `LEASE + MARGIN`.
    EarlyGc,
    /// (7) The create's "ours" check compares the owner name (the same for
    /// both coordinators of [`Scenario::SameId`]) instead of the token.
    OwnerNameOnly,
    /// A successful retry of an apply clears the participant's doubt,
    /// although the lost attempt may still be in flight.
    RetryClearsDoubt,
    /// Early commit ([`Fixes::early_commit`]): coordinators answer at the
    /// applies, but recovery and forced cancels roll a `pending` record back
    /// without probing it (the recovery of the late-commit protocol).
    NoProbe,
    /// Early commit: the probe ignores `NB`: it reads the marker at once,
    /// while an apply of the epoch it fenced may still land.
    ProbeBeforeFence,
    /// Early commit: rolling forward does not probe (nor wait for `NB`): the
    /// claim sets a new deadline at once and the re-apply's refusals cancel
    /// (the roll forward of the late-commit protocol), while an apply of an
    /// older epoch may still land.
    RefuseBeforeFence,
    /// The coordinator answers "canceled, every change undone" once its
    /// compensations end, also when one must wait for an apply in doubt
    /// (`NotYet`, left to recovery), as the code did before its answer said
    /// whether the undo happened.
    UndoneWhileWaiting,
    /// Garbage collection ignores the lease registry: a finished record
    /// goes once `R.now >= finishedAt + max(LEASE, its creator's lease) +
    /// MARGIN` (the collector's age and the record's own create deadline),
    /// also a keyed one whose key another run with a longer lease may still
    /// create under.
    GcIgnoresRegistry,
    /// A keyed coordinator registers its lease after its create landed, not
    /// before its first attempt.
    CreateBeforeRegister,
}

/// Changes to the protocol proposed by this model's findings (see the crate docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Fixes {
    /// The create carries `D_0` (the coordinator's reading of the records
    /// store's clock plus `LEASE`) and inserts a live record only while
    /// `R.now < D_0`; later it leaves nothing live. A coordinator that lost a
    /// create's answer takes a duplicate id for a definite `Duplicate` only
    /// once `R.now >= D_0`.
    pub fenced_create: bool,
    /// Markers, locks and record compare-and-sets carry the creation token
    /// as well as the transaction id.
    pub token_fencing: bool,
    /// A claim sets a new deadline only when the new epoch rolls forward
    /// (the only epochs that apply); otherwise `D` stays, so `NB` stops
    /// rising once nobody can apply any more.
    pub stable_deadline: bool,
    /// Commit at the applies (the record is created with `earlyCommit`): a
    /// coordinator answers "committed" as soon as every apply of its epoch
    /// answered "applied", while the record still says `pending`, and moves
    /// it to `applied` later. A claim of a `pending` record (any policy, and
    /// a forced cancel) keeps the deadline and probes every participant once
    /// its clock reads `NB`: every marker there ⇒ `pending → applied`; else
    /// roll back, or claim again with a new deadline and apply (roll forward).
    pub early_commit: bool,
    /// With [`Fixes::early_commit`]: an apply whose re-read finds the
    /// marker already there counts toward the early answer only if the
    /// re-read also finds `S.now < D_e` (the document's store clock read at
    /// or after the marker): before the deadline no other epoch can have
    /// applied there, so the marker is this epoch's. A marker found later
    /// may be a later epoch's (a roll forward's) on a transaction since
    /// canceled: it counts for the move to `applied` only ([`Part::Late`]),
    /// and the coordinator answers after the move, or from the record.
    pub timely_marker: bool,
}

impl Fixes {
    /// v2 as specified.
    pub const NONE: Fixes = Fixes {
        fenced_create: false,
        token_fencing: false,
        stable_deadline: false,
        early_commit: false,
        timely_marker: false,
    };
    /// The two safety fixes: [`Fixes::fenced_create`] and [`Fixes::token_fencing`].
    pub const SAFETY: Fixes = Fixes {
        fenced_create: true,
        token_fencing: true,
        stable_deadline: false,
        early_commit: false,
        timely_marker: false,
    };
    /// Every fix: the safety fixes and [`Fixes::stable_deadline`] (liveness),
    /// with the commit at the record's move (no early commit).
    pub const ALL: Fixes = Fixes {
        fenced_create: true,
        token_fencing: true,
        stable_deadline: true,
        early_commit: false,
        timely_marker: false,
    };
    /// The early commit as first specified: the safety fixes and
    /// [`Fixes::early_commit`], a marker found by an apply's re-read counting
    /// toward the early answer at any time. Unsafe (see the crate docs).
    pub const EARLY_COMMIT_AS_GIVEN: Fixes = Fixes {
        fenced_create: true,
        token_fencing: true,
        stable_deadline: false,
        early_commit: true,
        timely_marker: false,
    };
    /// The early commit with its fix: the safety fixes,
    /// [`Fixes::early_commit`] and [`Fixes::timely_marker`].
    pub const EARLY_COMMIT: Fixes = Fixes {
        fenced_create: true,
        token_fencing: true,
        stable_deadline: false,
        early_commit: true,
        timely_marker: true,
    };
}

/// What recovery does with a `pending` record (`tandem::PendingPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PendingPolicy {
    /// Cancel it: `pending → canceling`, compensate all, `canceled`.
    RollBack,
    /// Apply all with the new deadline; commit if all applied, else cancel.
    RollForward,
    /// Either, chosen at each claim.
    Either,
}

/// How clocks advance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ticks {
    /// Each store's clock ticks on its own: skew changes arbitrarily.
    PerStore,
    /// One tick advances every clock not yet at its end: the skew is fixed
    /// by the start offsets (until a clock reaches its end).
    Global,
}

/// Which steps may lose their answer (the request goes in flight and lands
/// whenever it is delivered, possibly much later).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lose {
    /// The record's create.
    pub create: bool,
    /// Applies, fills and reserves.
    pub apply: bool,
    /// Clears and compensates.
    pub remove: bool,
    /// Record compare-and-sets (commit, cancel, finish).
    pub cas: bool,
}

impl Lose {
    /// Every kind of step.
    pub const ALL: Lose = Lose {
        create: true,
        apply: true,
        remove: true,
        cas: true,
    };
    /// Participant steps only (applies, clears, compensates).
    pub const PARTICIPANTS: Lose = Lose {
        create: false,
        apply: true,
        remove: true,
        cas: false,
    };
}

/// How a claim came about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimKind {
    /// The owner is alive (its lease ran out while it was slow). Bounded.
    Takeover,
    /// The owner is gone (crashed, gave up, stopped on `NotYet`, finished). Timed, unbounded.
    Rescue,
    /// `tandem cancel`: a pending record, at any time, rolled back. Bounded.
    Forced,
}

/// One atomic step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A store's clock advances by one (`store == STORES`: every clock not at its end).
    Tick {
        /// The store.
        store: usize,
    },
    /// A store's clock steps back by [`TandemModel::step_back`] (once).
    StepBack {
        /// The store.
        store: usize,
    },
    /// A keyed coordinator raises the lease registry to its lease (`$max`
    /// upsert): `registry := max(registry, lease)`.
    Register {
        /// The worker.
        worker: usize,
    },
    /// A coordinator sends the record's create.
    Create {
        /// The worker.
        worker: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// An insert's reserve (upsert of a ghost).
    Reserve {
        /// The worker.
        worker: usize,
        /// The participant.
        part: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// An apply (for an insert: its fill), then on no match the re-read that diagnoses it.
    Apply {
        /// The worker.
        worker: usize,
        /// The participant.
        part: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// CAS `pending → applied` on (id, state, epoch).
    Commit {
        /// The worker.
        worker: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// Early commit: probe one participant of a claimed `pending` record:
    /// `NotYet` (the worker stops) unless the document's store clock reads
    /// `NB`; else whether the transaction's marker is on the document.
    Probe {
        /// The worker.
        worker: usize,
        /// The participant.
        part: usize,
    },
    /// Early commit, rolling forward after a probe that found a marker
    /// missing: claim the record again (CAS on id, state, epoch, token):
    /// epoch + 1, `NB := max(NB, D + MARGIN)`, `D := R.now + LEASE`; then apply.
    Reclaim {
        /// The worker.
        worker: usize,
    },
    /// CAS `pending → canceling`.
    Cancel {
        /// The worker.
        worker: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// Clear (in `applied`) or compensate (in `canceling`) one participant:
    /// read the store's clock, `NotYet` if before `nb_p`, else one guarded update.
    Remove {
        /// The worker.
        worker: usize,
        /// The participant.
        part: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// CAS `applied → done` or `canceling → canceled`.
    Finish {
        /// The worker.
        worker: usize,
        /// The answer is lost and the request stays in flight.
        lose: bool,
    },
    /// A worker with a step in doubt stops (a coordinator answers "unknown").
    GiveUp {
        /// The worker.
        worker: usize,
    },
    /// A worker crashes.
    Crash {
        /// The worker.
        worker: usize,
    },
    /// Recovery claims a record (read and CAS in one step: the CAS filter has `lastModified`).
    Claim {
        /// The transaction id.
        tx: usize,
        /// How.
        kind: ClaimKind,
        /// On `pending`: roll forward (`true`) or back.
        forward: bool,
    },
    /// A request in flight lands.
    Deliver {
        /// Its index in [`State::flight`].
        index: usize,
    },
    /// GC deletes a finished record: once `R.now >= finishedAt + age +
    /// MARGIN`, where the age is the longest of the collector's lease
    /// ([`LEASE`]), the record's creator's lease and (a keyed record) the
    /// lease registry.
    Collect {
        /// The transaction id.
        tx: usize,
    },
    /// The application inserts a document (the `_id` is free or a ghost).
    AppInsert {
        /// The document.
        doc: usize,
    },
    /// The application deletes a document (unlocked, unmarked).
    AppDelete {
        /// The document.
        doc: usize,
    },
}

/// The model: the scenario, the bounds, and the protocol variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TandemModel {
    /// Which transactions run.
    pub scenario: Scenario,
    /// The records live in `P1`'s store (one clock for both).
    pub records_on_p1: bool,
    /// Each clock's start (the skew).
    pub clock_start: [u8; STORES],
    /// Each clock's end: it does not tick past it.
    pub clock_end: [u8; STORES],
    /// How clocks advance.
    pub ticks: Ticks,
    /// The most requests whose answer is lost.
    pub lost: u8,
    /// Which steps may lose their answer.
    pub lose: Lose,
    /// The most crashes.
    pub crashes: u8,
    /// The most claims of a record whose owner is alive.
    pub takeovers: u8,
    /// The most forced cancels.
    pub forced_cancels: u8,
    /// The most application inserts and deletes.
    pub app_ops: u8,
    /// GC deletes finished records.
    pub gc: bool,
    /// A clock may step back once by this much (0: clocks never go back).
    pub step_back: u8,
    /// What recovery does with a `pending` record.
    pub pending: PendingPolicy,
    /// The protocol variant.
    pub variant: Variant,
    /// Proposed fixes switched on.
    pub fixes: Fixes,
}

/// What [`TandemModel::search`] found.
#[derive(Clone, Debug)]
pub struct Search {
    /// The property first violated (or, for a `sometimes` property,
    /// satisfied), and a shortest path from the initial state to it.
    pub found: Option<(&'static str, Vec<Action>)>,
    /// The states visited.
    pub states: usize,
}

/// What an apply found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ApplyResult {
    /// It landed: the marker is pushed.
    Landed,
    /// The marker was there already: applied; `timely`: the store's clock
    /// read below the deadline.
    Present { timely: bool },
    /// A definite refusal other than the deadline.
    Refused,
    /// The store's clock is past the deadline; `would_land`: only the deadline stopped it.
    Expired { would_land: bool },
    /// An insert's fill found no document: its reserve must be sent (again).
    NotReserved,
}

/// What a create found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CreateResult {
    Created,
    Exists(u8),
    Inert,
}

impl TandemModel {
    /// v2 as specified, for `scenario`, with small bounds: records in their
    /// own store, clocks R: 0..=4, P1: 0..=7, P2: 1..=7 ticking on their own,
    /// one lost answer (any step), no crash, no takeover, no forced cancel,
    /// no application step, GC on, either recovery policy.
    pub fn new(scenario: Scenario) -> Self {
        TandemModel {
            scenario,
            records_on_p1: false,
            clock_start: [0, 0, 1],
            clock_end: [4, 7, 7],
            ticks: Ticks::PerStore,
            lost: 1,
            lose: Lose::ALL,
            crashes: 0,
            takeovers: 0,
            forced_cancels: 0,
            app_ops: 0,
            gc: true,
            step_back: 0,
            pending: PendingPolicy::Either,
            variant: Variant::Faithful,
            fixes: Fixes::NONE,
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

    /// Puts the records in `P1`'s store.
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

    /// Sets the most crashes.
    pub fn with_crashes(mut self, crashes: u8) -> Self {
        self.crashes = crashes;
        self
    }

    /// Sets the most takeovers of live owners.
    pub fn with_takeovers(mut self, takeovers: u8) -> Self {
        self.takeovers = takeovers;
        self
    }

    /// Sets the most forced cancels.
    pub fn with_forced_cancels(mut self, forced: u8) -> Self {
        self.forced_cancels = forced;
        self
    }

    /// Sets the most application inserts and deletes.
    pub fn with_app_ops(mut self, app_ops: u8) -> Self {
        self.app_ops = app_ops;
        self
    }

    /// Switches GC on or off.
    pub fn with_gc(mut self, gc: bool) -> Self {
        self.gc = gc;
        self
    }

    /// Lets one clock step back once by `amount`.
    pub fn with_step_back(mut self, amount: u8) -> Self {
        self.step_back = amount;
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

    /// Switches proposed fixes on.
    pub fn with_fixes(mut self, fixes: Fixes) -> Self {
        self.fixes = fixes;
        self
    }

    /// The coordinator `coord`.
    pub fn spec(&self, coord: usize) -> &'static CoordSpec {
        &self.scenario.coords()[coord]
    }

    /// Change `part` of coordinator `coord`.
    pub fn change(&self, coord: usize, part: usize) -> Change {
        self.spec(coord).changes[part]
    }

    /// Coordinator `coord`'s lease.
    pub fn lease(&self, coord: usize) -> u8 {
        self.spec(coord).lease
    }

    /// How long after it finished GC keeps record `r` (before the margin):
    /// the collector's lease, the lease of the record's creator (the model's
    /// stand-in for the code's wait for the record's create deadline plus the
    /// margin, which it bounds: the create came before the finish), and for
    /// a keyed record the lease registry
    /// ([`Variant::GcIgnoresRegistry`] leaves that out).
    fn gc_age(&self, s: &State, r: &Record) -> u8 {
        let own = LEASE.max(self.lease(usize::from(r.token)));
        if self.scenario.keyed() && self.variant != Variant::GcIgnoresRegistry {
            own.max(s.registry)
        } else {
            own
        }
    }

    /// The marker (and lock value) coordinator `coord`'s changes use: its
    /// transaction id, or with [`Fixes::token_fencing`] its token.
    pub fn marker(&self, coord: usize) -> usize {
        if self.fixes.token_fencing {
            coord
        } else {
            self.spec(coord).tx
        }
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

    fn stores(&self) -> impl Iterator<Item = usize> + '_ {
        (0..STORES).filter(move |&i| !(i == R && self.records_on_p1))
    }

    fn coords(&self) -> usize {
        self.scenario.coords().len()
    }

    /// The serial balances and existence at the start.
    fn initial_serial() -> [SerialDoc; MAX_DOCS] {
        DOCS.map(|d| SerialDoc {
            exists: d.initial.is_some(),
            value: d.initial.unwrap_or(0),
        })
    }

    /// Whether coordinator `c`'s transaction is over: its record (with its
    /// token) is terminal, or it has none and either one was finished and
    /// collected or the coordinator is gone (never created, duplicate, gave up).
    pub fn is_finished(&self, s: &State, c: usize) -> bool {
        let tx = self.spec(c).tx;
        match s.records[tx] {
            Some(r) if usize::from(r.token) == c => r.state.is_terminal(),
            _ => s.history[c].terminal.is_some() || !s.workers[c].is_alive(),
        }
    }

    /// Whether every transaction is over.
    pub fn all_finished(&self, s: &State) -> bool {
        (0..self.coords()).all(|c| self.is_finished(s, c))
    }

    /// Whether the documents are what the serial execution holds, with no marker or lock.
    pub fn is_consistent(&self, s: &State) -> bool {
        s.docs.iter().zip(&s.serial).all(|(doc, serial)| {
            let real = doc.presence == Presence::Real;
            real == serial.exists
                && (!real || doc.value == serial.value)
                && doc.markers.is_empty()
                && doc.lock.is_none()
        })
    }

    /// Whether no step is enabled.
    pub fn is_quiescent(&self, s: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(s, &mut actions);
        actions.is_empty()
    }

    fn may_lose(&self, s: &State, kind: bool) -> &'static [bool] {
        if kind && s.lost < self.lost {
            &[false, true]
        } else {
            &[false]
        }
    }

    /// Whether worker `w` may crash: it owns its record, or is a coordinator
    /// that has no record yet. (A superseded worker that crashes is, to
    /// everyone else, one that stalls forever, which the interleavings cover.)
    fn may_crash(&self, s: &State, w: usize) -> bool {
        let worker = s.workers[w];
        if !worker.is_alive() || s.crashes >= self.crashes {
            return false;
        }
        if matches!(worker.phase, Phase::Create | Phase::Register) {
            return true;
        }
        matches!(s.records[self.spec(usize::from(worker.coord)).tx],
            Some(r) if r.token == worker.coord && r.epoch == worker.epoch)
    }

    /// Whether recovery may claim record `r` whose owner is gone: its lease
    /// ran out and its deadline plus the margin passed (by the records
    /// store's clock), or that clock is at its end (the model stops time
    /// there; in reality it goes on and the lease runs out).
    fn rescue_due(&self, s: &State, r: &Record) -> bool {
        let now = self.now(s, R);
        (now >= r.last_modified + LEASE && now >= r.deadline + MARGIN)
            || now >= self.clock_end[self.clock_index(R)]
    }

    fn owner_alive(&self, s: &State, tx: usize, r: &Record) -> bool {
        s.workers.iter().any(|w| {
            w.is_alive()
                && w.coord == r.token
                && w.epoch == r.epoch
                && self.spec(usize::from(w.coord)).tx == tx
        })
    }

    fn is_insert_part(&self, coord: usize, part: usize) -> bool {
        self.change(coord, part).op == Op::Insert && self.variant != Variant::UnfencedInsert
    }

    // ----- landing single-document steps -----

    fn land_create(&self, s: &mut State, coord: usize, deadline: u8) -> CreateResult {
        let tx = self.spec(coord).tx;
        let now = self.now(s, R);
        if let Some(r) = s.records[tx] {
            if self.scenario.keyed()
                && usize::from(r.token) != coord
                && r.state.is_terminal()
                && now < deadline
                && now >= r.last_modified + LEASE.max(self.lease(usize::from(r.token))) + MARGIN
            {
                s.event = Event::KeptForLateCreate;
            }
            return CreateResult::Exists(r.token);
        }
        if self.fixes.fenced_create && now >= deadline {
            return CreateResult::Inert;
        }
        let deadline = if self.fixes.fenced_create {
            deadline
        } else {
            now + self.lease(coord)
        };
        s.records[tx] = Some(Record {
            state: TxState::Pending,
            epoch: 0,
            token: coord as u8,
            deadline,
            not_before: 0,
            last_modified: now,
        });
        s.history[coord].created = true;
        s.history[coord].wrote = true;
        CreateResult::Created
    }

    fn land_reserve(&self, s: &mut State, doc: usize) {
        if s.docs[doc].presence == Presence::Absent {
            s.docs[doc].presence = Presence::Ghost;
        }
    }

    fn land_apply(&self, s: &mut State, coord: usize, part: usize, deadline: u8) -> ApplyResult {
        let change = self.change(coord, part);
        let m = self.marker(coord);
        let now = self.now(s, DOCS[change.doc].store);
        let doc = &mut s.docs[change.doc];
        if doc.markers.contains(m) {
            return ApplyResult::Present {
                timely: now < deadline,
            };
        }
        let mut in_time = self.variant == Variant::NoApplyDeadline || now < deadline;
        let locked_by_other = matches!(doc.lock, Some(l) if usize::from(l) != m);
        let would_land = match change.op {
            Op::Inc(delta) => {
                doc.presence == Presence::Real
                    && !locked_by_other
                    && (delta >= 0 || doc.value >= -delta)
            }
            Op::Insert if self.variant == Variant::UnfencedInsert => {
                in_time = true; // a plain insert cannot carry a deadline
                doc.presence == Presence::Absent
            }
            Op::Insert => match doc.presence {
                Presence::Ghost => true,
                Presence::Absent if in_time => return ApplyResult::NotReserved,
                _ => false,
            },
            Op::Delete => {
                doc.presence == Presence::Real && !locked_by_other && !doc.markers.has_other_than(m)
            }
        };
        if !in_time {
            return ApplyResult::Expired { would_land };
        }
        if !would_land {
            return ApplyResult::Refused;
        }
        match change.op {
            Op::Inc(delta) => {
                doc.markers.insert(m);
                if delta < 0 {
                    doc.value += delta; // a debit applies at once; a credit waits for the clear
                }
            }
            Op::Insert => {
                *doc = Doc {
                    presence: Presence::Real,
                    value: 0,
                    markers: MarkerSet::default(),
                    lock: Some(m as u8),
                };
                doc.markers.insert(m);
            }
            Op::Delete => {
                doc.markers.insert(m);
                doc.lock = Some(m as u8);
            }
        }
        let h = &mut s.history[coord];
        h.applies[part] = (h.applies[part] + 1).min(2);
        h.wrote = true;
        ApplyResult::Landed
    }

    fn land_remove(&self, s: &mut State, coord: usize, part: usize, not_before: u8, clear: bool) {
        let change = self.change(coord, part);
        let m = self.marker(coord);
        let now = self.now(s, DOCS[change.doc].store);
        let doc = &mut s.docs[change.doc];
        if now < not_before || !doc.markers.contains(m) {
            return; // no match: not yet (a clock stepped back), or already done
        }
        const GONE: Doc = Doc {
            presence: Presence::Absent,
            value: 0,
            markers: MarkerSet(0),
            lock: None,
        };
        let unlock = |doc: &mut Doc| {
            doc.markers.remove(m);
            if doc.lock == Some(m as u8) {
                doc.lock = None;
            }
        };
        match (clear, change.op) {
            (true, Op::Inc(delta)) => {
                doc.markers.remove(m);
                if delta > 0 {
                    doc.value += delta; // the deferred credit, guarded by the marker
                }
            }
            (true, Op::Insert) | (false, Op::Delete) => unlock(doc),
            (true, Op::Delete) | (false, Op::Insert) => *doc = GONE,
            (false, Op::Inc(delta)) => {
                doc.markers.remove(m);
                if delta < 0 {
                    doc.value -= delta; // undo the early debit
                }
            }
        }
        let h = &mut s.history[coord];
        h.undone |= !clear;
        h.effects[part] = (h.effects[part] + 1).min(2);
        h.wrote = true;
    }

    /// The record compare-and-set on (id, state, epoch) (and the token with
    /// [`Fixes::token_fencing`]).
    fn land_cas(
        &self,
        s: &mut State,
        coord: usize,
        tx: usize,
        epoch: u8,
        from: TxState,
        to: TxState,
    ) -> bool {
        let now = self.now(s, R);
        let Some(r) = s.records[tx].as_mut() else {
            return false;
        };
        if r.state != from
            || r.epoch != epoch
            || (self.fixes.token_fencing && usize::from(r.token) != coord)
        {
            return false;
        }
        r.state = to;
        r.last_modified = now;
        let token = usize::from(r.token);
        let h = &mut s.history[token];
        match to {
            TxState::Applied => {
                if !h.applied {
                    h.applied = true;
                    // The serial execution: the whole transaction at its commit point.
                    for change in self.spec(token).changes {
                        let doc = &mut s.serial[change.doc];
                        match change.op {
                            Op::Inc(delta) => doc.value += delta,
                            Op::Insert => {
                                *doc = SerialDoc {
                                    exists: true,
                                    value: 0,
                                }
                            }
                            Op::Delete => {
                                *doc = SerialDoc {
                                    exists: false,
                                    value: 0,
                                }
                            }
                        }
                    }
                }
            }
            TxState::Canceling => h.canceled = true,
            TxState::Done | TxState::Canceled => h.terminal = Some(to),
            TxState::Pending => {}
        }
        true
    }

    // ----- workers -----

    /// What a coordinator does once its create landed: apply (with
    /// [`Variant::CreateBeforeRegister`], a keyed one registers first).
    fn after_create(&self) -> Phase {
        if self.scenario.keyed() && self.variant == Variant::CreateBeforeRegister {
            Phase::Register
        } else {
            Phase::Apply
        }
    }

    fn enter(&self, s: &mut State, w: usize, phase: Phase) {
        let worker = &mut s.workers[w];
        worker.phase = phase;
        worker.parts = [Part::Todo; MAX_PARTS];
        worker.cas_doubt = false;
    }

    fn stop(&self, s: &mut State, w: usize) {
        let worker = s.workers[w];
        match worker.role {
            Role::Coordinator => {
                // A dead worker forgets everything, so that equal outcomes are equal states.
                s.workers[w] = Worker {
                    coord: worker.coord,
                    role: Role::Coordinator,
                    epoch: 0,
                    deadline: 0,
                    not_before: 0,
                    phase: Phase::Dead,
                    parts: [Part::Todo; MAX_PARTS],
                    doubt: 0,
                    cas_doubt: false,
                };
            }
            Role::Recovery => {
                s.workers.remove(w);
            }
        }
    }

    fn answer(&self, s: &mut State, w: usize, answer: Answer) {
        let worker = s.workers[w];
        if worker.role == Role::Coordinator {
            let a = &mut s.answers[usize::from(worker.coord)];
            if *a == Answer::None {
                *a = answer;
            }
        }
    }

    /// What a coordinator that lost track answers after re-reading its record.
    fn answer_from_record(&self, s: &mut State, w: usize) {
        let coord = s.workers[w].coord;
        let answer = match s.records[self.spec(usize::from(coord)).tx] {
            Some(r) if r.token == coord => match r.state {
                TxState::Applied | TxState::Done => Answer::Committed,
                TxState::Canceling | TxState::Canceled => Answer::Canceled,
                TxState::Pending => Answer::Unknown,
            },
            _ => Answer::Unknown,
        };
        self.answer(s, w, answer);
    }

    /// A record compare-and-set by worker `w`; on no match, the re-read: the
    /// record in `to` at the worker's epoch means an earlier attempt landed.
    fn cas_step(&self, s: &mut State, w: usize, from: TxState, to: TxState, lose: bool) {
        let worker = s.workers[w];
        let coord = usize::from(worker.coord);
        let tx = self.spec(coord).tx;
        if lose {
            s.lost += 1;
            s.flight.push(Request::Cas {
                coord: worker.coord,
                tx: tx as u8,
                epoch: worker.epoch,
                from,
                to,
            });
            s.workers[w].cas_doubt = true;
            return;
        }
        let landed = self.land_cas(s, coord, tx, worker.epoch, from, to);
        let mine = landed
            || matches!(s.records[tx], Some(r) if r.state == to && r.epoch == worker.epoch
                && (!self.fixes.token_fencing || usize::from(r.token) == coord));
        if !mine {
            self.answer_from_record(s, w);
            self.stop(s, w);
            return;
        }
        match to {
            TxState::Applied => {
                self.answer(s, w, Answer::Committed);
                self.enter(s, w, Phase::Clear);
            }
            TxState::Canceling => {
                self.answer(s, w, Answer::Canceled);
                self.enter(s, w, Phase::Compensate);
            }
            TxState::Canceled => {
                // Its own move to `canceled`, after every compensation
                // answered: nothing of it is left applied.
                let worker = s.workers[w];
                if worker.role == Role::Coordinator {
                    let a = &mut s.answers[usize::from(worker.coord)];
                    if *a == Answer::Canceled {
                        *a = Answer::CanceledUndone;
                    }
                }
                self.stop(s, w);
            }
            _ => self.stop(s, w),
        }
    }

    /// After a removal step: a worker with nothing left to send but a
    /// participant whose fence has not passed stops ("recovery will do it later").
    fn settle(&self, s: &mut State, w: usize) {
        let n = self.spec(usize::from(s.workers[w].coord)).changes.len();
        let parts = &s.workers[w].parts[..n];
        if parts.contains(&Part::NotYet)
            && !parts.iter().any(|p| matches!(p, Part::Todo | Part::Doubt))
        {
            let worker = s.workers[w];
            if self.variant == Variant::UndoneWhileWaiting
                && worker.role == Role::Coordinator
                && worker.phase == Phase::Compensate
            {
                let a = &mut s.answers[usize::from(worker.coord)];
                if *a == Answer::Canceled {
                    *a = Answer::CanceledUndone;
                }
            }
            self.stop(s, w);
        }
    }

    /// Renumbers each transaction's epochs densely (0 stays 0), keeping their
    /// order, so that repeated claims that change nothing else lead to equal states.
    fn normalize(&self, s: &mut State) {
        for tx in 0..MAX_TXS {
            // The epochs in use, as a bit set (epochs stay below 16: each is at
            // most one more than the number of epochs in use before a claim).
            let mut used: u16 = 1;
            if let Some(r) = s.records[tx] {
                used |= 1 << r.epoch;
            }
            for w in &s.workers {
                if w.is_alive() && self.spec(usize::from(w.coord)).tx == tx {
                    used |= 1 << w.epoch;
                }
            }
            for req in &s.flight {
                if let Request::Cas { tx: t, epoch, .. } = req {
                    if usize::from(*t) == tx {
                        used |= 1 << epoch;
                    }
                }
            }
            if used & (used + 1) == 0 {
                continue; // already dense: 0..n
            }
            let rank = |e: u8| (used & ((1u16 << e) - 1)).count_ones() as u8;
            if let Some(r) = s.records[tx].as_mut() {
                r.epoch = rank(r.epoch);
            }
            for w in s.workers.iter_mut() {
                if w.is_alive() && self.spec(usize::from(w.coord)).tx == tx {
                    w.epoch = rank(w.epoch);
                }
            }
            for req in s.flight.iter_mut() {
                if let Request::Cas { tx: t, epoch, .. } = req {
                    if usize::from(*t) == tx {
                        *epoch = rank(*epoch);
                    }
                }
            }
        }
        let coords = self.coords();
        s.workers[coords..].sort_unstable();
        s.flight.sort_unstable();
    }

    /// Breadth-first search, on one thread, for a shortest path from the
    /// initial state to a state where one of the properties `names` is
    /// violated (an `always` property) or holds (a `sometimes` property).
    /// Gives up after `limit` states.
    ///
    /// (Stateright's own checker keeps the last path it found for a
    /// property, not the shortest; this gives exact counterexample lengths.)
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
        let who = |w: usize| {
            let worker = s.workers[w];
            let role = match worker.role {
                Role::Coordinator => "coordinator",
                Role::Recovery => "recovery",
            };
            format!(
                "{role} {} @{} (D={})",
                self.spec(usize::from(worker.coord)).name,
                worker.epoch,
                worker.deadline
            )
        };
        let doc = |w: usize, part: usize| {
            let c = self.change(usize::from(s.workers[w].coord), part);
            let doc = DOCS[c.doc];
            format!(
                "{} {}{}",
                match c.op {
                    Op::Inc(d) if d < 0 => format!("debit {}", -d),
                    Op::Inc(d) => format!("credit {d}"),
                    Op::Insert => "insert".into(),
                    Op::Delete => "delete".into(),
                },
                doc.name,
                format_args!(
                    " [{}.now={}]",
                    STORE_NAMES[doc.store],
                    self.now(s, doc.store)
                )
            )
        };
        let lost = |lose: bool| {
            if lose {
                " -- answer LOST, request in flight"
            } else {
                ""
            }
        };
        match *action {
            Action::Tick { store } if store == STORES => "tick all clocks".into(),
            Action::Tick { store } => format!("tick {}", STORE_NAMES[store]),
            Action::StepBack { store } => {
                format!(
                    "{}'s clock steps back by {}",
                    STORE_NAMES[store], self.step_back
                )
            }
            Action::Register { worker } => {
                let coord = usize::from(s.workers[worker].coord);
                format!(
                    "{}: registers its lease {} (registry {} -> {})",
                    who(worker),
                    self.lease(coord),
                    s.registry,
                    s.registry.max(self.lease(coord))
                )
            }
            Action::Create { worker, lose } => {
                format!(
                    "{}: create record [R.now={}]{}",
                    who(worker),
                    self.now(s, R),
                    lost(lose)
                )
            }
            Action::Reserve { worker, part, lose } => {
                format!(
                    "{}: reserve for {}{}",
                    who(worker),
                    doc(worker, part),
                    lost(lose)
                )
            }
            Action::Apply { worker, part, lose } => {
                format!("{}: apply {}{}", who(worker), doc(worker, part), lost(lose))
            }
            Action::Commit { worker, lose } => {
                format!("{}: commit (pending -> applied){}", who(worker), lost(lose))
            }
            Action::Probe { worker, part } => {
                let c = self.change(usize::from(s.workers[worker].coord), part);
                let m = self.marker(usize::from(s.workers[worker].coord));
                let d = s.docs[c.doc];
                let now = self.now(s, DOCS[c.doc].store);
                format!(
                    "{}: probe {} (NB={}): {}",
                    who(worker),
                    doc(worker, part),
                    s.workers[worker].not_before,
                    if now < s.workers[worker].not_before
                        && self.variant != Variant::ProbeBeforeFence
                    {
                        "NotYet, stops"
                    } else if d.markers.contains(m) {
                        "marker there"
                    } else {
                        "no marker"
                    }
                )
            }
            Action::Reclaim { worker } => format!(
                "{}: claims again with a new deadline (roll forward) [R.now={}]",
                who(worker),
                self.now(s, R)
            ),
            Action::Cancel { worker, lose } => {
                format!(
                    "{}: cancel (pending -> canceling){}",
                    who(worker),
                    lost(lose)
                )
            }
            Action::Remove { worker, part, lose } => {
                let what = if s.workers[worker].phase == Phase::Clear {
                    "clear"
                } else {
                    "compensate"
                };
                format!(
                    "{}: {what} {}{}",
                    who(worker),
                    doc(worker, part),
                    lost(lose)
                )
            }
            Action::Finish { worker, lose } => {
                format!("{}: finish{}", who(worker), lost(lose))
            }
            Action::GiveUp { worker } => format!("{}: gives up", who(worker)),
            Action::Crash { worker } => format!("{}: crashes", who(worker)),
            Action::Claim { tx, kind, forward } => {
                let r = s.records[tx];
                format!(
                    "recovery claims {:?} record of tx {} [R.now={}]: {kind:?}{}",
                    r.map(|r| r.state),
                    tx,
                    self.now(s, R),
                    if r.map(|r| r.state) == Some(TxState::Pending) {
                        if forward {
                            ", roll forward"
                        } else {
                            ", roll back"
                        }
                    } else {
                        ""
                    }
                )
            }
            Action::Deliver { index } => format!("the network delivers {:?}", s.flight[index]),
            Action::Collect { tx } => format!(
                "GC deletes the record of tx {tx} [R.now={}]",
                self.now(s, R)
            ),
            Action::AppInsert { doc } => format!("application inserts {}", DOCS[doc].name),
            Action::AppDelete { doc } => format!("application deletes {}", DOCS[doc].name),
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
pub struct Summary<'a>(pub &'a TandemModel, pub &'a State);

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (m, s) = (self.0, self.1);
        write!(f, "clocks {:?}; ", s.clocks)?;
        for tx in 0..m.scenario.txs() {
            match s.records[tx] {
                Some(r) => write!(
                    f,
                    "record {tx}: {:?}@{} token {} D={} NB={}; ",
                    r.state,
                    r.epoch,
                    m.spec(usize::from(r.token)).name,
                    r.deadline,
                    r.not_before
                )?,
                None => write!(f, "record {tx}: none; ")?,
            }
        }
        for ((doc, spec), serial) in s.docs.iter().zip(DOCS).zip(&s.serial) {
            write!(
                f,
                "{}={:?}/{} markers {:?} lock {:?} (serial: {}/{}); ",
                spec.name,
                doc.presence,
                doc.value,
                doc.markers.iter().collect::<Vec<_>>(),
                doc.lock,
                if serial.exists { "exists" } else { "absent" },
                serial.value
            )?;
        }
        for c in 0..m.coords() {
            let h = s.history[c];
            write!(
                f,
                "{}: answer {:?}, applied {} canceled {} terminal {:?} applies {:?} effects {:?}; ",
                m.spec(c).name,
                s.answers[c],
                h.applied,
                h.canceled,
                h.terminal,
                &h.applies[..m.spec(c).changes.len()],
                &h.effects[..m.spec(c).changes.len()]
            )?;
        }
        if m.scenario.keyed() {
            write!(f, "lease registry {}; ", s.registry)?;
        }
        write!(f, "in flight {:?}", s.flight)
    }
}

impl Model for TandemModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let docs = DOCS.map(|d| Doc {
            presence: if d.initial.is_some() {
                Presence::Real
            } else {
                Presence::Absent
            },
            value: d.initial.unwrap_or(0),
            markers: MarkerSet::default(),
            lock: None,
        });
        let workers = (0..self.coords())
            .map(|c| Worker {
                coord: c as u8,
                role: Role::Coordinator,
                epoch: 0,
                deadline: 0,
                not_before: 0,
                phase: if self.scenario.keyed() && self.variant != Variant::CreateBeforeRegister {
                    Phase::Register
                } else {
                    Phase::Create
                },
                parts: [Part::Todo; MAX_PARTS],
                doubt: 0,
                cas_doubt: false,
            })
            .collect();
        let mut clocks = self.clock_start;
        if self.records_on_p1 {
            clocks[R] = 0;
        }
        vec![State {
            clocks,
            records: [None; MAX_TXS],
            docs,
            workers,
            answers: [Answer::None; MAX_COORDS],
            flight: Vec::new(),
            lost: 0,
            crashes: 0,
            takeovers: 0,
            forced: 0,
            app_ops: 0,
            steps_back: 0,
            registry: 0,
            history: [History::default(); MAX_COORDS],
            serial: Self::initial_serial(),
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
        // Workers.
        for (w, worker) in s.workers.iter().enumerate() {
            let coord = usize::from(worker.coord);
            let n = self.spec(coord).changes.len();
            let parts = &worker.parts[..n];
            match worker.phase {
                Phase::Register => actions.push(Action::Register { worker: w }),
                Phase::Create => {
                    for &lose in self.may_lose(s, self.lose.create) {
                        actions.push(Action::Create { worker: w, lose });
                    }
                    if worker.cas_doubt {
                        actions.push(Action::GiveUp { worker: w });
                    }
                }
                Phase::Apply => {
                    for (part, p) in parts.iter().enumerate() {
                        let reserve = *p == Part::Todo && self.is_insert_part(coord, part);
                        if matches!(p, Part::Todo | Part::Reserved | Part::Doubt) {
                            for &lose in self.may_lose(s, self.lose.apply) {
                                actions.push(if reserve {
                                    Action::Reserve {
                                        worker: w,
                                        part,
                                        lose,
                                    }
                                } else {
                                    Action::Apply {
                                        worker: w,
                                        part,
                                        lose,
                                    }
                                });
                            }
                        }
                    }
                    let returned = parts
                        .iter()
                        .all(|p| !matches!(p, Part::Todo | Part::Reserved));
                    let refused = parts.contains(&Part::Refused);
                    if parts.iter().all(|p| matches!(p, Part::Ok | Part::Late)) {
                        for &lose in self.may_lose(s, self.lose.cas) {
                            actions.push(Action::Commit { worker: w, lose });
                        }
                    } else if returned && refused {
                        for &lose in self.may_lose(s, self.lose.cas) {
                            actions.push(Action::Cancel { worker: w, lose });
                        }
                    }
                    if returned && (worker.cas_doubt || (parts.contains(&Part::Doubt) && !refused))
                    {
                        actions.push(Action::GiveUp { worker: w });
                    }
                }
                Phase::ProbeBack | Phase::ProbeForward => {
                    for (part, p) in parts.iter().enumerate() {
                        if *p == Part::Todo {
                            actions.push(Action::Probe { worker: w, part });
                        }
                    }
                    if !parts.contains(&Part::Todo) {
                        if parts.iter().all(|p| *p == Part::Ok) {
                            for &lose in self.may_lose(s, self.lose.cas) {
                                actions.push(Action::Commit { worker: w, lose });
                            }
                        } else if worker.phase == Phase::ProbeBack {
                            for &lose in self.may_lose(s, self.lose.cas) {
                                actions.push(Action::Cancel { worker: w, lose });
                            }
                        } else {
                            actions.push(Action::Reclaim { worker: w });
                        }
                        if worker.cas_doubt {
                            actions.push(Action::GiveUp { worker: w });
                        }
                    }
                }
                Phase::RollBack => {
                    for &lose in self.may_lose(s, self.lose.cas) {
                        actions.push(Action::Cancel { worker: w, lose });
                    }
                    if worker.cas_doubt {
                        actions.push(Action::GiveUp { worker: w });
                    }
                }
                Phase::Clear | Phase::Compensate => {
                    for (part, p) in parts.iter().enumerate() {
                        if matches!(p, Part::Todo | Part::Doubt) {
                            for &lose in self.may_lose(s, self.lose.remove) {
                                actions.push(Action::Remove {
                                    worker: w,
                                    part,
                                    lose,
                                });
                            }
                        }
                    }
                    if parts.iter().all(|p| *p == Part::Done) {
                        for &lose in self.may_lose(s, self.lose.cas) {
                            actions.push(Action::Finish { worker: w, lose });
                        }
                    }
                    if !parts.contains(&Part::Todo)
                        && (worker.cas_doubt || parts.contains(&Part::Doubt))
                    {
                        actions.push(Action::GiveUp { worker: w });
                    }
                }
                Phase::Dead => {}
            }
            if self.may_crash(s, w) {
                actions.push(Action::Crash { worker: w });
            }
        }
        // Recovery.
        for tx in 0..self.scenario.txs() {
            let Some(r) = s.records[tx] else {
                continue;
            };
            if r.state.is_terminal() {
                continue;
            }
            let forwards: &[bool] = match (r.state, self.pending) {
                (TxState::Pending, PendingPolicy::RollForward) => &[true],
                (TxState::Pending, PendingPolicy::Either) => &[false, true],
                _ => &[false],
            };
            let kind = if self.owner_alive(s, tx, &r) {
                (s.takeovers < self.takeovers).then_some(ClaimKind::Takeover)
            } else {
                self.rescue_due(s, &r).then_some(ClaimKind::Rescue)
            };
            if let Some(kind) = kind {
                for &forward in forwards {
                    actions.push(Action::Claim { tx, kind, forward });
                }
            }
            if r.state == TxState::Pending && s.forced < self.forced_cancels {
                actions.push(Action::Claim {
                    tx,
                    kind: ClaimKind::Forced,
                    forward: false,
                });
            }
        }
        // The network.
        for index in 0..s.flight.len() {
            if index == 0 || s.flight[index] != s.flight[index - 1] {
                actions.push(Action::Deliver { index });
            }
        }
        // GC.
        if self.gc {
            for tx in 0..self.scenario.txs() {
                if let Some(r) = s.records[tx] {
                    if r.state.is_terminal()
                        && (self.variant == Variant::EarlyGc
                            || self.now(s, R) >= r.last_modified + self.gc_age(s, &r) + MARGIN)
                    {
                        actions.push(Action::Collect { tx });
                    }
                }
            }
        }
        // The application.
        if s.app_ops < self.app_ops {
            for &doc in self.scenario.app_docs() {
                let d = s.docs[doc];
                match d.presence {
                    Presence::Absent | Presence::Ghost => actions.push(Action::AppInsert { doc }),
                    Presence::Real if d.lock.is_none() && d.markers.is_empty() => {
                        actions.push(Action::AppDelete { doc })
                    }
                    Presence::Real => {}
                }
            }
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
            Action::Register { worker: w } => {
                let coord = usize::from(s.workers[w].coord);
                s.registry = s.registry.max(self.lease(coord));
                let next = if self.variant == Variant::CreateBeforeRegister {
                    Phase::Apply
                } else {
                    Phase::Create
                };
                self.enter(&mut s, w, next);
            }
            Action::Create { worker: w, lose } => {
                let coord = usize::from(s.workers[w].coord);
                if self.fixes.fenced_create && s.workers[w].deadline == 0 {
                    // The coordinator read the records store's clock before its first attempt.
                    s.workers[w].deadline = self.now(&s, R) + self.lease(coord);
                    if self.scenario.keyed() {
                        // The run begins: it overlaps every other run under
                        // its key that began and has not finished.
                        let tx = self.spec(coord).tx;
                        let unfinished = (0..self.coords()).any(|c| {
                            c != coord
                                && self.spec(c).tx == tx
                                && s.history[c].began
                                && s.history[c].terminal.is_none()
                        });
                        s.history[coord].began = true;
                        s.history[coord].overlapped |= unfinished;
                    }
                }
                let deadline = s.workers[w].deadline;
                if lose {
                    s.lost += 1;
                    s.flight.push(Request::Create {
                        coord: coord as u8,
                        deadline,
                    });
                    s.workers[w].cas_doubt = true;
                } else {
                    match self.land_create(&mut s, coord, deadline) {
                        CreateResult::Created => {
                            let r = s.records[self.spec(coord).tx]?;
                            let worker = &mut s.workers[w];
                            worker.deadline = r.deadline;
                            worker.not_before = r.not_before;
                            self.enter(&mut s, w, self.after_create());
                        }
                        CreateResult::Exists(token) => {
                            let ours = self.variant == Variant::OwnerNameOnly
                                || usize::from(token) == coord;
                            let r = s.records[self.spec(coord).tx]?;
                            if ours {
                                if r.state == TxState::Pending && r.epoch == 0 {
                                    let worker = &mut s.workers[w];
                                    worker.deadline = r.deadline;
                                    worker.not_before = r.not_before;
                                    self.enter(&mut s, w, self.after_create());
                                } else {
                                    // Ours, claimed by recovery before we heard back.
                                    self.answer_from_record(&mut s, w);
                                    self.stop(&mut s, w);
                                }
                            } else if self.fixes.fenced_create
                                && s.workers[w].cas_doubt
                                && self.now(&s, R) < deadline
                            {
                                // An earlier attempt may still land: not a definite duplicate yet.
                            } else {
                                self.answer(&mut s, w, Answer::Duplicate);
                                self.stop(&mut s, w);
                            }
                        }
                        CreateResult::Inert => {
                            // Past its deadline: no attempt can create a live record any
                            // more. Nothing was created, unless an earlier attempt whose
                            // answer was lost did (and its record was driven and collected).
                            let answer = if s.workers[w].cas_doubt {
                                Answer::Unknown
                            } else {
                                // Nothing of it was or will be applied.
                                Answer::CanceledUndone
                            };
                            self.answer(&mut s, w, answer);
                            self.stop(&mut s, w);
                        }
                    }
                }
            }
            Action::Reserve {
                worker: w,
                part,
                lose,
            } => {
                let doc = self.change(usize::from(s.workers[w].coord), part).doc;
                if lose {
                    s.lost += 1;
                    s.flight.push(Request::Reserve { doc: doc as u8 });
                } else {
                    self.land_reserve(&mut s, doc);
                    s.workers[w].parts[part] = Part::Reserved;
                }
            }
            Action::Apply {
                worker: w,
                part,
                lose,
            } => {
                let worker = s.workers[w];
                let coord = usize::from(worker.coord);
                if lose {
                    s.lost += 1;
                    s.flight.push(Request::Apply {
                        coord: worker.coord,
                        part: part as u8,
                        deadline: worker.deadline,
                    });
                    s.workers[w].parts[part] = Part::Doubt;
                    s.workers[w].doubt |= 1 << part;
                } else {
                    let result = self.land_apply(&mut s, coord, part, worker.deadline);
                    let p = match result {
                        ApplyResult::Present { timely: false }
                            if self.fixes.timely_marker && worker.role == Role::Coordinator =>
                        {
                            Part::Late
                        }
                        ApplyResult::Landed | ApplyResult::Present { .. } => Part::Ok,
                        ApplyResult::NotReserved => Part::Todo,
                        ApplyResult::Refused | ApplyResult::Expired { .. } => Part::Refused,
                    };
                    s.workers[w].parts[part] = p;
                    if matches!(p, Part::Ok | Part::Late)
                        && self.variant == Variant::RetryClearsDoubt
                    {
                        s.workers[w].doubt &= !(1 << part);
                    }
                    let n = self.spec(coord).changes.len();
                    if self.fixes.early_commit
                        && worker.role == Role::Coordinator
                        && s.workers[w].parts[..n].iter().all(|p| *p == Part::Ok)
                    {
                        // Early commit: every apply of this epoch landed; the
                        // record still says `pending`.
                        self.answer(&mut s, w, Answer::Committed);
                    }
                }
            }
            Action::Commit { worker: w, lose } => {
                let worker = s.workers[w];
                let tx = self.spec(usize::from(worker.coord)).tx;
                let probing = matches!(worker.phase, Phase::ProbeBack | Phase::ProbeForward);
                self.cas_step(&mut s, w, TxState::Pending, TxState::Applied, lose);
                if probing
                    && !lose
                    && matches!(s.records[tx],
                        Some(r) if r.state == TxState::Applied && r.epoch == worker.epoch)
                {
                    s.event = Event::ProbeCommitted;
                }
            }
            Action::Probe { worker: w, part } => {
                let worker = s.workers[w];
                let coord = usize::from(worker.coord);
                let doc = self.change(coord, part).doc;
                let now = self.now(&s, DOCS[doc].store);
                if now < worker.not_before && self.variant != Variant::ProbeBeforeFence {
                    // NotYet: an apply of a fenced epoch may still land here.
                    // Recovery stops for now; the record stays `pending`.
                    self.stop(&mut s, w);
                } else {
                    s.workers[w].parts[part] = if s.docs[doc].markers.contains(self.marker(coord)) {
                        Part::Ok
                    } else {
                        Part::Missing
                    };
                }
            }
            Action::Reclaim { worker: w } => {
                let worker = s.workers[w];
                let coord = usize::from(worker.coord);
                let tx = self.spec(coord).tx;
                let now = self.now(&s, R);
                match s.records[tx].as_mut() {
                    Some(r)
                        if r.state == TxState::Pending
                            && r.epoch == worker.epoch
                            && (!self.fixes.token_fencing || r.token == worker.coord) =>
                    {
                        r.epoch += 1;
                        if self.variant != Variant::ClaimKeepsNotBefore {
                            r.not_before = r.not_before.max(r.deadline + MARGIN);
                        }
                        r.deadline = now + LEASE;
                        r.last_modified = now;
                        let r = *r;
                        let worker = &mut s.workers[w];
                        worker.epoch = r.epoch;
                        worker.deadline = r.deadline;
                        worker.not_before = r.not_before;
                        worker.doubt = 0;
                        self.enter(&mut s, w, Phase::Apply);
                    }
                    _ => self.stop(&mut s, w),
                }
            }
            Action::Cancel { worker: w, lose } => {
                self.cas_step(&mut s, w, TxState::Pending, TxState::Canceling, lose);
            }
            Action::Finish { worker: w, lose } => {
                let (from, to) = if s.workers[w].phase == Phase::Clear {
                    (TxState::Applied, TxState::Done)
                } else {
                    (TxState::Canceling, TxState::Canceled)
                };
                self.cas_step(&mut s, w, from, to, lose);
            }
            Action::Remove {
                worker: w,
                part,
                lose,
            } => {
                let worker = s.workers[w];
                let coord = usize::from(worker.coord);
                let clear = worker.phase == Phase::Clear;
                let store = DOCS[self.change(coord, part).doc].store;
                let now = self.now(&s, store);
                let own = if worker.doubt & (1 << part) != 0 && self.variant != Variant::IgnoreDoubt
                {
                    worker.deadline + MARGIN
                } else {
                    0
                };
                let not_before = if self.variant == Variant::NoRemovalFence {
                    0
                } else {
                    worker.not_before.max(own)
                };
                if now < not_before {
                    s.workers[w].parts[part] = Part::NotYet;
                    if now >= worker.not_before {
                        s.event = Event::WaitedForDoubt;
                    }
                } else if lose {
                    s.lost += 1;
                    s.flight.push(Request::Remove {
                        coord: worker.coord,
                        part: part as u8,
                        not_before,
                        clear,
                    });
                    s.workers[w].parts[part] = Part::Doubt;
                } else {
                    self.land_remove(&mut s, coord, part, not_before, clear);
                    s.workers[w].parts[part] = Part::Done;
                }
                self.settle(&mut s, w);
            }
            Action::GiveUp { worker: w } => {
                self.answer(&mut s, w, Answer::Unknown);
                self.stop(&mut s, w);
            }
            Action::Crash { worker: w } => {
                s.crashes += 1;
                self.stop(&mut s, w);
            }
            Action::Claim { tx, kind, forward } => {
                let now = self.now(&s, R);
                let r = s.records[tx].as_mut()?;
                // Early commit: a claim of a `pending` record keeps the
                // deadline and probes (the mutations skip the probe).
                let probe = self.fixes.early_commit
                    && r.state == TxState::Pending
                    && if forward {
                        self.variant != Variant::RefuseBeforeFence
                    } else {
                        self.variant != Variant::NoProbe
                    };
                r.epoch += 1;
                if self.variant != Variant::ClaimKeepsNotBefore {
                    r.not_before = r.not_before.max(r.deadline + MARGIN);
                }
                if !probe
                    && (!self.fixes.stable_deadline || (forward && r.state == TxState::Pending))
                {
                    r.deadline = now + LEASE;
                }
                r.last_modified = now;
                let phase = match r.state {
                    TxState::Pending if probe && forward => Phase::ProbeForward,
                    TxState::Pending if probe => Phase::ProbeBack,
                    TxState::Pending if forward => Phase::Apply,
                    TxState::Pending => Phase::RollBack,
                    TxState::Applied => Phase::Clear,
                    TxState::Canceling => Phase::Compensate,
                    TxState::Done | TxState::Canceled => return None,
                };
                let worker = Worker {
                    coord: r.token,
                    role: Role::Recovery,
                    epoch: r.epoch,
                    deadline: r.deadline,
                    not_before: r.not_before,
                    phase,
                    parts: [Part::Todo; MAX_PARTS],
                    doubt: 0,
                    cas_doubt: false,
                };
                s.workers.push(worker);
                s.event = match kind {
                    ClaimKind::Takeover => {
                        s.takeovers += 1;
                        Event::Takeover
                    }
                    ClaimKind::Rescue => Event::Rescue,
                    ClaimKind::Forced => {
                        s.forced += 1;
                        Event::ForcedCancel
                    }
                };
            }
            Action::Deliver { index } => {
                let request = s.flight.remove(index);
                let coord = match request {
                    Request::Create { coord, .. }
                    | Request::Apply { coord, .. }
                    | Request::Remove { coord, .. }
                    | Request::Cas { coord, .. } => Some(usize::from(coord)),
                    Request::Reserve { .. } => None,
                };
                let collected = coord.is_some_and(|c| {
                    s.history[c].terminal.is_some()
                        && !matches!(s.records[self.spec(c).tx],
                            Some(r) if usize::from(r.token) == c)
                });
                match request {
                    Request::Create { coord, deadline } => {
                        self.land_create(&mut s, usize::from(coord), deadline);
                    }
                    Request::Reserve { doc } => self.land_reserve(&mut s, usize::from(doc)),
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
                    Request::Remove {
                        coord,
                        part,
                        not_before,
                        clear,
                    } => self.land_remove(
                        &mut s,
                        usize::from(coord),
                        usize::from(part),
                        not_before,
                        clear,
                    ),
                    Request::Cas {
                        coord,
                        tx,
                        epoch,
                        from,
                        to,
                    } => {
                        self.land_cas(&mut s, usize::from(coord), usize::from(tx), epoch, from, to);
                    }
                }
                if collected {
                    s.event = Event::LandedAfterGc;
                }
            }
            Action::Collect { tx } => {
                s.records[tx] = None;
            }
            Action::AppInsert { doc } => {
                s.app_ops += 1;
                s.docs[doc] = Doc {
                    presence: Presence::Real,
                    value: 0,
                    markers: MarkerSet::default(),
                    lock: None,
                };
                s.serial[doc] = SerialDoc {
                    exists: true,
                    value: 0,
                };
                let deleted_by_tx = (0..self.coords()).any(|c| {
                    s.history[c].applied
                        && self.spec(c).changes.iter().enumerate().any(|(p, ch)| {
                            ch.doc == doc && ch.op == Op::Delete && s.history[c].effects[p] > 0
                        })
                });
                if deleted_by_tx {
                    s.event = Event::Recreated;
                }
            }
            Action::AppDelete { doc } => {
                s.app_ops += 1;
                s.docs[doc].presence = Presence::Absent;
                s.docs[doc].value = 0;
                s.serial[doc] = SerialDoc {
                    exists: false,
                    value: 0,
                };
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
        crate::properties::properties(self)
    }
}
