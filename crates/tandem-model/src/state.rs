//! The state of the whole system: clocks, records, documents, workers,
//! requests in flight, and what happened so far (for the properties).

use crate::scenario::{MAX_COORDS, MAX_DOCS, MAX_PARTS, MAX_TXS, STORES};

/// The state of a transaction record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxState {
    /// Participants are being applied.
    Pending,
    /// Every participant holds the change: the commit point.
    Applied,
    /// Committed and cleared.
    Done,
    /// Being compensated.
    Canceling,
    /// Rolled back and compensated.
    Canceled,
}

impl TxState {
    /// Every state of the model. The record's `initial` is not among them:
    /// the coordinator writes a record `pending` from the start (see the
    /// crate's top comment), so the model has no state that would stand for
    /// it. `tests/states_match_the_record.rs` pins these against the record's.
    pub const ALL: [TxState; 5] = [
        TxState::Pending,
        TxState::Applied,
        TxState::Done,
        TxState::Canceling,
        TxState::Canceled,
    ];

    /// `done` or `canceled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, TxState::Done | TxState::Canceled)
    }
}

/// A transaction record in the records store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// Its state.
    pub state: TxState,
    /// The fencing epoch, raised by every claim.
    pub epoch: u8,
    /// The creation token: the index of the coordinator that created it.
    pub token: u8,
    /// `D_e`: the deadline of this epoch's applies, by the records store's clock.
    pub deadline: u8,
    /// `NB`: no marker of this transaction may be removed from a document
    /// before that document's store clock reads this (0: no constraint).
    pub not_before: u8,
    /// The records store's clock at the last write (`lastModified`, `leaseStart`, `finishedAt`).
    pub last_modified: u8,
}

/// Whether a document exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Presence {
    /// No document with this `_id`.
    Absent,
    /// A placeholder left by an insert's reserve: invisible to guards and
    /// readers; any insert may fill it.
    Ghost,
    /// A real document.
    Real,
}

/// A set of markers, as a bit set. A marker names a transaction id (the
/// protocol as specified) or, with [`crate::Fixes::token_fencing`], a
/// transaction id and its creation token (a coordinator index).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MarkerSet(pub u8);

impl MarkerSet {
    /// Whether `m` is in the set.
    pub fn contains(self, m: usize) -> bool {
        self.0 & (1 << m) != 0
    }

    /// Adds `m` (`$push`).
    pub fn insert(&mut self, m: usize) {
        self.0 |= 1 << m;
    }

    /// Removes `m` (`$pull`).
    pub fn remove(&mut self, m: usize) {
        self.0 &= !(1 << m);
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether the set holds anything but `m`.
    pub fn has_other_than(self, m: usize) -> bool {
        self.0 & !(1 << m) != 0
    }

    /// The members, in order.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..8).filter(move |&m| self.contains(m))
    }
}

/// A participant document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Doc {
    /// Whether it exists.
    pub presence: Presence,
    /// Its balance (0 for documents without one).
    pub value: i8,
    /// The marker array: transactions whose change is applied but neither cleared nor compensated.
    pub markers: MarkerSet,
    /// The `lock` field: the marker of the transaction holding the document
    /// exclusively (insert, delete). A delete's `deleting` flag is implied:
    /// locked by a transaction whose change of this document is a delete.
    pub lock: Option<u8>,
}

/// Whose worker it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// The coordinator that creates and runs the transaction (epoch 0).
    Coordinator,
    /// A recovery worker that claimed the record.
    Recovery,
}

/// A worker's program counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Insert the record.
    Create,
    /// Apply every participant, then commit (all applied) or cancel (a definite refusal).
    Apply,
    /// Recovery rolling back a `pending` record: `pending → canceling`.
    RollBack,
    /// Clear every participant, then `applied → done`.
    Clear,
    /// Compensate every participant, then `canceling → canceled`.
    Compensate,
    /// Early commit: recovery (or a forced cancel) probing a `pending`
    /// record it claimed, to roll back: every participant holds the marker ⇒
    /// `pending → applied`, else `pending → canceling`.
    ProbeBack,
    /// Early commit: recovery probing a `pending` record it claimed, to roll
    /// forward: every participant holds the marker ⇒ `pending → applied`,
    /// else claim again with a new deadline and apply.
    ProbeForward,
    /// A coordinator that answered, gave up, stopped or crashed. (Recovery
    /// workers that stop are removed from the state.)
    Dead,
    /// A coordinator of a keyed transaction ([`crate::Scenario::keyed`])
    /// raises the lease registry ([`State::registry`]) to its lease, before
    /// its first create (with [`crate::Variant::CreateBeforeRegister`]:
    /// after its create).
    Register,
}

