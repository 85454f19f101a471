//! [`FaultStore`]: crashes, pauses and scheduling noise around any store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bson::Document;
use tokio::sync::oneshot;

use crate::store::{
    FindOptions, IndexSpec, Namespace, ReturnDocument, Store, StoreError, StoreErrorKind,
    UpdateOutcome,
};

/// A pause at one operation: the test learns when it is reached and decides when it goes on.
#[derive(Debug)]
pub struct Pause {
    /// Completes when the paused operation is reached (before it runs).
    pub reached: oneshot::Receiver<()>,
    /// Send (or drop) to let the operation run.
    pub release: oneshot::Sender<()>,
}

#[derive(Default)]
struct Plan {
    crash_after: Option<u64>,
    lose_at: Option<u64>,
    lose_answer_at: Option<u64>,
    pause_at: Option<(u64, oneshot::Sender<()>, oneshot::Receiver<()>)>,
    yield_seed: Option<u64>,
    /// Copies of the upserts sent through the wrapper, when kept.
    upserts: Option<Vec<Upsert>>,
}

/// The writes a [`FaultStore`] lost on their way
/// ([`lose_at`](FaultStore::lose_at)) and kept
/// ([`keeping_lost`](FaultStore::keeping_lost)), held as a network (or a
/// queue in the server) would hold them: [`deliver`](Self::deliver) lets
/// them arrive late. It holds nothing else of the wrapper (no pause), so
/// it can outlive it.
#[derive(Clone)]
pub struct LostWrites {
    inner: Arc<dyn Store>,
    lost: Arc<Mutex<Option<Vec<Lost>>>>,
}

impl std::fmt::Debug for LostWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostWrites")
            .field("inner", &self.inner.name())
            .field("held", &self.held())
            .finish()
    }
}

impl LostWrites {
    /// How many lost writes are held.
    pub fn held(&self) -> usize {
        self.lock().as_ref().map_or(0, Vec::len)
    }

    /// Sends every write held so far to the wrapped store, in the order they
    /// were sent, as late copies of them would arrive, ignoring their
    /// answers; returns how many were sent.
    pub async fn deliver(&self) -> usize {
        let lost = self.lock().as_mut().map(std::mem::take).unwrap_or_default();
        let inner = &self.inner;
        for write in &lost {
            let _ = match write.clone() {
                Lost::Insert(ns, doc) => inner.insert_one(&ns, doc).await.map(drop),
                Lost::Update(ns, f, u, o) => inner.update_one(&ns, f, u, o).await.map(drop),
                Lost::FindAndModify(ns, f, u, o) => {
                    inner.find_one_and_update(&ns, f, u, o).await.map(drop)
                }
                Lost::Replace(ns, f, r) => inner.replace_one(&ns, f, r).await.map(drop),
                Lost::DeleteOne(ns, f) => inner.delete_one(&ns, f).await.map(drop),
                Lost::DeleteMany(ns, f) => inner.delete_many(&ns, f).await.map(drop),
                Lost::UpdateMany(ns, f, u) => inner.update_many(&ns, f, u).await.map(drop),
            };
        }
        lost.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<Lost>>> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A write lost on its way ([`FaultStore::lose_at`]), kept to be delivered
/// late ([`FaultStore::deliver_lost`]).
#[derive(Clone, Debug)]
enum Lost {
    Insert(Namespace, Document),
    Update(Namespace, Document, Document, crate::store::UpdateOptions),
    FindAndModify(
        Namespace,
        Document,
        Document,
        crate::store::FindOneAndUpdateOptions,
    ),
    Replace(Namespace, Document, Document),
    DeleteOne(Namespace, Document),
    DeleteMany(Namespace, Document),
    UpdateMany(Namespace, Document, Document),
}

/// A copy of an upsert (a record's create by `findAndModify`, an insert's
/// reservation by `update`) sent through a [`FaultStore`]:
/// [`FaultStore::deliver_again`] sends it to the wrapped store once more, as
/// a request that the network delayed and delivered twice would arrive.
#[derive(Clone, Debug)]
pub struct Upsert {
    /// Its namespace.
    pub ns: Namespace,
    /// Its filter.
    pub filter: Document,
    /// Its update.
    pub update: Document,
}

/// A [`Store`] wrapper that injects crashes, pauses and scheduling noise.
#[derive(Clone)]
pub struct FaultStore {
    inner: Arc<dyn Store>,
    ops: Arc<AtomicU64>,
    plan: Arc<Mutex<Plan>>,
    lost: LostWrites,
}

impl std::fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultStore")
            .field("inner", &self.inner.name())
            .field("ops", &self.ops())
            .finish()
    }
}

