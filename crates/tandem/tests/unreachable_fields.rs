#![cfg(feature = "test-util")]
//! A `set`, `unset`, `push` or `pull` of a field below an array without an
//! index (`items.qty` where `items` is an array of documents). A query
//! reads such a path through the array's elements, an update does not: a
//! `$set` or `$push` there fails, an `$unset` or `$pull` changes nothing.
//! The two-phase strategy answered every one of them with a conflict with
//! a concurrent write that never happened (its before-image, read as
//! "missing", never matched), and the native strategy committed an
//! `unset` or a `pull` that did nothing, a payment with it. Both strategies
//! now refuse the change with a `TypeMismatch` naming the field, and
//! nothing is written.

mod common;

use std::sync::Arc;

use bson::{doc, Document};
use common::{balance, bank, debit_and, records};
use tandem::{
    CommitPoint, Coordinator, DocumentChange, Namespace, StepError, Store, Strategy, Transaction,
    TxError,
};

fn orders() -> Namespace {
    Namespace::new("shop", "orders")
}

fn order() -> Document {
    doc! { "_id": "o-1", "items": [ { "sku": "a", "qty": 2, "tags": ["gift"] } ] }
}

/// A payment of 30 from A, and a change of the order's `items.<field>`.
fn paid(change: DocumentChange) -> Transaction {
    debit_and("A", change)
}

#[tokio::test]
async fn a_field_below_an_array_is_refused_by_either_strategy() {
    type Case = (&'static str, fn() -> DocumentChange);
    let cases: Vec<Case> = vec![
        ("items.qty", || {
            DocumentChange::update(orders(), "o-1").set("items.qty", 5)
        }),
        ("items.qty", || {
            DocumentChange::update(orders(), "o-1").unset("items.qty")
        }),
        ("items.tags", || {
            DocumentChange::update(orders(), "o-1").push("items.tags", "sale")
        }),
        ("items.tags", || {
            DocumentChange::update(orders(), "o-1").pull("items.tags", "gift")
        }),
    ];
    for (path, change) in cases {
        for strategy in [Strategy::TwoPhase, Strategy::Native] {
            let (store, _clock, _) = bank(&["A"], 100).await;
            store.insert_one(&orders(), order()).await.unwrap();
            let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
                .commit_point(CommitPoint::Done)
                .build();
            let answer = coordinator.run(paid(change()).strategy(strategy)).await;
            let case = format!("{strategy:?}, {:?}", change().op);
            match &answer {
                Err(TxError::Canceled {
                    cause:
                        StepError::TypeMismatch {
                            path: p, message, ..
                        },
                    undone: true,
                    ..
                }) => {
                    assert_eq!(p, path, "{case}");
                    assert!(message.contains("items holds array"), "{case}: {message}");
                }
                other => panic!("{case}: {other:?}"),
            }
            assert_eq!(
                balance(&store, "A").await,
                100,
                "{case}: the payment undone"
            );
            let stored = store.documents(&orders());
            assert_eq!(stored.len(), 1, "{case}");
            assert_eq!(
                stored[0].get("items"),
                order().get("items"),
                "{case}: the order unchanged"
            );
            for record in store.documents(&records()) {
                assert_eq!(record.get_str("state").unwrap(), "canceled", "{case}");
            }
        }
    }
}

/// The same paths where `items` is a sub-document, or through an element
/// named by its index, still apply.
#[tokio::test]
async fn a_field_of_a_sub_document_or_an_element_still_applies() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let (store, _clock, _) = bank(&["A"], 100).await;
        store.insert_one(&orders(), order()).await.unwrap();
        store
            .insert_one(&orders(), doc! { "_id": "o-2", "items": { "qty": 1 } })
            .await
            .unwrap();
        let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
            .commit_point(CommitPoint::Done)
            .build();
        coordinator
            .run(
                paid(DocumentChange::update(orders(), "o-1").set("items.0.qty", 5))
                    .strategy(strategy),
            )
            .await
            .unwrap();
        coordinator
            .run(
                Transaction::new()
                    .change(DocumentChange::update(orders(), "o-2").set("items.qty", 7))
                    .strategy(strategy),
            )
            .await
            .unwrap();
        assert_eq!(balance(&store, "A").await, 70, "{strategy:?}");
        let stored = store.documents(&orders());
        let by_id = |id: &str| {
            stored
                .iter()
                .find(|d| d.get_str("_id").unwrap() == id)
                .unwrap()
                .clone()
        };
        assert_eq!(
            by_id("o-1").get_array("items").unwrap()[0]
                .as_document()
                .unwrap()
                .get_i32("qty")
                .unwrap(),
            5
        );
        assert_eq!(
            by_id("o-2")
                .get_document("items")
                .unwrap()
                .get_i32("qty")
                .unwrap(),
            7
        );
    }
}
