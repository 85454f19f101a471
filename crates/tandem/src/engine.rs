//! The protocol steps shared by the coordinator and the recovery worker.
//!
//! An [`Engine`] drives one transaction that a worker owns at a given epoch:
//! guarded state transitions of the record, and concurrent participant steps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson, Document};
use futures::future::join_all;

use crate::config::{ConflictPolicy, CoordinatorConfig};
use crate::error::{ChangeError, StepError, TxError};
use crate::event::{EventSink, TxEvent};
use crate::participant::{Participant, ParticipantKinds, StepContext, Stores};
use crate::record::{ParticipantEntry, TxRecord, TxState, CONFLICT_EVENT};
use crate::store::{
    FindOneAndUpdateOptions, Namespace, ReturnDocument, Store, StoreError, StoreErrorKind,
};
use crate::TxId;

/// Most transactions finished together in one round (by the background
/// finisher, or by a recovery pass): their moves share one statement, their
/// clears one request per store and collection.
pub(crate) const ROUND: usize = 64;

/// A participant and its recorded before-image.
pub(crate) struct Party {
    pub participant: Box<dyn Participant>,
    pub before: Option<Document>,
    /// Whether an apply of this epoch failed with its outcome unknown: that
    /// request may still land until the epoch's deadline, so the marker may
    /// be removed only after the deadline plus the clock margin.
    pub in_doubt: AtomicBool,
    /// The marker of a change to a document an earlier participant changes
    /// too, through another store name ([`party_markers`]); `None`: the
    /// transaction's.
    pub marker: Option<TxId>,
}

impl Party {
    pub fn new(participant: Box<dyn Participant>, before: Option<Document>) -> Self {
        Party {
            participant,
            before,
            in_doubt: AtomicBool::new(false),
            marker: None,
        }
    }

    /// This party with its own marker (`None`: the transaction's).
    pub fn with_marker(mut self, marker: Option<TxId>) -> Self {
        self.marker = marker;
        self
    }
}

/// The markers of participants that change a document an earlier one
/// changes too (`keys`: [`document_key`](crate::document::document_key) of
/// each), `None` for the others, which carry the transaction's `marker`.
///
/// Two changes of one document in one transaction are refused as one
/// document named twice, but only through one store name: one database
/// registered under two names names it twice unnoticed. Each change must
/// then carry a marker of its own, or the second to apply finds the first's
/// marker, takes it for its own apply, and is lost from a committed
/// transaction. The marker is `<marker>/<index>`, and the record keeps it
/// ([`ParticipantEntry::marker`](crate::record::ParticipantEntry::marker)).
/// (A marker without a tag, of a record written before tags, stays as it
/// was.)
pub(crate) fn party_markers(keys: &[Option<Vec<u8>>], marker: &TxId) -> Vec<Option<TxId>> {
    let tagged = TxId::of_marker(marker.as_str()) != marker.as_str();
    let mut seen = std::collections::HashSet::new();
    keys.iter()
        .enumerate()
        .map(|(index, key)| match key {
            Some(key) if tagged && !seen.insert(key.as_slice()) => {
                Some(TxId::from_marker_parts(marker, index))
            }
            _ => None,
        })
        .collect()
}

/// Whether `party`'s document is one the transaction names more than once
/// (through two store names of one database): a conflict there may be with
/// the transaction's own hold, which names no one when the other change
/// uses another marker field, and waiting would wait for nothing.
fn named_twice(live: &Live, party: &Party) -> bool {
    if live.parties.iter().all(|p| p.marker.is_none()) {
        return false;
    }
    let key = |p: &Party| {
        p.participant
            .spec()
            .ok()
            .and_then(|spec| crate::document::document_key(p.participant.kind(), &spec))
    };
    let Some(own) = key(party) else {
        return false;
    };
    live.parties
        .iter()
        .filter(|p| key(p).as_ref() == Some(&own))
        .count()
        > 1
}

/// A transaction as one worker drives it.
pub(crate) struct Live {
    pub id: TxId,
    /// Whether the id was chosen by the caller (an idempotency key).
    pub keyed: bool,
    /// The record's creation token: every move of the record names it, so a
    /// stalled worker of an earlier transaction with the same id (its record
    /// collected, the id used again) cannot move the new one.
    pub token: Option<String>,
    /// When the store wrote the record and the create deadline it carries,
    /// when known: every move of the record names the first, and a batch of
    /// moves requires a write before the second. A create that arrived late
    /// writes an inert record with the same id, token and epoch
    /// ([`TxRecord::is_inert`]), but always stamped at or after its create
    /// deadline, so no move meant for the live record can land on it.
    pub stamps: Option<CreateStamps>,
    pub epoch: i64,
    /// What the participants' markers and locks hold: [`TxId::marker`].
    pub marker: TxId,
    pub parties: Vec<Party>,
    /// The deadline of this epoch's applies, by the participant stores' clocks.
    pub deadline: bson::DateTime,
    /// No marker may be removed before this time: see [`TxRecord::not_before`].
    pub not_before: Option<bson::DateTime>,
    /// Committed at its applies while the record still says `pending`
    /// ([`TxRecord::early_commit`]): finishing moves the record to
    /// `applied` first, and clears no marker unless that move succeeds.
    pub early: bool,
}

/// When a live record was written (`created`, by the records store's clock)
/// and its create deadline (`createBy`): `created < create_by`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CreateStamps {
    pub created: bson::DateTime,
    pub create_by: bson::DateTime,
}

impl CreateStamps {
    /// The stamps of a record, if it has both and is live (not inert).
    pub fn of(record: &TxRecord) -> Option<CreateStamps> {
        match (record.created, record.create_by) {
            (Some(created), Some(create_by)) if created < create_by => {
                Some(CreateStamps { created, create_by })
            }
            _ => None,
        }
    }
}

/// Which participant step to run.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    Apply,
    Compensate,
    Clear,
    Forget,
}

/// Single-document updates of several participants, for one request.
struct Batch {
    store: Arc<dyn Store>,
    namespace: Namespace,
    /// (index of the transaction, index into its `Live::parties`), in the order of `statements`.
    members: Vec<(usize, usize)>,
    statements: Vec<(Document, Document)>,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Apply => "apply",
            Step::Compensate => "compensate",
            Step::Clear => "clear",
            Step::Forget => "forget",
        }
    }
}

/// The collection, in the coordinator's database on each named store,
/// that holds the store's identity ([`Engine::store_uid`]).
pub(crate) const IDENTITY_COLLECTION: &str = "tandem_store";

