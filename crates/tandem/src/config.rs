//! Settings of a coordinator and of the recovery worker.

use std::time::Duration;

/// Where [`Coordinator::run`](crate::Coordinator::run) returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommitPoint {
    /// Return at the commit point: once every apply landed, for a
    /// transaction that commits at its applies
    /// ([`TxRecord::early_commit`](crate::TxRecord::early_commit)), else at
    /// the record's move to `applied`. Moving the record on, clearing
    /// markers and `done` finish in the background.
    #[default]
    Applied,
    /// Return only once the record is `done` and every marker is cleared.
    Done,
}

/// How a transaction runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// The two-phase protocol over single-document steps: works across databases
    /// and clusters, suits long business transactions, and leaves an audit record.
    #[default]
    TwoPhase,
    /// One native multi-document transaction of the store (a MongoDB session):
    /// needs every participant in one store (one replica set or sharded cluster)
    /// and a short transaction; leaves no record behind.
    Native,
    /// [`Native`](Self::Native) when the transaction can run natively: every
    /// participant a document change, all on one store that supports native
    /// transactions, at most [`NATIVE_MAX_CHANGES`] changes of at most
    /// [`NATIVE_MAX_BYTES`] in all; [`TwoPhase`](Self::TwoPhase) otherwise.
    /// The receipt says which ran ([`Receipt::strategy`](crate::Receipt::strategy)),
    /// and a [`TxEvent::StrategyChosen`](crate::TxEvent::StrategyChosen) event says why.
    Auto,
}

/// The most changes [`Strategy::Auto`] runs natively: a native transaction
/// holds a lock on every document it writes until it commits, and MongoDB
/// advises keeping them to about a thousand documents.
pub const NATIVE_MAX_CHANGES: usize = 1000;

/// The most bytes of changes (their stored specifications) [`Strategy::Auto`]
/// runs natively: well under the 16 MiB a transaction's oplog entries allow.
pub const NATIVE_MAX_BYTES: usize = 1 << 20;

/// The longest age a TTL index holds, in seconds: MongoDB takes
/// `expireAfterSeconds` up to 2^31 − 1 (about 68 years).
/// [`Coordinator::ensure_ttl`](crate::Coordinator::ensure_ttl) and
/// [`Coordinator::ensure_placeholder_ttl`](crate::Coordinator::ensure_placeholder_ttl)
/// refuse a longer one.
pub const MAX_TTL_SECS: u64 = i32::MAX as u64;

/// What a transaction does when a document it needs is held by another transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConflictPolicy {
    /// Cancel at once with [`StepError::Conflict`](crate::StepError::Conflict).
    #[default]
    Fail,
    /// Retry the apply with backoff for up to `timeout`, then cancel with `Conflict`.
    Wait {
        /// How long to keep trying.
        timeout: Duration,
    },
}

/// What recovery does with a transaction found stuck in `pending`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PendingPolicy {
    /// Undo it (the default: the caller never got an answer, so nobody relies on it).
    #[default]
    RollBack,
    /// Apply what is missing and commit it, canceling only if a participant refuses.
    RollForward,
}

