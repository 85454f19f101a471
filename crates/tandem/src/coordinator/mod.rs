//! The [`Coordinator`]: runs a [`Transaction`] to `done`, or cancels it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson, Document};
use futures::future::join_all;
use tokio::task::JoinHandle;

use crate::change::{DocumentChange, DocumentOp};
use crate::config::{CommitPoint, ConflictPolicy, CoordinatorConfig, RecoveryConfig, Strategy};
use crate::engine::{history, Engine, Live, Party};
use crate::error::{ChangeError, StepError, TxError};
use crate::event::{EventSink, TxEvent};
use crate::participant::{Participant, ParticipantKinds, StepContext, Stores};
use crate::record::{TxRecord, TxState};
use crate::recovery::RecoveryWorker;
use crate::store::{IndexSpec, ReturnDocument, Store, StoreError, StoreErrorKind};
use crate::TxId;

/// The most the participant entries of one record may take: the 16 MiB
/// document limit, less room for the record's other fields and history.
const MAX_RECORD_ENTRIES_LEN: usize = 16 * 1024 * 1024 - 64 * 1024;

/// Most transactions the background finisher takes on in one go.
const FINISH_BATCH: usize = 64;

/// Committed transactions waiting to be finished, and the one task that finishes them.
///
/// Transactions committed while the finisher is busy wait for its next round,
/// which finishes them all together: their clears share one request per
/// store and collection, and their moves to `done` one request.
#[derive(Default)]
struct Background {
    waiting: Vec<Live>,
    /// When the oldest of `waiting` arrived (for [`CoordinatorConfig::finish_delay`]).
    oldest: Option<tokio::time::Instant>,
    running: bool,
    /// Set by `drain`: finish what is waiting without delay.
    flush: bool,
    finisher: Option<JoinHandle<()>>,
    /// Wakes a finisher waiting out its delay (a full round, or a drain).
    wake: Arc<tokio::sync::Notify>,
}

/// Marks the finisher idle if its task ends by a panic, so that the next
/// commit starts a new one for whatever is still waiting.
struct IdleOnPanic(Option<Arc<Mutex<Background>>>);

impl Drop for IdleOnPanic {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.lock().unwrap_or_else(|e| e.into_inner()).running = false;
        }
    }
}

pub(crate) enum Item {
    Document(Box<DocumentChange>),
    Custom(Box<dyn Participant>),
}

/// The one store every participant of `tx` lives in (`None`: the default
/// store), or why there is none: a hand-written participant, or several stores.
fn one_document_store(tx: &Transaction) -> Result<Option<String>, String> {
    let mut store: Option<&Option<String>> = None;
    for item in &tx.items {
        match item {
            Item::Document(change) => match store {
                None => store = Some(&change.store),
                Some(first) if *first != change.store => {
                    return Err(format!(
                        "participants span the stores {} and {}, but native transactions run on one store: several stores need two-phase",
                        first.as_deref().unwrap_or("default"),
                        change.store.as_deref().unwrap_or("default")
                    ))
                }
                Some(_) => {}
            },
            Item::Custom(p) => {
                return Err(format!(
                    "participant {} is not a document change",
                    p.label()
                ))
            }
        }
    }
    Ok(store.cloned().flatten())
}

/// A participant as its record entry stores it: the stored form of a
/// [`ParticipantEntry`](crate::record::ParticipantEntry), written out directly rather than through serde.
fn entry(participant: &dyn Participant, spec: Document, before: Option<Document>) -> Bson {
    let mut entry = doc! {
        "kind": participant.kind(),
        "label": participant.label(),
        "spec": spec,
    };
    if let Some(before) = before {
        entry.insert("before", before);
    }
    Bson::Document(entry)
}

/// A set of changes to run all-or-nothing.
///
/// ```
/// use tandem::{DocumentChange, Namespace, Transaction};
///
/// let accounts = Namespace::new("bank", "accounts");
/// let tx = Transaction::new()
///     .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -100_i64).require_gte("balance", 100_i64))
///     .change(DocumentChange::update(accounts, "B").inc("balance", 100_i64));
/// assert_eq!(tx.len(), 2);
/// ```
#[derive(Default)]
pub struct Transaction {
    id: Option<TxId>,
    pub(crate) strategy: Option<Strategy>,
    pub(crate) items: Vec<Item>,
    errors: Vec<ChangeError>,
}

impl Transaction {
    /// An empty transaction with a generated id.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty transaction with a chosen id (e.g. an idempotency key).
    pub fn with_id(id: impl Into<String>) -> Self {
        let mut tx = Self::default();
        match TxId::new(id) {
            Ok(id) => tx.id = Some(id),
            Err(e) => tx.errors.push(e),
        }
        tx
    }

    /// Adds a document change (or a typed change from `#[participant]`).
    pub fn change(mut self, change: impl Into<DocumentChange>) -> Self {
        self.items.push(Item::Document(Box::new(change.into())));
        self
    }