/// The collection, in the coordinator's database on the records store,
/// that keeps the longest lease of the coordinators creating keyed records
/// in each records collection ([`Engine::register_lease`]).
pub(crate) const LEASES_COLLECTION: &str = "tandem_leases";

/// The `_id` of a store's identity document.
const IDENTITY_ID: &str = "identity";

/// The identities of the named stores, as read once per process
/// ([`Engine::store_uid`]): shared by a coordinator and its recovery workers.
#[derive(Default)]
pub(crate) struct StoreUids {
    cells: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<String>>>>,
}

impl StoreUids {
    fn cell(&self, name: &str) -> Arc<tokio::sync::OnceCell<String>> {
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells.entry(name.to_owned()).or_default().clone()
    }

    /// The identity of the store named `name`, if read already.
    fn known(&self, name: &str) -> Option<String> {
        let cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells.get(name).and_then(|cell| cell.get().cloned())
    }
}

/// The shared machinery: stores, participant kinds, configuration, events.
pub(crate) struct Engine {
    pub stores: Stores,
    pub kinds: ParticipantKinds,
    pub config: CoordinatorConfig,
    pub events: Option<EventSink>,
    /// The named stores' identities, read once per process.
    pub uids: Arc<StoreUids>,
    /// Set once this coordinator's lease is in the leases collection
    /// ([`Engine::register_lease`]).
    pub lease_registered: tokio::sync::OnceCell<()>,
    /// Whether a transaction id is one of the coordinator's own committed
    /// transactions still waiting for its background finisher (`None`: a
    /// recovery worker's engine, which has no finisher). An apply refused
    /// as a conflict with one is not waited out under
    /// [`ConflictPolicy::Wait`]: the coordinator wakes the finisher and
    /// waits for that finishing instead, which a backoff would leave asleep
    /// for its `finish_delay`.
    pub own_unfinished: Option<OwnUnfinished>,
}

/// See [`Engine::own_unfinished`].
pub(crate) type OwnUnfinished = Arc<dyn Fn(&str) -> bool + Send + Sync>;

impl Engine {
    pub fn records(&self) -> &Arc<dyn Store> {
        self.stores.default_store()
    }

    pub fn records_ns(&self) -> Namespace {
        Namespace::new(&self.config.database, &self.config.collection)
    }

    pub fn emit(&self, event: TxEvent) {
        tracing::info!(target: "tandem", "{event}");
        if let Some(sink) = &self.events {
            sink(&event);
        }
    }

    /// Runs a store call again while it fails transiently, as the retry policy allows.
    pub async fn retry<T, F, Fut>(&self, mut call: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let started = tokio::time::Instant::now();
        match call().await {
            // Boxed: the path seldom taken, with its timer, does not grow the
            // future of every caller.
            Err(e) if e.kind.is_retryable() => Box::pin(self.retry_after(call, started, e)).await,
            other => other,
        }
    }

    /// [`retry`](Self::retry) after the first call (begun at `started`)
    /// failed transiently with `error`.
    async fn retry_after<T, F, Fut>(
        &self,
        mut call: F,
        started: tokio::time::Instant,
        mut error: StoreError,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let mut attempt = 1;
        loop {
            match self.config.retry.next_delay(attempt, started.elapsed()) {
                Some(delay) => tokio::time::sleep(delay).await,
                None => return Err(gave_up(error, attempt, started)),
            }
            attempt += 1;
            match call().await {
                Err(e) if e.kind.is_retryable() => error = e,
                other => return other,
            }
        }
    }

    /// What a run meeting the record under `id` is told of the run that
    /// took the id ([`TxRecord::state_for_duplicate`]); `None` also where
    /// the record could not be read, or is gone.
    pub(crate) async fn duplicate_state(&self, id: &TxId) -> Option<crate::record::TxState> {
        self.load(id)
            .await
            .ok()
            .flatten()
            .and_then(|r| r.state_for_duplicate())
    }

    /// Reads a record.
    pub async fn load(&self, id: &TxId) -> Result<Option<TxRecord>, StoreError> {
        let ns = self.records_ns();
        let found = self
            .retry(|| self.records().find_one(&ns, doc! { "_id": id.as_str() }))
            .await?;
        found
            .map(|d| {
                TxRecord::from_document(d).map_err(|e| {
                    StoreError::new(
                        StoreErrorKind::Other,
                        format!("unreadable record {id}: {e}"),
                    )
                })
            })
            .transpose()
    }

    /// The guarded update that moves `live`'s record from `from` to `to`.
    fn transition_statement(
        &self,
        live: &Live,
        from: TxState,
        to: TxState,
        last_error: Option<&str>,
    ) -> (Document, Document) {
        self.transition_statement_noting(live, from, to, last_error, &[])
    }

    /// [`transition_statement`](Self::transition_statement), with `notes`
    /// as further history lines (their events) after the move's own.
    fn transition_statement_noting(
        &self,
        live: &Live,
        from: TxState,
        to: TxState,
        last_error: Option<&str>,
        notes: &[String],
    ) -> (Document, Document) {
        let mut filter = doc! { "_id": live.id.as_str(), "state": from, "epoch": live.epoch };
        if let Some(token) = &live.token {
            filter.insert("token", token.as_str());
        }
        if let Some(stamps) = live.stamps {
            // Not an inert copy written by a create that arrived late.
            filter.insert("created", stamps.created);
        }
        let mut set = doc! { "state": to };
        // Whatever an error or a note quotes, the record stays far below
        // the 16 MiB a document may hold.
        let limit =
            |text: &str| crate::error::clip(text.to_owned(), crate::error::RECORD_TEXT_LIMIT);
        if let Some(err) = last_error {
            set.insert("lastError", limit(err));
        }
        let mut stamps = doc! { "lastModified": true };
        if to.is_terminal() {
            // What an optional TTL index counts from: only finished records have it.
            stamps.insert("finishedAt", true);
        }
        let update = doc! {
            "$set": set,
            "$currentDate": stamps,
            "$push": { "history": {
                "$each": std::iter::once(history(to, &self.config.owner, live.epoch, "move"))
                    .chain(notes.iter().map(|n| {
                        let note = crate::error::clip(n.clone(), crate::error::HISTORY_TEXT_LIMIT);
                        history(to, &self.config.owner, live.epoch, &note)
                    }))
                    .collect::<Vec<_>>(),
                "$slice": -HISTORY_KEPT,
            } },
        };
        (filter, update)
    }

    /// Moves the record from `from` to `to`, guarded by state and epoch.
    pub async fn transition(
        &self,
        live: &Live,
        from: TxState,
        to: TxState,
        last_error: Option<String>,
    ) -> Result<(), TxError> {
        self.transition_noting(live, from, to, last_error, &[])
            .await
    }

