//! Answers that name a record's state say the state it is in when they are
//! given, not the one a caller read before another actor moved it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tandem::testing::FaultStore;
use tandem::{Coordinator, MemoryStore, Store, TxError, TxId, TxState};

/// A record `pending` after its owner crashed, past its lease, and a
/// cancel of it held after it read the record (operation 1), before its
/// claim (operation 2). Returns the store, the id, the cancel's task and
/// what lets it go on.
async fn cancel_held_before_its_claim() -> (
    MemoryStore,
    TxId,
    tokio::task::JoinHandle<Result<TxState, TxError>>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let id = stuck_transfer(&store).await;
    clock.advance(Duration::from_secs(33));
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let pause = faulty.pause_at(2);
    let slow = Coordinator::builder(faulty.clone()).build();
    let cancel = tokio::spawn({
        let id = id.clone();
        async move { slow.cancel(&id, "first operator").await }
    });
    pause.reached.await.unwrap();
    (store, id, cancel, pause.release)
}

/// Replaces the record under `id` by another transaction's: the same
/// document but for its creation token (the record collected, the id
/// written again).
async fn write_again_under(store: &MemoryStore, id: &str) {
    let mut replaced = get(store, &records(), id).await.expect("the record");
    replaced.insert("token", "0123456789abcdef01234567");
    store
        .delete_one(&records(), bson::doc! { "_id": id })
        .await
        .unwrap();
    store.insert_one(&records(), replaced).await.unwrap();
}

/// `cancel` read the record `pending`; before its claim, another operator
/// canceled it. The claim misses, and the answer `Superseded` named the
/// state and epoch read before (`pending`), which its documentation calls
/// "the state the record is in now": the command line printed "changed
/// while canceling (now pending)" for a record already `canceled`.
#[tokio::test]
async fn a_cancel_that_loses_the_claim_names_the_state_now() {
    let (store, id, cancel, release) = cancel_held_before_its_claim().await;
    let other = Coordinator::new(store.clone())
        .cancel(&id, "second operator")
        .await
        .unwrap();
    assert_eq!(other, TxState::Canceled);
    release.send(()).unwrap();
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

/// As above, but while the cancel waited the record was collected and its
/// id taken by another transaction (a caller-chosen id used again): a
/// record of another creation token. The answer named that transaction's
/// state as the state of the one the cancel read; that one is gone.
#[tokio::test]
async fn a_cancel_whose_record_was_replaced_says_it_is_gone() {
    let (store, id, cancel, release) = cancel_held_before_its_claim().await;
    write_again_under(&store, id.as_str()).await;
    release.send(()).unwrap();
    match cancel.await.unwrap() {
        Err(TxError::Superseded { state, .. }) => {
            assert_eq!(state, None, "the transaction the cancel read is gone")
        }
        other => panic!("{other:?}"),
    }
}

/// A coordinator's own move of its record that misses because the id now
/// names another transaction (its record collected, the id written again
/// with another creation token) answers that its transaction's record is
/// gone, not the other transaction's state.
#[tokio::test]
async fn a_move_whose_record_was_replaced_says_it_is_gone() {
    let (store, _clock, _) = bank(&["A", "B"], 1000).await;
    // 1 the record's create, 2 the applies, 3 the move to `applied`.
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let pause = faulty.pause_at(3);
    // Committing at the move (not at the applies), so the move's answer is
    // the transaction's.
    let slow = Coordinator::builder(faulty.clone())
        .early_commit(false)
        .build();
    let run = tokio::spawn(async move { slow.run(transfer("A", "B", 100)).await });
    pause.reached.await.unwrap();
    let stored = store
        .find(
            &records(),
            bson::doc! {},
            tandem::store::FindOptions::default(),
        )
        .await
        .unwrap();
    let [record] = stored.as_slice() else {
        panic!("one record: {stored:?}");
    };
    let id = record.get_str("_id").unwrap().to_owned();
    write_again_under(&store, &id).await;
    pause.release.send(()).unwrap();
    match run.await.unwrap() {
        Err(TxError::Superseded { state, .. }) => {
            assert_eq!(
                state, None,
                "the coordinator's transaction's record is gone"
            )
        }
        other => panic!("{other:?}"),
    }
}
