//! The [`RecoveryWorker`]: finishes transactions whose owner went silent.
//!
//! A pass reads the store's clock, finds records in flight whose lease has
//! ended by that clock, claims each with a compare-and-set that raises its
//! epoch (so the old owner is fenced off), and drives it to a terminal state:
//!
//! | found in    | recovery                                                   |
//! |-------------|------------------------------------------------------------|
//! | `initial`   | remove the record (nothing was applied)                    |
//! | `pending`   | roll back (default) or forward, per [`PendingPolicy`]      |
//! | `applied`   | clear markers, move to `done`                              |
//! | `canceling` | compensate, move to `canceled`                             |
//!
//! Several workers (in several applications) may run at once: the claim
//! decides which one drives each record.

use std::borrow::Cow;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson};
use futures::future::join_all;
use futures::FutureExt;

use crate::config::{PendingPolicy, RecoveryConfig};
use crate::engine::{history, is_not_yet, Engine, Live, Step, HISTORY_KEPT, ROUND};
use crate::error::{ChangeError, TxError};
use crate::event::TxEvent;
use crate::record::{HistoryEntry, TxRecord, TxState};

/// How many records garbage collection removes with one `delete` request
/// (`_id: {$in: [...]}`): large enough that a pass costs few round trips, small
/// enough that the request stays far below the server's 16 MiB message limit
/// (transaction ids are short strings).
const GC_BATCH: usize = 500;
use crate::store::{FindOptions, Namespace, ReturnDocument, StoreError, StoreErrorKind};
use crate::TxId;

/// How many pages of records one pass (or one garbage collection) reads at
/// most while looking for a batch it can act on.
const SCAN_PAGES: usize = 16;

/// What one recovery pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Records in flight that were looked at.
    pub scanned: usize,
    /// Records whose lease had ended and that this worker claimed.
    pub claimed: usize,
    /// Claimed records that ended `done`.
    pub committed: usize,
    /// Claimed records that ended `canceled`.
    pub canceled: usize,
    /// Stale `initial` records removed.
    pub removed: usize,
    /// Records that could not be finished this pass: claimed ones whose
    /// steps failed (left for the next pass), and due ones this process
    /// cannot drive (a participant kind it does not register, a store it
    /// does not have), left unclaimed for a process that can.
    pub failed: usize,
    /// Claimed records left unfinished for a later pass: their markers may
    /// be removed only later, by the participant stores' clocks, because an
    /// earlier apply may still be in flight until its deadline, or a record
    /// rolled forward was refused and its undo met a store failure. A record
    /// counted here may be decided (`canceling`, `applied`) but still shows
    /// its applied half.
    pub waiting: usize,
    /// Records another worker changed or claimed first.
    pub lost: usize,
}

/// Sums passes: every count of `other` added to this report's.
///
/// ```
/// let pass = tandem::RecoveryReport { claimed: 2, committed: 1, canceled: 1, ..Default::default() };
/// let mut total = tandem::RecoveryReport::default();
/// total += &pass;
/// total += &pass;
/// assert_eq!((total.claimed, total.committed, total.canceled), (4, 2, 2));
/// ```
impl std::ops::AddAssign<&RecoveryReport> for RecoveryReport {
    fn add_assign(&mut self, other: &RecoveryReport) {
        let RecoveryReport {
            scanned,
            claimed,
            committed,
            canceled,
            removed,
            failed,
            waiting,
            lost,
        } = other;
        self.scanned += scanned;
        self.claimed += claimed;
        self.committed += committed;
        self.canceled += canceled;
        self.removed += removed;
        self.failed += failed;
        self.waiting += waiting;
        self.lost += lost;
    }
}

impl RecoveryReport {
    fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Committed => self.committed += 1,
            Outcome::Canceled => self.canceled += 1,
            Outcome::Removed => self.removed += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Waiting => self.waiting += 1,
            Outcome::Lost => self.lost += 1,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Committed,
    Canceled,
    Removed,
    Failed,
    Waiting,
    Lost,
}

impl Outcome {
    /// The outcome of a claimed record that driving left in `state`.
    fn of(state: TxState) -> Self {
        match state {
            TxState::Done => Outcome::Committed,
            TxState::Canceled => Outcome::Canceled,
            TxState::Canceling | TxState::Applied | TxState::Pending => Outcome::Waiting,
            TxState::Initial => Outcome::Removed,
        }
    }

    /// The outcome of a claimed record whose driving failed with `e`.
    fn of_error(id: &TxId, e: TxError) -> Self {
        match e {
            TxError::Superseded { .. } => Outcome::Lost,
            TxError::Canceled { .. } => Outcome::Canceled,
            ref e if is_not_yet(e) => Outcome::Waiting,
            e => {
                tracing::warn!(target: "tandem", "recovering {id} failed: {e}");
                Outcome::Failed
            }
        }
    }
}

/// Where driving a claimed record got to.
enum Driven {
    /// It ended in this state, or waits in it for a later pass.
    State(TxState),
    /// Committed, and left to finish
    /// ([`finish_committed`](RecoveryWorker::finish_committed)): still
    /// `pending` (every apply landed) if `from_pending`, else `applied`.
    Committed { live: Live, from_pending: bool },
}

/// The field of a stub holding the floor its `stubUntil` counted after the
/// idempotency window: the longest registered lease plus the clock margin
/// when it was written, in milliseconds.
const STUB_FLOOR: &str = "stubFloorMillis";

/// The longest operator's reason for a cancel that a record keeps, in bytes.
const CANCEL_REASON_LIMIT: usize = 1024;

/// Finds and finishes stuck transactions. Get one from [`Coordinator::recovery`](crate::Coordinator::recovery).
pub struct RecoveryWorker {
    engine: Arc<Engine>,
    config: RecoveryConfig,
    /// Where the last recovery pass stopped reading, if it stopped before
    /// the last due record: the next pass goes on from there.
    recovery_at: Mutex<Option<Cursor>>,
    /// The same for garbage collection.
    collection_at: Mutex<Option<Cursor>>,
}

/// A position in the records' scan order (`lastModified`, then `_id`) within
/// a round of scans from the oldest record to the last: past every record
/// changed before `at`, and past the records changed at `at` whose ids are
/// in `ids`. A round reads the records changed up to `until` (its first
/// scan's bound) only: a record changed since (claimed, rewritten) falls
/// into the next round, so a round ends however many records are changed
/// meanwhile, and the next, from the oldest, comes to the ones this one
/// passed before they were due.
#[derive(Clone, Debug)]
struct Cursor {
    until: bson::DateTime,
    at: bson::DateTime,
    ids: Vec<bson::Bson>,
}

impl Cursor {
    /// Moves the cursor of the round bounded by `until` past `record`, read
    /// next in the scan order.
    fn pass(cursor: &mut Option<Cursor>, until: bson::DateTime, record: &bson::Document) {
        let (Ok(&at), Some(id)) = (record.get_datetime("lastModified"), record.get("_id")) else {
            return;
        };
        match cursor {
            Some(c) if c.at == at => c.ids.push(id.clone()),
            _ => {
                *cursor = Some(Cursor {
                    until,
                    at,
                    ids: vec![id.clone()],
                })
            }
        }
    }
}

impl std::fmt::Debug for RecoveryWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoveryWorker")
            .field("owner", &self.engine.config.owner)
            .field("config", &self.config)
            .finish()
    }
}

impl RecoveryWorker {
    pub(crate) fn new(engine: Arc<Engine>, config: RecoveryConfig) -> Self {
        RecoveryWorker {
            engine,
            config,
            recovery_at: Mutex::new(None),
            collection_at: Mutex::new(None),
        }
    }