    /// [`transition`](Self::transition), noting `notes` in the history.
    pub async fn transition_noting(
        &self,
        live: &Live,
        from: TxState,
        to: TxState,
        last_error: Option<String>,
        notes: &[String],
    ) -> Result<(), TxError> {
        debug_assert!(from.can_move_to(to), "{from} -> {to}");
        let ns = self.records_ns();
        // Built afresh for each attempt: the store takes them by value, and
        // building costs no more than the copy a retry would otherwise need.
        let statement =
            || self.transition_statement_noting(live, from, to, last_error.as_deref(), notes);
        let interrupted = |source| TxError::Interrupted {
            id: live.id.clone(),
            state: Some(from),
            source,
        };
        let outcome = self
            .retry(|| {
                let (filter, update) = statement();
                self.records().update_one(
                    &ns,
                    filter,
                    update,
                    crate::store::UpdateOptions::default(),
                )
            })
            .await
            .map_err(interrupted)?;
        if outcome.matched == 0 {
            // Either an earlier attempt of ours landed, or another worker owns the record now,
            // or the record is another transaction's that reused the id after ours was
            // collected (same epoch, maybe the same state, but another creation token).
            let now = self.load(&live.id).await.map_err(interrupted)?;
            match now {
                Some(r)
                    if r.state == to
                        && r.epoch == live.epoch
                        && (live.token.is_none() || r.token == live.token)
                        && live.stamps.is_none_or(|s| r.created == Some(s.created)) => {}
                // Another transaction's record under the id: ours is gone.
                Some(r) if live.token.is_some() && r.token != live.token => {
                    return Err(TxError::Superseded {
                        id: live.id.clone(),
                        state: None,
                        epoch: live.epoch,
                    })
                }
                Some(r) => {
                    return Err(TxError::Superseded {
                        id: live.id.clone(),
                        state: Some(r.state),
                        epoch: r.epoch,
                    })
                }
                None => {
                    return Err(TxError::Superseded {
                        id: live.id.clone(),
                        state: None,
                        epoch: live.epoch,
                    })
                }
            }
        }
        self.emit(TxEvent::StateChanged {
            id: live.id.clone(),
            from,
            to,
        });
        Ok(())
    }

    /// Cancels an inert record ([`TxRecord::is_inert`]), in state `from`
    /// (`pending` or `canceling`), without touching any document: nothing
    /// of it was applied, and its participants' markers, if any, belong to
    /// the transaction that first wrote the record.
    pub async fn cancel_inert(&self, live: &Live, from: TxState) -> Result<(), TxError> {
        if from == TxState::Pending {
            self.transition(
                live,
                TxState::Pending,
                TxState::Canceling,
                Some(INERT.to_owned()),
            )
            .await?;
        }
        self.transition(live, TxState::Canceling, TxState::Canceled, None)
            .await
    }