/// Settings of a [`Coordinator`](crate::Coordinator).
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// Database of the transaction records, and of document changes that name no database.
    pub database: String,
    /// Collection of the transaction records.
    pub collection: String,
    /// This worker's name, recorded as the owner of its transactions. Unique per process by default.
    pub owner: String,
    /// How long a transaction may go without progress before recovery may take it over.
    ///
    /// It is also the deadline of the applies: the time, by the records
    /// store's clock, at which the record was written (or at which a recovery
    /// worker's claim rolls a `pending` record forward; other claims keep the
    /// deadline) plus the lease. Each apply carries that time, and lands
    /// only while its own store's clock reads earlier: one that arrives
    /// later changes nothing and the transaction is canceled
    /// ([`StepError::Expired`](crate::StepError::Expired)). A participant
    /// store whose clock is behind the records store's admits applies for
    /// that much longer, one ahead for that much less (safety does not
    /// depend on it; keep the clocks far closer than the lease). Choose it
    /// well above the time the applies of one transaction take.
    pub lease: Duration,
    /// How far the clock of a store may step back, or differ between the
    /// servers that answer for it over time (a failover to a node whose
    /// clock is behind): of every store holding participants, and of the
    /// records store. Markers that an earlier owner's late apply could still
    /// race are removed only once the deadline plus this margin has passed
    /// on the participant store's clock; a record is collected only once its
    /// create deadline plus this margin has passed on the records store's
    /// clock, so that a late copy of its create writes an inert record. Clocks
    /// that differ between stores by a constant do not matter to safety; only
    /// steps backward do. They cost liveness: a participant store whose clock
    /// is ahead of the records store's by more than the lease refuses every
    /// apply as late. Every process sharing the records must use the same
    /// margin: the smallest one in use is the one the fences keep.
    pub clock_margin: Duration,
    /// Where `run` returns.
    pub commit_point: CommitPoint,
    /// What to do on a conflict.
    pub conflict: ConflictPolicy,
    /// How transactions run unless they choose otherwise.
    pub strategy: Strategy,
    /// The most participants one transaction may have.
    pub max_participants: usize,
    /// How a store request that failed transiently is repeated: the one retry
    /// policy (stores never repeat a request themselves), also the backoff of
    /// [`ConflictPolicy::Wait`].
    pub retry: crate::RetryPolicy,
    /// With [`CommitPoint::Applied`]: how long the background finisher may
    /// hold a committed transaction, waiting for more to finish together with
    /// it (group commit). Zero, the default, finishes at once what is waiting.
    ///
    /// A round settles up to 64 transactions with one request moving their
    /// records to `applied` and one clearing their markers per store and
    /// collection; their moves to `done` share a request across rounds. So a
    /// delay trades how soon markers are cleared and deferred credits land
    /// for fewer commands per transaction and less competition with the next
    /// transactions' own steps on the server.
    /// [`Coordinator::drain`](crate::Coordinator::drain) does not wait out the
    /// delay, and recovery is unaffected: keep the delay far below the lease.
    /// (A delay longer than the clock reaches, such as `Duration::MAX`, holds
    /// transactions until a drain or a full round.)
    pub finish_delay: Duration,
    /// Whether transactions whose participants can all say whether their
    /// apply landed ([`Participant::probes`](crate::Participant::probes))
    /// commit at their applies, one round trip sooner
    /// ([`TxRecord::early_commit`](crate::TxRecord::early_commit)). `true` by
    /// default. Turn it off while recovery workers or CLIs built from code
    /// without it (before this option existed; no release lacks it) run
    /// against the same records: they roll a `pending` record back without
    /// asking its participants, which would undo a transaction its
    /// coordinator answered committed.
    pub early_commit: bool,
    /// How long after it finished a transaction with a caller-chosen id
    /// ([`Transaction::with_id`](crate::Transaction::with_id), an
    /// idempotency key) keeps answering for that id, at the least: its
    /// record keeps this window (`idempotencyMillis`), and garbage
    /// collection keeps a stub of it until the longer of this window and
    /// the collector's own ([`RecoveryConfig::idempotency_window`]) has
    /// passed, and then for the longest registered lease plus the clock
    /// margin ([`Coordinator::register_lease`](crate::Coordinator::register_lease)).
    /// A native transaction's record keeps this window plus the
    /// [retry budget](crate::RetryPolicy::budget): it is stamped before
    /// its attempt, and the store's own repeats of it come before the
    /// commit. So the promise made to this coordinator's callers does not
    /// depend on which process collects: another application sharing the
    /// records, or `tandem gc`, with a shorter window, keeps it all the
    /// same. 24 hours by default; keep it as long as callers may retry.
    pub idempotency_window: Duration,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            database: "tandem".into(),
            collection: "transactions".into(),
            owner: default_owner(),
            lease: Duration::from_secs(30),
            clock_margin: Duration::from_secs(2),
            commit_point: CommitPoint::default(),
            conflict: ConflictPolicy::default(),
            strategy: Strategy::default(),
            max_participants: 64,
            retry: crate::RetryPolicy::default(),
            finish_delay: Duration::ZERO,
            early_commit: true,
            idempotency_window: Duration::from_secs(24 * 3600),
        }
    }
}

/// Settings of a [`RecoveryWorker`](crate::RecoveryWorker).
#[derive(Clone, Debug)]
pub struct RecoveryConfig {
    /// What to do with stuck `pending` transactions.
    pub pending: PendingPolicy,
    /// The most transactions claimed per pass, and the records a scan reads
    /// per page. Zero counts as one, and more than `i64::MAX` (what a
    /// store's page limit holds) as `i64::MAX`.
    pub batch: usize,
    /// How many claimed transactions are driven at once.
    pub concurrency: usize,
    /// The pause between passes of [`RecoveryWorker::run_until`](crate::RecoveryWorker::run_until).
    pub interval: Duration,
    /// How long after it finished a transaction with a caller-chosen id
    /// ([`Transaction::with_id`](crate::Transaction::with_id), an idempotency
    /// key) keeps answering for that id: garbage collection turns its record
    /// into a small stub (state and id) until then, so that a retry is told
    /// [`TxError::Duplicate`](crate::TxError::Duplicate) with the outcome
    /// instead of running again (and for the longest registered lease plus
    /// the clock margin after that:
    /// [`Coordinator::register_lease`](crate::Coordinator::register_lease)).
    /// 24 hours by default. A record written with
    /// a longer window ([`CoordinatorConfig::idempotency_window`] of the
    /// coordinator that ran it, kept in the record) keeps that one: this is
    /// the window of records that carry none (written by an earlier
    /// version) and the least of any.
    pub idempotency_window: Duration,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            pending: PendingPolicy::default(),
            batch: 1000,
            concurrency: 16,
            interval: Duration::from_secs(5),
            idempotency_window: Duration::from_secs(24 * 3600),
        }
    }
}

/// A worker name unique to this process: `tandem-<pid>-<objectid>`.
pub fn default_owner() -> String {
    format!(
        "tandem-{}-{}",
        std::process::id(),
        bson::oid::ObjectId::new().to_hex()
    )
}