    /// Adds a hand-written participant. Its kind must be registered with the coordinator.
    pub fn participant(mut self, participant: impl Participant + 'static) -> Self {
        self.items.push(Item::Custom(Box::new(participant)));
        self
    }

    /// Runs this transaction with `strategy` instead of the coordinator's default.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = Some(strategy);
        self
    }

    /// How many participants it has.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it has no participants.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The chosen id, if any.
    pub fn id(&self) -> Option<&TxId> {
        self.id.as_ref()
    }
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("id", &self.id)
            .field("participants", &self.items.len())
            .finish()
    }
}

/// What a committed transaction reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Receipt {
    /// The transaction id.
    pub id: TxId,
    /// `Applied` (committed; cleanup continues in the background) or `Done`.
    pub state: TxState,
    /// Sequential round trips to the stores until `run` returned.
    pub round_trips: u32,
    /// How it ran: [`Strategy::TwoPhase`] or [`Strategy::Native`] (what
    /// [`Strategy::Auto`] chose).
    pub strategy: Strategy,
}

/// Builds a [`Coordinator`].
pub struct CoordinatorBuilder {
    stores: Stores,
    kinds: ParticipantKinds,
    config: CoordinatorConfig,
    events: Option<EventSink>,
}

impl CoordinatorBuilder {
    /// Adds a named store that participants can live in (another database or cluster).
    pub fn store(mut self, name: impl Into<String>, store: impl Store) -> Self {
        self.stores.insert(name, Arc::new(store));
        self
    }

    /// Registers a hand-written participant kind so recovery can rebuild it.
    pub fn kind<F>(mut self, kind: impl Into<String>, factory: F) -> Self
    where
        F: Fn(&bson::Document) -> Result<Box<dyn Participant>, ChangeError> + Send + Sync + 'static,
    {
        self.kinds.register(kind, factory);
        self
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, config: CoordinatorConfig) -> Self {
        self.config = config;
        self
    }

    /// The database of the records (and of changes naming no database).
    pub fn database(mut self, db: impl Into<String>) -> Self {
        self.config.database = db.into();
        self
    }

    /// This worker's owner name.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.config.owner = owner.into();
        self
    }

    /// The lease after which recovery may take a silent transaction over.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// Where `run` returns.
    pub fn commit_point(mut self, point: CommitPoint) -> Self {
        self.config.commit_point = point;
        self
    }

    /// How far a participant store's clock may step back
    /// ([`CoordinatorConfig::clock_margin`]).
    pub fn clock_margin(mut self, margin: Duration) -> Self {
        self.config.clock_margin = margin;
        self
    }

    /// How long the background finisher may wait for more committed
    /// transactions to finish together ([`CoordinatorConfig::finish_delay`]).
    pub fn finish_delay(mut self, delay: Duration) -> Self {
        self.config.finish_delay = delay;
        self
    }

    /// How transactions run unless they choose otherwise.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.config.strategy = strategy;
        self
    }

    /// What to do on conflicts.
    pub fn conflict(mut self, policy: ConflictPolicy) -> Self {
        self.config.conflict = policy;
        self
    }

    /// The most participants per transaction.
    pub fn max_participants(mut self, n: usize) -> Self {
        self.config.max_participants = n;
        self
    }

    /// Receives every progress event.
    pub fn on_event(mut self, sink: impl Fn(&TxEvent) + Send + Sync + 'static) -> Self {
        self.events = Some(Arc::new(sink));
        self
    }

    /// The coordinator.
    pub fn build(self) -> Coordinator {
        Coordinator {
            engine: Arc::new(Engine {
                stores: self.stores,
                kinds: self.kinds,
                config: self.config,
                events: self.events,
            }),
            background: Arc::new(Mutex::new(Background::default())),
        }
    }
}

/// Runs transactions: the two-phase protocol over single-document steps.
///
/// ```
/// # async fn demo() -> Result<(), tandem::TxError> {
/// use tandem::{Coordinator, DocumentChange, MemoryStore, Namespace, Transaction};
///
/// let store = MemoryStore::new();
/// let coordinator = Coordinator::new(store);
/// let tx = Transaction::new()
///     .change(DocumentChange::insert(Namespace::new("shop", "orders"), "o1", bson::doc! { "state": "UnPaid" }));
/// let receipt = coordinator.run(tx).await?;
/// coordinator.drain().await;
/// # let _ = receipt; Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone)]
pub struct Coordinator {
    engine: Arc<Engine>,
    background: Arc<Mutex<Background>>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("stores", &self.engine.stores)
            .field("config", &self.engine.config)
            .finish()
    }
}

impl Coordinator {
    /// A coordinator with default settings whose records and documents live in `store`.
    pub fn new(store: impl Store) -> Self {
        Self::builder(store).build()
    }

    /// A builder whose default store (records, and documents naming no store) is `store`.
    pub fn builder(store: impl Store) -> CoordinatorBuilder {
        Self::builder_shared(Arc::new(store))
    }