    /// What `step` of `party` knows: the apply deadline, and for a step that
    /// removes the marker the time it must wait for, which covers every apply
    /// that may still be in flight (an earlier epoch's, or this epoch's own
    /// when one of its answers was lost).
    fn context<'a>(&'a self, live: &'a Live, party: &'a Party, step: Step) -> StepContext<'a> {
        let not_before = match step {
            Step::Apply | Step::Forget => None,
            Step::Compensate | Step::Clear => {
                let own = party.in_doubt.load(Ordering::SeqCst).then(|| {
                    let margin =
                        i64::try_from(self.config.clock_margin.as_millis()).unwrap_or(i64::MAX);
                    bson::DateTime::from_millis(
                        live.deadline.timestamp_millis().saturating_add(margin),
                    )
                });
                match (live.not_before, own) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                }
            }
        };
        StepContext {
            tx: &live.id,
            marker: party.marker.as_ref().unwrap_or(&live.marker),
            epoch: live.epoch,
            deadline: Some(live.deadline),
            not_before,
            before: party.before.as_ref(),
            stores: &self.stores,
            lease: self.config.lease,
        }
    }

    /// Runs one step on one participant, retrying transient failures (and conflicts, if configured).
    async fn step(&self, live: &Live, party: &Party, step: Step) -> Result<(), StepError> {
        let ctx = self.context(live, party, step);
        let p = &party.participant;
        let mut attempt = 0;
        let started = tokio::time::Instant::now();
        loop {
            let mut result = match step {
                Step::Apply => p.apply(ctx).await,
                Step::Compensate => p.compensate(ctx).await,
                Step::Clear => p.clear_marker(ctx).await,
                Step::Forget => p.forget(ctx).await,
            };
            attempt += 1;
            if matches!(result, Err(StepError::Conflict { .. })) {
                crate::metrics::conflict(crate::Strategy::TwoPhase);
            }
            if matches!(step, Step::Apply)
                && matches!(&result, Err(StepError::Store { source, .. }) if source.kind.outcome_unknown())
            {
                // The request may have landed, or may land later, until the deadline.
                party.in_doubt.store(true, Ordering::SeqCst);
            }
            let delay = match (&result, self.config.conflict) {
                (Err(StepError::Store { source, .. }), _) if source.kind.is_retryable() => {
                    self.config.retry.next_delay(attempt, started.elapsed())
                }
                // A transaction that holds the document itself (one
                // database under two store names) would wait for nothing.
                (Err(StepError::Conflict { holder, .. }), ConflictPolicy::Wait { timeout })
                    if matches!(step, Step::Apply)
                        && started.elapsed() < timeout
                        && holder.as_str() != live.id.as_str()
                        && !named_twice(live, party)
                        && !self.own_unfinished.as_ref().is_some_and(|own| own(holder)) =>
                {
                    // Never a busy loop, even under a policy without delays.
                    Some(
                        self.config
                            .retry
                            .jittered_backoff(attempt)
                            .max(Duration::from_millis(1)),
                    )
                }
                _ => None,
            };
            let Some(delay) = delay else {
                if let Err(StepError::Store { source, .. }) = &mut result {
                    if source.kind.is_retryable() && attempt > 1 {
                        *source = gave_up(source.clone(), attempt, started);
                    }
                }
                if let Err(e) = &result {
                    self.emit(TxEvent::StepFailed {
                        id: live.id.clone(),
                        participant: p.label(),
                        error: e.to_string(),
                    });
                }
                return result;
            };
            tokio::time::sleep(delay).await;
        }
    }

    /// A participant's [`prepare`](Participant::prepare) (its before-image
    /// read, an insert's reservation of its `_id`), repeated while it fails
    /// transiently and the retry policy allows, as every other store request
    /// is (`repeat`), or run once (a hand-written participant, whose
    /// `prepare` runs once).
    pub async fn prepare(
        &self,
        participant: &dyn Participant,
        ctx: StepContext<'_>,
        repeat: bool,
    ) -> Result<Option<Document>, StepError> {
        let started = tokio::time::Instant::now();
        let result = self.prepare_once(participant, ctx, repeat).await;
        match (&result, self.config.conflict) {
            (Err(StepError::Conflict { .. }), ConflictPolicy::Wait { .. }) if repeat => {
                Box::pin(self.prepare_waiting(participant, ctx, started, result)).await
            }
            _ => result,
        }
    }

    /// [`prepare`](Self::prepare) but for waiting out a conflict.
    async fn prepare_once(
        &self,
        participant: &dyn Participant,
        ctx: StepContext<'_>,
        repeat: bool,
    ) -> Result<Option<Document>, StepError> {
        let started = tokio::time::Instant::now();
        match participant.prepare(ctx).await {
            Err(StepError::Store {
                participant: label,
                source,
            }) if repeat && source.kind.is_retryable() => {
                // Boxed: the path seldom taken, with its timer, does not grow
                // every participant's future.
                Box::pin(self.prepare_again(participant, ctx, started, label, source)).await
            }
            other => other,
        }
    }

    /// A document change's [`prepare`](Self::prepare) (begun at `started`)
    /// that met a document held by another transaction (`result`), under
    /// [`ConflictPolicy::Wait`]: repeated with backoff until the holder is
    /// done or the timeout has passed, as an apply is (an exclusive change
    /// reads its before-image once nothing is pending). Not for a holder of
    /// the coordinator's own waiting for its background finishing, which
    /// the coordinator wakes and waits for instead.
    async fn prepare_waiting(
        &self,
        participant: &dyn Participant,
        ctx: StepContext<'_>,
        started: tokio::time::Instant,
        mut result: Result<Option<Document>, StepError>,
    ) -> Result<Option<Document>, StepError> {
        let ConflictPolicy::Wait { timeout } = self.config.conflict else {
            return result;
        };
        let mut attempt = 1;
        loop {
            let waiting = match &result {
                Err(StepError::Conflict { holder, .. }) => {
                    started.elapsed() < timeout
                        && !self.own_unfinished.as_ref().is_some_and(|own| own(holder))
                }
                _ => false,
            };
            if !waiting {
                // Counted by the caller, as a conflict that ends preparing.
                return result;
            }
            crate::metrics::conflict(crate::Strategy::TwoPhase);
            let delay = self
                .config
                .retry
                .jittered_backoff(attempt)
                .max(Duration::from_millis(1));
            tokio::time::sleep(delay).await;
            attempt += 1;
            result = self.prepare_once(participant, ctx, true).await;
        }
    }

    /// [`prepare`](Self::prepare) after its first attempt (begun at
    /// `started`) failed transiently with `source`: repeated while it fails
    /// transiently and the retry policy allows.
    async fn prepare_again(
        &self,
        participant: &dyn Participant,
        ctx: StepContext<'_>,
        started: tokio::time::Instant,
        mut label: String,
        mut source: StoreError,
    ) -> Result<Option<Document>, StepError> {
        let mut attempt = 1;
        loop {
            match self.config.retry.next_delay(attempt, started.elapsed()) {
                Some(delay) => tokio::time::sleep(delay).await,
                None => {
                    return Err(StepError::Store {
                        participant: label,
                        source: gave_up(source, attempt, started),
                    })
                }
            }
            attempt += 1;
            match participant.prepare(ctx).await {
                Err(StepError::Store {
                    participant,
                    source: again,
                }) if again.kind.is_retryable() => {
                    label = participant;
                    source = again;
                }
                other => return other,
            }
        }
    }

    /// Runs one step on every participant at once.
    ///
    /// Applies and clears that are single-document updates
    /// ([`Participant::apply_statement`]) go to their store together, one request
    /// per store and collection ([`Store::update_each`]). If any of a request's
    /// statements did not match, or the request failed, each of its participants
    /// runs its step on its own, which finds out what landed and why the rest did not.
    pub async fn step_all(&self, live: &Live, step: Step) -> Vec<Result<(), StepError>> {
        self.step_all_of(&[live], step)
            .await
            .pop()
            .expect("one result list per transaction")
    }

    /// [`step_all`](Self::step_all) for several transactions at once: their
    /// single-document updates share requests too. One result list per transaction.
    async fn step_all_of(&self, lives: &[&Live], step: Step) -> Vec<Vec<Result<(), StepError>>> {
        let (groups, solo) = self.batches(lives, step);
        let one = |(t, i): (usize, usize)| async move {
            let live = lives[t];
            ((t, i), self.step(live, &live.parties[i], step).await)
        };
        let solo_runs = join_all(solo.into_iter().map(one));
        let batch_runs = join_all(groups.into_iter().map(|batch| async move {
            let size = batch.statements.len() as u64;
            let landed = match batch.store.update_each(&batch.namespace, batch.statements).await {
                Ok(matched) => matched == size,
                Err(e) => {
                    tracing::debug!(target: "tandem", "{} of {} transaction(s): one request failed ({e}); step by step", step.name(), lives.len());
                    if matches!(step, Step::Apply) && e.kind.outcome_unknown() {
                        for &(t, i) in &batch.members {
                            lives[t].parties[i].in_doubt.store(true, Ordering::SeqCst);
                        }
                    }
                    false
                }
            };
            (batch.members, landed)
        }));
        let (solo_results, batch_results) = futures::future::join(solo_runs, batch_runs).await;
        let mut results: Vec<Vec<Option<Result<(), StepError>>>> = lives
            .iter()
            .map(|live| (0..live.parties.len()).map(|_| None).collect())
            .collect();
        for ((t, i), result) in solo_results {
            results[t][i] = Some(result);
        }
        let mut again = Vec::new();
        for (members, landed) in batch_results {
            if landed {
                for (t, i) in members {
                    results[t][i] = Some(Ok(()));
                }
            } else {
                again.extend(members);
            }
        }
        for ((t, i), result) in join_all(again.into_iter().map(one)).await {
            results[t][i] = Some(result);
        }
        results
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .map(|r| r.expect("every participant ran its step"))
                    .collect()
            })
            .collect()
    }

    /// Splits the participants of `lives` into requests of several
    /// single-document updates (for applies and clears, where at least two
    /// share a store and a collection) and those that run their step on their
    /// own, each named by (transaction, participant) indexes.
    fn batches(&self, lives: &[&Live], step: Step) -> (Vec<Batch>, Vec<(usize, usize)>) {
        let mut groups: Vec<Batch> = Vec::new();
        let mut solo = Vec::new();
        let everyone = || {
            lives
                .iter()
                .enumerate()
                .flat_map(|(t, live)| (0..live.parties.len()).map(move |i| (t, i)))
        };
        if !matches!(step, Step::Apply | Step::Clear) || everyone().nth(1).is_none() {
            return (groups, everyone().collect());
        }
        for (t, i) in everyone() {
            let live = lives[t];
            let party = &live.parties[i];
            let ctx = self.context(live, party, step);
            let statement = match step {
                Step::Apply => party.participant.apply_statement(&ctx),
                _ => party.participant.clear_statement(&ctx),
            };
            let Some(st) = statement else {
                solo.push((t, i));
                continue;
            };
            let same =
                |b: &&mut Batch| Arc::ptr_eq(&b.store, &st.store) && b.namespace == st.namespace;
            match groups.iter_mut().find(same) {
                Some(batch) => {
                    batch.members.push((t, i));
                    batch.statements.push((st.filter, st.update));
                }
                None => groups.push(Batch {
                    store: st.store,
                    namespace: st.namespace,
                    members: vec![(t, i)],
                    statements: vec![(st.filter, st.update)],
                }),
            }
        }
        // A request of one statement saves nothing over the step itself.
        groups.retain(|b| {
            if b.members.len() < 2 {
                solo.extend(&b.members);
                false
            } else {
                true
            }
        });
        (groups, solo)
    }

    /// Runs a step everywhere; the first failure means the store failed mid-way.
    async fn step_all_or_interrupt(
        &self,
        live: &Live,
        step: Step,
        state: TxState,
    ) -> Result<(), TxError> {
        interrupted_by(live, state, self.step_all(live, step).await)
    }

    /// From `pending`: apply everything. `Ok(())` once every apply landed
    /// (for a transaction that commits at its applies, the commit point; the
    /// record still says `pending`); on a refusal, cancels and answers why.
    pub async fn apply_or_refuse(&self, live: &Live) -> Result<(), TxError> {
        let results = self.step_all(live, Step::Apply).await;
        self.applied_or_refuse(live, results).await
    }

    /// Participant `index`'s apply of `live` again, on its own (after a
    /// conflict its holder has since settled).
    pub async fn apply_again(&self, live: &Live, index: usize) -> Result<(), StepError> {
        self.step(live, &live.parties[index], Step::Apply).await
    }

    /// [`apply_or_refuse`](Self::apply_or_refuse) once the applies were
    /// made: `Ok(())` if every one of `results` landed, else cancels.
    pub async fn applied_or_refuse(
        &self,
        live: &Live,
        results: Vec<Result<(), StepError>>,
    ) -> Result<(), TxError> {
        let mut refusals = results
            .into_iter()
            .enumerate()
            .filter_map(|(i, r)| r.err().map(|e| (i, e)))
            .collect::<Vec<_>>();
        if refusals.is_empty() {
            return Ok(());
        }
        // A refusal by a change's own conditions explains the cancellation
        // best: the transaction is refused again however often it is
        // retried, which a conflict, an expired apply or a store failure
        // does not say. Then any other answer of the store before a store
        // failure; among equals, the first participant's.
        refusals.sort_by_key(|(i, e)| (!e.is_refusal(), e.is_store_failure(), *i));
        let (index, cause) = refusals.swap_remove(0);
        let by = live.parties[index].participant.reference(index);
        self.cancel(live, cause, Some(by)).await
    }

    /// From `pending`: cancel because of `cause` (a refusal of participant
    /// `by`), undoing every participant.
    pub async fn cancel(
        &self,
        live: &Live,
        cause: StepError,
        by: Option<crate::ParticipantRef>,
    ) -> Result<(), TxError> {
        self.transition(
            live,
            TxState::Pending,
            TxState::Canceling,
            Some(cause.to_string()),
        )
        .await?;
        // `canceling` decides the outcome: whatever the undoing meets (a store
        // failure, an apply still in flight), recovery finishes it, and the
        // transaction ends `canceled` with nothing applied.
        let undone = match self.finish_canceling(live).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(target: "tandem", "undoing {} left to recovery: {e}", live.id);
                false
            }
        };
        Err(TxError::Canceled {
            id: live.id.clone(),
            cause,
            participant: by.map(Box::new),
            undone,
        })
    }

    /// From `canceling`: undo every participant and move to `canceled`.
    ///
    /// An undo that left fields as a writer outside tandem set them
    /// ([`StepError::Overwritten`]) is done; the move to `canceled` notes it
    /// in the history.
    pub async fn finish_canceling(&self, live: &Live) -> Result<(), TxError> {
        let mut conflicts = Vec::new();
        let results = self
            .step_all(live, Step::Compensate)
            .await
            .into_iter()
            .map(|r| match r {
                Err(StepError::Overwritten {
                    participant,
                    fields,
                }) => {
                    conflicts.push(format!("{CONFLICT_EVENT} {participant}: {fields}"));
                    Ok(())
                }
                other => other,
            })
            .collect();
        interrupted_by(live, TxState::Canceling, results)?;
        self.transition_noting(
            live,
            TxState::Canceling,
            TxState::Canceled,
            None,
            &fold_conflicts(conflicts),
        )
        .await
    }

    /// From `applied` (or, for a transaction that committed at its applies,
    /// from `pending`: moving it to `applied` first): clear every marker and
    /// move to `done`.
    pub async fn finish_applied(&self, live: &Live) -> Result<(), TxError> {
        if live.early {
            self.transition(live, TxState::Pending, TxState::Applied, None)
                .await?;
        }
        self.step_all_or_interrupt(live, Step::Clear, TxState::Applied)
            .await?;
        self.transition(live, TxState::Applied, TxState::Done, None)
            .await
    }

    /// The first part of finishing several committed transactions
    /// ([`finish_applied`](Self::finish_applied) for many): those
    /// still `pending` (committed at their applies) move to `applied` in one
    /// request, and only those that moved have their markers cleared, in one
    /// request per store and collection. `Ok` for a transaction left
    /// `applied` with every marker cleared: only its move to `done`
    /// ([`close_many`](Self::close_many)) is left, which may wait to share a
    /// request with later ones. One result per transaction, in order.
    pub async fn settle_many(&self, lives: &[&Live]) -> Vec<Result<(), TxError>> {
        let early: Vec<usize> = (0..lives.len()).filter(|&t| lives[t].early).collect();
        let mut moved: Vec<Result<(), TxError>> = lives.iter().map(|_| Ok(())).collect();
        if !early.is_empty() {
            for (t, result) in self
                .move_many(lives, &early, TxState::Pending, TxState::Applied)
                .await
            {
                moved[t] = result;
            }
        }
        let ready: Vec<&Live> = (0..lives.len())
            .filter(|&t| moved[t].is_ok())
            .map(|t| lives[t])
            .collect();
        let mut steps = self.step_all_of(&ready, Step::Clear).await.into_iter();
        moved
            .into_iter()
            .zip(lives)
            .map(|(moved, live)| {
                moved?;
                let cleared = steps.next().expect("one result list per ready transaction");
                interrupted_by(live, TxState::Applied, cleared)
            })
            .collect()
    }

    /// The last part of finishing: moves the records of `lives[t]` for each
    /// `t` of `which`, settled ([`settle_many`](Self::settle_many)), from
    /// `applied` to `done`, in one request for those of one epoch. One result
    /// per `t`, in order.
    pub async fn close_many(
        &self,
        lives: &[&Live],
        which: &[usize],
    ) -> Vec<(usize, Result<(), TxError>)> {
        self.move_many(lives, which, TxState::Applied, TxState::Done)
            .await
    }

    /// Moves the records of `lives[t]` for each `t` of `which` from `from`
    /// to `to`. Several go in one statement ([`Store::update_many`]) per
    /// epoch, filtered on the state `from`, the epoch, and the records' ids
    /// and creation tokens (`_id: {$in}`, `token: {$in}`): a token is 96
    /// random bits drawn for one record, so a record matches only under its
    /// own id and token, and is moved by exactly the update its own
    /// compare-and-set would make. (Not an `$or` of per-record guards: a
    /// server may scan the collection for an `$or`.) If fewer than all
    /// matched, or a record has no token, each record takes the one-by-one
    /// path, which accepts a move that the shared statement made already and
    /// finds out why not otherwise. One result per `t`, in order.
    pub(crate) async fn move_many(
        &self,
        lives: &[&Live],
        which: &[usize],
        from: TxState,
        to: TxState,
    ) -> Vec<(usize, Result<(), TxError>)> {
        let mut all_moved = which.len() > 1
            && which
                .iter()
                .all(|&t| lives[t].token.is_some() && lives[t].stamps.is_some());
        let mut epochs: Vec<i64> = which.iter().map(|&t| lives[t].epoch).collect();
        epochs.sort_unstable();
        epochs.dedup();
        let ns = self.records_ns();
        for epoch in epochs {
            if !all_moved {
                break;
            }
            let group: Vec<&Live> = which
                .iter()
                .map(|&t| lives[t])
                .filter(|live| live.epoch == epoch)
                .collect();
            let ids: Vec<&str> = group.iter().map(|live| live.id.as_str()).collect();
            let tokens: Vec<&str> = group
                .iter()
                .filter_map(|live| live.token.as_deref())
                .collect();
            // Every live record of the group was written before the earliest
            // create deadline among them, or the count falls short and each
            // record moves on its own; an inert copy never was.
            let written_before = group
                .iter()
                .filter_map(|live| live.stamps.map(|s| s.create_by))
                .min()
                .unwrap_or(bson::DateTime::MIN);
            let (_, update) = self.transition_statement(group[0], from, to, None);
            let filter = doc! {
                "_id": { "$in": ids },
                "state": from,
                "epoch": epoch,
                "token": { "$in": tokens },
                "created": { "$lt": written_before },
            };
            all_moved = matches!(
                self.records().update_many(&ns, filter, update).await,
                Ok(outcome) if outcome.matched == group.len() as u64
            );
        }
        let mut results = Vec::with_capacity(which.len());
        for &t in which {
            let live = lives[t];
            let result = if all_moved {
                self.emit(TxEvent::StateChanged {
                    id: live.id.clone(),
                    from,
                    to,
                });
                Ok(())
            } else {
                self.transition(live, from, to, None).await
            };
            results.push((t, result));
        }
        results
    }

    /// For a transaction that commits at its applies, still `pending`:
    /// whether every participant's apply landed, asked once no apply of an
    /// earlier epoch can land any more (each participant store's clock reads
    /// [`Live::not_before`] or later). `Ok(None)`: not yet (some store's
    /// clock reads earlier); `Ok(Some(true))`: committed.
    pub async fn probe(&self, live: &Live) -> Result<Option<bool>, TxError> {
        let fence = live.not_before.unwrap_or_else(|| {
            bson::DateTime::from_millis(
                live.deadline
                    .timestamp_millis()
                    .saturating_add(self.margin_millis()),
            )
        });
        if let Some(party) = live.parties.iter().find(|p| !p.participant.probes()) {
            // The record was written by a coordinator whose participant of this
            // kind could say whether its apply landed; the kind registered here
            // builds one that cannot. Left as it is: rolling it back could undo
            // a transaction its coordinator answered committed.
            return Err(TxError::Interrupted {
                id: live.id.clone(),
                state: Some(TxState::Pending),
                source: StoreError::new(
                    StoreErrorKind::Other,
                    format!(
                        "{} cannot say whether its apply landed, but the transaction commits at its \
                         applies: register a participant kind whose participants can (Participant::probes)",
                        party.participant.label()
                    ),
                ),
            });
        }
        let answers = join_all(live.parties.iter().map(|party| {
            let ctx = StepContext {
                not_before: Some(fence),
                ..self.context(live, party, Step::Apply)
            };
            party.participant.applied(ctx)
        }))
        .await;
        let mut all = true;
        let mut waiting = false;
        for answer in answers {
            match answer {
                Ok(landed) => all &= landed,
                Err(StepError::NotYet { .. }) => waiting = true,
                Err(e) => {
                    return interrupted_by(live, TxState::Pending, vec![Err(e)]).map(|()| None)
                }
            }
        }
        Ok((!waiting).then_some(all))
    }

    /// What of `record` this engine cannot drive, if anything: a participant
    /// kind it cannot rebuild, a document change in a store it does not
    /// have, or one in a store that is another database here than where the
    /// record says the change was made ([`foreign_store`](Self::foreign_store)).
    /// A worker that claimed such a record would raise its epoch, its
    /// attempts and its back-off, fencing its owner off, and then fail to
    /// drive it (or, in the wrong database, find no marker and roll back a
    /// committed transaction).
    ///
    /// The identities compared are those read already
    /// ([`learn_uids`](Self::learn_uids)); one not read yet is
    /// [`ChangeError::ForeignStore`] with `here: None`.
    pub fn cannot_drive(&self, record: &TxRecord) -> Option<ChangeError> {
        record.participants.iter().find_map(|p| {
            if !self.kinds.knows(&p.kind) {
                return Some(ChangeError::UnknownKind {
                    kind: p.kind.clone(),
                });
            }
            let store = p.spec.get_str("store").ok();
            if p.kind == crate::document::KIND
                && store.is_some()
                && self.stores.get(store).is_none()
            {
                return Some(ChangeError::UnknownStore {
                    participant: p.label.clone(),
                    store: store.unwrap_or_default().to_owned(),
                });
            }
            self.foreign_store(p)
        })
    }

    /// Whether the store named in `entry` is, in this process, another
    /// database than the one the entry was recorded in: its identity
    /// ([`store_uid`](Self::store_uid)) differs from the recorded one
    /// ([`ParticipantEntry::store_uid`]), or has not been read here. `None`
    /// for an entry without a recorded identity (the default store, another
    /// kind, a record of an older version) or a store this process does not
    /// have (see [`cannot_drive`](Self::cannot_drive)).
    pub fn foreign_store(&self, entry: &ParticipantEntry) -> Option<ChangeError> {
        let recorded = entry.store_uid.as_deref()?;
        let store = entry.spec.get_str("store").ok()?;
        self.stores.get(Some(store))?;
        let here = self.uids.known(store);
        (here.as_deref() != Some(recorded)).then(|| ChangeError::ForeignStore {
            participant: entry.label.clone(),
            store: store.to_owned(),
            recorded: recorded.to_owned(),
            here,
        })
    }

    /// Reads the identities of the stores that the entries of `records`
    /// recorded one for ([`ParticipantEntry::store_uid`]), where not read
    /// already, each store once: nothing for records without any. The
    /// first failure is the answer (the other stores are still read).
    pub async fn learn_uids<'a>(
        &self,
        records: impl IntoIterator<Item = &'a TxRecord>,
    ) -> Result<(), StoreError> {
        let mut names: Vec<&str> = records
            .into_iter()
            .flat_map(|r| &r.participants)
            .filter(|p| p.store_uid.is_some())
            .filter_map(|p| p.spec.get_str("store").ok())
            .filter(|name| self.stores.get(Some(name)).is_some() && self.uids.known(name).is_none())
            .collect();
        names.sort_unstable();
        names.dedup();
        let mut first = Ok(());
        for name in names {
            if let Err(e) = self.store_uid(name).await {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// The identity of the store named `name`: a random value kept in the
    /// document `{_id: "identity", uid}` of the `tandem_store` collection
    /// of the coordinator's database on that store, written by the first
    /// process that asks (an upsert that only sets on insert; a duplicate
    /// key from a race reads the winner's). Read once per process, the
    /// first time it is needed, and kept.
    ///
    /// Two processes that share the records must mean the same database by
    /// each store name: the record keeps each named-store participant's
    /// store identity, and a process whose store under that name has
    /// another does not drive it.
    pub async fn store_uid(&self, name: &str) -> Result<String, StoreError> {
        let store = self.stores.get(Some(name)).ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::BadRequest,
                format!("unknown store {name:?}"),
            )
        })?;
        let ns = Namespace::new(&self.config.database, IDENTITY_COLLECTION);
        let cell = self.uids.cell(name);
        cell.get_or_try_init(|| self.retry(|| read_identity(store.as_ref(), &ns)))
            .await
            .cloned()
    }

    /// Rebuilds the participants of a stored record, as its current epoch drives it.
    pub fn rebuild(&self, record: &TxRecord) -> Result<Live, ChangeError> {
        let marker = record.marker();
        let parties = record
            .participants
            .iter()
            .map(|entry| {
                Ok(Party::new(
                    self.kinds.build(&entry.kind, &entry.spec)?,
                    entry.before.clone(),
                )
                .with_marker(entry.marker.clone().map(TxId::from_marker_value)))
            })
            .collect::<Result<Vec<_>, ChangeError>>()?;
        Ok(Live {
            keyed: record.keyed,
            token: record.token.clone(),
            stamps: CreateStamps::of(record),
            id: record.id.clone(),
            epoch: record.epoch,
            marker,
            parties,
            deadline: record.deadline(),
            not_before: record.not_before,
            early: false,
        })
    }

    /// Keeps this coordinator's lease in the leases collection (the
    /// document named after the records collection, `millis` raised to the
    /// lease by `$max`), once per coordinator, before its first keyed
    /// create, whatever the strategy:
    /// garbage collection keeps a keyed record's id taken for the
    /// longest lease there plus the clock margin after the record's
    /// idempotency window ended ([`registered_lease`](Self::registered_lease)).
    /// A create of a keyed run sent before that window ended can land live
    /// until its own lease has passed, and a coordinator's lease is written
    /// there before any of its creates is sent.
    pub async fn register_lease(&self) -> Result<(), StoreError> {
        let ns = Namespace::new(&self.config.database, LEASES_COLLECTION);
        let millis = i64::try_from(self.config.lease.as_millis()).unwrap_or(i64::MAX);
        let raise = || {
            self.retry(|| {
                self.records().update_one(
                    &ns,
                    doc! { "_id": self.config.collection.as_str() },
                    doc! { "$max": { "millis": millis } },
                    crate::store::UpdateOptions::upsert(),
                )
            })
        };
        self.lease_registered
            .get_or_try_init(|| async {
                match raise().await {
                    // Two first upserts at once: the one that lost its
                    // insert raises the document the other wrote.
                    Err(e) if e.kind == StoreErrorKind::DuplicateKey => raise().await.map(|_| ()),
                    other => other.map(|_| ()),
                }
            })
            .await
            .map(|_| ())
    }

    /// The longest lease registered for this records collection
    /// ([`register_lease`](Self::register_lease)), in milliseconds; 0 if none.
    pub async fn registered_lease(&self) -> Result<i64, StoreError> {
        let ns = Namespace::new(&self.config.database, LEASES_COLLECTION);
        let found = self
            .retry(|| {
                self.records()
                    .find_one(&ns, doc! { "_id": self.config.collection.as_str() })
            })
            .await?;
        Ok(match found.as_ref().and_then(|d| d.get("millis")) {
            Some(Bson::Int64(n)) => *n,
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Double(f)) if f.is_finite() => *f as i64,
            _ => 0,
        })
    }

    /// The clock margin in milliseconds.
    pub fn margin_millis(&self) -> i64 {
        i64::try_from(self.config.clock_margin.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The identity of `store` as coordinators of `database` know it
/// ([`ParticipantEntry::store_uid`]): the `uid` of `{_id: "identity"}` in the
/// `tandem_store` collection of `database` there, read without writing one.
/// `None` where no coordinator wrote one, so the store is not the one a
/// record naming an identity was written with. For tools that read the
/// documents of a record, which must not take another database given under a
/// recorded store name for the one the change was made in.
pub async fn store_identity(
    store: &dyn Store,
    database: &str,
) -> Result<Option<String>, StoreError> {
    let ns = Namespace::new(database, IDENTITY_COLLECTION);
    let found = store.find_one(&ns, doc! { "_id": IDENTITY_ID }).await?;
    Ok(found.and_then(|d| d.get_str("uid").ok().map(str::to_owned)))
}

/// Reads a store's identity, writing it first if it has none (see
/// [`Engine::store_uid`]).
async fn read_identity(store: &dyn Store, ns: &Namespace) -> Result<String, StoreError> {
    let filter = doc! { "_id": IDENTITY_ID };
    let update = doc! { "$setOnInsert": { "uid": crate::record::new_token() } };
    let found = match store
        .find_one_and_update(
            ns,
            filter.clone(),
            update,
            FindOneAndUpdateOptions::returning(ReturnDocument::After).with_upsert(true),
        )
        .await
    {
        // Another process wrote it between our filter and our insert.
        Err(e) if e.kind == StoreErrorKind::DuplicateKey => store.find_one(ns, filter).await?,
        other => other?,
    };
    found
        .as_ref()
        .and_then(|d| d.get_str("uid").ok())
        .map(str::to_owned)
        .ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Other,
                format!("the store's identity in {ns} has no uid: {found:?}"),
            )
        })
}

