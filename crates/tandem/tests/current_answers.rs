//! Answers that name a record's state say the state it is in when they are
//! given, not the one a caller read before another actor moved it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tandem::testing::FaultStore;
use tandem::{Coordinator, MemoryStore, TxError, TxId, TxState};

/// A record left `pending` with nothing applied: its owner crashed after writing it.
async fn stuck_transfer(store: &MemoryStore) -> TxId {
    let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(1);
    let dead = Coordinator::builder(faulty).build();
    match dead.run(transfer("A", "B", 100)).await.unwrap_err() {
        TxError::Interrupted {
            id,
            state: Some(TxState::Pending),
            ..
        } => id,
        other => panic!("{other:?}"),
    }
}

/// `cancel` read the record `pending`; before its claim, another operator
/// canceled it. The claim misses, and the answer `Superseded` named the
/// state and epoch read before (`pending`), which its documentation calls
/// "the state the record is in now": the command line printed "changed
/// while canceling (now pending)" for a record already `canceled`.
#[tokio::test]
async fn a_cancel_that_loses_the_claim_names_the_state_now() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let id = stuck_transfer(&store).await;
    clock.advance(Duration::from_secs(33));
    // Operation 1 reads the record; operation 2 is the claim.
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let pause = faulty.pause_at(2);
    let slow = Coordinator::builder(faulty.clone()).build();
    let cancel = tokio::spawn({
        let id = id.clone();
        async move { slow.cancel(&id, "first operator").await }
    });
    pause.reached.await.unwrap();
    let other = Coordinator::new(store.clone())
        .cancel(&id, "second operator")
        .await
        .unwrap();
    assert_eq!(other, TxState::Canceled);
    pause.release.send(()).unwrap();
    let answer = cancel.await.unwrap();
    let now = Coordinator::new(store.clone())
        .record(&id)
        .await
        .unwrap()
        .expect("the record");
    match answer {
        Err(TxError::Superseded { state, epoch, .. }) => {
            assert_eq!(state, Some(now.state), "the answer names the state now");
            assert_eq!(epoch, now.epoch, "the answer names the epoch now");
        }
        other => panic!("{other:?}"),
    }
}