    /// This worker's owner name.
    pub fn owner(&self) -> &str {
        &self.engine.config.owner
    }

    /// Whether this worker's last recovery pass and last garbage collection
    /// each ended a round (or have not run).
    ///
    /// A pass reads at most a bounded number of pages of records, oldest
    /// change first, and the records it leaves (not due yet, not drivable
    /// here, not collectable now) keep their place. So that such records
    /// cannot hide the ones behind them for good, a pass that stops before
    /// the end leaves its position, and the next pass on this worker goes
    /// on from there. A round of passes reads the records changed up to
    /// the time it started, from the oldest to the last; one changed since
    /// (claimed, say) waits for the next round, so every round ends, and
    /// the next starts from the oldest again. A caller that runs passes by
    /// hand until nothing is left to do runs them until this is true as
    /// well.
    pub fn caught_up(&self) -> bool {
        lock(&self.recovery_at).is_none() && lock(&self.collection_at).is_none()
    }

    /// One pass: claims and finishes up to `batch` expired transactions.
    pub async fn run_once(&self) -> Result<RecoveryReport, StoreError> {
        let result = self.pass().await;
        crate::metrics::recovery_pass(&result);
        result
    }

    async fn pass(&self) -> Result<RecoveryReport, StoreError> {
        let engine = &self.engine;
        let ns = engine.records_ns();
        let now = engine.retry(|| engine.records().now()).await?;
        let in_flight: Vec<_> = TxState::in_flight()
            .into_iter()
            .map(bson::Bson::from)
            .collect();
        // Page past records that are not due (a long lease, a claim moments
        // ago) or unreadable, oldest first, until a batch is due: the oldest
        // records cannot starve the rest.
        let filter = doc! { "state": { "$in": in_flight }, "lastModified": { "$lte": now } };
        // Records this process cannot drive (a participant kind it does not
        // register, a store it does not have) are paged past as well, left
        // for a process that can: claimed, they would only fence their owner
        // off; kept in the batch, they would take the places of others.
        let mut unreadable = 0;
        let mut undrivable = 0;
        let (expired, scanned) = self
            .scan(&ns, filter, &self.recovery_at, |d| match TxRecord::from_document(d) {
                Ok(r) if !(r.lease_expired(now) && self.past_margin(&r, now)) => None,
                Ok(r) => match self.engine.cannot_drive(&r) {
                    // A store identity not read yet: read after the scan.
                    Some(ChangeError::ForeignStore { here: None, .. }) => Some(r),
                    Some(why) => {
                        undrivable += 1;
                        refuse_to_drive(&r.id, &why);
                        None
                    }
                    None => Some(r),
                },
                Err(e) => {
                    unreadable += 1;
                    tracing::error!(target: "tandem", "skipping unreadable transaction record: {e}");
                    None
                }
            })
            .await?;
        if unreadable > 0 {
            tracing::warn!(target: "tandem", "{unreadable} unreadable transaction record(s) passed over");
        }
        // A record naming a store by the identity it had where it was
        // written: a store here under that name that is another database is
        // not driven (it would find no marker, and roll back what committed).
        // Identities are read once per process, the first time a record
        // needs one.
        if let Err(e) = self.engine.learn_uids(&expired).await {
            tracing::warn!(target: "tandem", "cannot read a store's identity: {e}");
        }
        let mut checked = Vec::with_capacity(expired.len());
        for r in expired {
            match self.engine.cannot_drive(&r) {
                Some(why) => {
                    undrivable += 1;
                    refuse_to_drive(&r.id, &why);
                }
                None => checked.push(r),
            }
        }
        let expired = checked;
        let mut report = RecoveryReport {
            scanned,
            failed: undrivable,
            ..RecoveryReport::default()
        };
        let total = expired.len();
        // A round of up to `concurrency` records at a time: claimed and
        // driven together, then the committed ones finished together: their
        // moves to `applied` share a request, their clears one per store and
        // collection, their moves to `done` another. (Nothing of a round is
        // left half-driven while the finishing runs: a future not polled
        // would keep its connection, and the finishing could wait for it.)
        let mut expired = expired.into_iter();
        let per_round = self.config.concurrency.clamp(1, ROUND);
        loop {
            let round: Vec<(bool, Result<Driven, Outcome>)> = join_all(
                expired
                    .by_ref()
                    .take(per_round)
                    .map(|record| self.recover(record)),
            )
            .await;
            if round.is_empty() {
                break;
            }
            let mut committed = Vec::new();
            for (claimed, driven) in round {
                if claimed {
                    report.claimed += 1;
                }
                match driven {
                    Ok(Driven::State(state)) => report.add(Outcome::of(state)),
                    Ok(Driven::Committed { live, from_pending }) => {
                        committed.push((live, from_pending))
                    }
                    Err(outcome) => report.add(outcome),
                }
            }
            // A panic while finishing them together (a hand-written
            // participant's clear) fails the round's committed records,
            // left for a later pass, and not the pass.
            match AssertUnwindSafe(self.finish_committed(&committed))
                .catch_unwind()
                .await
            {
                Ok(results) => {
                    for ((live, _), result) in committed.iter().zip(results) {
                        report.add(match result {
                            Ok(state) => Outcome::of(state),
                            Err(e) => Outcome::of_error(&live.id, e),
                        });
                    }
                }
                Err(panic) => {
                    for (live, _) in &committed {
                        tracing::error!(target: "tandem", "finishing {} panicked: {}; left for a later pass", live.id, panic_text(&*panic));
                        report.add(Outcome::Failed);
                    }
                }
            }
        }
        if total > 0 {
            tracing::info!(target: "tandem", ?report, "recovery pass");
        }
        Ok(report)
    }

    /// Runs passes every `interval` until `shutdown` completes. Returns the
    /// totals of the passes that ended.
    ///
    /// It returns as soon as `shutdown` completes, also in the middle of a
    /// pass (one waiting on a store that does not answer, say): that pass
    /// stops where it is, as if the process had stopped there, and its
    /// report is not in the totals. Nothing of the protocol depends on a
    /// pass ending: a record it claimed and did not finish is taken up again
    /// once the claim's lease has passed (by any worker), and a step it sent
    /// is fenced as a stalled worker's is.
    ///
    /// # Panics
    ///
    /// On a zero [`RecoveryConfig::interval`]: it would pass without pause.
    pub async fn run_until(&self, shutdown: impl Future<Output = ()>) -> RecoveryReport {
        assert!(
            !self.config.interval.is_zero(),
            "RecoveryConfig::interval must be longer than zero: run_until would pass without pause"
        );
        let mut total = RecoveryReport::default();
        tokio::pin!(shutdown);
        loop {
            // Shutdown is watched during the pass too: a store that hangs
            // would otherwise keep the worker (and its caller) from stopping.
            let pass = tokio::select! {
                _ = &mut shutdown => return total,
                pass = self.run_once() => pass,
            };
            match pass {
                Ok(r) => total += &r,
                Err(e) => tracing::warn!(target: "tandem", "recovery pass failed: {e}"),
            }
            tokio::select! {
                _ = &mut shutdown => return total,
                _ = tokio::time::sleep(self.config.interval) => {}
            }
        }
    }

