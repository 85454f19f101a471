#![cfg(feature = "test-util")]
//! A guard on an insert. The document does not exist before its insert, so
//! no guard of it can be checked against anything: the fill of a two-phase
//! insert and a native insert ignored them, and a transaction whose insert
//! was guarded by a condition that could never hold committed (and
//! `explain` listed the guard as if it were checked). Such a change is
//! refused as malformed, with either strategy, before anything is written.

mod common;

use std::sync::Arc;

use bson::doc;
use common::{accounts, balance, bank, get, records};
use tandem::{
    ChangeError, CommitPoint, Coordinator, DocumentChange, GuardOp, Namespace, Store, Strategy,
    Transaction, TxError,
};

fn orders() -> Namespace {
    Namespace::new("shop", "orders")
}

/// An order paid from A, inserted only "if its state is `approved`": a
/// guard no document can meet before it is inserted.
fn guarded_order() -> Transaction {
    Transaction::new()
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -30_i64)
                .require_gte("balance", 30_i64),
        )
        .change(
            DocumentChange::insert(orders(), "o-1", doc! { "amount": 30_i64, "state": "new" })
                .require_eq("state", "approved"),
        )
}

#[tokio::test]
async fn a_guarded_insert_is_refused_before_anything_is_written() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let (store, _clock, _) = bank(&["A"], 100).await;
        let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
            .commit_point(CommitPoint::Done)
            .build();
        let answer = coordinator.run(guarded_order().strategy(strategy)).await;
        assert!(
            matches!(
                answer,
                Err(TxError::Invalid(ChangeError::InvalidPath { ref path, .. })) if path == "state"
            ),
            "{strategy:?}: {answer:?}"
        );
        assert_eq!(
            balance(&store, "A").await,
            100,
            "{strategy:?}: nothing paid"
        );
        assert!(
            get(&store, &orders(), "o-1").await.is_none(),
            "{strategy:?}: nothing inserted, no placeholder"
        );
        assert!(store.documents(&records()).is_empty(), "{strategy:?}");
    }
}

/// `require(path, GuardOp::Exists, false)`, as MongoDB's `{$exists: false}`
/// reads: the value of an `exists` or `missing` guard was ignored, so this
/// guard required the field to exist, the opposite of what it says. A
/// one-time bonus "only where no coupon was used" was paid where one was.
/// Such a guard is refused as malformed, with either strategy.
#[tokio::test]
async fn a_presence_guard_with_a_value_is_refused() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let (store, _clock, _) = bank(&[], 0).await;
        store
            .insert_one(
                &accounts(),
                doc! { "_id": "A", "balance": 100_i64, "coupon": "used", "pendingTransactions": [] },
            )
            .await
            .unwrap();
        let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
            .commit_point(CommitPoint::Done)
            .build();
        for (op, value) in [
            (GuardOp::Exists, bson::Bson::Boolean(false)),
            (GuardOp::Missing, bson::Bson::Boolean(true)),
            (GuardOp::Exists, bson::Bson::Int32(0)),
        ] {
            let bonus = Transaction::new().change(
                DocumentChange::update(accounts(), "A")
                    .inc("balance", 10_i64)
                    .require("coupon", op, value.clone()),
            );
            let answer = coordinator.run(bonus.strategy(strategy)).await;
            assert!(
                matches!(
                    answer,
                    Err(TxError::Invalid(ChangeError::InvalidPath { ref path, .. })) if path == "coupon"
                ),
                "{strategy:?} {op:?} {value}: {answer:?}"
            );
        }
        assert_eq!(
            balance(&store, "A").await,
            100,
            "{strategy:?}: no bonus paid"
        );
        assert!(store.documents(&records()).is_empty(), "{strategy:?}");
    }
}
