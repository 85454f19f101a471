//! A create that arrives late writes an inert record: the same id, creation
//! token, epoch 0 and state `pending` as the transaction's live record,
//! stamped at or after its create deadline. A stalled worker of that
//! transaction, waking after its record was finished and collected, must not
//! move the inert copy and answer from it: every move names the time its
//! live record was written. (The same with the commit at the move to
//! `applied` is the safety scenario `stale_move_misses_the_inert_copy`, run
//! on both stores.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use common::*;
use tandem::testing::FaultStore;
use tandem::{
    CommitPoint, Coordinator, PendingPolicy, RecoveryConfig, Store, TxError, TxRecord, TxState,
};

async fn record_of(store: &dyn Store) -> Option<TxRecord> {
    store
        .find_one(&records(), doc! {})
        .await
        .unwrap()
        .map(|d| TxRecord::from_document(d).unwrap())
}

fn recovery(
    store: Arc<dyn Store>,
    lease: Duration,
    pending: PendingPolicy,
) -> tandem::RecoveryWorker {
    Coordinator::builder_shared(store)
        .lease(lease)
        .clock_margin(Duration::ZERO)
        .build()
        .recovery(RecoveryConfig {
            pending,
            ..RecoveryConfig::default()
        })
}

/// Commit at the applies (the default): the coordinator stalls before its
/// apply of B; recovery rolls forward and commits, and the record is
/// collected; the create's lost copy lands inert; the coordinator's apply
/// is refused (expired), its cancel moves the inert copy, and the caller is
/// told canceled with every change undone, for a transfer that was made.
#[tokio::test]
async fn early_commit_cancel_lands_on_the_inert_copy() {
    let (mem, clock, _) = bank(&["A", "B"], 100).await;
    let mem = Arc::new(mem);
    let store: Arc<dyn Store> = mem.clone();
    let lease = Duration::from_secs(1);
    // 1 the lost create, 2 the retried create, 3 A's apply, 4 B's apply.
    let faulty = FaultStore::new(store.clone()).keeping_upserts().lose_at(1);
    let pause = faulty.pause_at(4);
    let coordinator = Coordinator::builder(faulty.clone())
        .lease(lease)
        .clock_margin(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .build();
    let run = tokio::spawn(async move { coordinator.run(transfer("A", "B", 10)).await });
    pause
        .reached
        .await
        .expect("the coordinator reaches B's apply");
    assert_eq!(balance(&mem, "A").await, 90, "A's debit applied");

    clock.advance(lease * 2);
    let worker = recovery(store.clone(), lease, PendingPolicy::RollForward);
    let report = worker.run_once().await.unwrap();
    assert_eq!(report.committed, 1, "{report:?}");
    assert_eq!(
        (balance(&mem, "A").await, balance(&mem, "B").await),
        (90, 110)
    );
    clock.advance(lease * 2);
    assert_eq!(worker.collect_garbage(lease).await.unwrap(), 1);

    let create = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == records())
        .expect("the lost create");
    faulty.deliver_again(&create).await.unwrap();
    assert!(record_of(store.as_ref())
        .await
        .expect("the late copy")
        .is_inert());

    pause.release.send(()).unwrap();
    let answer = run.await.unwrap();
    let after = record_of(store.as_ref())
        .await
        .expect("the inert copy stays");
    assert_eq!(
        (balance(&mem, "A").await, balance(&mem, "B").await),
        (90, 110),
        "transfer made once"
    );
    // Not "canceled": recovery committed the transfer.
    assert!(
        matches!(answer, Err(TxError::Superseded { .. })),
        "told {answer:?} for a transfer recovery committed"
    );
    assert_eq!(
        after.state,
        TxState::Pending,
        "the inert copy was not moved"
    );
}