/// The progress of one participant step of a worker in its current phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    /// Not sent yet (for an insert: its reserve is next).
    Todo,
    /// An insert whose reserve answered: its fill is next.
    Reserved,
    /// The last attempt's answer was lost; it may be retried.
    Doubt,
    /// Applied: this transaction's marker is on the document (for a probe:
    /// found it there).
    Ok,
    /// A definite refusal: guard, not found, already exists, lock conflict, or expired.
    Refused,
    /// Cleared or compensated (or found already done).
    Done,
    /// The removal's time fence has not passed yet on the document's store: the worker stops.
    NotYet,
    /// A probe (early commit) found no marker of this transaction on the document.
    Missing,
    /// Applied, but the re-read found the marker only at or past the
    /// deadline ([`crate::Fixes::timely_marker`]): it may be another epoch's.
    /// Counts for the move to `applied`, not for an early answer.
    Late,
}

/// A coordinator or a recovery worker driving one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Worker {
    /// The coordinator whose changes it drives (for recovery: the record's token).
    pub coord: u8,
    /// Coordinator or recovery.
    pub role: Role,
    /// The epoch it owns the record at.
    pub epoch: u8,
    /// The deadline of its applies (for a coordinator with a fenced create:
    /// the one its create carries; 0 until known).
    pub deadline: u8,
    /// The record's `NB` when it got the record (0 for a coordinator).
    pub not_before: u8,
    /// What it does next.
    pub phase: Phase,
    /// Its participant steps in the current phase.
    pub parts: [Part; MAX_PARTS],
    /// Participants whose apply is in doubt in this epoch (an answer was
    /// lost), as a bit set. Sticky: a later answer does not clear it.
    pub doubt: u8,
    /// The answer of its last record step (create or compare-and-set) was lost.
    pub cas_doubt: bool,
}

impl Worker {
    /// Whether the worker may still take steps.
    pub fn is_alive(&self) -> bool {
        self.phase != Phase::Dead
    }
}

/// What a coordinator told its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Nothing yet (or it crashed before answering).
    None,
    /// Committed.
    Committed,
    /// Canceled: decided, the undo perhaps left to recovery
    /// (`TxError::Canceled { undone: false }`).
    Canceled,
    /// Canceled, and every change it applied undone before the answer
    /// (`TxError::Canceled { undone: true }`): given once its own move to
    /// `canceled` landed, after its compensations.
    CanceledUndone,
    /// Another transaction has this id: nothing was written.
    Duplicate,
    /// Outcome unknown: the transaction may end either way.
    Unknown,
}

/// A request in the network whose answer was lost: it lands whenever it is
/// delivered, as the same guarded single-document step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// The record's insert.
    Create {
        /// The coordinator (token).
        coord: u8,
        /// The deadline it carries (fenced create only).
        deadline: u8,
    },
    /// An insert's reserve: upsert a ghost if no document has the `_id`.
    Reserve {
        /// The document.
        doc: u8,
    },
    /// An apply (an insert's fill) with its deadline.
    Apply {
        /// The coordinator whose change it is.
        coord: u8,
        /// The participant.
        part: u8,
        /// `D_e`.
        deadline: u8,
    },
    /// A clear or compensate with its time fence.
    Remove {
        /// The coordinator whose change it is.
        coord: u8,
        /// The participant.
        part: u8,
        /// `nb_p`.
        not_before: u8,
        /// Clear (`true`) or compensate.
        clear: bool,
    },
    /// A record compare-and-set.
    Cas {
        /// The coordinator (token) of the worker that sent it.
        coord: u8,
        /// The record.
        tx: u8,
        /// The epoch in its filter.
        epoch: u8,
        /// The state in its filter.
        from: TxState,
        /// The state it sets.
        to: TxState,
    },
}

/// What happened to one coordinator's transaction (for the properties).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct History {
    /// A record with this token was inserted (live).
    pub created: bool,
    /// A record with this token reached `applied`.
    pub applied: bool,
    /// A record with this token reached `canceling`.
    pub canceled: bool,
    /// The last terminal state a record with this token reached.
    pub terminal: Option<TxState>,
    /// A compensation found the marker (a change of this transaction was undone).
    pub undone: bool,
    /// Per participant: applies (fills) that landed, capped at 2.
    pub applies: [u8; MAX_PARTS],
    /// Per participant: marker removals that found the marker (a credit
    /// landing, a debit undone, a delete done, an insert undone), capped at 2.
    pub effects: [u8; MAX_PARTS],
    /// Some request of this coordinator changed something (ghosts aside).
    pub wrote: bool,
    /// A keyed run ([`crate::Scenario::keyed`]) began: it fixed its create
    /// deadline (before its first create).
    pub began: bool,
    /// A keyed run that began while another run under its key had begun
    /// and not finished (no record of it had reached a terminal state):
    /// the two must not both pay ([`crate::KEY_PAYS_ONCE`]).
    pub overlapped: bool,
}

/// What the serial execution would hold: each committed transaction's
/// changes applied atomically at its commit point, and the application's
/// inserts and deletes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SerialDoc {
    /// It exists.
    pub exists: bool,
    /// Its balance.
    pub value: i8,
}

