//! A debit of a field named by a number (`m.1`, a sub-document's field)
//! kept no give-back in `_tandem.credit` when it shared its document (such
//! a path is not counted), and a credit of the same field was checked
//! against the field alone: a credit up to the limit committed while the
//! debit was pending, and the debit's undo, adding its amount back, could
//! then never land, a canceled transaction stuck half undone. Such a debit
//! now holds its document alone, and is restored from its before-image.

mod common;

use std::sync::Arc;

use bson::{doc, Bson};
use common::*;
use tandem::testing::FaultStore;
use tandem::{DocumentChange, RecoveryConfig, StepError, Store, Transaction, TxError};

#[tokio::test]
async fn a_canceled_debit_of_a_numbered_field_is_undone() {
    let (store, clock, _) = bank(&["A"], 10).await;
    store
        .insert_one(&stats(), doc! { "_id": "X", "m": { "1": 10_i64 } })
        .await
        .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // 1 the read of X's before-image (the debit holds X alone), 2 the
    // create, 3 the debit of X; 4, the apply of A (whose guard refuses),
    // waits.
    let faulty = FaultStore::new(shared.clone());
    let pause = faulty.pause_at(4);
    let slow = two_phase(Arc::new(faulty));
    let debit = Transaction::new()
        .change(
            DocumentChange::update(stats(), "X")
                .inc("m.1", -10_i64)
                .require_gte("m.1", 10_i64),
        )
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -1_000_i64)
                .require_gte("balance", 1_000_i64),
        );
    let run = tokio::spawn(async move { slow.run(debit).await });
    pause.reached.await.unwrap();
    let x = get(&store, &stats(), "X").await.unwrap();
    assert_eq!(
        x.get_document("m").unwrap().get("1"),
        Some(&Bson::Int64(0)),
        "the debit applied: {x}"
    );

    let coordinator = two_phase(shared.clone());
    let credit = coordinator
        .run(Transaction::new().change(DocumentChange::update(stats(), "X").inc("m.1", i64::MAX)))
        .await;

    pause.release.send(()).unwrap();
    let canceled = run.await.unwrap();
    clock.advance(LEASE * 3);
    let worker = coordinator.recovery(RecoveryConfig::default());
    let _ = worker.run_once().await;
    coordinator.drain().await;
    let x = get(&store, &stats(), "X").await.unwrap();
    assert!(
        matches!(canceled, Err(TxError::Canceled { undone: true, .. })),
        "the debit's transaction is canceled and undone: {canceled:?}; credit {credit:?}; {x}"
    );
    assert_eq!(
        x.get_array("pendingTransactions").map(Vec::len),
        Ok(0),
        "no marker left: {x}"
    );
    assert_eq!(
        x.get_document("m").unwrap().get("1"),
        Some(&Bson::Int64(10)),
        "the debit undone: {x}"
    );
    assert!(
        matches!(
            credit,
            Err(TxError::Canceled {
                cause: StepError::Conflict { .. },
                ..
            })
        ),
        "the credit meets the debit holding X: {credit:?}"
    );
}
