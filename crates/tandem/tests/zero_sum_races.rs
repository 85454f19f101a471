//! Zero credit sums dropped by the increments they stand in the way of
//! (`tidy_zero_sums`), raced by other increments of the same document,
//! or failed by the store under the native strategy.
//! Each test failed on the code before the fix.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bson::{doc, Bson, Document};
use common::*;
use tandem::store::{FindOneAndUpdateOptions, FindOptions, UpdateOptions, UpdateOutcome};
use tandem::testing::FaultStore;
use tandem::{
    Coordinator, DocumentChange, MemoryStore, Namespace, NativeTransactions, StepError, Store,
    StoreError, StoreErrorKind, Strategy, Transaction, TxError, TxState,
};

fn credit(path: &str, by: i64) -> Transaction {
    Transaction::new().change(DocumentChange::update(stats(), "X").inc(path, by))
}

/// A credit of `a.b` beside the zero of `a`, held before its store
/// operation `op`, while a credit of `a.c` runs whole; then let go. Both
/// must commit, `a` holding both credits.
async fn a_b_beside_a_c_landing_at(op: u64) {
    let (store, _clock) = undone_credits_at(&["a"]).await;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let faulty = FaultStore::new(shared.clone());
    let pause = faulty.pause_at(op);
    let slow = two_phase(Arc::new(faulty));
    let held = tokio::spawn(async move { slow.run(credit("a.b", 7)).await });
    pause.reached.await.unwrap();
    let x = get(&store, &stats(), "X").await.unwrap();
    assert_eq!(credit_sums(&x).get("a"), Some(&Bson::Int64(0)), "{x}");
    assert!(x.get("a").is_none(), "nothing of a.b landed yet: {x}");

    let plain = two_phase(shared.clone());
    let other = plain.run(credit("a.c", 7)).await;
    assert!(
        matches!(&other, Ok(r) if r.state == TxState::Done),
        "{other:?}"
    );

    pause.release.send(()).unwrap();
    let answer = held.await.unwrap();
    plain.drain().await;
    let x = get(&store, &stats(), "X").await.unwrap();
    assert!(
        matches!(&answer, Ok(r) if r.state == TxState::Done),
        "a credit of a.b beside a.c, nothing in its way: {answer:?}; {x}"
    );
    assert_eq!(
        x.get("a"),
        Some(&Bson::Document(doc! { "c": 7_i64, "b": 7_i64 })),
        "{x}"
    );
}

/// Two credits of `a.b` and `a.c` beside the zero of `a`, on a busy
/// document: the credit of `a.c` drops the zero (and lands) between the
/// read and the unset of the credit of `a.b`'s own tidy, whose unset,
/// guarded by the zero it read, then matches nothing. Nothing is in the way
/// of `a.b` any more (`a` holds `{c: 7}`, its sums `{c: 0}`), yet the
/// credit of `a.b` was canceled with the `TypeMismatch` that tells of a
/// zero in its way: the retry was made only when its own unset matched.
#[tokio::test]
async fn a_zero_dropped_by_another_credit_meanwhile_still_makes_way() {
    // 1 the record's create, 2 the apply (refused: the zero of `a`), 3 the
    // read that explains it, 4 the tidy's read; 5, the tidy's unset, waits.
    a_b_beside_a_c_landing_at(5).await;
}

/// The same, with the zero dropped between the refused apply's explanation
/// and the tidy's read: the tidy finds no zero in the way, drops nothing,
/// and the credit of `a.b` was canceled as if one were there.
#[tokio::test]
async fn a_zero_dropped_before_the_tidy_reads_still_makes_way() {
    // 4, the tidy's read, waits.
    a_b_beside_a_c_landing_at(4).await;
}