    /// Reads records matching `filter`, oldest change first, one page of
    /// `batch` at a time, keeping those `pick` takes, until `batch` are kept,
    /// the records run out, or [`SCAN_PAGES`] pages were read. Starts where
    /// the last scan with `cursor` stopped, within that scan's round (see
    /// [`Cursor`]: `filter`'s `lastModified` bound is the first scan's of the
    /// round), and leaves there where this one stopped (none once it read the
    /// round's last record: the next starts a round from the oldest).
    /// Returns what was kept and how many records were read.
    async fn scan<T>(
        &self,
        ns: &crate::Namespace,
        filter: bson::Document,
        cursor: &Mutex<Option<Cursor>>,
        mut pick: impl FnMut(bson::Document) -> Option<T>,
    ) -> Result<(Vec<T>, usize), StoreError> {
        let engine = &self.engine;
        // A page's limit is a 64-bit signed count: a batch past it (where
        // `usize` is wider than `i64` allows, `usize::MAX` say) reads pages
        // of the largest limit, rather than wrap around to a negative limit,
        // which a store reads as a limit of its magnitude (`-1`: one record).
        let (batch, limit) = match i64::try_from(self.config.batch.max(1)) {
            Ok(limit) => (self.config.batch.max(1), limit),
            Err(_) => (usize::try_from(i64::MAX).unwrap_or(usize::MAX), i64::MAX),
        };
        let mut kept = Vec::new();
        let mut scanned = 0;
        let mut after = lock(cursor).clone();
        // The round's bound: its first scan's own, kept by its cursor.
        let mut window = filter
            .get_document("lastModified")
            .cloned()
            .unwrap_or_default();
        let until = match &after {
            Some(c) => c.until,
            None => match window.get("$lte") {
                Some(Bson::DateTime(t)) => *t,
                _ => bson::DateTime::MAX,
            },
        };
        window.insert("$lte", until);
        'pages: for _ in 0..SCAN_PAGES {
            let mut page_filter = filter.clone();
            let mut window = window.clone();
            if let Some(Cursor { at, ids, .. }) = &after {
                window.insert("$gte", *at);
                page_filter.insert("_id", doc! { "$nin": ids.clone() });
            }
            page_filter.insert("lastModified", window);
            let page = engine
                .retry(|| {
                    engine.records().find(
                        ns,
                        page_filter.clone(),
                        FindOptions {
                            sort: Some(doc! { "lastModified": 1, "_id": 1 }),
                            limit: Some(limit),
                        },
                    )
                })
                .await?;
            scanned += page.len();
            let full = page.len() == batch;
            for record in page {
                // Past each record as it is looked at: the records of the
                // page after the batch is full are left for the next scan.
                Cursor::pass(&mut after, until, &record);
                kept.extend(pick(record));
                if kept.len() >= batch {
                    break 'pages;
                }
            }
            if !full {
                after = None;
                break;
            }
        }
        *lock(cursor) = after;
        Ok((kept, scanned))
    }

    /// Whether the deadline of the record's epoch plus the clock margin has
    /// passed at `now`: before that, the new owner could not remove markers yet.
    fn past_margin(&self, record: &TxRecord, now: bson::DateTime) -> bool {
        record
            .deadline()
            .timestamp_millis()
            .saturating_add(self.engine.margin_millis())
            <= now.timestamp_millis()
    }

    /// Claims a record: raises its epoch if nobody touched it since it was read.
    ///
    /// The claim moves the record's `notBefore` past the current deadline
    /// plus the clock margin: the old owner's applies may land until their
    /// deadline, so no marker is removed before then. Only a new epoch that
    /// will apply (`applies`: rolling `pending` forward) gets a new deadline;
    /// any other keeps the old one, so that `notBefore` does not move on with
    /// every claim (it would chase a participant store whose clock is behind
    /// the records' store's, and recovery would never finish).
    ///
    /// A claim by a recovery pass (`attempt`) counts in the record's
    /// `attempts`, and so lengthens the lease of its later claims; an
    /// operator's [`cancel`](Self::cancel) is no failed recovery attempt,
    /// and leaves the count (and the back-off) as it was.
    ///
    /// The record is taken by value where the caller has no more use for
    /// it (a recovery pass): the claimed record is then the scanned one
    /// with the claim's fields, without a copy of its participants.
    async fn claim(
        &self,
        record: Cow<'_, TxRecord>,
        applies: bool,
        attempt: bool,
    ) -> Result<Option<TxRecord>, StoreError> {
        let engine = &self.engine;
        let owner = &engine.config.owner;
        // Back off per record: each recovery claim after the first doubles the
        // lease, up to eight times the lease, so a transaction whose store stays
        // down is tried less and less often (its applies get the longer deadline too).
        let lease = i64::try_from(engine.config.lease.as_millis())
            .unwrap_or(i64::MAX)
            .saturating_mul(1_i64 << record.attempts.clamp(0, 3));
        let fence = bson::DateTime::from_millis(
            record
                .deadline()
                .timestamp_millis()
                .saturating_add(engine.margin_millis()),
        );
        let not_before = record.not_before.map_or(fence, |nb| nb.max(fence));
        // A token of this very claim: a repeated claim whose first answer was lost
        // recognises itself by it, and never mistakes another claim of this worker for its own.
        let token = bson::oid::ObjectId::new().to_hex();
        // Built afresh for each attempt, as the store takes them by value.
        let statement = || {
            let mut filter =
                doc! { "_id": record.id.as_str(), "state": record.state, "epoch": record.epoch };
            if let Some(lm) = record.last_modified {
                filter.insert("lastModified", lm);
            }
            // Every record move names the creation token: a record written
            // again under the id is never claimed for the one scanned.
            if let Some(creation) = &record.token {
                filter.insert("token", creation.as_str());
            }
            let mut set = doc! { "owner": owner, "leaseMillis": lease, "claimToken": &token, "notBefore": not_before };
            let mut stamps = doc! { "lastModified": true };
            if applies {
                stamps.insert("leaseStart", true);
            } else {
                // The deadline stays where it was: lease start + lease.
                set.insert(
                    "leaseStart",
                    bson::DateTime::from_millis(
                        record.deadline().timestamp_millis().saturating_sub(lease),
                    ),
                );
            }
            let mut inc = doc! { "epoch": 1_i64 };
            if attempt {
                inc.insert("attempts", 1_i32);
            }
            let update = doc! {
                "$inc": inc,
                "$set": set,
                "$currentDate": stamps,
                "$push": { "history": {
                    "$each": [history(record.state, owner, record.epoch + 1, "claim")],
                    "$slice": -HISTORY_KEPT,
                } },
            };
            (filter, update)
        };
        let ns = engine.records_ns();
        let claimed = engine
            .retry(|| {
                let (filter, update) = statement();
                engine.records().find_one_and_update(
                    &ns,
                    filter,
                    update,
                    crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                        .with_fields(Claimed::FIELDS),
                )
            })
            .await?;
        let id = record.id.clone();
        let next_epoch = record.epoch + 1;
        let claimed = match claimed {
            None => None,
            Some(doc) => {
                let changed = Claimed::from_document(doc)
                    .map_err(|e| StoreError::new(StoreErrorKind::Other, e.to_string()))?;
                let epoch = changed.epoch;
                // The line the claim pushed: the history is as scanned
                // (the filter says so) but for it.
                let line = HistoryEntry {
                    state: record.state,
                    owner: owner.clone(),
                    epoch: next_epoch,
                    event: "claim".to_owned(),
                };
                match changed.onto(record, line) {
                    Some(claimed) => Some(claimed),
                    // Not the record scanned (its id used again since): read
                    // it whole, if this claim still holds it.
                    None => engine.load(&id).await?.filter(|now| {
                        now.claim_token.as_deref() == Some(token.as_str()) && now.epoch == epoch
                    }),
                }
            }
        };
        if claimed.is_none() {
            if let Some(now) = engine.load(&id).await? {
                if now.claim_token.as_deref() == Some(token.as_str()) && now.epoch == next_epoch {
                    return Ok(Some(now));
                }
            }
        }
        Ok(claimed)
    }

    /// The answer for a move of `record` that missed because another
    /// actor changed it first: [`TxError::Superseded`] with the state and
    /// epoch the record has now, read back (`state: None` if it is gone,
    /// also where the id now names another transaction: a record of
    /// another creation token), not the ones read before the move. A
    /// failure to read it back is [`TxError::Interrupted`] in the state
    /// last read.
    async fn superseded(&self, record: &TxRecord) -> TxError {
        match self.engine.load(&record.id).await {
            Ok(Some(now)) if record.token.is_some() && now.token != record.token => {
                TxError::Superseded {
                    id: record.id.clone(),
                    state: None,
                    epoch: record.epoch,
                }
            }
            Ok(Some(now)) => TxError::Superseded {
                id: record.id.clone(),
                state: Some(now.state),
                epoch: now.epoch,
            },
            Ok(None) => TxError::Superseded {
                id: record.id.clone(),
                state: None,
                epoch: record.epoch,
            },
            Err(source) => TxError::Interrupted {
                id: record.id.clone(),
                state: Some(record.state),
                source,
            },
        }
    }

    async fn recover(&self, record: TxRecord) -> (bool, Result<Driven, Outcome>) {
        // A transaction that commits at its applies is probed first, under
        // its old deadline; it gets a new one only if it must be rolled forward.
        let applies = record.state == TxState::Pending
            && self.config.pending == PendingPolicy::RollForward
            && !record.is_inert()
            && !record.early_commit;
        let id = record.id.clone();
        let claimed = match self.claim(Cow::Owned(record), applies, true).await {
            Ok(Some(r)) => r,
            Ok(None) => return (false, Err(Outcome::Lost)),
            Err(e) => {
                tracing::warn!(target: "tandem", "claiming {id} failed: {e}");
                return (false, Err(Outcome::Failed));
            }
        };
        // A panic (a hand-written participant's step or kind, an event
        // sink) fails this record, as a store failure does, and leaves the
        // pass to the others: it would take the pass down, drop the other
        // records of its round half driven, and end `run_until`'s task, and
        // the next pass would meet the same record first.
        let id = claimed.id.clone();
        let driven = AssertUnwindSafe(async {
            self.engine.emit(TxEvent::Claimed {
                id: claimed.id.clone(),
                state: claimed.state,
                owner: claimed.owner.clone(),
                epoch: claimed.epoch,
            });
            self.drive(&claimed, None)
                .await
                .map_err(|e| Outcome::of_error(&claimed.id, e))
        })
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            tracing::error!(target: "tandem", "driving {id} panicked: {}; left for a later pass", panic_text(&*panic));
            Err(Outcome::Failed)
        });
        (true, driven)
    }

    /// Finishes committed transactions together (see [`Driven::Committed`]):
    /// those still `pending` move to `applied` in one request, then every
    /// marker is cleared and every record moved to `done`
    /// ([`Engine::settle_many`], [`Engine::close_many`]). One result per
    /// transaction, in order: `done`, or `applied` if some marker may be
    /// cleared only later. Callers pass at most [`ROUND`] at a time.
    async fn finish_committed(&self, committed: &[(Live, bool)]) -> Vec<Result<TxState, TxError>> {
        let engine = &self.engine;
        let lives: Vec<&Live> = committed.iter().map(|(live, _)| live).collect();
        let pending: Vec<usize> = (0..lives.len()).filter(|&t| committed[t].1).collect();
        let mut results: Vec<Result<(), TxError>> = lives.iter().map(|_| Ok(())).collect();
        for (t, moved) in engine
            .move_many(&lives, &pending, TxState::Pending, TxState::Applied)
            .await
        {
            results[t] = moved;
        }
        let ready: Vec<usize> = (0..lives.len()).filter(|&t| results[t].is_ok()).collect();
        let ready_lives: Vec<&Live> = ready.iter().map(|&t| lives[t]).collect();
        for (&t, settled) in ready.iter().zip(engine.settle_many(&ready_lives).await) {
            results[t] = settled;
        }
        let settled: Vec<usize> = (0..lives.len()).filter(|&t| results[t].is_ok()).collect();
        for (t, closed) in engine.close_many(&lives, &settled).await {
            results[t] = closed;
        }
        results
            .into_iter()
            .map(|result| match result {
                Ok(()) => Ok(TxState::Done),
                // Committed and `applied`: the clears wait for applies in flight.
                Err(ref e) if is_not_yet(e) => Ok(TxState::Applied),
                Err(e) => Err(e),
            })
            .collect()
    }

    /// Drives a claimed record to a terminal state, or to its commit, left
    /// to finish. `cancel_reason` forces `pending` back.
    async fn drive(
        &self,
        record: &TxRecord,
        cancel_reason: Option<&str>,
    ) -> Result<Driven, TxError> {
        let engine = &self.engine;
        let live = engine.rebuild(record)?;
        if record.is_inert() && matches!(record.state, TxState::Pending | TxState::Canceling) {
            // Written by a create that arrived late: nothing of it was applied.
            engine.cancel_inert(&live, record.state).await?;
            return Ok(Driven::State(TxState::Canceled));
        }
        let ended = |state: Result<(), TxError>, ended: TxState, waiting: TxState| match state {
            Ok(()) => Ok(Driven::State(ended)),
            // Decided; the markers wait for applies still in flight.
            Err(ref e) if is_not_yet(e) => Ok(Driven::State(waiting)),
            Err(e) => Err(e),
        };
        match record.state {
            TxState::Initial => {
                let ns = engine.records_ns();
                let filter = doc! { "_id": record.id.as_str(), "state": TxState::Initial, "epoch": record.epoch };
                let deleted = engine
                    .retry(|| engine.records().delete_one(&ns, filter.clone()))
                    .await
                    .map_err(|source| TxError::Interrupted {
                        id: record.id.clone(),
                        state: Some(TxState::Initial),
                        source,
                    })?;
                if deleted == 0 {
                    return Err(self.superseded(record).await);
                }
                engine.emit(TxEvent::Removed {
                    id: record.id.clone(),
                });
                Ok(Driven::State(TxState::Initial))
            }
            TxState::Pending => {
                let forward =
                    cancel_reason.is_none() && self.config.pending == PendingPolicy::RollForward;
                let mut live = live;
                if record.early_commit {
                    // Committed if every apply landed: its coordinator may have
                    // answered so. Asked once none can land any more.
                    match engine.probe(&live).await? {
                        None => return Ok(Driven::State(TxState::Pending)),
                        Some(true) => {
                            return Ok(Driven::Committed {
                                live,
                                from_pending: true,
                            })
                        }
                        Some(false) if forward => {
                            // Not committed: roll forward in a new epoch, with a new deadline.
                            // The same attempt as the probe's claim: a pass counts once,
                            // or the back-off would come at twice the pace.
                            let again = self
                                .claim(Cow::Borrowed(record), true, false)
                                .await
                                .map_err(|source| TxError::Interrupted {
                                    id: record.id.clone(),
                                    state: Some(TxState::Pending),
                                    source,
                                })?;
                            let Some(again) = again else {
                                return Err(self.superseded(record).await);
                            };
                            live = engine.rebuild(&again)?;
                        }
                        Some(false) => {}
                    }
                }
                if forward {
                    // Committed at the move to `applied`, made with the others'.
                    match engine.apply_or_refuse(&live).await {
                        Ok(()) => Ok(Driven::Committed {
                            live,
                            from_pending: true,
                        }),
                        Err(TxError::Canceled { undone: true, .. }) => {
                            Ok(Driven::State(TxState::Canceled))
                        }
                        // Decided, and the undo left for a later pass: not
                        // `canceled` yet, whatever the report would like.
                        Err(TxError::Canceled { undone: false, .. }) => {
                            Ok(Driven::State(TxState::Canceling))
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    let reason =
                        cancel_reason.unwrap_or("rolled back by recovery after the lease expired");
                    // An operator's reason also goes into the history, which keeps it
                    // when a later error replaces `lastError`.
                    let notes: Vec<String> = cancel_reason
                        .map(|r| format!("cancel: {r}"))
                        .into_iter()
                        .collect();
                    engine
                        .transition_noting(
                            &live,
                            TxState::Pending,
                            TxState::Canceling,
                            Some(format!("(recovery): rejected: {reason}")),
                            &notes,
                        )
                        .await?;
                    ended(
                        engine.finish_canceling(&live).await,
                        TxState::Canceled,
                        TxState::Canceling,
                    )
                }
            }
            TxState::Applied => Ok(Driven::Committed {
                live,
                from_pending: false,
            }),
            TxState::Canceling => ended(
                engine.finish_canceling(&live).await,
                TxState::Canceled,
                TxState::Canceling,
            ),
            state @ (TxState::Done | TxState::Canceled) => Ok(Driven::State(state)),
        }
    }

    /// Cancels a `pending` transaction, whoever owns it (its owner's record
    /// moves are fenced off). Finishes `canceling` ones; a transaction past
    /// its commit point cannot be canceled, and this answers its state.
    ///
    /// A transaction that commits at its applies
    /// ([`TxRecord::early_commit`](crate::TxRecord::early_commit)) is decided
    /// only once no apply can land any more: before that this answers
    /// `pending`, and the request is not remembered (a later recovery pass
    /// decides, as its [`PendingPolicy`](crate::PendingPolicy) says where not
    /// every apply landed: rolling forward commits); after it, `canceled` or
    /// `canceling` if some apply never landed, `done` (or `applied`) if every
    /// apply landed, which means the transaction committed.
    ///
    /// Once decided, the answer is the decision: `canceling` when the undo is
    /// left to recovery (it must wait for applies in flight, or met a store
    /// failure), `applied` when finishing a committed transaction is. A
    /// store failure before the decision is
    /// [`TxError::Interrupted`] in `pending`; an id without a record,
    /// [`TxError::NoRecord`] (never there, or finished and collected). A `reason` longer than 1 KiB
    /// is cut (the record keeps it twice).
    ///
    /// The takeover raises the record's epoch but not its
    /// [`attempts`](crate::TxRecord::attempts): cancels, however many, do not
    /// lengthen the lease recovery's next claims give it.
    pub async fn cancel(&self, id: &TxId, reason: &str) -> Result<TxState, TxError> {
        // The reason goes into the record twice (last error, history): cut
        // to a size that cannot make the record too large.
        let reason = crate::error::clip(reason.to_owned(), CANCEL_REASON_LIMIT);
        let reason = reason.as_str();
        let record = self
            .engine
            .load(id)
            .await
            .map_err(|source| TxError::Interrupted {
                id: id.clone(),
                state: None,
                source,
            })?
            .ok_or_else(|| TxError::NoRecord { id: id.clone() })?;
        match record.state {
            TxState::Pending | TxState::Canceling | TxState::Initial => {}
            state => return Ok(state),
        }
        self.engine
            .learn_uids([&record])
            .await
            .map_err(|source| TxError::Interrupted {
                id: id.clone(),
                state: Some(record.state),
                source,
            })?;
        if let Some(why) = self.engine.cannot_drive(&record) {
            // Not claimed: a claim would only fence its owner off, and
            // nothing here could drive it.
            refuse_to_drive(id, &why);
            return Err(TxError::Invalid(why));
        }
        let claimed = self
            .claim(Cow::Borrowed(&record), false, false)
            .await
            .map_err(|source| TxError::Interrupted {
                id: id.clone(),
                state: Some(record.state),
                source,
            })?;
        let Some(claimed) = claimed else {
            return Err(self.superseded(&record).await);
        };
        match self.drive(&claimed, Some(reason)).await {
            Ok(Driven::State(state)) => Ok(state),
            // Decided canceled: what is left of the undo, recovery finishes.
            Err(TxError::Interrupted {
                state: Some(TxState::Canceling),
                source,
                ..
            }) => {
                tracing::warn!(target: "tandem", "undoing {id} left to recovery: {source}");
                Ok(TxState::Canceling)
            }
            Err(e) => Err(e),
            Ok(Driven::Committed { live, from_pending }) => {
                match self.finish_committed(&[(live, from_pending)]).await.pop() {
                    Some(Ok(state)) => Ok(state),
                    // Committed (every apply landed): what is left of the
                    // finishing, recovery does.
                    Some(Err(e)) => {
                        tracing::warn!(target: "tandem", "finishing {id} left to recovery: {e}");
                        Ok(TxState::Applied)
                    }
                    None => unreachable!("one result per transaction"),
                }
            }
        }
    }

    /// Removes `done` and `canceled` records older than `older_than` (by the
    /// store's clock) whose create deadline has passed by the clock margin,
    /// running each participant's [`forget`](crate::Participant::forget)
    /// first. (The create deadline is the writing coordinator's lease from
    /// the start; a late copy of the record's create is inert only once it
    /// has passed, so a record is kept until then even where this worker's
    /// lease is shorter.) A record whose id the caller chose (an
    /// idempotency key) becomes a stub instead, holding its id and state
    /// until the
    /// [idempotency window](RecoveryConfig::idempotency_window) after it
    /// finished has passed, and the longest lease registered for these
    /// records ([`Coordinator::register_lease`](crate::Coordinator::register_lease))
    /// plus the clock margin after that (read once per collection that has
    /// such records: a retry sent inside the window whose first attempt
    /// lost its answer can land its record live until its own lease has
    /// passed, and must find the id taken); stubs past it are removed, once
    /// the window and the longest lease registered now plus the margin
    /// have passed as well (read again before the removal: a run under the
    /// key sent inside the window through a coordinator that registered a
    /// longer lease after the stub was written can land its record until
    /// that lease has passed). The
    /// window is the longer of this worker's and the one the record was
    /// written with
    /// ([`CoordinatorConfig::idempotency_window`](crate::CoordinatorConfig::idempotency_window)). Returns how many
    /// records were removed or reduced to stubs: a store error after some
    /// were ends the collection early with their count (logged; the next
    /// collection goes on), and is returned only when none were. A request
    /// sent again after a transient error is counted by reading its records
    /// back (the repeat finds done what a first copy that landed did): the
    /// count then includes what another collection running at the same time
    /// did to the same records meanwhile, and so may exceed this one's work;
    /// for the removal of expired stubs, which names no records, it is the
    /// repeat's count, a lower bound.
    ///
    /// First it drops the zero credit sums (`_tandem.credit`) of the
    /// documents the due records credited or debited, where nothing is
    /// pending any more, one request per store and collection; a record
    /// whose documents that request failed for, or that names a store this
    /// process does not have, stays for the next collection (one with the
    /// store).
    ///
    /// `older_than` must be at least the lease plus the clock margin
    /// ([`CoordinatorConfig::lease`](crate::CoordinatorConfig::lease),
    /// [`clock_margin`](crate::CoordinatorConfig::clock_margin)); a shorter age
    /// is refused with [`StoreErrorKind::BadRequest`] and removes nothing. A
    /// record younger than that may still have a stalled worker's step on its
    /// way, and the record is what tells that worker it was superseded.
    pub async fn collect_garbage(&self, older_than: Duration) -> Result<usize, StoreError> {
        let engine = &self.engine;
        let least = engine
            .config
            .lease
            .saturating_add(engine.config.clock_margin);
        if older_than < least {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "garbage collection age {older_than:?} is below the lease plus the clock margin ({least:?})"
                ),
            ));
        }
        let ns = engine.records_ns();
        let now = engine.retry(|| engine.records().now()).await?;
        let cutoff = bson::DateTime::from_millis(
            now.timestamp_millis()
                .saturating_sub(i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX)),
        );
        // A record is due once its age passed `older_than` and its create
        // deadline passed by the margin: only then is a late copy of its
        // create, arriving after the record is gone, sure to write an inert
        // record. (The create deadline is the lease of the coordinator that
        // wrote the record, which may be longer than this worker's.)
        // Collection does not wait for the applies' deadline (the lease
        // from `leaseStart`, or a claim's longer one): a record is `done` or
        // `canceled` only after every participant's clear or undo passed
        // that participant's own fence, so no late apply can land once it is
        // terminal. A way to finish a record without touching its
        // participants would need that deadline plus the margin here too
        // (an inert record is canceled so: no coordinator applies under a
        // record written after its create deadline).
        let created_cutoff = bson::DateTime::from_millis(
            now.timestamp_millis()
                .saturating_sub(engine.margin_millis()),
        );
        let due_filter = doc! {
            "state": { "$in": [TxState::Done, TxState::Canceled] },
            "lastModified": { "$lte": cutoff },
            "createBy": { "$not": { "$gt": created_cutoff } },
            "stubUntil": { "$exists": false },
        };
        let filter = due_filter.clone();
        let window = i64::try_from(self.config.idempotency_window.as_millis()).unwrap_or(i64::MAX);
        // Records whose participants are all document changes keep nothing on
        // their documents: they go at once. Others are rebuilt to run their
        // `forget`; those that cannot be rebuilt are passed over (paging past
        // them), and logged. A record of a caller-chosen id still inside its
        // idempotency window becomes a stub instead.
        let (due, _) = self
            .scan(&ns, filter, &self.collection_at, |d| {
                let record = match TxRecord::from_document(d) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(target: "tandem", "skipping unreadable record: {e}");
                        return None;
                    }
                };
                if record
                    .participants
                    .iter()
                    .all(|p| p.kind == crate::document::KIND)
                {
                    return Some((record, None));
                }
                // A kind's factory that panics passes its record over, as
                // one that refuses it does.
                match std::panic::catch_unwind(AssertUnwindSafe(|| engine.rebuild(&record))) {
                    Ok(Ok(live)) => Some((record, Some(live))),
                    Ok(Err(e)) => {
                        tracing::error!(target: "tandem", "cannot rebuild {}: {e}", record.id);
                        None
                    }
                    Err(panic) => {
                        tracing::error!(target: "tandem", "rebuilding {} panicked: {}", record.id, panic_text(&*panic));
                        None
                    }
                }
            })
            .await?;
        // A keyed record keeps its id taken for the longer of this worker's
        // window and the one it was written with (a collector with a shorter
        // window, another application or `tandem gc`, keeps the writer's
        // promise), and then for the longest lease of the coordinators
        // creating keyed records here plus the margin: a run under the same
        // key sent before the window ended (or before this one finished)
        // can land its create live until its own lease has passed, and must
        // meet the id taken.
        // How long a stub outlives its window.
        let floor = if due.iter().any(|(record, _)| record.keyed) {
            Some(
                engine
                    .registered_lease()
                    .await?
                    .saturating_add(engine.margin_millis()),
            )
        } else {
            None
        };
        let due: Vec<_> = due
            .into_iter()
            .map(|(record, live)| {
                let finished = record
                    .finished_at
                    .or(record.last_modified)
                    .map(|t| t.timestamp_millis())
                    .unwrap_or(0);
                // A retry sent inside the window can land its create live
                // until its own lease has passed: the stub outlives the
                // window by the longest lease plus the margin.
                let window = window
                    .max(record.idempotency_millis.unwrap_or(0))
                    .saturating_add(floor.unwrap_or(0));
                let keep_until = (record.keyed
                    && finished.saturating_add(window) > now.timestamp_millis())
                .then(|| bson::DateTime::from_millis(finished.saturating_add(window)));
                (record, live, keep_until)
            })
            .collect();
        // Records to remove go in batches of one `delete` each, by `_id` under
        // the scan's own conditions: a record written again under the same id
        // since the scan (young, or not finished) is not among them. Stubs go
        // in batches of one request each, a statement per record.
        let mut ids = Vec::new();
        let mut stubs = Vec::new();
        // First the credit sums of the documents these records incremented
        // are dropped where nothing is pending any more; a record whose
        // documents could not be tidied stays for the next collection.
        let kept_back = self.tidy_credits(&due).await;
        for (record, live, keep_until) in due {
            if kept_back.contains(record.id.as_str()) {
                continue;
            }
            if let Some(live) = live {
                // Its participants' `forget` runs only where every store
                // name means the database the record was written in (the
                // identities were read by `tidy_credits`); kept otherwise,
                // for a process where it does.
                if let Some(why) = record
                    .participants
                    .iter()
                    .find_map(|p| engine.foreign_store(p))
                {
                    refuse_to_drive(&record.id, &why);
                    continue;
                }
                // Kept (for the next collection) where a `forget` failed
                // or panicked.
                let forgot = AssertUnwindSafe(engine.step_all(&live, Step::Forget))
                    .catch_unwind()
                    .await;
                match forgot {
                    Ok(results) if results.iter().all(Result::is_ok) => {}
                    Ok(_) => continue,
                    Err(panic) => {
                        tracing::error!(target: "tandem", "forgetting {} panicked: {}; kept", record.id, panic_text(&*panic));
                        continue;
                    }
                }
            }
            match keep_until {
                Some(until) => {
                    // Under the scan's own conditions and the record's
                    // creation token, as the deletes below: a worker that
                    // stalled since its scan must not stub a record written
                    // again under the id after this one was collected (its
                    // window would already be over, and the next pass would
                    // remove a record seconds old).
                    // `_id` first: a server that rides the first clause an
                    // index covers then looks the record up (SecantusDB
                    // took the state index, and stubs cost 60 ms each).
                    let mut filter = doc! { "_id": record.id.as_str() };
                    filter.extend(due_filter.clone());
                    filter.insert("state", record.state);
                    if let Some(token) = &record.token {
                        filter.insert("token", token.as_str());
                    }
                    // With the floor its end counted: a longer lease
                    // registered later keeps it longer (below).
                    let stub = doc! { "$set": {
                        "participants": [],
                        "history": [],
                        "stubUntil": until,
                        STUB_FLOOR: floor.unwrap_or(0),
                    } };
                    stubs.push((filter, stub));
                }
                None => ids.push(Bson::String(record.id.as_str().to_owned())),
            }
        }
        // What is done counts: an error after some records were removed
        // ends this collection with their count (the next one goes on);
        // only an error before any was removed is the answer.
        let mut removed = 0;
        let done = |result: Result<usize, StoreError>, removed: &mut usize| match result {
            Ok(n) => {
                *removed += n;
                Ok(())
            }
            Err(e) if *removed > 0 => {
                tracing::warn!(target: "tandem", "garbage collection stopped after {removed} record(s): {e}");
                Err(None)
            }
            Err(e) => Err(Some(e)),
        };
        // A request sent again after a lost answer: the first copy may have
        // done the work, and the repeat's count misses it. Then what is done
        // is counted by reading the batch's records back (`done_filter`
        // matches those the collection is done with; `gone` counts the ones
        // missing), and the repeat's count stays a lower bound if that fails.
        let recount = |n: usize, ids: Vec<Bson>, done_filter: Option<bson::Document>| {
            let ns = &ns;
            async move {
                let total = ids.len();
                let gone = done_filter.is_none();
                let filter = match done_filter {
                    Some(mut f) => {
                        f.insert("_id", doc! { "$in": ids });
                        f
                    }
                    None => doc! { "_id": { "$in": ids } },
                };
                match engine
                    .retry(|| engine.records().count(ns, filter.clone()))
                    .await
                {
                    Ok(found) => {
                        let found = usize::try_from(found).unwrap_or(total).min(total);
                        if gone {
                            total - found
                        } else {
                            found
                        }
                    }
                    Err(e) => {
                        tracing::warn!(target: "tandem", "garbage collection could not count what a repeated request did: {e}");
                        n
                    }
                }
            }
        };
        let outcome: Result<(), Option<StoreError>> = async {
            for batch in stubs.chunks(GC_BATCH) {
                let mut attempts = 0;
                let result = engine
                    .retry(|| {
                        attempts += 1;
                        engine.records().update_each(&ns, batch.to_vec())
                    })
                    .await;
                let result = match result {
                    Ok(n) if attempts > 1 => {
                        let ids = batch
                            .iter()
                            .filter_map(|(filter, _)| filter.get("_id").cloned())
                            .collect();
                        let stubbed = doc! { "stubUntil": { "$exists": true } };
                        Ok(recount(n as usize, ids, Some(stubbed)).await)
                    }
                    other => other.map(|n| n as usize),
                };
                done(result, &mut removed)?;
            }
            for batch in ids.chunks(GC_BATCH) {
                let mut filter = doc! { "_id": { "$in": batch } };
                filter.extend(due_filter.clone());
                let mut attempts = 0;
                let result = engine
                    .retry(|| {
                        attempts += 1;
                        engine.records().delete_many(&ns, filter.clone())
                    })
                    .await;
                let result = match result {
                    Ok(n) if attempts > 1 => Ok(recount(n as usize, batch.to_vec(), None).await),
                    other => other.map(|n| n as usize),
                };
                done(result, &mut removed)?;
            }
            // Stubs whose idempotency window has passed, in one request.
            // A stub's end counted the longest lease registered when it was
            // written; a run under its key sent inside the window registered
            // its own lease before its create, so before this read (`now`
            // is past the window's end): a stub goes once the floor read
            // now has passed too. One whose own floor covers it goes at its
            // end; any other (one written under a shorter registered lease,
            // or by a version that kept no floor) once the window's end and
            // the floor now have passed, which its end plus that floor is
            // surely not before.
            let floor = match floor {
                Some(floor) => floor,
                None => match engine.registered_lease().await {
                    Ok(lease) => lease.saturating_add(engine.margin_millis()),
                    Err(e) => return done(Err(e), &mut removed),
                },
            };
            let unfloored =
                bson::DateTime::from_millis(now.timestamp_millis().saturating_sub(floor));
            let expired = doc! { "$or": [
                { "stubUntil": { "$lte": now }, STUB_FLOOR: { "$gte": floor } },
                { "stubUntil": { "$lte": unfloored } },
            ] };
            let result = engine
                .retry(|| engine.records().delete_many(&ns, expired.clone()))
                .await;
            done(result.map(|n| n as usize), &mut removed)
        }
        .await;
        match outcome {
            Err(Some(e)) => Err(e),
            _ => Ok(removed),
        }
    }

    /// Drops the zero credit sums of the documents the records `due`
    /// incremented, where nothing is pending (every sum is zero then), in
    /// one request per store and collection (and [`GC_BATCH`] documents),
    /// each sent once. Returns the ids of the records whose documents were
    /// not tidied for a store error: they stay, and the next collection
    /// tries again. A store this worker does not have is passed over, with
    /// a warning: its documents keep their zeros until their next exclusive
    /// change.
    async fn tidy_credits(
        &self,
        due: &[(TxRecord, Option<Live>, Option<bson::DateTime>)],
    ) -> std::collections::HashSet<String> {
        type Group = (Vec<Bson>, Vec<String>);
        let mut credited: std::collections::BTreeMap<(Option<String>, String, String), Group> =
            std::collections::BTreeMap::new();
        let engine = &self.engine;
        let mut kept_back = std::collections::HashSet::new();
        if let Err(e) = engine.learn_uids(due.iter().map(|(r, _, _)| r)).await {
            tracing::warn!(target: "tandem", "garbage collection cannot read a store's identity: {e}");
        }
        for (record, _, _) in due {
            for p in &record.participants {
                match engine.foreign_store(p) {
                    None => {}
                    // Not read (the store failed): the record stays, and
                    // the next collection tries again.
                    Some(ChangeError::ForeignStore { here: None, .. }) => {
                        kept_back.insert(record.id.as_str().to_owned());
                        continue;
                    }
                    // Another database here under that name: its documents
                    // are not the ones the record incremented. The record
                    // stays for a collection that has the right store (as
                    // for a store this process does not have at all).
                    Some(why) => {
                        tracing::error!(target: "tandem", "garbage collection keeps {} for a process with the right store: {why}", record.id);
                        kept_back.insert(record.id.as_str().to_owned());
                        continue;
                    }
                }
                if let Some((store, ns, id)) = crate::document::incremented(&p.kind, &p.spec) {
                    let (ids, records) = credited.entry((store, ns.db, ns.collection)).or_default();
                    ids.push(id);
                    records.push(record.id.as_str().to_owned());
                }
            }
        }
        for ((store, db, collection), (mut ids, records)) in credited {
            let ns = Namespace::new(db, collection);
            let Some(target) = engine.stores.get(store.as_deref()) else {
                // Kept for a collection that has the store: once the records
                // are gone, nothing would look at those documents again.
                tracing::warn!(target: "tandem", "garbage collection keeps the records that credited {ns} in store {store:?}, which this process does not have, for one that has it");
                kept_back.extend(records.iter().cloned());
                continue;
            };
            ids.sort_by(crate::query::total_cmp);
            ids.dedup_by(|a, b| crate::query::total_cmp(a, b).is_eq());
            for batch in ids.chunks(GC_BATCH) {
                let (filter, update) = crate::document::tidy_credits(batch);
                if let Err(e) = target.update_many(&ns, filter, update).await {
                    tracing::warn!(target: "tandem", "garbage collection left credit sums in {ns}, and the records that made them: {e}");
                    kept_back.extend(records.iter().cloned());
                    break;
                }
            }
        }
        kept_back
    }
}

