//! The [`Coordinator`]: runs a [`Transaction`] to `done`, or cancels it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson, Document};

use crate::change::DocumentChange;
use crate::config::{CoordinatorConfig, RecoveryConfig, Strategy};
use crate::engine::Engine;
use crate::error::{ChangeError, TxError};
use crate::event::TxEvent;
use crate::participant::{Participant, ParticipantKinds, Stores};
use crate::record::{TxRecord, TxState};
use crate::recovery::RecoveryWorker;
use crate::store::{IndexSpec, Store, StoreError, StoreErrorKind};
use crate::TxId;
pub use builder::CoordinatorBuilder;
use finisher::Background;
pub use transaction::{Receipt, Transaction};

mod builder;
mod finisher;
mod native;
mod transaction;
mod two_phase;

/// The TTL index on stubs' `stubUntil` that earlier versions' `ensure_ttl`
/// made, which it now drops.
const STUB_TTL_INDEX: &str = "tandem_stubUntil_ttl";

/// `age` in the whole seconds of a TTL index, rounded up (never below the
/// age checked), or [`StoreErrorKind::BadRequest`] naming `what` where it
/// is longer than [`MAX_TTL_SECS`](crate::config::MAX_TTL_SECS): the sum overflowed for
/// [`Duration::MAX`] (a panic, or a wrap-around to an index that expires
/// records at once), and a server refuses more.
fn ttl_secs(age: Duration, what: &str) -> Result<u64, StoreError> {
    use crate::config::MAX_TTL_SECS;
    let secs = age
        .as_secs()
        .saturating_add(u64::from(age.subsec_nanos() > 0));
    if secs > MAX_TTL_SECS {
        return Err(StoreError::new(
            StoreErrorKind::BadRequest,
            format!(
                "{what} {age:?} is longer than a TTL index holds ({MAX_TTL_SECS} seconds, about 68 years)"
            ),
        ));
    }
    Ok(secs)
}

/// The most the participant entries of one record may take: the 16 MiB
/// document limit, less room for the record's other fields and history.
const MAX_RECORD_ENTRIES_LEN: usize = 16 * 1024 * 1024 - 64 * 1024;

/// The most levels a record may nest, its own included: a change's values
/// sit seven levels below its top, and reach at most
/// [`MAX_VALUE_DEPTH`](crate::change::MAX_VALUE_DEPTH) levels with their
/// path; MongoDB's manual supports at most 100.
const MAX_RECORD_DEPTH: usize = crate::change::MAX_VALUE_DEPTH + 7;

/// How deep a record nests a participant's `entry` (its spec and
/// before-image): the record, its `participants` array, then the entry's
/// own levels.
fn entry_depth(entry: &Bson) -> usize {
    2 + crate::change::nesting(entry)
}

/// The bytes the participant entries take in the record's `participants`
/// array, the array's keys (`"0"`, `"1"`, …) included.
fn entries_len(entries: &[Bson]) -> usize {
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e.as_document().map(|d| (i, d)))
        .map(|(i, d)| 2 + i.to_string().len() + crate::query::size::document_len(d))
        .sum()
}

pub(crate) enum Item {
    Document(Box<DocumentChange>),
    Custom(Box<dyn Participant>),
}

/// A participant as its record entry stores it: the stored form of a
/// [`ParticipantEntry`](crate::record::ParticipantEntry), written out directly rather than through serde.
fn entry(
    participant: &dyn Participant,
    spec: Document,
    before: Option<Document>,
    marker: Option<&TxId>,
    store_uid: Option<&str>,
) -> Bson {
    let mut entry = doc! {
        "kind": participant.kind(),
        "label": participant.label(),
        "spec": spec,
    };
    if let Some(before) = before {
        entry.insert("before", before);
    }
    if let Some(marker) = marker {
        entry.insert("marker", marker.as_str());
    }
    if let Some(uid) = store_uid {
        entry.insert("storeUid", uid);
    }
    Bson::Document(entry)
}