    /// Like [`builder`](Self::builder), for a store already behind an `Arc`.
    pub fn builder_shared(store: Arc<dyn Store>) -> CoordinatorBuilder {
        CoordinatorBuilder {
            stores: Stores::new(store),
            kinds: ParticipantKinds::new(),
            config: CoordinatorConfig::default(),
            events: None,
        }
    }

    /// The settings.
    pub fn config(&self) -> &CoordinatorConfig {
        &self.engine.config
    }

    /// The stores.
    pub fn stores(&self) -> &Stores {
        &self.engine.stores
    }

    /// A recovery worker sharing this coordinator's stores, kinds and events, under its own owner name.
    pub fn recovery(&self, config: RecoveryConfig) -> RecoveryWorker {
        let mut engine_config = self.engine.config.clone();
        engine_config.owner = format!(
            "{}-recovery-{}",
            engine_config.owner,
            bson::oid::ObjectId::new().to_hex()
        );
        RecoveryWorker::new(
            Arc::new(Engine {
                stores: self.engine.stores.clone(),
                kinds: self.engine.kinds.clone(),
                config: engine_config,
                events: self.engine.events.clone(),
            }),
            config,
        )
    }

    /// Creates the index recovery scans use (idempotent): records by state and `lastModified`,
    /// from which each lease's end is computed.
    pub async fn ensure_indexes(&self) -> Result<(), StoreError> {
        let ns = self.engine.records_ns();
        self.engine
            .records()
            .ensure_index(
                &ns,
                IndexSpec {
                    name: "tandem_state_lastModified".into(),
                    keys: doc! { "state": 1, "lastModified": 1 },
                    expire_after_secs: None,
                    partial_filter: None,
                },
            )
            .await
    }