/// The fields of a record that a claim changes, read back in place of the
/// whole record (but for the history, whose line the claim knows). The
/// claim's filter names the record's state, epoch and `lastModified` as
/// scanned, and every other write of a live record moves its state or
/// epoch and stamps `lastModified`: whatever the claim did not change is
/// as scanned. The creation token and the `created` stamp, read
/// back too, tell the scanned record from another one under the same id
/// (the token alone does not tell it from an inert copy of itself, written
/// by a create that arrived late).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Claimed {
    state: TxState,
    epoch: i64,
    #[serde(default)]
    attempts: i32,
    owner: String,
    lease_millis: i64,
    claim_token: Option<String>,
    not_before: Option<bson::DateTime>,
    last_modified: Option<bson::DateTime>,
    lease_start: Option<bson::DateTime>,
    token: Option<String>,
    created: Option<bson::DateTime>,
}

impl Claimed {
    /// Reads a claim's answer (its dates directly, as
    /// [`TxRecord::from_document`] does).
    fn from_document(mut doc: bson::Document) -> Result<Self, bson::de::Error> {
        let [not_before, last_modified, lease_start, created] = crate::record::take_dates(
            &mut doc,
            ["notBefore", "lastModified", "leaseStart", "created"],
        );
        let mut claimed: Self = bson::from_document(doc)?;
        claimed.not_before = not_before.or(claimed.not_before);
        claimed.last_modified = last_modified.or(claimed.last_modified);
        claimed.lease_start = lease_start.or(claimed.lease_start);
        claimed.created = created.or(claimed.created);
        Ok(claimed)
    }