impl FaultStore {
    /// Wraps `inner`; it behaves exactly like `inner` until told otherwise.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        FaultStore {
            lost: LostWrites {
                inner: inner.clone(),
                lost: Arc::default(),
            },
            inner,
            ops: Arc::new(AtomicU64::new(0)),
            plan: Arc::new(Mutex::new(Plan::default())),
        }
    }

    /// Operations started so far (including refused ones).
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::SeqCst)
    }

    /// Lets the first `n` operations run; every later one fails with [`StoreErrorKind::Crashed`].
    pub fn crash_after(self, n: u64) -> Self {
        self.lock().crash_after = Some(n);
        self
    }

    /// From now on, every operation fails with [`StoreErrorKind::Crashed`].
    pub fn crash_now(&self) {
        let done = self.ops();
        self.lock().crash_after = Some(done);
    }

    /// Operation number `n` (1-based) fails with
    /// [`StoreErrorKind::Transient`] without reaching the wrapped store: to
    /// the caller, a request whose answer was lost, its outcome unknown. The
    /// request itself may still arrive: an upserting `findAndModify` lost so
    /// is kept (with [`keeping_upserts`](Self::keeping_upserts)), to be
    /// delivered late with [`deliver_again`](Self::deliver_again), and any
    /// write lost so (with [`keeping_lost`](Self::keeping_lost)) with
    /// [`deliver_lost`](Self::deliver_lost).
    pub fn lose_at(self, n: u64) -> Self {
        self.lock().lose_at = Some(n);
        self
    }

    /// Operation number `n` (1-based) reaches the wrapped store and runs,
    /// and its answer is replaced by a [`StoreErrorKind::Transient`] error:
    /// a request that landed and whose answer was lost on the way back.
    pub fn lose_answer_at(self, n: u64) -> Self {
        self.lock().lose_answer_at = Some(n);
        self
    }

    /// Pauses before operation number `n` (1-based) until released.
    pub fn pause_at(&self, n: u64) -> Pause {
        let (reached_tx, reached_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        self.lock().pause_at = Some((n, reached_tx, release_rx));
        Pause {
            reached: reached_rx,
            release: release_tx,
        }
    }

    /// Before each operation, yields to the scheduler a pseudo-random number of times
    /// (0 to 3) drawn from `seed`: on a single-threaded runtime this picks an interleaving.
    pub fn with_yields(self, seed: u64) -> Self {
        self.lock().yield_seed = Some(seed);
        self
    }

    /// From now on, keeps a copy of every upsert, by `findAndModify` (a
    /// record's create) or by `update` (an insert's reservation of its
    /// `_id`); see [`Upsert`].
    pub fn keeping_upserts(self) -> Self {
        self.lock().upserts = Some(Vec::new());
        self
    }

    /// From now on, keeps every write that [`lose_at`](Self::lose_at) loses
    /// on its way, for [`deliver_lost`](Self::deliver_lost): a request the
    /// caller gave up on that the network (or a queue in the server)
    /// delivers later.
    pub fn keeping_lost(self) -> Self {
        *self.lost.lock() = Some(Vec::new());
        self
    }

    /// The writes lost on their way and kept ([`keeping_lost`](Self::keeping_lost)),
    /// to be delivered late.
    pub fn lost_writes(&self) -> LostWrites {
        self.lost.clone()
    }

    /// Delivers the writes lost on their way and kept so far
    /// ([`LostWrites::deliver`]); returns how many were sent.
    pub async fn deliver_lost(&self) -> usize {
        self.lost.deliver().await
    }

    /// Keeps a write lost on its way, when asked to.
    fn keep_lost(&self, gate: &Result<bool, StoreError>, write: impl FnOnce() -> Lost) {
        if matches!(gate, Err(e) if e.kind == StoreErrorKind::Transient) {
            if let Some(kept) = &mut *self.lost.lock() {
                kept.push(write());
            }
        }
    }

    /// The upserts kept so far, in the order they were sent.
    pub fn upserts(&self) -> Vec<Upsert> {
        self.lock().upserts.clone().unwrap_or_default()
    }

    /// Sends `upsert` to the wrapped store again, as a late duplicate of the
    /// original request would arrive; returns the document it wrote.
    pub async fn deliver_again(&self, upsert: &Upsert) -> Result<Option<Document>, StoreError> {
        self.inner
            .find_one_and_update(
                &upsert.ns,
                upsert.filter.clone(),
                upsert.update.clone(),
                crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                    .with_upsert(true),
            )
            .await
    }

    /// Keeps a copy of an upsert sent (or lost on its way), when asked to.
    fn keep_upsert(&self, ns: &Namespace, filter: &Document, update: &Document) {
        if let Some(kept) = &mut self.lock().upserts {
            kept.push(Upsert {
                ns: ns.clone(),
                filter: filter.clone(),
                update: update.clone(),
            });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before an operation: its injected fault, if any; `Ok(true)` when it
    /// runs and its answer is then lost ([`lose_answer_at`](Self::lose_answer_at)).
    async fn gate(&self) -> Result<bool, StoreError> {
        let n = self.ops.fetch_add(1, Ordering::SeqCst) + 1;
        let (crash_after, lost, lose_answer, pause, yields) = {
            let mut plan = self.lock();
            let lost = plan.lose_at == Some(n);
            let lose_answer = plan.lose_answer_at == Some(n);
            let pause = match &plan.pause_at {
                Some((at, _, _)) if *at == n => plan.pause_at.take(),
                _ => None,
            };
            let yields = plan.yield_seed.map(|seed| {
                // splitmix64 of (seed, n): deterministic per operation.
                let mut z = seed.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) % 4
            });
            (plan.crash_after, lost, lose_answer, pause, yields)
        };
        if let Some((_, reached, release)) = pause {
            let _ = reached.send(());
            let _ = release.await;
        }
        for _ in 0..yields.unwrap_or(0) {
            tokio::task::yield_now().await;
        }
        match crash_after {
            Some(limit) if n > limit => Err(StoreError::new(
                StoreErrorKind::Crashed,
                format!("injected crash before operation {n}"),
            )),
            _ if lost => Err(StoreError::new(
                StoreErrorKind::Transient,
                format!("injected: the answer of operation {n} was lost"),
            )),
            _ => Ok(lose_answer),
        }
    }

    /// The answer of an operation that ran: replaced by a
    /// [`StoreErrorKind::Transient`] error when its answer is to be lost.
    fn answered<T>(&self, lose: bool, answer: Result<T, StoreError>) -> Result<T, StoreError> {
        if lose {
            Err(StoreError::new(
                StoreErrorKind::Transient,
                "injected: the operation ran and its answer was lost",
            ))
        } else {
            answer
        }
    }
}

#[async_trait]
impl Store for FaultStore {
    fn name(&self) -> &str {
        "fault"
    }
    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        let lose = self.gate().await?;
        let answer = self.inner.now().await;
        self.answered(lose, answer)
    }
    /// A clock reading, not an operation: neither counted nor faulted.
    async fn clock_estimate(&self) -> Result<bson::DateTime, StoreError> {
        self.inner.clock_estimate().await
    }
    async fn shutdown(&self) {
        self.inner.shutdown().await
    }
    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        let gate = self.gate().await;
        self.keep_lost(&gate, || Lost::Insert(ns.clone(), doc.clone()));
        let lose = gate?;
        let answer = self.inner.insert_one(ns, doc).await;
        self.answered(lose, answer)
    }
    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: crate::store::UpdateOptions,
    ) -> Result<UpdateOutcome, StoreError> {
        let gate = self.gate().await;
        let lost = matches!(&gate, Err(e) if e.kind == StoreErrorKind::Transient);
        if options.upsert && (gate.is_ok() || lost) {
            self.keep_upsert(ns, &filter, &update);
        }
        self.keep_lost(&gate, || {
            Lost::Update(ns.clone(), filter.clone(), update.clone(), options)
        });
        let lose = gate?;
        let answer = self.inner.update_one(ns, filter, update, options).await;
        self.answered(lose, answer)
    }
    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: crate::store::FindOneAndUpdateOptions,
    ) -> Result<Option<Document>, StoreError> {
        let gate = self.gate().await;
        let lost = matches!(&gate, Err(e) if e.kind == StoreErrorKind::Transient);
        if options.upsert && (gate.is_ok() || lost) {
            self.keep_upsert(ns, &filter, &update);
        }
        self.keep_lost(&gate, || {
            Lost::FindAndModify(ns.clone(), filter.clone(), update.clone(), options)
        });
        let lose = gate?;
        let answer = self
            .inner
            .find_one_and_update(ns, filter, update, options)
            .await;
        self.answered(lose, answer)
    }
    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        let gate = self.gate().await;
        self.keep_lost(&gate, || {
            Lost::Replace(ns.clone(), filter.clone(), replacement.clone())
        });
        let lose = gate?;
        let answer = self.inner.replace_one(ns, filter, replacement).await;
        self.answered(lose, answer)
    }
    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        let gate = self.gate().await;
        self.keep_lost(&gate, || Lost::DeleteOne(ns.clone(), filter.clone()));
        let lose = gate?;
        let answer = self.inner.delete_one(ns, filter).await;
        self.answered(lose, answer)
    }
    async fn delete_many(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        let gate = self.gate().await;
        self.keep_lost(&gate, || Lost::DeleteMany(ns.clone(), filter.clone()));
        let lose = gate?;
        let answer = self.inner.delete_many(ns, filter).await;
        self.answered(lose, answer)
    }
    async fn update_many(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        let gate = self.gate().await;
        self.keep_lost(&gate, || {
            Lost::UpdateMany(ns.clone(), filter.clone(), update.clone())
        });
        let lose = gate?;
        let answer = self.inner.update_many(ns, filter, update).await;
        self.answered(lose, answer)
    }
    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        let lose = self.gate().await?;
        let answer = self.inner.find_one(ns, filter).await;
        self.answered(lose, answer)
    }
    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError> {
        let lose = self.gate().await?;
        let answer = self.inner.find(ns, filter, options).await;
        self.answered(lose, answer)
    }
    async fn exists(&self, ns: &Namespace, filter: Document) -> Result<bool, StoreError> {
        let lose = self.gate().await?;
        let answer = self.inner.exists(ns, filter).await;
        self.answered(lose, answer)
    }
    async fn ensure_index(&self, ns: &Namespace, index: IndexSpec) -> Result<(), StoreError> {
        let lose = self.gate().await?;
        let answer = self.inner.ensure_index(ns, index).await;
        self.answered(lose, answer)
    }
    async fn drop_index(&self, ns: &Namespace, name: &str) -> Result<(), StoreError> {
        let lose = self.gate().await?;
        let answer = self.inner.drop_index(ns, name).await;
        self.answered(lose, answer)
    }
}
