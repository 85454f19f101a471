//! The stores, documents and transactions the model runs.

use crate::model::LEASE;

/// The records store `R`: where transaction records live.
pub const R: usize = 0;
/// The first participant store.
pub const P1: usize = 1;
/// The second participant store.
pub const P2: usize = 2;
/// How many stores (and clocks) the model has.
pub const STORES: usize = 3;
/// The names of the stores, by index.
pub const STORE_NAMES: [&str; STORES] = ["R", "P1", "P2"];

/// How many documents the model has (every scenario has all four; unused ones never change).
pub const MAX_DOCS: usize = 4;
/// The most participants one transaction has.
pub const MAX_PARTS: usize = 3;
/// The most coordinators a scenario has. A coordinator's index is also its creation token.
pub const MAX_COORDS: usize = 2;
/// The most transaction ids (records) a scenario has.
pub const MAX_TXS: usize = 2;

/// Document `A`: an account on `P1`, balance 1.
pub const A: usize = 0;
/// Document `B`: an account on `P2`, balance 1.
pub const B: usize = 1;
/// Document `C`: absent at first, on `P1`; inserted by a transaction or by the application.
pub const C: usize = 2;
/// Document `D`: present at first, on `P2`; deleted by a transaction or by the application.
pub const D: usize = 3;

/// A participant document: its name, its store and its initial balance (`None`: absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DocSpec {
    /// Its name in traces.
    pub name: &'static str,
    /// Its store ([`P1`] or [`P2`]).
    pub store: usize,
    /// Its balance at the start, or `None` if it does not exist yet.
    pub initial: Option<i8>,
}

/// The documents, by index ([`A`], [`B`], [`C`], [`D`]).
pub const DOCS: [DocSpec; MAX_DOCS] = [
    DocSpec {
        name: "A",
        store: P1,
        initial: Some(1),
    },
    DocSpec {
        name: "B",
        store: P2,
        initial: Some(1),
    },
    DocSpec {
        name: "C",
        store: P1,
        initial: None,
    },
    DocSpec {
        name: "D",
        store: P2,
        initial: Some(0),
    },
];

/// What a change does to its document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A shared increment of the balance. A negative one is a debit, guarded
    /// by `balance >= -delta` and applied at once; a positive one is a credit,
    /// deferred to the clear step. Takes no lock.
    Inc(i8),
    /// An exclusive insert: reserve a placeholder (ghost), then fill it.
    Insert,
    /// An exclusive delete: lock and mark at apply, delete at clear.
    Delete,
}

/// One change of one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Change {
    /// The document.
    pub doc: usize,
    /// What it does.
    pub op: Op,
}

/// A coordinator: the transaction id it uses, the changes it makes, and
/// its process's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoordSpec {
    /// Its name in traces.
    pub name: &'static str,
    /// The transaction id (the record's `_id`), an index into [`crate::State::records`].
    pub tx: usize,
    /// Its participants, in order.
    pub changes: &'static [Change],
    /// Its process's lease: its create deadline is `D_0 = R.now + lease`
    /// (the deadline of epoch 0's applies too). [`LEASE`] but in
    /// [`Scenario::KeyedRetry`], whose first run has [`LONG_LEASE`].
    pub lease: u8,
}

/// The lease of the first run of [`Scenario::KeyedRetry`]: long enough that
/// its create may still land live once the other run's record finished and
/// waited out the other run's lease plus the margin (`LONG_LEASE >
/// LEASE + MARGIN`).
pub const LONG_LEASE: u8 = 2 * LEASE;

const T1: CoordSpec = CoordSpec {
    name: "T1",
    tx: 0,
    changes: &[
        Change {
            doc: A,
            op: Op::Inc(-1),
        },
        Change {
            doc: B,
            op: Op::Inc(1),
        },
    ],
    lease: LEASE,
};

const T2_MIXED: CoordSpec = CoordSpec {
    name: "T2",
    tx: 1,
    changes: &[
        Change {
            doc: C,
            op: Op::Insert,
        },
        Change {
            doc: D,
            op: Op::Delete,
        },
        Change {
            doc: B,
            op: Op::Inc(-2),
        },
    ],
    lease: LEASE,
};

const T2_ALONE: CoordSpec = CoordSpec {
    name: "T2",
    tx: 0,
    changes: &[
        Change {
            doc: C,
            op: Op::Insert,
        },
        Change {
            doc: D,
            op: Op::Delete,
        },
        Change {
            doc: B,
            op: Op::Inc(-1),
        },
    ],
    lease: LEASE,
};