/// The conflict notes of a move to `canceled`, as many as the history
/// keeps beside the move's own line ([`HISTORY_KEPT`] in all): past that,
/// the last line names how many more participants were overwritten and as
/// many of them as its text holds. (Each note was a line of its own, and
/// the history's `$slice` dropped the move and the first notes: a record
/// of 40 overwritten participants named 32, and nothing said that others
/// were left as another writer set them.)
fn fold_conflicts(mut conflicts: Vec<String>) -> Vec<String> {
    let room = usize::try_from(HISTORY_KEPT).unwrap_or(1).saturating_sub(1);
    if conflicts.len() > room {
        let rest = conflicts.split_off(room.saturating_sub(1));
        let listed = rest
            .iter()
            .map(|c| c.strip_prefix(CONFLICT_EVENT).unwrap_or(c).trim_start())
            .collect::<Vec<_>>()
            .join("; ");
        conflicts.push(format!(
            "{CONFLICT_EVENT} {} more participants: {listed}",
            rest.len()
        ));
    }
    conflicts
}

/// How [`interrupted_by`] begins the message of a step that must wait
/// ([`StepError::NotYet`]), so that recovery can tell waiting from failing.
pub(crate) const NOT_YET: &str = "not yet: ";

/// Why an inert record was canceled.
pub(crate) const INERT: &str =
    "inert: the store wrote the record at or after its create deadline (a create that arrived late)";

