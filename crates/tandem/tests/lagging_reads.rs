//! An apply counted as landed must be one the store cannot lose.
//!
//! When an apply's answer is lost, its retry matches nothing and the
//! coordinator reads the document to tell why. That read uses the store's
//! read concern, which on MongoDB may be `local`: it can show the marker of
//! a write a majority does not hold yet, which a failover then rolls back.
//! Counting such a marker as the apply's made the coordinator answer
//! committed for an apply that never held (found by an adversarial review
//! comparing the code with the model). The coordinator now confirms the
//! marker with `Store::exists`, which on MongoDB reads `linearizable`.
//!
//! The store here plays a primary whose first write to account A is not
//! replicated yet: `exists` (the majority's view) does not see it, and the
//! first write after a read showed it rolls it back, as a failover does.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bson::{doc, Bson, Document};
use common::*;
use tandem::store::{FindOneAndUpdateOptions, FindOptions, UpdateOptions, UpdateOutcome};
use tandem::testing::FaultStore;
use tandem::{
    CommitPoint, Coordinator, MemoryStore, Namespace, RecoveryConfig, RetryPolicy, Store,
    StoreError,
};

#[derive(Default)]
struct Lag {
    /// A's document before its first update, while that update is not
    /// replicated.
    unreplicated: Option<Document>,
    /// A read showed the unreplicated write.
    seen: bool,
    /// The write was rolled back.
    rolled_back: bool,
}

#[derive(Clone)]
struct Primary {
    inner: MemoryStore,
    lag: Arc<Mutex<Lag>>,
}

fn is_a(ns: &Namespace, filter: &Document) -> bool {
    *ns == accounts() && filter.get("_id") == Some(&Bson::String("A".into()))
}

impl Primary {
    /// Before a write: a failover rolls back a write a read has shown, which
    /// a majority never held.
    async fn before_write(&self) {
        let image = {
            let mut lag = self.lag.lock().unwrap();
            if !lag.seen {
                return;
            }
            lag.seen = false;
            lag.rolled_back = true;
            lag.unreplicated.take()
        };
        if let Some(image) = image {
            self.inner
                .replace_one(&accounts(), doc! { "_id": "A" }, image)
                .await
                .unwrap();
        }
    }
}

#[async_trait]
impl Store for Primary {
    fn name(&self) -> &str {
        "primary"
    }
    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        self.inner.now().await
    }
    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        self.before_write().await;
        self.inner.insert_one(ns, doc).await
    }
    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: UpdateOptions,
    ) -> Result<UpdateOutcome, StoreError> {
        self.before_write().await;
        let first = is_a(ns, &filter) && {
            let lag = self.lag.lock().unwrap();
            lag.unreplicated.is_none() && !lag.rolled_back
        };
        if first {
            let image = self.inner.find_one(ns, doc! { "_id": "A" }).await?;
            self.lag.lock().unwrap().unreplicated = image;
        }
        self.inner.update_one(ns, filter, update, options).await
    }
    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: FindOneAndUpdateOptions,
    ) -> Result<Option<Document>, StoreError> {
        self.before_write().await;
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
        self.before_write().await;
        self.inner.replace_one(ns, filter, replacement).await
    }
    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.before_write().await;
        self.inner.delete_one(ns, filter).await
    }
    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        let found = self.inner.find_one(ns, filter).await?;
        if *ns == accounts() && found.as_ref().and_then(|d| d.get("_id")) == Some(&"A".into()) {
            let mut lag = self.lag.lock().unwrap();
            if lag.unreplicated.is_some() {
                lag.seen = true;
            }
        }
        Ok(found)
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
        // What a majority holds: not the unreplicated write.
        let image = self.lag.lock().unwrap().unreplicated.clone();
        match image {
            Some(image) if is_a(ns, &filter) => {
                let scratch = MemoryStore::new();
                scratch.insert_one(ns, image).await?;
                scratch.exists(ns, filter).await
            }
            _ => self.inner.exists(ns, filter).await,
        }
    }
}

/// A transfer whose batched apply lands on a primary that loses its answer
/// and then the write: the answer and the balances agree, whatever the
/// commit point.
#[tokio::test]
async fn an_apply_seen_only_by_a_local_read_is_not_counted() {
    for point in [CommitPoint::Applied, CommitPoint::Done] {
        let (store, clock, _) = bank(&["A", "B"], 1000).await;
        let primary = Primary {
            inner: store.clone(),
            lag: Arc::default(),
        };
        let lag = primary.lag.clone();
        // Operation 1 writes the record, 2 applies both accounts (its answer is lost).
        let faulty = FaultStore::new(Arc::new(primary)).lose_answer_at(2);
        let coordinator = Coordinator::builder(faulty)
            .commit_point(point)
            .retry(RetryPolicy {
                base_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(2),
                ..RetryPolicy::default()
            })
            .build();
        let answer = coordinator.run(transfer("A", "B", 100)).await;
        coordinator.drain().await;
        assert!(
            lag.lock().unwrap().rolled_back,
            "{point:?}: the scenario did not happen"
        );
        // What the applies in doubt left to recovery, it finishes.
        let worker = Coordinator::new(store.clone()).recovery(RecoveryConfig::default());
        for _ in 0..3 {
            clock.advance(Duration::from_secs(120));
            worker.run_once().await.unwrap();
        }
        let (a, b) = (balance(&store, "A").await, balance(&store, "B").await);
        assert_eq!(a + b, 2000, "{point:?}: answered {answer:?}, A {a}, B {b}");
        if answer.is_ok() {
            assert_eq!((a, b), (900, 1100), "{point:?}: answered {answer:?}");
        }
    }
}
