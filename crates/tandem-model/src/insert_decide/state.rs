//! The state of the "decide by inserting" model: clocks, the decision
//! record, the two documents, the coordinators, recovery's tasks, requests in
//! flight, and what happened so far (for the properties).

use crate::scenario::STORES;

/// How many documents (and participants per coordinator): `A` and `B`.
pub const DOCS: usize = 2;
/// The most coordinators (both use the same transaction id `T`).
pub const COORDS: usize = 2;

/// What a decision record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// Inserted as committed by its coordinator before the create deadline:
    /// the commit point.
    Committed,
    /// Inserted as canceled by recovery before the create deadline.
    Canceled,
    /// Inserted (by either) at or after the create deadline, by the records
    /// store's clock: it decides nothing new. Everyone reads it as "not
    /// committed by this insert" (recovery and the coordinator roll back).
    Inert,
}

/// The decision record of transaction id `T` (unique `_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    /// The tag of the transaction that inserted it (its coordinator's
    /// index). Without tags ([`super::Variant::NoTags`]) readers ignore it;
    /// the model keeps it for the properties.
    pub tag: u8,
    /// What it says.
    pub outcome: Outcome,
    /// `C`: the create deadline it carries (by the records store's clock);
    /// here the transaction's deadline `D`, also carried by its markers.
    pub deadline: u8,
}

/// A marker on a document: `T#tag`, with what is needed to undo it and the
/// deadline of the apply that pushed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Marker {
    /// The coordinator whose apply pushed it: its undo information is that
    /// coordinator's change of this document.
    pub owner: u8,
    /// `D`: the apply's deadline, judged by this document's store clock.
    pub deadline: u8,
}

/// A participant document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Doc {
    /// Its balance.
    pub value: i8,
    /// Its markers, by identity: the tag (a coordinator index), or `T` alone
    /// (slot 0) without tags.
    pub markers: [Option<Marker>; COORDS],
}

/// A coordinator's program counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Not started: it reads the records store's clock for `D` next.
    Begin,
    /// Registering namespaces (if new to it) and applying both participants.
    Apply,
    /// Every participant applied: insert the decision record `committed`.
    Decide,
    /// Committed: clear both markers (credits land).
    Clear,
    /// Not committed: undo and remove its markers.
    Compensate,
    /// Finished, gave up, or crashed.
    Dead,
}

/// The progress of one participant step of a coordinator in its phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    /// Not sent yet.
    Todo,
    /// The last attempt's answer was lost; it may be retried.
    Doubt,
    /// Applied: its marker is on the document.
    Ok,
    /// A definite refusal: the guard, or the deadline passed.
    Refused,
    /// Cleared, compensated, or nothing to do.
    Done,
}

/// A coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Coord {
    /// What it does next.
    pub phase: Phase,
    /// `D`: its reading of the records store's clock plus the lease. The
    /// deadline of its applies (by each document's store clock) and of its
    /// decision insert (by the records store's clock).
    pub deadline: u8,
    /// Its participant steps in the current phase.
    pub parts: [Part; DOCS],
    /// Participants whose apply lost an answer (sticky: a copy may still
    /// be in flight even after a retry answered).
    pub doubt: u8,
    /// A decision insert of its lost its answer (a copy may still land).
    pub decide_doubt: bool,
    /// The namespaces this process has registered (its once-per-namespace cache).
    pub known: u8,
}

impl Coord {
    /// A coordinator that has not begun.
    pub const START: Coord = Coord {
        phase: Phase::Begin,
        deadline: 0,
        parts: [Part::Todo; DOCS],
        doubt: 0,
        decide_doubt: false,
        known: 0,
    };

    /// A coordinator that is gone (it forgets everything).
    pub const DEAD: Coord = Coord {
        phase: Phase::Dead,
        ..Coord::START
    };

    /// Whether it is in the middle of a transaction.
    pub fn is_active(&self) -> bool {
        !matches!(self.phase, Phase::Begin | Phase::Dead)
    }
}

/// What a recovery task does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskPhase {
    /// Read the decision record; if there is none, insert it `canceled`.
    Decide,
    /// Clear the marker (the transaction committed).
    Clear,
    /// Undo the change and remove the marker (it did not).
    Compensate,
}

