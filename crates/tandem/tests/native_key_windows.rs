//! How long the key of a native transaction holds: its window counts from
//! when the transaction committed, however long its run waited first.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tandem::testing::FaultStore;
use tandem::{
    CommitPoint, ConflictPolicy, Coordinator, DocumentChange, RecoveryConfig, Strategy,
    Transaction, TxError, TxState,
};

/// A keyed native payment waits two minutes for a document a two-phase
/// transaction holds (`ConflictPolicy::Wait`), then commits. Its key must
/// answer for the idempotency window (one minute here) after that: a retry
/// ten seconds after the commit, after garbage collection, is told
/// `Duplicate`. Before, the record was stamped before the wait, as if the
/// payment had finished two minutes earlier: collection removed it, and
/// the retry paid a second time.
#[tokio::test]
async fn a_native_key_holds_its_window_after_a_wait() {
    let window = Duration::from_secs(60);
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let pause = faulty.pause_at(6); // A held exclusively; waiting before `applied`
    let holder = Coordinator::builder(faulty)
        .lease(Duration::from_secs(3600))
        .commit_point(CommitPoint::Done)
        .build();
    let held = Transaction::new()
        .change(DocumentChange::update(accounts(), "A").set("tier", "gold"))
        .change(DocumentChange::update(accounts(), "B").inc("balance", 1_i64));
    let first = tokio::spawn(async move { holder.run(held).await });
    pause.reached.await.unwrap();

    let payer = Coordinator::builder(store.clone())
        .strategy(Strategy::Native)
        .commit_point(CommitPoint::Done)
        .idempotency_window(window)
        .conflict(ConflictPolicy::Wait {
            timeout: Duration::from_secs(600),
        })
        .build();
    payer.register_lease().await.unwrap();
    let before = store.command_count();
    let paying = {
        let payer = payer.clone();
        tokio::spawn(async move { payer.run(keyed_payment("pay-7", 5)).await })
    };
    // The holder is paused and sends nothing: the next command is the
    // payment's first try, which finds A held.
    let mut turns = 0;
    while store.command_count() == before {
        turns += 1;
        assert!(turns < 1_000_000, "the payment never tried");
        tokio::task::yield_now().await;
    }
    // The holder takes two minutes to go on.
    clock.advance(Duration::from_secs(120));
    pause.release.send(()).unwrap();
    first.await.unwrap().unwrap();
    let paid = paying.await.unwrap();
    assert!(
        matches!(&paid, Ok(r) if r.state == TxState::Done),
        "the payment: {paid:?}"
    );
    assert_eq!(balance(&store, "A").await, 995);

    // Ten seconds after the commit, collection runs with the same window,
    // and the caller, whose answer was lost, retries under the key.
    clock.advance(Duration::from_secs(10));
    let collector = payer.recovery(RecoveryConfig {
        idempotency_window: window,
        ..RecoveryConfig::default()
    });
    collector
        .collect_garbage(Duration::from_secs(32))
        .await
        .unwrap();
    let again = payer.run(keyed_payment("pay-7", 5)).await;
    let a = balance(&store, "A").await;
    assert!(
        matches!(
            &again,
            Err(TxError::Duplicate {
                state: Some(TxState::Done),
                ..
            })
        ) && a == 995,
        "a retry 10 s after the commit, inside the 60 s window, answered {again:?} and A = {a} (expected Duplicate {{ Done }}, A = 995)"
    );
}