/// A notable event of the last step (for the `sometimes` properties). Only
/// the last step's event is kept, so it adds few states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// Nothing notable.
    None,
    /// A late apply would have landed but for its deadline.
    LateApplyFenced,
    /// A removal met `NotYet` because its own participant's apply is in doubt.
    WaitedForDoubt,
    /// A request landed (with no effect) after its transaction's record was collected.
    LandedAfterGc,
    /// The application re-created a document a committed transaction had deleted.
    Recreated,
    /// An operator's forced cancel claimed a pending record.
    ForcedCancel,
    /// Recovery claimed a record whose owner is alive.
    Takeover,
    /// Recovery claimed a record whose owner is gone.
    Rescue,
    /// A clock stepped back.
    SteppedBack,
    /// Early commit: recovery found every marker by its probes and moved the record to `applied`.
    ProbeCommitted,
    /// A keyed run's create that would have landed live (before its
    /// deadline) met the finished record of another run under the key,
    /// kept only by the lease registry: past the record's own lease and
    /// that of the collector, plus the margin.
    KeptForLateCreate,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// Each store's clock ([`crate::R`], [`crate::P1`], [`crate::P2`]).
    pub clocks: [u8; STORES],
    /// The record of each transaction id, if it exists.
    pub records: [Option<Record>; MAX_TXS],
    /// The documents.
    pub docs: [Doc; MAX_DOCS],
    /// The coordinators (index = coordinator = token), then the live recovery workers.
    pub workers: Vec<Worker>,
    /// What each coordinator answered.
    pub answers: [Answer; MAX_COORDS],
    /// Requests in flight, sorted.
    pub flight: Vec<Request>,
    /// Requests that went in flight so far.
    pub lost: u8,
    /// Crashes so far.
    pub crashes: u8,
    /// Claims of records whose owner was alive so far.
    pub takeovers: u8,
    /// Forced cancels so far.
    pub forced: u8,
    /// Application inserts and deletes so far.
    pub app_ops: u8,
    /// Clock steps back so far.
    pub steps_back: u8,
    /// The lease registry (`tandem_leases`): the longest lease a keyed
    /// coordinator registered (0: none). It only grows.
    pub registry: u8,
    /// Per coordinator.
    pub history: [History; MAX_COORDS],
    /// The serial execution's documents.
    pub serial: [SerialDoc; MAX_DOCS],
    /// The last step's notable event.
    pub event: Event,
}

impl Request {
    fn pack(&self, out: &mut Packer) {
        match *self {
            Request::Create { coord, deadline } => out.put(&[1, coord, deadline]),
            Request::Reserve { doc } => out.put(&[2, doc]),
            Request::Apply {
                coord,
                part,
                deadline,
            } => out.put(&[3, coord, part, deadline]),
            Request::Remove {
                coord,
                part,
                not_before,
                clear,
            } => out.put(&[4, coord, part, not_before, u8::from(clear)]),
            Request::Cas {
                coord,
                tx,
                epoch,
                from,
                to,
            } => out.put(&[5, coord, tx, epoch, from as u8, to as u8]),
        }
    }
}

/// Bytes to hash.
struct Packer {
    buf: [u8; 512],
    len: usize,
}

impl Packer {
    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

/// Hashes the state as one packed byte string (every field in a fixed
/// layout, so that distinct states give distinct strings): much faster than
/// the derived field-by-field hash, and the checker hashes every state it generates.
impl std::hash::Hash for State {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut p = Packer {
            buf: [0; 512],
            len: 0,
        };
        p.put(&self.clocks);
        for r in &self.records {
            match r {
                Some(r) => p.put(&[
                    1,
                    r.state as u8,
                    r.epoch,
                    r.token,
                    r.deadline,
                    r.not_before,
                    r.last_modified,
                ]),
                None => p.put(&[0]),
            }
        }
        for d in &self.docs {
            p.put(&[
                d.presence as u8,
                d.value as u8,
                d.markers.0,
                d.lock.map_or(0xff, |l| l),
            ]);
        }
        p.put(&[self.workers.len() as u8]);
        for w in &self.workers {
            p.put(&[
                w.coord,
                w.role as u8,
                w.epoch,
                w.deadline,
                w.not_before,
                w.phase as u8,
                w.parts[0] as u8,
                w.parts[1] as u8,
                w.parts[2] as u8,
                w.doubt,
                u8::from(w.cas_doubt),
            ]);
        }
        p.put(&[self.flight.len() as u8]);
        for r in &self.flight {
            r.pack(&mut p);
        }
        for a in &self.answers {
            p.put(&[*a as u8]);
        }
        p.put(&[
            self.lost,
            self.crashes,
            self.takeovers,
            self.forced,
            self.app_ops,
            self.steps_back,
            self.registry,
            self.event as u8,
        ]);
        for h in &self.history {
            p.put(&[
                u8::from(h.created),
                u8::from(h.applied),
                u8::from(h.canceled),
                u8::from(h.undone),
                h.terminal.map_or(0xff, |t| t as u8),
                u8::from(h.wrote),
                u8::from(h.began),
                u8::from(h.overlapped),
            ]);
            p.put(&h.applies);
            p.put(&h.effects);
        }
        for d in &self.serial {
            p.put(&[u8::from(d.exists), d.value as u8]);
        }
        state.write(&p.buf[..p.len]);
    }
}
