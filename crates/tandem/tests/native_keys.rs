//! Idempotency keys under the native strategy when the store fails: a
//! failure before the commit leaves the key free, and a refusal's record
//! whose answer was lost is recognised as its own.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bson::{doc, Document};
use common::*;
use tandem::store::{FindOneAndUpdateOptions, FindOptions, UpdateOptions, UpdateOutcome};
use tandem::{
    CommitPoint, Coordinator, DocumentChange, ManualClock, MemoryStore, Namespace, NativeFailure,
    NativeTransactions, RetryPolicy, StepError, Store, StoreError, StoreErrorKind, Strategy,
    Transaction, TxError,
};

/// A MemoryStore whose native transactions fail, the first `fail` times,
/// before their commit is sent, as the MongoDB store's `run` answers a
/// driver error (a network error, a primary stepping down) before the commit:
/// `NativeFailure::Aborted(StepError::Store { .. })`.
#[derive(Clone)]
struct Blip {
    inner: MemoryStore,
    fail: Arc<AtomicU32>,
    /// How many readings of the clock ([`Store::clock_estimate`]) still
    /// fail transiently, as a `hello` to a primary stepping down does.
    clock_fail: Arc<AtomicU32>,
    /// How long the store's own repeats of an attempt take before it
    /// commits (the clock is moved on by that much first), as an attempt
    /// answered with a `TransientTransactionError` and run again does.
    repeats: Option<(Arc<ManualClock>, Duration)>,
}

#[async_trait]
impl NativeTransactions for Blip {
    async fn run_native(
        &self,
        changes: &[DocumentChange],
        retry: RetryPolicy,
    ) -> Result<(), NativeFailure> {
        if self
            .fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(NativeFailure::Aborted(StepError::Store {
                participant: changes.first().map(|c| c.label()).unwrap_or_default(),
                source: StoreError::new(
                    StoreErrorKind::Transient,
                    "connection reset (primary stepped down) before the commit was sent",
                ),
            }));
        }
        if let Some((clock, took)) = &self.repeats {
            clock.advance(*took);
        }
        self.inner
            .native()
            .unwrap()
            .run_native(changes, retry)
            .await
    }
}

#[async_trait]
impl Store for Blip {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        self.inner.now().await
    }
    async fn clock_estimate(&self) -> Result<bson::DateTime, StoreError> {
        if self
            .clock_fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(StoreError::new(
                StoreErrorKind::Transient,
                "connection reset while reading the server's clock",
            ));
        }
        self.inner.clock_estimate().await
    }
    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        self.inner.insert_one(ns, doc).await
    }
    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: UpdateOptions,
    ) -> Result<UpdateOutcome, StoreError> {
        self.inner.update_one(ns, filter, update, options).await
    }
    async fn update_each(
        &self,
        ns: &Namespace,
        statements: Vec<(Document, Document)>,
    ) -> Result<u64, StoreError> {
        self.inner.update_each(ns, statements).await
    }
    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: FindOneAndUpdateOptions,
    ) -> Result<Option<Document>, StoreError> {
        self.inner
            .find_one_and_update(ns, filter, update, options)
            .await
    }
    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.inner.replace_one(ns, filter, replacement).await
    }
    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.inner.delete_one(ns, filter).await
    }
    async fn delete_many(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.inner.delete_many(ns, filter).await
    }
    async fn update_many(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.inner.update_many(ns, filter, update).await
    }
    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        self.inner.find_one(ns, filter).await
    }
    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError> {
        self.inner.find(ns, filter, options).await
    }
    async fn exists(&self, ns: &Namespace, filter: Document) -> Result<bool, StoreError> {
        self.inner.exists(ns, filter).await
    }
    async fn count(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.inner.count(ns, filter).await
    }
    fn native(&self) -> Option<&dyn NativeTransactions> {
        Some(self)
    }
}