/// A recovery worker's work on one marker it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Task {
    /// The document.
    pub doc: u8,
    /// The marker's identity (slot in [`Doc::markers`]).
    pub ident: u8,
    /// The marker's owner (its undo information).
    pub owner: u8,
    /// The marker's deadline `D`.
    pub deadline: u8,
    /// What it does next.
    pub phase: TaskPhase,
}

/// What a coordinator told its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// Nothing (yet, or it crashed).
    None,
    /// Committed.
    Committed,
    /// Canceled (a refusal, or recovery's cancel won).
    Canceled,
    /// Another transaction holds the id: this one is undone.
    Duplicate,
    /// Outcome unknown: it may end either way.
    Unknown,
}

/// A request whose answer was lost: it lands whenever it is delivered, as
/// the same guarded single-document step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// The namespace registry's upsert.
    Register {
        /// The namespace (= document here).
        ns: u8,
    },
    /// An apply.
    Apply {
        /// The coordinator.
        coord: u8,
        /// The participant (= document).
        part: u8,
        /// `D`.
        deadline: u8,
    },
    /// A coordinator's decision insert, `committed`.
    Commit {
        /// The coordinator (tag).
        coord: u8,
        /// `C`.
        deadline: u8,
    },
    /// Recovery's decision insert, `canceled`.
    Cancel {
        /// The tag.
        owner: u8,
        /// `C` (the marker's `D`).
        deadline: u8,
    },
    /// A clear or compensate.
    Remove {
        /// Whose change it undoes or completes (for the coordinator: itself;
        /// for recovery: the marker's owner).
        coord: u8,
        /// The participant (= document).
        part: u8,
        /// No match before this time by the document's store clock.
        not_before: u8,
        /// Clear (`true`) or compensate.
        clear: bool,
    },
}

/// What happened to one coordinator's transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct History {
    /// A live `committed` record with its tag was inserted.
    pub committed: bool,
    /// A live `canceled` record with its tag was inserted.
    pub canceled: bool,
    /// Per participant: applies that landed (capped at 2).
    pub applies: [u8; DOCS],
    /// Per participant: clears that found a marker (capped at 2).
    pub clears: [u8; DOCS],
    /// Per participant: compensations that found a marker (capped at 2).
    pub undos: [u8; DOCS],
}

/// A notable event of the last step (for the `sometimes` properties).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    /// Nothing notable.
    None,
    /// A delivered apply would have landed but for its deadline.
    LateApplyFenced,
    /// A delivered `committed` insert found no record and landed inert.
    LateCommitInert,
    /// A coordinator's insert met its own transaction canceled by recovery.
    CommitLostRace,
    /// Recovery inserted a live `canceled` record.
    RecoveryCanceled,
    /// Recovery cleared a committed transaction's marker.
    RecoveryCleared,
    /// Recovery rolled a marker back because another transaction holds the
    /// id and the marker's create deadline has passed on the records store.
    PresumedAbortByTime,
    /// GC deleted the record.
    Collected,
    /// A request landed after the record of its transaction was collected.
    LandedAfterGc,
    /// A clock stepped back.
    SteppedBack,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Each store's clock ([`crate::R`], [`crate::P1`], [`crate::P2`]).
    pub clocks: [u8; STORES],
    /// The decision record of `T`, if one exists.
    pub record: Option<Record>,
    /// The namespaces registered for recovery's scan.
    pub registry: [bool; DOCS],
    /// `A` and `B`.
    pub docs: [Doc; DOCS],
    /// The coordinators (index = tag).
    pub coords: [Coord; COORDS],
    /// Recovery's tasks in progress, sorted.
    pub tasks: Vec<Task>,
    /// What each coordinator answered.
    pub answers: [Answer; COORDS],
    /// Requests in flight, sorted.
    pub flight: Vec<Request>,
    /// Answers lost so far.
    pub lost: u8,
    /// Coordinator crashes so far.
    pub crashes: u8,
    /// Clock steps back so far.
    pub steps_back: u8,
    /// A record was collected at some point.
    pub collected: bool,
    /// Per coordinator.
    pub history: [History; COORDS],
    /// The last step's notable event.
    pub event: Event,
}