    /// The fields a claim returns.
    const FIELDS: &'static [&'static str] = &[
        "state",
        "epoch",
        "attempts",
        "owner",
        "leaseMillis",
        "claimToken",
        "notBefore",
        "lastModified",
        "leaseStart",
        "token",
        "created",
    ];

    /// `scanned` as this claim left it, with `line` (the one the claim
    /// pushed) at the end of its history, which keeps its last
    /// [`HISTORY_KEPT`] lines as the store
    /// does; `None` if the claimed record is not the one scanned (another
    /// creation token, or another write of it). The history is not read
    /// back: its lines are most of a record's fields, and the claim's
    /// filter says that the one stored is the one scanned.
    fn onto(self, scanned: Cow<'_, TxRecord>, line: HistoryEntry) -> Option<TxRecord> {
        if self.token != scanned.token || self.created != scanned.created {
            return None;
        }
        let mut record = scanned.into_owned();
        record.state = self.state;
        record.epoch = self.epoch;
        record.attempts = self.attempts;
        record.owner = self.owner;
        record.lease_millis = self.lease_millis;
        record.claim_token = self.claim_token;
        record.not_before = self.not_before;
        record.last_modified = self.last_modified;
        record.lease_start = self.lease_start;
        record.history.push(line);
        let kept = usize::try_from(HISTORY_KEPT).unwrap_or(usize::MAX);
        let dropped = record.history.len().saturating_sub(kept);
        record.history.drain(..dropped);
        Some(record)
    }
}

