//! A typed path below an `Option` of an embedded document: a change through
//! it that would create the field (`set`, `inc`, `push`) is guarded on the
//! embedded document existing. On a document without it the transaction is
//! refused and nothing is written, instead of a sub-document holding one
//! field that the struct cannot read back; on a stored `null` the store
//! refuses it. On both strategies.

use bson::{doc, Bson, Document};
use serde::{Deserialize, Serialize};
use tandem::{
    participant, CommitPoint, Coordinator, MemoryStore, Namespace, StepError, Store, Strategy,
    Transaction, TxError,
};

#[participant(embedded)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Billing {
    city: String,
    visits: i64,
    tags: Vec<String>,
}

#[participant(collection = "customers")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Customer {
    #[serde(rename = "_id")]
    id: String,
    name: String,
    #[participant(nested)]
    billing: Option<Billing>,
}

fn ns() -> Namespace {
    Namespace::new("crm", "customers")
}

async fn raw(store: &MemoryStore, id: &str) -> Document {
    store
        .find_one(&ns(), doc! { "_id": id })
        .await
        .unwrap()
        .expect("the customer")
}

/// Each change the generic builder methods make through `billing.*`.
fn changes(id: &str) -> Vec<(&'static str, Transaction)> {
    let f = Customer::fields();
    vec![
        (
            "inc",
            Transaction::new().change(Customer::change(id).inc(f.billing().visits(), 1)),
        ),
        (
            "set",
            Transaction::new().change(Customer::change(id).set(f.billing().city(), "Oslo".into())),
        ),
        (
            "push",
            Transaction::new()
                .change(Customer::change(id).push(f.billing().tags(), "vip".to_owned())),
        ),
    ]
}

async fn coordinator(strategy: Strategy) -> (MemoryStore, Coordinator) {
    let store = MemoryStore::new();
    store
        .insert_one(&ns(), doc! { "_id": "absent", "name": "Ada" })
        .await
        .unwrap();
    store
        .insert_one(
            &ns(),
            doc! { "_id": "null", "name": "Bo", "billing": Bson::Null },
        )
        .await
        .unwrap();
    store
        .insert_one(
            &ns(),
            doc! {
                "_id": "held",
                "name": "Cy",
                "billing": { "city": "Rome", "visits": 2_i64, "tags": [] },
            },
        )
        .await
        .unwrap();
    let coordinator = Coordinator::builder(store.clone())
        .database("crm")
        .strategy(strategy)
        .commit_point(CommitPoint::Done)
        .build();
    (store, coordinator)
}

#[tokio::test]
async fn a_change_below_an_absent_option_is_refused_and_writes_nothing() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let (store, coordinator) = coordinator(strategy).await;
        let before = raw(&store, "absent").await;
        for (what, tx) in changes("absent") {
            let err = coordinator.run(tx).await.unwrap_err();
            assert!(
                matches!(
                    &err,
                    TxError::Canceled {
                        cause: StepError::GuardFailed { .. },
                        ..
                    }
                ),
                "{strategy:?} {what}: {err:?}"
            );
            assert!(err.refused_by::<Customer>(), "{strategy:?} {what}");
            coordinator.drain().await;
            assert_eq!(raw(&store, "absent").await, before, "{strategy:?} {what}");
        }
        // The struct still reads it.
        let read = coordinator.get::<Customer, _>("absent").await.unwrap();
        assert_eq!(read.map(|c| c.billing), Some(None), "{strategy:?}");
    }
}

#[tokio::test]
async fn a_change_below_a_null_option_is_a_type_mismatch_and_writes_nothing() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let (store, coordinator) = coordinator(strategy).await;
        let before = raw(&store, "null").await;
        for (what, tx) in changes("null") {
            let err = coordinator.run(tx).await.unwrap_err();
            assert!(
                matches!(
                    &err,
                    TxError::Canceled {
                        cause: StepError::TypeMismatch { .. },
                        ..
                    }
                ),
                "{strategy:?} {what}: {err:?}"
            );
            coordinator.drain().await;
            assert_eq!(raw(&store, "null").await, before, "{strategy:?} {what}");
        }
    }
}

#[tokio::test]
async fn a_change_below_a_held_option_commits() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let (_store, coordinator) = coordinator(strategy).await;
        for (what, tx) in changes("held") {
            coordinator
                .run(tx)
                .await
                .unwrap_or_else(|e| panic!("{strategy:?} {what}: {e:?}"));
        }
        coordinator.drain().await;
        let read = coordinator.get::<Customer, _>("held").await.unwrap();
        assert_eq!(
            read.and_then(|c| c.billing),
            Some(Billing {
                city: "Oslo".into(),
                visits: 3,
                tags: vec!["vip".into()],
            }),
            "{strategy:?}"
        );
    }
}