/// A keyed native transaction whose store failed before its commit was sent
/// (a failure, not a refusal) takes no key: answered `Interrupted` with no
/// record, as two-phase answers the same failure, and the redelivered
/// payment pays once (a review found the key taken by a `canceled` record,
/// and the redelivery refused for good).
#[tokio::test]
async fn a_store_failure_before_a_native_commit_leaves_the_key_free() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    let blip = Blip {
        inner: store.clone(),
        fail: Arc::new(AtomicU32::new(1)),
        clock_fail: Arc::default(),
        repeats: None,
    };
    let c = Coordinator::builder(blip.clone())
        .strategy(Strategy::Native)
        .commit_point(CommitPoint::Done)
        .build();
    let first = c.run(keyed_payment("pay-7", 100)).await;
    // The store is back; the message is redelivered.
    let again = c.run(keyed_payment("pay-7", 100)).await;
    let a = balance(&store, "A").await;
    // The same blip under two-phase (the first request lost, no retries):
    // `Interrupted`, the key free, and the redelivery pays.
    let (store2, _, _) = bank(&["A", "B"], 1000).await;
    let faulty = tandem::testing::FaultStore::new(Arc::new(store2.clone())).lose_at(1);
    let c2 = Coordinator::builder(faulty)
        .strategy(Strategy::TwoPhase)
        .commit_point(CommitPoint::Done)
        .retry(RetryPolicy::NONE)
        .build();
    let first2 = c2.run(keyed_payment("pay-7", 100)).await;
    let again2 = c2.run(keyed_payment("pay-7", 100)).await;
    let a2 = balance(&store2, "A").await;
    assert!(
        a == 900,
        "a transient store failure took the key for good under Native: first {first:?}, retry {again:?}, A = {a}\n\
         two-phase, same blip: first {first2:?}, retry {again2:?}, A = {a2}"
    );
}
/// A MemoryStore whose first insert into the records collection lands but
/// loses its answer (a transient error), and whose reads of the records
/// collection then lag (miss the record) or fail, as a MongoDB failover or a
/// `majority` read concern may show.
#[derive(Clone)]
struct LostRecordAnswer {
    inner: Blip,
    lose_next_record_insert: Arc<AtomicU32>,
    /// 1: record reads return nothing; 2: record reads fail.
    reads: Arc<AtomicU32>,
}

#[async_trait]
impl Store for LostRecordAnswer {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        self.inner.now().await
    }
    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        let r = self.inner.insert_one(ns, doc).await;
        if *ns == records()
            && r.is_ok()
            && self
                .lose_next_record_insert
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(StoreError::new(StoreErrorKind::Transient, "answer lost"));
        }
        r
    }
    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: UpdateOptions,
    ) -> Result<UpdateOutcome, StoreError> {
        self.inner.update_one(ns, filter, update, options).await
    }
    async fn update_each(
        &self,
        ns: &Namespace,
        statements: Vec<(Document, Document)>,
    ) -> Result<u64, StoreError> {
        self.inner.update_each(ns, statements).await
    }
    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: FindOneAndUpdateOptions,
    ) -> Result<Option<Document>, StoreError> {
        self.inner
            .find_one_and_update(ns, filter, update, options)
            .await
    }
    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.inner.replace_one(ns, filter, replacement).await
    }
    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.inner.delete_one(ns, filter).await
    }
    async fn delete_many(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.inner.delete_many(ns, filter).await
    }
    async fn update_many(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.inner.update_many(ns, filter, update).await
    }
    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        if *ns == records() {
            match self.reads.load(Ordering::SeqCst) {
                1 => return Ok(None),
                2 => {
                    return Err(StoreError::new(
                        StoreErrorKind::Transient,
                        "not primary (election)",
                    ))
                }
                _ => {}
            }
        }
        self.inner.find_one(ns, filter).await
    }
    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError> {
        self.inner.find(ns, filter, options).await
    }
    async fn exists(&self, ns: &Namespace, filter: Document) -> Result<bool, StoreError> {
        self.inner.exists(ns, filter).await
    }
    async fn count(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.inner.count(ns, filter).await
    }
    fn native(&self) -> Option<&dyn NativeTransactions> {
        Some(&self.inner)
    }
}

