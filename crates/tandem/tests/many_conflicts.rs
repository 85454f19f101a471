#![cfg(feature = "test-util")]
//! The undo of a transaction that meets outside writes on more participants
//! than the record keeps history lines (32) must not lose them from the
//! record silently: `TxRecord::conflicts` is where an operator learns which
//! documents a canceled transaction left as another writer set them.
//! Each conflict was a line of its own, and the history's `$slice` kept
//! the last 32 lines: 8 of 40 were dropped, with the move to `canceled`
//! itself, and nothing said so.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use common::{accounts, records};
use tandem::testing::FaultStore;
use tandem::{
    Coordinator, DocumentChange, Namespace, RecoveryConfig, RetryPolicy, Store, Transaction,
    TxError, TxRecord, TxState,
};

const LEASE: Duration = Duration::from_secs(10);
const ORDERS: usize = 40;

fn orders() -> Namespace {
    Namespace::new("shop", "orders")
}

#[tokio::test]
async fn every_overwritten_participant_is_noted() {
    let (store, clock, _) = common::bank(&["Z"], 0).await;
    for i in 0..ORDERS {
        store
            .insert_one(&orders(), doc! { "_id": format!("o{i}"), "state": "new" })
            .await
            .unwrap();
    }
    let mut tx = Transaction::new();
    for i in 0..ORDERS {
        tx = tx.change(
            DocumentChange::update(orders(), format!("o{i}"))
                .set("state", "shipped")
                .require_eq("state", "new"),
        );
    }
    tx = tx.change(
        DocumentChange::update(accounts(), "Z")
            .in_store("other")
            .inc("shipments", 1_i64),
    );
    // Default store: 1 the create, then the applies of the orders, one
    // each; "other": 1 its identity, then its apply fails. The
    // coordinator is gone before it can cancel.
    let dying = Coordinator::builder(
        FaultStore::new(Arc::new(store.clone())).crash_after(1 + ORDERS as u64),
    )
    .store(
        "other",
        FaultStore::new(Arc::new(store.clone())).crash_after(1),
    )
    .lease(LEASE)
    .max_participants(64)
    .retry(RetryPolicy::NONE)
    .build();
    let answer = dying.run(tx).await;
    assert!(
        matches!(answer, Err(TxError::Interrupted { .. })),
        "{answer:?}"
    );
    // Application code ships every order meanwhile.
    for i in 0..ORDERS {
        store
            .update_one(
                &orders(),
                doc! { "_id": format!("o{i}") },
                doc! { "$set": { "state": "shipped by hand" } },
                Default::default(),
            )
            .await
            .unwrap();
    }
    clock.advance(LEASE * 4);
    let healthy = Coordinator::builder(store.clone())
        .store("other", store.clone())
        .lease(LEASE)
        .build();
    let report = healthy
        .recovery(RecoveryConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.canceled, 1, "{report:?}");
    let record: TxRecord =
        TxRecord::from_document(store.documents(&records()).pop().unwrap()).unwrap();
    assert_eq!(record.state, TxState::Canceled);
    for i in 0..ORDERS {
        let o = common::get(&store, &orders(), &format!("o{i}"))
            .await
            .unwrap();
        assert_eq!(o.get_str("state"), Ok("shipped by hand"), "kept as found");
    }
    let noted = record.conflicts();
    let named = (0..ORDERS)
        .filter(|i| {
            let label = format!("shop.orders/o{i}:");
            noted.iter().any(|c| c.contains(&label))
        })
        .count();
    assert_eq!(
        named, ORDERS,
        "every overwritten participant is named: {noted:#?}"
    );
    assert!(
        noted.iter().any(|c| c.contains("10 more participants")),
        "the last line says how many it folds: {noted:#?}"
    );
    assert!(
        record
            .history
            .iter()
            .any(|h| h.state == TxState::Canceled && h.event == "move"),
        "the move to canceled is in the history: {:#?}",
        record.history
    );
}