/// Whether `e` says a step must wait for applies still in flight.
pub(crate) fn is_not_yet(e: &TxError) -> bool {
    matches!(e, TxError::Interrupted { source, .. } if source.message.starts_with(NOT_YET))
}

/// The outcome of a step that must land everywhere: the first failure means
/// the store failed mid-way, and the transaction is left in `state`.
fn interrupted_by(
    live: &Live,
    state: TxState,
    results: Vec<Result<(), StepError>>,
) -> Result<(), TxError> {
    let mut errors: Vec<StepError> = results.into_iter().filter_map(Result::err).collect();
    // A real failure says more than a wait.
    errors.sort_by_key(|e| matches!(e, StepError::NotYet { .. }));
    match errors.into_iter().next() {
        None => Ok(()),
        Some(e) => {
            let source = match e {
                StepError::Store { source, .. } => source,
                e @ StepError::NotYet { .. } => {
                    StoreError::new(StoreErrorKind::Other, format!("{NOT_YET}{e}"))
                }
                other => StoreError::new(StoreErrorKind::Other, other.to_string()),
            };
            Err(TxError::Interrupted {
                id: live.id.clone(),
                state: Some(state),
                source,
            })
        }
    }
}

/// The last transient error of a request the retry policy gave up on, saying so.
fn gave_up(mut e: StoreError, attempts: u32, started: tokio::time::Instant) -> StoreError {
    if attempts > 1 {
        e.message.push_str(&format!(
            " (gave up after {attempts} attempts in {} ms)",
            started.elapsed().as_millis()
        ));
    }
    e
}