/// A refused keyed native run whose `canceled` record landed with its answer
/// lost tells its own record from another run's by the creation token, read
/// with `exists`: never `Duplicate` of itself (the ownership read went
/// through a lagging or failing `find_one`).
#[tokio::test]
async fn a_refused_native_run_is_never_told_duplicate_of_its_own_record() {
    let mut bad = Vec::new();
    for mode in [1_u32, 2] {
        let (store, _, _) = bank(&["A", "B"], 50).await;
        let s = LostRecordAnswer {
            inner: Blip {
                inner: store.clone(),
                fail: Arc::new(AtomicU32::new(0)),
                clock_fail: Arc::default(),
                repeats: None,
            },
            lose_next_record_insert: Arc::new(AtomicU32::new(1)),
            reads: Arc::new(AtomicU32::new(mode)),
        };
        let c = Coordinator::builder(s.clone())
            .strategy(Strategy::Native)
            .commit_point(CommitPoint::Done)
            .retry(RetryPolicy {
                base_delay: std::time::Duration::from_millis(1),
                max_delay: std::time::Duration::from_millis(2),
                ..RetryPolicy::default()
            })
            .build();
        // Refused by its guard: 50 < 100. The only run under the key.
        let answer = c.run(keyed_payment("pay-9", 100)).await;
        let record = store
            .find_one(&records(), doc! { "_id": "pay-9" })
            .await
            .unwrap()
            .map(|r| r.get_str("state").unwrap_or_default().to_owned());
        if matches!(answer, Err(TxError::Duplicate { .. })) {
            bad.push(format!(
                "reads mode {mode}: first run answered {answer:?}; the record under the key is its own ({record:?})"
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// A reading of the records store's clock that fails transiently (the
/// estimate a record's create deadline, or a keyed native record's time,
/// is taken from) is repeated under the coordinator's retry policy, as
/// every other store request is: the payment goes through, under either
/// strategy. It was answered at once: `Canceled` with the store error as
/// the cause (a refusal, to the guide) under two-phase without a key, and
/// `Interrupted` under Native with one, though the store answered the
/// next request.
#[tokio::test]
async fn a_transient_failure_reading_the_clock_is_repeated() {
    let mut answers = Vec::new();
    for (strategy, key) in [
        (Strategy::TwoPhase, None),
        (Strategy::Native, Some("pay-9")),
    ] {
        let (store, _, _) = bank(&["A", "B"], 1000).await;
        let blip = Blip {
            inner: store.clone(),
            fail: Arc::default(),
            clock_fail: Arc::new(AtomicU32::new(1)),
            repeats: None,
        };
        let c = Coordinator::builder(blip)
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build();
        let tx = match key {
            Some(key) => keyed_payment(key, 100),
            None => Transaction::new()
                .change(
                    DocumentChange::update(accounts(), "A")
                        .inc("balance", -100_i64)
                        .require_gte("balance", 100_i64),
                )
                .change(DocumentChange::update(accounts(), "B").inc("balance", 100_i64)),
        };
        let answer = c.run(tx).await;
        answers.push((strategy, answer.is_ok(), balance(&store, "A").await, answer));
    }
    assert!(
        answers.iter().all(|(_, ok, a, _)| *ok && *a == 900),
        "{answers:#?}"
    );
}

/// A coordinator that runs its keyed transactions natively registers its
/// lease before the first one's record, as a two-phase one does: garbage
/// collection keeps a key taken for the longest lease registered after its
/// window, and a native commit can land after its record's stamp. Before,
/// only `register_lease` called by hand did.
#[tokio::test]
async fn a_native_keyed_run_registers_its_lease() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    let c = Coordinator::builder(store.clone())
        .strategy(Strategy::Native)
        .lease(Duration::from_secs(45))
        .build();
    c.run(keyed_payment("pay-lease", 5)).await.unwrap();
    let registered = store
        .find_one(
            &Namespace::new("tandem", "tandem_leases"),
            doc! { "_id": "transactions" },
        )
        .await
        .unwrap();
    assert_eq!(
        registered.as_ref().and_then(|d| d.get_i64("millis").ok()),
        Some(45_000),
        "the leases collection after a native keyed run: {registered:?}"
    );
}

/// The store's own repeats of a native attempt (after a transient
/// transaction error) come between the record's stamp and the commit, up
/// to the retry budget (30 s here), far longer than the lease (1 s). A
/// retry 55 s after the commit, inside the 60 s window, after garbage
/// collection, must be told `Duplicate`. Before, the stub was removed at
/// the window plus the margin after the stamp, 25 s before the window
/// after the commit ended, and the retry paid a second time.
#[tokio::test]
async fn a_native_key_holds_its_window_after_the_stores_own_repeats() {
    let window = Duration::from_secs(60);
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let blip = Blip {
        inner: store.clone(),
        fail: Arc::default(),
        clock_fail: Arc::default(),
        repeats: Some((clock.clone(), Duration::from_secs(25))),
    };
    let c = Coordinator::builder(blip)
        .strategy(Strategy::Native)
        .commit_point(CommitPoint::Done)
        .lease(Duration::from_secs(1))
        .retry(RetryPolicy {
            budget: Duration::from_secs(30),
            ..RetryPolicy::default()
        })
        .idempotency_window(window)
        .build();
    c.run(keyed_payment("pay-slow", 5)).await.unwrap();
    assert_eq!(balance(&store, "A").await, 995);

    clock.advance(Duration::from_secs(55));
    c.recovery(tandem::RecoveryConfig {
        idempotency_window: window,
        ..tandem::RecoveryConfig::default()
    })
    .collect_garbage(Duration::from_secs(32))
    .await
    .unwrap();
    let again = c.run(keyed_payment("pay-slow", 5)).await;
    let a = balance(&store, "A").await;
    assert!(
        matches!(&again, Err(TxError::Duplicate { .. })) && a == 995,
        "a retry 55 s after the commit, inside the 60 s window, answered {again:?} and A = {a} (expected Duplicate, A = 995)"
    );
}