/// Runs transactions: the two-phase protocol over single-document steps,
/// or natively as MongoDB multi-document transactions ([`Strategy`]).
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
                uids: self.engine.uids.clone(),
                lease_registered: tokio::sync::OnceCell::new(),
                own_unfinished: None,
            }),
            config,
        )
    }

    /// Writes this coordinator's lease to the leases collection
    /// (`tandem_leases` in the coordinator's database on the records store:
    /// a document per records collection keeping the longest lease of the
    /// coordinators that create keyed records in it), once per coordinator.
    ///
    /// The first transaction under a caller-chosen id (an idempotency key)
    /// does it before its record is written, if this was not called: call it
    /// at start-up to take that round trip off the first such transaction.
    /// Garbage collection keeps a keyed record's id taken for the
    /// idempotency window after the transaction finished and then for the
    /// longest lease there plus the clock margin
    /// ([`RecoveryWorker::collect_garbage`]): a run under the same key sent
    /// before the window ended (a retry whose first attempt lost its answer)
    /// can land its record live until its own lease has passed, and must
    /// then meet the id taken, whatever the leases and windows of the
    /// processes that retried and collected.
    pub async fn register_lease(&self) -> Result<(), StoreError> {
        self.engine.register_lease().await
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
    /// kept for the idempotency window and then the longest registered
    /// lease plus the clock margin, and removes them itself, reading the
    /// registered leases again first. No TTL index removes stubs: it could
    /// not see a longer lease registered after a stub was written. This
    /// call drops the one earlier versions made (`tandem_stubUntil_ttl`),
    /// if it is there: call it again after upgrading.
    ///
    /// `after` must be at least the lease plus the clock margin, as for
    /// [`RecoveryWorker::collect_garbage`] (the longer of this
    /// coordinator's lease and the longest registered by any coordinator
    /// of these records: [`register_lease`](Self::register_lease)), and at most
    /// [`MAX_TTL_SECS`](crate::config::MAX_TTL_SECS) seconds (what a TTL index holds); another one is
    /// refused with [`StoreErrorKind::BadRequest`] and creates nothing. Unlike
    /// `collect_garbage`, the index cannot wait for each record's own create
    /// deadline: give `after` at least the longest lease of any coordinator
    /// writing to these records, plus the margin, or a late copy of a
    /// record's create, arriving after its record expired, could write it
    /// again live. Of the other coordinators' leases, this call knows only
    /// those registered (before a coordinator's first keyed transaction, or
    /// when it calls `register_lease`): call `register_lease` at start-up
    /// in every process for the check to cover them all. The index counts
    /// whole seconds: `after` is rounded up.
    ///
    /// A finished transaction keeps nothing on its documents but zero
    /// counts and credit sums; `collect_garbage` drops the sums of the
    /// documents its records credited, and the index does not (they stay
    /// until a document's next exclusive change). Nor does the index run the
    /// participants' [`forget`](crate::Participant::forget), as
    /// `collect_garbage` does: what a hand-written participant keeps until
    /// then stays; collect such records with `collect_garbage` instead.
    pub async fn ensure_ttl(&self, after: Duration) -> Result<(), StoreError> {
        let below = |lease: Duration, whose: &str| {
            let least = lease.saturating_add(self.engine.config.clock_margin);
            (after < least).then(|| {
                StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!(
                        "record expiry {after:?} is below {whose} ({lease:?}) plus the clock margin ({least:?})"
                    ),
                )
            })
        };
        if let Some(refused) = below(self.engine.config.lease, "this coordinator's lease") {
            return Err(refused);
        }
        let expire_after = ttl_secs(after, "record expiry")?;
        // A longer lease registered by another coordinator writing to
        // these records (checked last: the only check that reads).
        let registered = u64::try_from(self.engine.registered_lease().await?).unwrap_or(0);
        if let Some(refused) = below(
            Duration::from_millis(registered),
            "the longest lease registered in `tandem_leases`",
        ) {
            return Err(refused);
        }
        let ns = self.engine.records_ns();
        let records = self.engine.records();
        records
            .ensure_index(
                &ns,
                IndexSpec {
                    name: "tandem_finishedAt_ttl_unkeyed".into(),
                    keys: doc! { "finishedAt": 1 },
                    expire_after_secs: Some(expire_after),
                    partial_filter: Some(doc! { "keyed": false }),
                },
            )
            .await?;
        // Stubs are removed by garbage collection alone, which reads the
        // registered leases again before it removes one (a lease registered
        // after a stub was written keeps it longer); a TTL index on
        // `stubUntil`, which earlier versions made here, cannot.
        records.drop_index(&ns, STUB_TTL_INDEX).await
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
        let target = self.named_store(store)?;
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

    /// Creates a TTL index on a participant collection that lets the store
    /// remove placeholders of inserts (`_tandem.ghost`) once they are older
    /// than the lease plus the clock margin (idempotent). The index keys on
    /// `_tandem.reservedAt` alone, with this coordinator's lease: a
    /// placeholder that another coordinator reserved with a longer lease
    /// may go before that lease has run out, which is harmless (an insert
    /// that finds no placeholder reserves its `_id` again). A reservation that
    /// landed late, after its transaction had ended, leaves one behind, and
    /// so does a coordinator that crashed between reserving an insert's `_id`
    /// and writing its record (no record names it, so recovery cannot); see [`collect_placeholders`](Self::collect_placeholders)
    /// for stores without TTL indexes. `store` names the coordinator store
    /// the collection lives in (`None`: the default).
    ///
    /// Placeholders written by a version that did not stamp them
    /// (`_tandem.reservedAt` missing), which a TTL index never removes, are
    /// stamped with the store's time first: they expire a lease plus the
    /// margin later.
    ///
    /// A lease plus margin longer than [`MAX_TTL_SECS`](crate::config::MAX_TTL_SECS) seconds is refused
    /// with [`StoreErrorKind::BadRequest`], and nothing is created.
    pub async fn ensure_placeholder_ttl(
        &self,
        store: Option<&str>,
        ns: &crate::Namespace,
    ) -> Result<(), StoreError> {
        let target = self.named_store(store)?;
        let expire_after = ttl_secs(self.placeholder_age(), "placeholder expiry")?;
        target
            .ensure_index(
                ns,
                IndexSpec {
                    name: "tandem_placeholder_ttl".into(),
                    keys: doc! { crate::document::RESERVED_AT: 1 },
                    expire_after_secs: Some(expire_after),
                    partial_filter: Some(doc! { "_tandem.ghost": true }),
                },
            )
            .await?;
        stamp_unstamped_placeholders(target.as_ref(), ns).await
    }

    /// Removes the placeholders of inserts (`_tandem.ghost`) in `ns` that
    /// are no longer reservations, by that store's clock; returns how many.
    /// A placeholder carries the lease of the coordinator that reserved it
    /// (`_tandem.leaseMillis`), and is a reservation until the store's clock
    /// reads its `_tandem.reservedAt` plus that lease: an insert fills it only
    /// until then, and reserves the `_id` again (stamping it anew) to fill it
    /// later. An expired one, such as one that a reservation landing late
    /// (after its transaction had ended) left behind, would keep the `_id`
    /// from a plain insert. (One written without the lease, by an older
    /// version, goes once reserved longer ago than this coordinator's lease
    /// plus the clock margin.) Removing a placeholder is always safe (an
    /// insert that finds none reserves its `_id` again). On MongoDB,
    /// [`ensure_placeholder_ttl`](Self::ensure_placeholder_ttl) has the
    /// server do it. `store` names the coordinator store the collection
    /// lives in (`None`: the default).
    ///
    /// A placeholder written by a version that did not stamp it
    /// (`_tandem.reservedAt` missing) is stamped with the store's time by the
    /// first collection that sees it, and removed by one a lease plus the
    /// margin later: an older coordinator still filling it keeps that long.
    pub async fn collect_placeholders(
        &self,
        store: Option<&str>,
        ns: &crate::Namespace,
    ) -> Result<u64, StoreError> {
        let target = self.named_store(store)?;
        stamp_unstamped_placeholders(target.as_ref(), ns).await?;
        let cutoff = self.placeholder_cutoff(target.as_ref()).await?;
        target
            .delete_many(ns, crate::document::expired_placeholders(cutoff))
            .await
    }

    /// The age past which a placeholder is left behind: the lease plus the margin.
    fn placeholder_age(&self) -> Duration {
        self.engine
            .config
            .lease
            .saturating_add(self.engine.config.clock_margin)
    }

    /// The store's time minus [`placeholder_age`](Self::placeholder_age):
    /// placeholders reserved at or before it are left behind.
    pub(crate) async fn placeholder_cutoff(
        &self,
        store: &dyn Store,
    ) -> Result<bson::DateTime, StoreError> {
        let now = store.now().await?;
        let age = i64::try_from(self.placeholder_age().as_millis()).unwrap_or(i64::MAX);
        Ok(bson::DateTime::from_millis(
            now.timestamp_millis().saturating_sub(age),
        ))
    }

    /// The coordinator store named `store` (`None`: the default).
    fn named_store(&self, store: Option<&str>) -> Result<&Arc<dyn Store>, StoreError> {
        self.engine.stores.get(store).ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::BadRequest,
                format!("unknown store {:?}", store.unwrap_or("")),
            )
        })
    }

    /// Reads a transaction record.
    pub async fn record(&self, id: &TxId) -> Result<Option<TxRecord>, StoreError> {
        self.engine.load(id).await
    }

    /// Shuts down cleanly: waits for the background work ([`drain`](Self::drain)),
    /// then closes every store ([`Store::shutdown`]). Call it before the end of
    /// `main`: a MongoDB client dropped while the runtime stops may still have
    /// background tasks of its own running. The coordinator (and its stores,
    /// also through clones) must not be used afterwards.
    ///
    /// It waits as long as the background work takes: a store call that
    /// never returns (a hung connection) holds it up for good. Use
    /// [`shutdown_within`](Self::shutdown_within) to bound the wait.
    pub async fn shutdown(&self) {
        self.drain().await;
        for store in self.engine.stores.all() {
            store.shutdown().await;
        }
    }

    /// [`shutdown`](Self::shutdown), waiting at most `limit` for the
    /// background work. `true` once it finished and the stores were closed;
    /// `false` if it did not finish in time: what it had not finished
    /// (committed transactions whose markers are still to clear) is left to
    /// recovery after the lease, as after a crash, and the stores are left
    /// open (closing a MongoDB client waits for the operations still in
    /// flight). Nothing committed is lost either way.
    pub async fn shutdown_within(&self, limit: std::time::Duration) -> bool {
        if tokio::time::timeout(limit, self.drain()).await.is_err() {
            tracing::warn!(
                target: "tandem",
                "shutdown: the background work did not finish within {limit:?}; left to recovery"
            );
            return false;
        }
        for store in self.engine.stores.all() {
            store.shutdown().await;
        }
        true
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
    /// missing document, a conflict) the transaction is canceled and
    /// [`TxError::Canceled`] says why, and whether every applied change was
    /// undone before the answer (`undone`) or its undo is left to recovery.
    /// If the store fails mid-way the record is left for the recovery worker
    /// and [`TxError::Interrupted`] says where. [`TxError::Superseded`]: a
    /// recovery worker took the transaction over, and the record says how it
    /// ended; [`TxError::Duplicate`]: a caller-chosen id is taken;
    /// [`TxError::Invalid`]: the transaction was refused before anything
    /// was written. The guide's payment chapter tabulates what each answer
    /// tells about the documents.
    ///
    /// [`CommitPoint`]: crate::config::CommitPoint
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

    /// Cancels a transaction that is still `pending` (or finishes canceling one that is `canceling`).
    ///
    /// The caller takes the record over (raising its epoch), so a coordinator
    /// still working on it can no longer move it. A transaction that commits
    /// at its applies ([`TxRecord::early_commit`](crate::TxRecord::early_commit))
    /// cannot be decided while an apply may still land: until every
    /// participant store's clock reads the applies' deadline plus the clock
    /// margin, this answers `pending`, and the request is not remembered:
    /// recovery decides later, committing if every apply landed and
    /// otherwise as its [`PendingPolicy`](crate::PendingPolicy) says (rolled
    /// back by default; a worker rolling `pending` forward applies the rest
    /// and commits), unless `cancel` is called again then; after it, `canceled` (or
    /// `canceling`) if some apply never landed, and `done` if all did (the
    /// transaction had committed). See [`RecoveryWorker::cancel`](crate::RecoveryWorker::cancel).
    pub async fn cancel(&self, id: &TxId, reason: &str) -> Result<TxState, TxError> {
        let worker = self.recovery(RecoveryConfig::default());
        worker.cancel(id, reason).await
    }
}

#[cfg(test)]
mod tests;

/// Stamps the placeholders in `ns` that carry no reservation time (written
/// by a version before placeholders were stamped) with the store's time, so
/// that they expire like the others instead of never.
async fn stamp_unstamped_placeholders(
    store: &dyn Store,
    ns: &crate::Namespace,
) -> Result<(), StoreError> {
    store
        .update_many(
            ns,
            doc! { "_tandem.ghost": true, crate::document::RESERVED_AT: { "$exists": false } },
            doc! { "$currentDate": { crate::document::RESERVED_AT: true } },
        )
        .await
        .map(|_| ())
}