    /// Creates a TTL index that lets the store delete `done` and `canceled` records
    /// `after` they finished (idempotent).
    ///
    /// Records of caller-chosen ids (idempotency keys) are not expired by
    /// this index: [`RecoveryWorker::collect_garbage`] turns them into stubs
    /// kept for the idempotency window, which a second TTL index (on
    /// `stubUntil`) then removes.
    ///
    /// `after` must be at least the lease plus the clock margin, as for
    /// [`RecoveryWorker::collect_garbage`]; a shorter one is refused with
    /// [`StoreErrorKind::BadRequest`] and creates nothing. Nothing is left on
    /// documents when a record expires: a finished transaction keeps nothing there.
    pub async fn ensure_ttl(&self, after: Duration) -> Result<(), StoreError> {
        let least = self
            .engine
            .config
            .lease
            .saturating_add(self.engine.config.clock_margin);
        if after < least {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "record expiry {after:?} is below the lease plus the clock margin ({least:?})"
                ),
            ));
        }
        let ns = self.engine.records_ns();
        let records = self.engine.records();
        records
            .ensure_index(
                &ns,
                IndexSpec {
                    name: "tandem_finishedAt_ttl_unkeyed".into(),
                    keys: doc! { "finishedAt": 1 },
                    expire_after_secs: Some(after.as_secs()),
                    partial_filter: Some(doc! { "keyed": false }),
                },
            )
            .await?;
        records
            .ensure_index(
                &ns,
                IndexSpec {
                    name: "tandem_stubUntil_ttl".into(),
                    keys: doc! { "stubUntil": 1 },
                    expire_after_secs: Some(0),
                    partial_filter: None,
                },
            )
            .await
    }

    /// Creates the index on the marker field of a participant collection (idempotent),
    /// so readers can cheaply find or skip documents with a pending change.
    /// `store` names the coordinator store the collection lives in (`None`: the default).
    pub async fn ensure_marker_index(
        &self,
        store: Option<&str>,
        ns: &crate::Namespace,
        marker: &str,
    ) -> Result<(), StoreError> {
        let target = self.engine.stores.get(store).ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::BadRequest,
                format!("unknown store {:?}", store.unwrap_or("")),
            )
        })?;
        let mut keys = bson::Document::new();
        keys.insert(marker, 1);
        target
            .ensure_index(
                ns,
                IndexSpec {
                    name: format!("tandem_{marker}"),
                    keys,
                    expire_after_secs: None,
                    partial_filter: None,
                },
            )
            .await
    }

    /// Reads a transaction record.
    pub async fn record(&self, id: &TxId) -> Result<Option<TxRecord>, StoreError> {
        self.engine.load(id).await
    }

    /// Waits until every transaction committed so far is finished in the
    /// background (markers cleared, `done`), or left to recovery.
    pub async fn drain(&self) {
        let handle = {
            let mut bg = self.background();
            if bg.running {
                bg.flush = true;
                bg.wake.notify_one();
            }
            bg.finisher.take()
        };
        if let Some(h) = handle {
            let _ = h.await;
        }
    }

    /// Shuts down cleanly: waits for the background work ([`drain`](Self::drain)),
    /// then closes every store ([`Store::shutdown`]). Call it before the end of
    /// `main`: a MongoDB client dropped while the runtime stops may still have
    /// background tasks of its own running. The coordinator (and its stores,
    /// also through clones) must not be used afterwards.
    pub async fn shutdown(&self) {
        self.drain().await;
        for store in self.engine.stores.all() {
            store.shutdown().await;
        }
    }

    fn background(&self) -> std::sync::MutexGuard<'_, Background> {
        self.background.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands a committed transaction to the background finisher, starting it if idle.
    fn finish_later(&self, live: Live) {
        let mut bg = self.background();
        if bg.waiting.is_empty() {
            bg.oldest = Some(tokio::time::Instant::now());
        }
        bg.waiting.push(live);
        if bg.running {
            if bg.waiting.len() >= FINISH_BATCH {
                bg.wake.notify_one();
            }
            return;
        }
        bg.running = true;
        let engine = Arc::clone(&self.engine);
        let shared = Arc::clone(&self.background);
        let earlier = bg.finisher.take();
        bg.finisher = Some(tokio::spawn(async move {
            // A drain that started before this finisher also waits for the one before it.
            if let Some(h) = earlier {
                let _ = h.await;
            }
            let mut idle = IdleOnPanic(Some(Arc::clone(&shared)));
            let delay = engine.config.finish_delay;
            loop {
                let (batch, wait): (Vec<Live>, _) = {
                    let mut bg = shared.lock().unwrap_or_else(|e| e.into_inner());
                    if bg.waiting.is_empty() {
                        bg.running = false;
                        bg.flush = false;
                        idle.0 = None;
                        return;
                    }
                    let deadline = bg.oldest.map(|t| t + delay);
                    let now = tokio::time::Instant::now();
                    match deadline {
                        Some(at) if at > now && !bg.flush && bg.waiting.len() < FINISH_BATCH => {
                            (Vec::new(), Some((at, Arc::clone(&bg.wake))))
                        }
                        _ => {
                            let n = bg.waiting.len().min(FINISH_BATCH);
                            let batch = bg.waiting.drain(..n).collect();
                            bg.oldest = (!bg.waiting.is_empty()).then_some(now);
                            (batch, None)
                        }
                    }
                };
                if let Some((at, wake)) = wait {
                    // Until the delay is over, the round is full, or a drain asks.
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = wake.notified() => {}
                    }
                    continue;
                }
                let lives: Vec<&Live> = batch.iter().collect();
                for (live, result) in batch.iter().zip(engine.finish_applied_many(&lives).await) {
                    if let Err(e) = result {
                        tracing::warn!(target: "tandem", "finishing {} left to recovery: {e}", live.id);
                    }
                }
            }
        }));
    }

    /// Checks a transaction's items (count, stores, kinds, each change's own
    /// validation, no participant twice) and fills in the default database.
    fn prepare_items(&self, tx: Transaction) -> Result<(TxId, Vec<Item>), ChangeError> {
        if let Some(e) = tx.errors.into_iter().next() {
            return Err(e);
        }
        let config = &self.engine.config;
        if tx.items.is_empty() {
            return Err(ChangeError::NoParticipants);
        }
        if tx.items.len() > config.max_participants {
            return Err(ChangeError::TooManyParticipants {
                count: tx.items.len(),
                limit: config.max_participants,
            });
        }
        let mut seen = HashSet::with_capacity(tx.items.len());
        let mut items = tx.items;
        for item in &mut items {
            let p: &dyn Participant = match item {
                Item::Document(change) => {
                    if change.namespace.db.is_empty() {
                        change.namespace.db = config.database.clone();
                    }
                    if let Some(name) = &change.store {
                        if self.engine.stores.get(Some(name)).is_none() {
                            return Err(ChangeError::UnknownStore {
                                participant: change.label(),
                                store: name.clone(),
                            });
                        }
                    }
                    &**change
                }
                Item::Custom(p) => {
                    // Recovery must be able to rebuild it.
                    self.engine.kinds.build(p.kind(), &p.spec()?)?;
                    &**p
                }
            };
            p.validate()?;
            if !seen.insert(p.resource()) {
                return Err(ChangeError::DuplicateParticipant {
                    participant: p.label(),
                });
            }
        }
        Ok((tx.id.unwrap_or_else(TxId::generate), items))
    }

    /// Runs a transaction: every change is applied, or none is.
    ///
    /// Returns at the commit point ([`CommitPoint`]). On refusal (a guard, a
    /// missing document, a conflict) every applied change is undone and
    /// [`TxError::Canceled`] says why. If the store fails mid-way the record is
    /// left for the recovery worker and [`TxError::Interrupted`] says where.
    pub async fn run(&self, tx: Transaction) -> Result<Receipt, TxError> {
        let timer = crate::metrics::Timer::start();
        let (strategy, chosen) = match tx.strategy.unwrap_or(self.engine.config.strategy) {
            Strategy::Auto => {
                let (strategy, reason) = self.choose(&tx);
                (strategy, Some(reason))
            }
            strategy => (strategy, None),
        };
        let announce = |id: &TxId| {
            if let Some(reason) = &chosen {
                self.engine.emit(TxEvent::StrategyChosen {
                    id: id.clone(),
                    strategy,
                    reason: reason.clone(),
                });
            }
        };
        let result = if strategy == Strategy::Native {
            self.run_native(tx, announce).await
        } else {
            self.run_two_phase(tx, announce).await
        };
        crate::metrics::transaction(strategy, &result, timer);
        result
    }

    /// Runs a transaction with the two-phase protocol.
    async fn run_two_phase(
        &self,
        tx: Transaction,
        announce: impl FnOnce(&TxId),
    ) -> Result<Receipt, TxError> {
        let keyed = tx.id.is_some();
        let (id, items) = self.prepare_items(tx)?;
        announce(&id);
        // Inserts reserve their `_id` while preparing: a round trip of its own.
        let inserts: Vec<bool> = items
            .iter()
            .map(|item| matches!(item, Item::Document(c) if matches!(c.op, DocumentOp::Insert { .. })))
            .collect();
        let reserves = inserts.contains(&true);
        // Whether preparing reads or writes a store: a document change that
        // reserves an `_id` or reads a before-image (one taken from its
        // equality guards needs no read), or a hand-written participant that
        // returns a before-image.
        let document_reads = items.iter().any(|item| match item {
            Item::Document(change) => change.prepare_reads(),
            Item::Custom(_) => false,
        });
        let custom: Vec<bool> = items
            .iter()
            .map(|item| matches!(item, Item::Custom(_)))
            .collect();
        let participants: Vec<Box<dyn Participant>> = items
            .into_iter()
            .map(|item| match item {
                Item::Document(change) => change as Box<dyn Participant>,
                Item::Custom(p) => p,
            })
            .collect();
        let engine = &self.engine;
        let mut round_trips = 0;

        // Before-images, read before anything is written.
        let epoch = 0;
        let token = crate::record::new_token();
        let marker = id.marker(Some(&token));
        let prepare_ctx = |id| StepContext {
            tx: id,
            marker: &marker,
            epoch,
            deadline: None,
            not_before: None,
            before: None,
            stores: &engine.stores,
        };
        let images = join_all(participants.iter().map(|p| p.prepare(prepare_ctx(&id)))).await;
        let mut parties = Vec::with_capacity(participants.len());
        let mut entries = Vec::with_capacity(participants.len());
        let mut refused = None;
        for (index, (participant, image)) in participants.into_iter().zip(images).enumerate() {
            let before = match image {
                Ok(b) => b,
                Err(StepError::Store { source, .. }) => {
                    refused.get_or_insert(TxError::Interrupted {
                        id: id.clone(),
                        state: None,
                        source,
                    });
                    None
                }
                Err(cause) => {
                    if matches!(cause, StepError::Conflict { .. }) {
                        crate::metrics::conflict(Strategy::TwoPhase);
                    }
                    refused.get_or_insert_with(|| TxError::Canceled {
                        id: id.clone(),
                        cause,
                        participant: Some(Box::new(participant.reference(index))),
                    });
                    None
                }
            };
            match participant.spec() {
                Ok(spec) => entries.push(entry(participant.as_ref(), spec, before.clone())),
                Err(e) => {
                    refused.get_or_insert(TxError::Invalid(e));
                }
            }
            parties.push(Party::new(participant, before));
        }
        // The record holds every change: one too large for it is refused
        // before it is written (servers disagree on how they refuse it).
        let record_len: usize = entries
            .iter()
            .filter_map(Bson::as_document)
            .map(crate::query::size::document_len)
            .sum();
        if refused.is_none() && record_len > MAX_RECORD_ENTRIES_LEN {
            refused = Some(TxError::Canceled {
                id: id.clone(),
                cause: StepError::TooLarge {
                    participant: "(transaction record)".into(),
                },
                participant: None,
            });
        }
        if let Some(refusal) = refused {
            // Nothing was recorded: give back the `_id`s the inserts reserved.
            for (party, _) in parties.iter().zip(&inserts).filter(|(_, i)| **i) {
                if let Err(e) = party.participant.compensate(prepare_ctx(&id)).await {
                    tracing::warn!(target: "tandem", "releasing the placeholder of {} failed: {e}", party.participant.label());
                }
            }
            return Err(refusal);
        }
        let custom_reads = parties
            .iter()
            .zip(&custom)
            .any(|(p, custom)| *custom && p.before.is_some());
        if reserves || document_reads || custom_reads {
            round_trips += 1;
        }
        let mut live = Live {
            keyed,
            token: Some(token.clone()),
            id: id.clone(),
            epoch,
            marker: marker.clone(),
            parties,
            // Set from the record as written: its lease start plus the lease.
            deadline: bson::DateTime::from_millis(0),
            not_before: None,
        };

        // The record is created `pending`: it holds every participant before any is
        // applied, so there is nothing an `initial` state would add but a round trip.
        live.deadline = self.create_record(&live, entries).await?;
        round_trips += 1;
        let applied = engine.apply_or_cancel(&live).await;
        round_trips += 2;
        applied?;

        match engine.config.commit_point {
            CommitPoint::Done => {
                round_trips += 2;
                // Committed either way: what finishing meets (a store failure,
                // an apply still in flight) is left to recovery, and the
                // receipt says `applied` rather than claim an unknown outcome.
                let state = match engine.finish_applied(&live).await {
                    Ok(()) => TxState::Done,
                    Err(TxError::Superseded { .. }) => TxState::Applied,
                    Err(e) => {
                        tracing::warn!(target: "tandem", "finishing {id} left to recovery: {e}");
                        TxState::Applied
                    }
                };
                Ok(Receipt {
                    id,
                    state,
                    round_trips,
                    strategy: Strategy::TwoPhase,
                })
            }
            CommitPoint::Applied => {
                self.finish_later(live);
                Ok(Receipt {
                    id,
                    state: TxState::Applied,
                    round_trips,
                    strategy: Strategy::TwoPhase,
                })
            }
        }
    }

    /// What [`Strategy::Auto`] runs `tx` with, and why.
    pub(crate) fn choose(&self, tx: &Transaction) -> (Strategy, String) {
        let two_phase = |why: String| (Strategy::TwoPhase, why);
        let name = match one_document_store(tx) {
            Ok(name) => name,
            Err(why) => return two_phase(why),
        };
        let name = name.as_deref();
        match self.engine.stores.get(name) {
            Some(s) if s.supports_native() => {}
            Some(s) => {
                return two_phase(format!(
                    "the {} store ({}) has no native transactions",
                    name.unwrap_or("default"),
                    s.name()
                ))
            }
            // An unknown store: the two-phase path refuses it with a typed error.
            None => return two_phase(format!("unknown store {name:?}")),
        }
        let changes = tx.items.len();
        if changes > crate::config::NATIVE_MAX_CHANGES {
            return two_phase(format!(
                "{changes} changes, more than the {} a native transaction takes",
                crate::config::NATIVE_MAX_CHANGES
            ));
        }
        // Serialized only when every cheaper check passed.
        let bytes: usize = tx
            .items
            .iter()
            .filter_map(|item| match item {
                Item::Document(change) => Some(
                    change
                        .spec()
                        .map(|spec| crate::query::size::document_len(&spec))
                        .unwrap_or(usize::MAX / 2),
                ),
                Item::Custom(_) => None,
            })
            .fold(0, usize::saturating_add);
        if bytes > crate::config::NATIVE_MAX_BYTES {
            return two_phase(format!(
                "{bytes} bytes of changes, more than the {} a native transaction takes",
                crate::config::NATIVE_MAX_BYTES
            ));
        }
        (
            Strategy::Native,
            format!(
                "{changes} change(s), {bytes} bytes, all on the {} store, which has native transactions",
                name.unwrap_or("default")
            ),
        )
    }

    /// Runs a transaction as one native multi-document transaction of its store.
    async fn run_native(
        &self,
        tx: Transaction,
        announce: impl FnOnce(&TxId),
    ) -> Result<Receipt, TxError> {
        let unavailable =
            |reason: String| TxError::Invalid(ChangeError::NativeUnavailable { reason });
        let name = one_document_store(&tx).map_err(unavailable)?;
        // The same validation as the two-phase path, so bad input fails the same way.
        let (id, items) = self.prepare_items(tx)?;
        announce(&id);
        let changes: Vec<DocumentChange> = items
            .into_iter()
            .filter_map(|item| match item {
                Item::Document(change) => Some(*change),
                // Refused above.
                Item::Custom(_) => None,
            })
            .collect();
        let store = self
            .engine
            .stores
            .get(name.as_deref())
            .ok_or_else(|| unavailable(format!("unknown store {name:?}")))?;
        if !store.supports_native() {
            return Err(unavailable(format!(
                "the {} store has no native transactions",
                store.name()
            )));
        }
        let result = match store.run_native(&changes).await {
            Ok(()) => Ok(Receipt {
                id,
                strategy: Strategy::Native,
                state: TxState::Done,
                // One command per change inside the transaction, then the commit.
                round_trips: u32::try_from(changes.len())
                    .unwrap_or(u32::MAX)
                    .saturating_add(1),
            }),
            Err(StepError::Store { source, .. }) => Err(TxError::Interrupted {
                id,
                state: None,
                source,
            }),
            Err(cause) => {
                // The store names the refusing change by its label.
                let participant = changes
                    .iter()
                    .position(|c| cause.participant() == Some(c.label().as_str()))
                    .map(|i| Box::new(Participant::reference(&changes[i], i)));
                Err(TxError::Canceled {
                    id,
                    cause,
                    participant,
                })
            }
        };
        self.engine.emit(TxEvent::NativeFinished {
            id: match &result {
                Ok(r) => r.id.clone(),
                Err(e) => e.id().cloned().unwrap_or_else(TxId::generate),
            },
            outcome: match &result {
                Ok(_) => Some(TxState::Done),
                Err(TxError::Canceled { .. }) => Some(TxState::Canceled),
                Err(_) => None,
            },
            error: result.as_ref().err().map(ToString::to_string),
        });
        result
    }

    /// Writes the record in state `pending`, with timestamps from the store's
    /// clock, and returns the deadline of its applies (the lease's start, as
    /// the store stamped it, plus the lease).
    async fn create_record(
        &self,
        live: &Live,
        entries: Vec<Bson>,
    ) -> Result<bson::DateTime, TxError> {
        let engine = &self.engine;
        let config = &engine.config;
        let ns = engine.records_ns();
        let lease_millis = i64::try_from(config.lease.as_millis()).unwrap_or(i64::MAX);
        // Tells this transaction's record apart from another one of the same id
        // (owner names repeat across processes that were given the same name).
        let token = live.token.clone().unwrap_or_default();
        let keyed = live.keyed;
        // The create's deadline, fixed before the first attempt: a record the
        // store writes later (an attempt that arrived late, perhaps after the
        // transaction finished and its record was collected) is inert.
        let estimate =
            engine
                .records()
                .clock_estimate()
                .await
                .map_err(|source| TxError::Canceled {
                    id: live.id.clone(),
                    cause: StepError::Store {
                        participant: "(transaction record)".into(),
                        source,
                    },
                    participant: None,
                })?;
        let create_by =
            bson::DateTime::from_millis(estimate.timestamp_millis().saturating_add(lease_millis));
        let attempts = std::sync::atomic::AtomicU32::new(0);
        let statement = |participants: Vec<Bson>| {
            // `state: {$in: []}` matches nothing, so an existing record is never touched:
            // the upsert then collides with its `_id` and fails with a duplicate key.
            let filter = doc! { "_id": live.id.as_str(), "state": { "$in": [] } };
            let update = doc! {
                "$setOnInsert": {
                    "state": TxState::Pending,
                    "participants": participants,
                    "owner": &config.owner,
                    "epoch": live.epoch,
                    "leaseMillis": lease_millis,
                    "attempts": 0,
                    "token": &token,
                    "keyed": keyed,
                    "createBy": create_by,
                    "history": [history(TxState::Pending, &config.owner, live.epoch, "create")],
                },
                "$currentDate": { "created": true, "lastModified": true, "leaseStart": true },
            };
            (filter, update)
        };
        // The first attempt takes the entries as they are; a retry (the store
        // took them) writes them out again from the participants.
        let mut first = Some(entries);
        let ns = &ns;
        let result = engine
            .retry(|| {
                let participants = match first.take() {
                    Some(entries) => Ok(entries),
                    None => live
                        .parties
                        .iter()
                        .map(|party| {
                            let p = party.participant.as_ref();
                            Ok(entry(p, p.spec()?, party.before.clone()))
                        })
                        .collect::<Result<Vec<_>, ChangeError>>(),
                };
                let statement = participants.map(statement);
                attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                async move {
                    let (filter, update) = statement
                        .map_err(|e| StoreError::new(StoreErrorKind::Other, e.to_string()))?;
                    engine
                        .records()
                        .find_one_and_update(ns, filter, update, ReturnDocument::After, true)
                        .await
                }
            })
            .await;
        let written = match result {
            Ok(Some(doc)) => doc,
            Ok(None) => {
                return Err(TxError::Interrupted {
                    id: live.id.clone(),
                    state: None,
                    source: StoreError::new(
                        StoreErrorKind::Other,
                        "the store returned no document for the record's upsert",
                    ),
                })
            }
            Err(e) if e.kind == StoreErrorKind::DuplicateKey => {
                // Ours, if an earlier attempt landed before its answer was lost.
                let existing =
                    engine
                        .load(&live.id)
                        .await
                        .map_err(|source| TxError::Interrupted {
                            id: live.id.clone(),
                            state: None,
                            source,
                        })?;
                match existing {
                    Some(r) if r.token.as_deref() == Some(token.as_str()) => {
                        if r.is_inert() {
                            let retried = attempts.load(std::sync::atomic::Ordering::Relaxed) > 1;
                            return Err(self.cancel_inert(live, r.epoch, retried).await);
                        }
                        if r.state != TxState::Pending || r.epoch != live.epoch {
                            // Written by us, then claimed by recovery before we heard back.
                            return Err(TxError::Superseded {
                                id: live.id.clone(),
                                state: Some(r.state),
                                epoch: r.epoch,
                            });
                        }
                        engine.emit(TxEvent::Created {
                            id: live.id.clone(),
                            participants: live.parties.len(),
                        });
                        return Ok(r.deadline());
                    }
                    other => {
                        if attempts.load(std::sync::atomic::Ordering::Relaxed) > 1
                            && !self.wait_until(create_by).await
                        {
                            // An earlier attempt of ours may still be on its way:
                            // it can take effect only before the create deadline.
                            return Err(TxError::Interrupted {
                                id: live.id.clone(),
                                state: None,
                                source: StoreError::new(
                                    StoreErrorKind::Other,
                                    "the id is taken, and an earlier attempt to write this \
                                     transaction's record may still land until its create deadline",
                                ),
                            });
                        }
                        return Err(TxError::Duplicate {
                            id: live.id.clone(),
                            state: other.map(|r| r.state),
                        });
                    }
                }
            }
            Err(source) if source.kind == StoreErrorKind::DocumentTooLarge => {
                // The record holds every change: one too large for it is refused outright.
                return Err(TxError::Canceled {
                    id: live.id.clone(),
                    cause: StepError::TooLarge {
                        participant: "(transaction record)".into(),
                    },
                    participant: None,
                });
            }
            Err(source) => {
                return Err(TxError::Interrupted {
                    id: live.id.clone(),
                    state: None,
                    source,
                })
            }
        };
        let stamp = |field| written.get_datetime(field).ok().copied();
        if crate::record::written_late(stamp("created"), stamp("createBy")) {
            let retried = attempts.load(std::sync::atomic::Ordering::Relaxed) > 1;
            return Err(self.cancel_inert(live, live.epoch, retried).await);
        }
        engine.emit(TxEvent::Created {
            id: live.id.clone(),
            participants: live.parties.len(),
        });
        let start = written
            .get_datetime("leaseStart")
            .map(|t| t.timestamp_millis())
            .map_err(|e| TxError::Interrupted {
                id: live.id.clone(),
                state: Some(TxState::Pending),
                source: StoreError::new(
                    StoreErrorKind::Other,
                    format!("the record as written has no lease start: {e}"),
                ),
            })?;
        Ok(bson::DateTime::from_millis(
            start.saturating_add(lease_millis),
        ))
    }

    /// The answer for a record the store wrote at or after its create
    /// deadline: nothing of it was or will be applied. Moves it to `canceled`
    /// at once when it can; recovery does it otherwise, without touching any
    /// document.
    ///
    /// When the record took more than one attempt (`retried`), an earlier
    /// attempt whose answer was lost may have written a live record in time,
    /// which recovery then finished (perhaps committed) and collected before
    /// this one landed: the outcome is unknown.
    async fn cancel_inert(&self, live: &Live, epoch: i64, retried: bool) -> TxError {
        if epoch == live.epoch {
            if let Err(e) = self.engine.cancel_inert(live, TxState::Pending).await {
                tracing::warn!(target: "tandem", "canceling the inert record {} left to recovery: {e}", live.id);
            }
        }
        if retried {
            return TxError::Interrupted {
                id: live.id.clone(),
                state: None,
                source: StoreError::new(
                    StoreErrorKind::Other,
                    "the record was written after its create deadline by a retry; an \
                     earlier attempt may have written it in time and been finished by recovery",
                ),
            };
        }
        TxError::Canceled {
            id: live.id.clone(),
            cause: StepError::Expired {
                participant: "(transaction record)".into(),
            },
            participant: None,
        }
    }

    /// Waits until the records store's clock reads `time` or later: `true`
    /// once it does, `false` if it does not within the lease plus the clock
    /// margin of local time (or cannot be read).
    async fn wait_until(&self, time: bson::DateTime) -> bool {
        let config = &self.engine.config;
        let give_up = tokio::time::Instant::now() + config.lease + config.clock_margin;
        loop {
            let Ok(now) = self.engine.records().now().await else {
                return false;
            };
            let left = time
                .timestamp_millis()
                .saturating_sub(now.timestamp_millis());
            if left <= 0 {
                return true;
            }
            let left = Duration::from_millis(u64::try_from(left).unwrap_or(0).min(1_000));
            if tokio::time::Instant::now() + left > give_up {
                return false;
            }
            tokio::time::sleep(left).await;
        }
    }

    /// Cancels a transaction that is still `pending` (or finishes canceling one that is `canceling`).
    ///
    /// The caller takes the record over (raising its epoch), so a coordinator
    /// still working on it is fenced off.
    pub async fn cancel(&self, id: &TxId, reason: &str) -> Result<TxState, TxError> {
        let worker = self.recovery(RecoveryConfig::default());
        worker.cancel(id, reason).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ParticipantEntry;
    use crate::Namespace;

    #[test]
    fn entries_are_stored_as_serde_writes_them() {
        let change = DocumentChange::update(Namespace::new("bank", "accounts"), "A")
            .inc("balance", -5_i64)
            .require_gte("balance", 5_i64);
        for before in [None, Some(doc! { "fields": [{ "path": "x", "value": 1 }] })] {
            let spec = change.spec().unwrap();
            let serde = bson::to_bson(&ParticipantEntry {
                kind: change.kind().to_owned(),
                label: change.label(),
                spec: spec.clone(),
                before: before.clone(),
            })
            .unwrap();
            assert_eq!(entry(&change, spec, before), serde);
        }
    }
}