/// A credit of `a.b` and `d.e` beside the zeros of `a` and `d`, while a
/// credit of `d` is applied between the tidy's read and its unset (pending,
/// its sum 5): the obstacle is a conflict with that pending credit, which
/// `ConflictPolicy::Wait` waits out; it was answered as the `TypeMismatch`
/// of a zero in the way (the unset, guarded by both zeros, matched nothing).
#[tokio::test]
async fn a_credit_pending_meanwhile_is_told_as_a_conflict() {
    let (store, _clock) = undone_credits_at(&["a", "d"]).await;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let faulty = FaultStore::new(shared.clone());
    let pause = faulty.pause_at(5);
    let slow = two_phase(Arc::new(faulty));
    let both = Transaction::new().change(
        DocumentChange::update(stats(), "X")
            .inc("a.b", 7_i64)
            .inc("d.e", 7_i64),
    );
    let held = tokio::spawn(async move { slow.run(both).await });
    pause.reached.await.unwrap();

    // A credit of `d` applied, its clear held.
    let faulty_d = FaultStore::new(shared.clone());
    let pause_d = faulty_d.pause_at(3);
    let slow_d = two_phase(Arc::new(faulty_d));
    let pending = tokio::spawn(async move { slow_d.run(credit("d", 5)).await });
    pause_d.reached.await.unwrap();
    let x = get(&store, &stats(), "X").await.unwrap();
    assert_eq!(credit_sums(&x).get("d"), Some(&Bson::Int64(5)), "{x}");

    pause.release.send(()).unwrap();
    let answer = held.await.unwrap();
    pause_d.release.send(()).unwrap();
    let receipt = pending.await.unwrap().unwrap();
    assert_eq!(receipt.state, TxState::Done);
    assert!(
        matches!(
            &answer,
            Err(TxError::Canceled {
                cause: StepError::Conflict { .. },
                undone: true,
                ..
            })
        ),
        "{answer:?}"
    );
}

/// A lost answer on the way of a credit beside a zero (the apply refused,
/// its explaining read, the tidy's read or unset, the apply tried again):
/// the credit is answered committed and lands once, finished by recovery
/// where the coordinator left it, and leaves no marker, pending count or
/// room behind.
#[tokio::test]
async fn a_lost_answer_around_the_tidy_lands_the_credit_once() {
    for op in 2..=7 {
        let (store, clock) = undone_credits_at(&["a"]).await;
        let shared: Arc<dyn Store> = Arc::new(store.clone());
        let faulty = FaultStore::new(shared.clone()).lose_answer_at(op);
        let answer = two_phase(Arc::new(faulty)).run(credit("a.b", 7)).await;
        assert!(answer.is_ok(), "answer lost at {op}: {answer:?}");
        clock.advance(LEASE * 3);
        two_phase(shared)
            .recovery(tandem::RecoveryConfig::default())
            .run_once()
            .await
            .unwrap();
        let x = get(&store, &stats(), "X").await.unwrap();
        assert_eq!(
            x.get("a"),
            Some(&Bson::Document(doc! { "b": 7_i64 })),
            "answer lost at {op}: {x}"
        );
        assert_eq!(
            x.get_array("pendingTransactions").map(Vec::len),
            Ok(0),
            "answer lost at {op}: {x}"
        );
        let meta = x.get_document("_tandem").unwrap();
        assert_eq!(
            meta.get("pending"),
            Some(&Bson::Int32(0)),
            "answer lost at {op}: {x}"
        );
        assert!(
            matches!(
                meta.get("room"),
                None | Some(Bson::Int32(0) | Bson::Int64(0))
            ),
            "answer lost at {op}: {x}"
        );
    }
}

/// A store whose plain requests go through a [`FaultStore`] and whose
/// native transactions run on the memory store beneath it (a `FaultStore`
/// has none): the faults reach what the native strategy sends outside its
/// transaction, such as the tidy of the zero sums in a credit's way.
#[derive(Clone)]
struct NativeBeside {
    plain: FaultStore,
    native: MemoryStore,
}