/// 64 random bits: a fresh hasher keyed from the OS's randomness (std's
/// `RandomState`) over the time. Unique enough for jitter and creation
/// tokens; not for secrets.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// How many lines of history a record keeps: the newest. A record that
/// recovery claims again and again (a participant store down for days) stays
/// bounded; `attempts` still counts every claim.
pub(crate) const HISTORY_KEPT: i32 = 32;

/// The stored form of a history line.
pub(crate) fn history(state: TxState, owner: &str, epoch: i64, event: &str) -> Bson {
    Bson::Document(doc! { "state": state, "owner": owner, "epoch": epoch, "event": event })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change to a document an earlier participant changes too gets a
    /// marker of its own, which still names the transaction; the others,
    /// and every participant of an untagged (old) marker, keep the
    /// transaction's.
    #[test]
    fn a_document_changed_twice_gets_a_marker_of_its_own() {
        let tagged = TxId::new("t1").unwrap().marker(Some("0123456789abcdef"));
        let key = |k: &str| Some(k.as_bytes().to_vec());
        let keys = [key("A"), None, key("B"), key("A"), None, key("A")];
        let markers = party_markers(&keys, &tagged);
        let own: Vec<Option<&str>> = markers
            .iter()
            .map(|m| m.as_ref().map(TxId::as_str))
            .collect();
        assert_eq!(
            own,
            [
                None,
                None,
                None,
                Some("t1#0123456789ab/3"),
                None,
                Some("t1#0123456789ab/5")
            ]
        );
        for m in markers.iter().flatten() {
            assert_eq!(TxId::of_marker(m.as_str()), "t1");
        }
        let untagged = TxId::new("t1").unwrap();
        assert!(party_markers(&keys, &untagged).iter().all(Option::is_none));
        // Not a tag: the value names itself.
        for value in ["t1#0123456789ab/", "t1#0123456789ab/x", "t1#0123/4"] {
            assert_eq!(TxId::of_marker(value), value);
        }
    }
}
