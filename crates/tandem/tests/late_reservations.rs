//! An insert reserves its `_id` with an upsert, which no deadline fences: a
//! copy the network delays may land after the transaction ended. On a
//! committed document it collides and changes nothing; after a cancel it
//! leaves a placeholder that no reader sees and that expires.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use common::*;
use serde::{Deserialize, Serialize};
use tandem::testing::FaultStore;
use tandem::{
    participant, CommitPoint, Coordinator, DocumentChange, Namespace, Transaction, TxError,
};

#[participant(collection = "ledger", db = "bank")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Entry {
    #[serde(rename = "_id")]
    id: String,
    amount: i64,
}

fn ledger() -> Namespace {
    Namespace::new("bank", "ledger")
}

/// Pays 10 from A into a new ledger entry `E`.
fn payment() -> Transaction {
    Transaction::new()
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::insert(
            ledger(),
            "E",
            doc! { "amount": 10_i64 },
        ))
}

#[tokio::test]
async fn a_late_reservation_leaves_a_committed_insert_alone() {
    let (store, _, _) = bank(&["A"], 100).await;
    let faulty = FaultStore::new(Arc::new(store.clone())).keeping_upserts();
    let coordinator = Coordinator::builder(faulty.clone())
        .commit_point(CommitPoint::Done)
        .build();
    coordinator.run(payment()).await.unwrap();
    let entry = get(&store, &ledger(), "E").await.expect("the entry");

    let reservation = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == ledger())
        .expect("the reservation was kept");
    let late = faulty.deliver_again(&reservation).await;
    assert!(
        matches!(&late, Err(e) if e.kind == tandem::StoreErrorKind::DuplicateKey),
        "{late:?}"
    );
    assert_eq!(get(&store, &ledger(), "E").await.unwrap(), entry);
    assert_eq!(balance(&store, "A").await, 90);
}

#[tokio::test]
async fn a_late_reservation_after_a_cancel_is_invisible_and_expires() {
    let (store, clock, _) = bank(&["A"], 5).await;
    let faulty = FaultStore::new(Arc::new(store.clone())).keeping_upserts();
    let coordinator = Coordinator::builder(faulty.clone())
        .commit_point(CommitPoint::Done)
        .build();
    // A holds 5: the debit is refused, the reservation given back.
    let refused = coordinator.run(payment()).await;
    assert!(
        matches!(refused, Err(TxError::Canceled { undone: true, .. })),
        "{refused:?}"
    );
    assert!(get(&store, &ledger(), "E").await.is_none());

    let reservation = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == ledger())
        .expect("the reservation was kept");
    faulty.deliver_again(&reservation).await.unwrap();
    let raw = get(&store, &ledger(), "E").await.expect("a placeholder");
    assert!(raw.get_document("_tandem").unwrap().contains_key("ghost"));
    // Tandem's reads do not see it.
    assert_eq!(coordinator.get::<Entry, _>("E").await.unwrap(), None);
    let all: Vec<Entry> = coordinator.find(doc! {}, None).await.unwrap();
    assert!(all.is_empty(), "{all:?}");

    // Young: kept. Past the lease and the margin: collected.
    assert_eq!(
        coordinator
            .collect_placeholders(None, &ledger())
            .await
            .unwrap(),
        0
    );
    clock.advance(Duration::from_secs(33));
    assert_eq!(
        coordinator
            .collect_placeholders(None, &ledger())
            .await
            .unwrap(),
        1
    );
    assert!(store.documents(&ledger()).is_empty());
}