/// What a caught panic said, for the log.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Logs why a record is left undriven here: an error for a store name that
/// means another database here than where the record was written (the
/// deployment is wrong: processes sharing the records must agree on what
/// each store name means), a warning otherwise.
fn refuse_to_drive(id: &TxId, why: &ChangeError) {
    match why {
        ChangeError::ForeignStore {
            store,
            recorded,
            here: Some(here),
            ..
        } => tracing::error!(
            target: "tandem",
            "not driving {id}: the store {store:?} registered here (identity {here}) is not the one \
             the transaction was made in (identity {recorded}); left for a process whose store \
             {store:?} is that database"
        ),
        why => tracing::warn!(target: "tandem", "cannot recover {id} here: {why}"),
    }
}

/// The cursor behind `mutex`, also after a panic while it was held (a
/// cursor is a hint of where to read next; any value is safe).
fn lock(mutex: &Mutex<Option<Cursor>>) -> std::sync::MutexGuard<'_, Option<Cursor>> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[should_panic(expected = "interval must be longer than zero")]
    async fn a_zero_interval_is_refused_before_any_pass() {
        let coordinator = crate::Coordinator::builder(crate::MemoryStore::new()).build();
        let worker = coordinator.recovery(RecoveryConfig {
            interval: Duration::ZERO,
            ..RecoveryConfig::default()
        });
        worker.run_until(std::future::pending()).await;
    }

    fn record(token: &str) -> TxRecord {
        TxRecord::from_document(doc! {
            "_id": "t1", "state": "pending", "epoch": 0_i64, "owner": "a",
            "leaseMillis": 30_000_i64, "token": token, "earlyCommit": true,
            "participants": [{ "kind": "document", "label": "db.c/x", "spec": { "id": "x" } }],
            "lastModified": bson::DateTime::from_millis(1_000),
            "history": [{ "state": "pending", "owner": "a", "epoch": 0_i64, "event": "create" }],
        })
        .unwrap()
    }

    fn claimed(token: &str) -> Claimed {
        Claimed::from_document(doc! {
            "_id": "t1", "state": "pending", "epoch": 1_i64, "attempts": 1, "owner": "b",
            "leaseMillis": 60_000_i64, "claimToken": "c1", "token": token,
            "notBefore": bson::DateTime::from_millis(33_000),
            "lastModified": bson::DateTime::from_millis(40_000),
            "leaseStart": bson::DateTime::from_millis(1_000),
        })
        .unwrap()
    }

    fn line() -> HistoryEntry {
        HistoryEntry {
            state: TxState::Pending,
            owner: "b".into(),
            epoch: 1,
            event: "claim".into(),
        }
    }

    /// What a claim read back replaces every field the claim changes, and
    /// keeps the rest as scanned: the same record the whole read would give.
    #[test]
    fn a_claim_read_back_equals_the_whole_record() {
        let scanned = record("k1");
        let merged = claimed("k1")
            .onto(Cow::Borrowed(&scanned), line())
            .expect("the same record");
        let mut whole = scanned.clone();
        whole.epoch = 1;
        whole.attempts = 1;
        whole.owner = "b".into();
        whole.lease_millis = 60_000;
        whole.claim_token = Some("c1".into());
        whole.not_before = Some(bson::DateTime::from_millis(33_000));
        whole.last_modified = Some(bson::DateTime::from_millis(40_000));
        whole.lease_start = Some(bson::DateTime::from_millis(1_000));
        whole.history.push(line());
        assert_eq!(merged, whole);
        assert_eq!(merged.participants, scanned.participants);
    }

    /// A claim's record, with the history it did not read back, is the one
    /// the store then holds, also once the history is full and the claim's
    /// line pushes the oldest out; and claiming again from it gives the
    /// stored one again.
    #[tokio::test]
    async fn a_claimed_record_is_the_one_stored_with_its_history_sliced() {
        let coordinator = crate::Coordinator::builder(crate::MemoryStore::new()).build();
        let worker = coordinator.recovery(RecoveryConfig::default());
        let engine = &worker.engine;
        let lines: Vec<Bson> = (0..HISTORY_KEPT - 1)
            .map(|n| history(TxState::Pending, "a", 0, &format!("line {n}")))
            .collect();
        let id = TxId::new("t1").unwrap();
        engine
            .records()
            .insert_one(
                &engine.records_ns(),
                doc! {
                    "_id": id.as_str(), "state": "canceling", "epoch": 0_i64, "owner": "a",
                    "leaseMillis": 30_000_i64, "token": "k1",
                    "participants": [{ "kind": "document", "label": "db.c/x", "spec": { "id": "x" } }],
                    "lastModified": bson::DateTime::from_millis(1_000),
                    "history": lines,
                },
            )
            .await
            .unwrap();
        let mut scanned = engine.load(&id).await.unwrap().expect("written");
        for claims in 1..=3_i64 {
            let claimed = worker
                .claim(Cow::Owned(scanned), false, true)
                .await
                .unwrap()
                .expect("claimed");
            let stored = engine.load(&id).await.unwrap().expect("kept");
            assert_eq!(claimed, stored, "claim {claims}");
            assert_eq!(
                stored.history.len(),
                HISTORY_KEPT as usize,
                "claim {claims}"
            );
            let last = stored.history.last().unwrap();
            assert_eq!((last.epoch, last.event.as_str()), (claims, "claim"));
            scanned = claimed;
        }
    }

    /// A record of another creation token under the same id is not merged
    /// into the one scanned.
    #[test]
    fn a_claim_of_another_record_under_the_id_is_not_merged() {
        assert!(claimed("k2")
            .onto(Cow::Owned(record("k1")), line())
            .is_none());
    }

    /// The inert copy a late create wrote (same id and token, another
    /// `created` stamp) is not merged into the live record scanned.
    #[test]
    fn a_claim_of_an_inert_copy_is_not_merged() {
        let mut scanned = record("k1");
        scanned.created = Some(bson::DateTime::from_millis(1_000));
        let mut copy = claimed("k1");
        copy.created = Some(bson::DateTime::from_millis(31_000));
        assert!(copy.onto(Cow::Borrowed(&scanned), line()).is_none());
    }
}
