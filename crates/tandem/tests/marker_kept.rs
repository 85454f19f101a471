#![cfg(feature = "test-util")]
//! A marker name that is a field of the application's holding something
//! other than an array (`DocumentChange::marker("owner")` where `owner` is
//! a string). The two-phase apply could not push its marker there and
//! answered a `TypeMismatch` naming the change's own field (`n`), not the
//! marker; the native strategy, which writes no marker, committed. Both now
//! refuse it with a `TypeMismatch` naming the marker field, and nothing is
//! written.

mod common;

use std::sync::Arc;

use bson::doc;
use common::{accounts, balance, bank, get, records};
use tandem::{
    CommitPoint, Coordinator, DocumentChange, Namespace, StepError, Store, Strategy, Transaction,
    TxError,
};

fn things() -> Namespace {
    Namespace::new("app", "things")
}

#[tokio::test]
async fn a_marker_field_holding_a_string_is_refused_by_either_strategy() {
    for shared in [true, false] {
        for strategy in [Strategy::TwoPhase, Strategy::Native] {
            let (store, _clock, _) = bank(&["A"], 100).await;
            store
                .insert_one(&things(), doc! { "_id": "X", "owner": "alice", "n": 1 })
                .await
                .unwrap();
            let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
                .commit_point(CommitPoint::Done)
                .build();
            let change = DocumentChange::update(things(), "X").marker("owner");
            let change = if shared {
                change.inc("n", 1)
            } else {
                change.set("n", 2)
            };
            let tx = Transaction::new()
                .change(
                    DocumentChange::update(accounts(), "A")
                        .inc("balance", -30_i64)
                        .require_gte("balance", 30_i64),
                )
                .change(change)
                .strategy(strategy);
            let answer = coordinator.run(tx).await;
            let case = format!("{strategy:?}, shared {shared}");
            match &answer {
                Err(TxError::Canceled {
                    cause: StepError::TypeMismatch { path, message, .. },
                    undone: true,
                    ..
                }) => {
                    assert_eq!(path, "owner", "{case}: {message}");
                    assert!(message.contains("marker field owner"), "{case}: {message}");
                }
                other => panic!("{case}: {other:?}"),
            }
            assert_eq!(balance(&store, "A").await, 100, "{case}");
            let x = get(&store, &things(), "X").await.unwrap();
            assert_eq!(x.get_str("owner").unwrap(), "alice", "{case}");
            assert_eq!(x.get_i32("n").unwrap(), 1, "{case}");
            for record in store.documents(&records()) {
                assert_eq!(record.get_str("state").unwrap(), "canceled", "{case}");
            }
        }
    }
}