const T1_INTO_D: CoordSpec = CoordSpec {
    name: "T1",
    tx: 0,
    changes: &[
        Change {
            doc: A,
            op: Op::Inc(-1),
        },
        Change {
            doc: D,
            op: Op::Inc(1),
        },
    ],
    lease: LEASE,
};

const T2_CONFLICT: CoordSpec = CoordSpec {
    name: "T2",
    tx: 1,
    changes: T2_ALONE.changes,
    lease: LEASE,
};

const K1: CoordSpec = CoordSpec {
    name: "K1",
    tx: 0,
    changes: T1.changes,
    lease: LEASE,
};

const K2: CoordSpec = CoordSpec {
    name: "K2",
    tx: 0,
    changes: &[
        Change {
            doc: B,
            op: Op::Inc(-1),
        },
        Change {
            doc: A,
            op: Op::Inc(1),
        },
    ],
    lease: LEASE,
};

/// The keyed payout, run twice under one key: credit `A` and `B` by 1
/// each (credits are not guarded, so a second run could pay again).
const PAYOUT: &[Change] = &[
    Change {
        doc: A,
        op: Op::Inc(1),
    },
    Change {
        doc: B,
        op: Op::Inc(1),
    },
];

const RUN_LONG: CoordSpec = CoordSpec {
    name: "Long",
    tx: 0,
    changes: PAYOUT,
    lease: LONG_LEASE,
};

const RUN_SHORT: CoordSpec = CoordSpec {
    name: "Short",
    tx: 0,
    changes: PAYOUT,
    lease: LEASE,
};

/// Which transactions run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// One transfer `T1`: `A −1` (guarded `A >= 1`), `B +1`. The smallest.
    Transfer,
    /// One transaction `T2`: insert `C`, delete `D`, debit `B −1`; the
    /// application may insert and delete `C` and `D`.
    InsertDelete,
    /// `T1` as in [`Scenario::Transfer`] and `T2`: insert `C`, delete `D`,
    /// debit `B −2` (its guard holds only once `T1` has committed and cleared
    /// its credit); the application may insert and delete `C` and `D`.
    Mixed,
    /// `T1`: `A −1`, `D +1` (a shared increment) and `T2`: insert `C`, delete
    /// `D` (exclusive: refused while `T1`'s marker is on `D`, and `T1`'s credit
    /// is refused while `T2` holds `D`'s lock or once `D` is gone), debit `B −1`.
    Conflict,
    /// Two coordinators `K1` (`A −1`, `B +1`) and `K2` (`B −1`, `A +1`) with
    /// the same transaction id and the same owner name, different tokens.
    SameId,
    /// One request under an idempotency key (the transaction id), run
    /// twice: `Long` (lease [`LONG_LEASE`]) and `Short` (lease [`LEASE`]),
    /// both paying out `A +1`, `B +1`. Each registers its lease before its
    /// first create ([`crate::Action::Register`]); garbage collection keeps
    /// the key's record for the longest lease registered plus the margin
    /// after it finished. Runs that overlapped (one began before the
    /// other's record finished) must not both pay
    /// ([`crate::KEY_PAYS_ONCE`]).
    KeyedRetry,
}

impl Scenario {
    /// The coordinators; a coordinator's index is its token.
    pub fn coords(self) -> &'static [CoordSpec] {
        match self {
            Scenario::Transfer => &[T1],
            Scenario::InsertDelete => &[T2_ALONE],
            Scenario::Mixed => &[T1, T2_MIXED],
            Scenario::Conflict => &[T1_INTO_D, T2_CONFLICT],
            Scenario::SameId => &[K1, K2],
            Scenario::KeyedRetry => &[RUN_LONG, RUN_SHORT],
        }
    }

    /// The documents the application (outside any transaction) may insert and delete.
    pub fn app_docs(self) -> &'static [usize] {
        match self {
            Scenario::Transfer | Scenario::SameId | Scenario::KeyedRetry => &[],
            Scenario::InsertDelete | Scenario::Mixed | Scenario::Conflict => &[C, D],
        }
    }

    /// Whether the transaction id is an idempotency key whose coordinators
    /// register their leases before their first create.
    pub fn keyed(self) -> bool {
        self == Scenario::KeyedRetry
    }

    /// How many transaction ids (records) there are.
    pub fn txs(self) -> usize {
        match self {
            Scenario::Mixed | Scenario::Conflict => 2,
            _ => 1,
        }
    }
}