#[async_trait]
impl Store for NativeBeside {
    fn name(&self) -> &str {
        self.native.name()
    }
    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        self.plain.now().await
    }
    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        self.plain.insert_one(ns, doc).await
    }
    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: UpdateOptions,
    ) -> Result<UpdateOutcome, StoreError> {
        self.plain.update_one(ns, filter, update, options).await
    }
    async fn update_each(
        &self,
        ns: &Namespace,
        statements: Vec<(Document, Document)>,
    ) -> Result<u64, StoreError> {
        self.plain.update_each(ns, statements).await
    }
    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: FindOneAndUpdateOptions,
    ) -> Result<Option<Document>, StoreError> {
        self.plain
            .find_one_and_update(ns, filter, update, options)
            .await
    }
    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.plain.replace_one(ns, filter, replacement).await
    }
    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.plain.delete_one(ns, filter).await
    }
    async fn delete_many(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.plain.delete_many(ns, filter).await
    }
    async fn update_many(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.plain.update_many(ns, filter, update).await
    }
    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        self.plain.find_one(ns, filter).await
    }
    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError> {
        self.plain.find(ns, filter, options).await
    }
    async fn exists(&self, ns: &Namespace, filter: Document) -> Result<bool, StoreError> {
        self.plain.exists(ns, filter).await
    }
    async fn count(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.plain.count(ns, filter).await
    }
    fn native(&self) -> Option<&dyn NativeTransactions> {
        self.native.native()
    }
}

/// A native credit of `a.b` beside the zero of `a` is refused, the zero
/// dropped outside the transaction, and the transaction run once more. A
/// transient failure of that tidy (its read lost, its unset lost on the way
/// or its answer lost) is repeated under the coordinator's retry policy, as
/// every other request is: the credit commits. It was canceled with the
/// `TypeMismatch` the zero made, the tidy left undone.
#[tokio::test]
async fn a_transient_failure_of_a_native_tidy_is_retried() {
    // Through the `FaultStore`: 1 is the tidy's read, 2 its unset.
    for (op, answer_lost) in [(1, false), (2, false), (2, true)] {
        let (store, _clock) = undone_credits_at(&["a"]).await;
        let plain = FaultStore::new(Arc::new(store.clone()));
        let plain = if answer_lost {
            plain.lose_answer_at(op)
        } else {
            plain.lose_at(op)
        };
        let native = Coordinator::builder(NativeBeside {
            plain: plain.clone(),
            native: store.clone(),
        })
        .strategy(Strategy::Native)
        .build();
        let answer = native.run(credit("a.b", 7)).await;
        let x = get(&store, &stats(), "X").await.unwrap();
        assert!(
            matches!(&answer, Ok(r) if r.state == TxState::Done),
            "op {op} lost (answer only: {answer_lost}): {answer:?}; {x}"
        );
        assert!(plain.ops() > op, "op {op}: the tidy was tried again");
        assert_eq!(
            x.get("a"),
            Some(&Bson::Document(doc! { "b": 7_i64 })),
            "op {op} lost (answer only: {answer_lost}): {x}"
        );
    }
}

/// A tidy whose store stays down is answered with the store's failure, not
/// with the `TypeMismatch` of the zero it could not drop: the credit is no
/// refusal, and nothing of it was written.
#[tokio::test]
async fn a_native_tidy_that_cannot_reach_its_store_answers_the_failure() {
    let (store, _clock) = undone_credits_at(&["a"]).await;
    let native = Coordinator::builder(NativeBeside {
        plain: FaultStore::new(Arc::new(store.clone())).crash_after(0),
        native: store.clone(),
    })
    .strategy(Strategy::Native)
    .build();
    let answer = native.run(credit("a.b", 7)).await;
    assert!(
        matches!(
            &answer,
            Err(TxError::Canceled {
                cause: StepError::Store { source, .. },
                undone: true,
                ..
            }) if source.kind == StoreErrorKind::Crashed
        ),
        "{answer:?}"
    );
    let x = get(&store, &stats(), "X").await.unwrap();
    assert!(x.get("a").is_none(), "{x}");
    assert_eq!(credit_sums(&x).get("a"), Some(&Bson::Int64(0)), "{x}");
}
