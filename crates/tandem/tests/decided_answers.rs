//! What the caller is told and what recovery reports, in cases no other test
//! pinned: each test here failed on a plausible one-line change of the
//! code that decides an answer (hand-made mutation testing of the answers
//! and of recovery's decisions), which the rest of the suite let through.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use common::*;
use tandem::testing::FaultStore;
use tandem::{
    CommitPoint, Coordinator, DocumentChange, RecoveryConfig, Transaction, TxError, TxState,
};

const LEASE: Duration = Duration::from_secs(1);

fn roll_forward(store: tandem::MemoryStore) -> tandem::RecoveryWorker {
    rolling_forward(Arc::new(store), LEASE)
}

/// A refusal while preparing (a before-image read finds no document)
/// wrote nothing: the answer must say so (`undone: true`), naming the
/// participant, and no record exists.
#[tokio::test]
async fn a_refusal_while_preparing_says_undone() {
    let (store, _, _) = bank(&["A"], 1000).await;
    let coordinator = Coordinator::new(store.clone());
    let answer = coordinator
        .run(
            Transaction::new()
                .change(DocumentChange::update(accounts(), "A").inc("balance", -100_i64))
                .change(DocumentChange::update(accounts(), "Z").set("name", "z")),
        )
        .await;
    let Err(TxError::Canceled {
        id,
        undone,
        participant,
        ..
    }) = &answer
    else {
        panic!("{answer:?}")
    };
    assert!(
        *undone,
        "nothing was written, nothing is left to undo: {answer:?}"
    );
    assert!(!answer
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("left to recovery"));
    assert_eq!(participant.as_ref().map(|p| p.index), Some(1));
    assert!(coordinator.record(id).await.unwrap().is_none());
    assert_eq!(balance(&store, "A").await, 1000);
}

/// The create's first attempt is lost on the way and kept; the retry
/// is held back. Meanwhile the first attempt lands live, recovery rolls it
/// forward (the transfer is made) and the record is collected. The retry
/// then writes an inert record: the coordinator must not answer
/// `Canceled` ("nothing applied") but `Interrupted`.
#[tokio::test]
async fn a_retried_create_landing_inert_answers_interrupted() {
    let (store, clock, _) = bank(&["A", "B"], 100).await;
    let faulty = FaultStore::new(Arc::new(store.clone()))
        .keeping_upserts()
        .lose_at(1);
    let pause = faulty.pause_at(2);
    let coordinator = Coordinator::builder(faulty.clone())
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .build();
    let run = tokio::spawn(async move { coordinator.run(transfer("A", "B", 10)).await });
    pause.reached.await.unwrap();
    let create = faulty
        .upserts()
        .into_iter()
        .next()
        .expect("the lost create");
    faulty
        .deliver_again(&create)
        .await
        .unwrap()
        .expect("landed live");
    clock.advance(LEASE * 2);
    let worker = roll_forward(store.clone());
    assert_eq!(worker.run_once().await.unwrap().committed, 1);
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (90, 110)
    );
    clock.advance(LEASE * 3);
    assert_eq!(worker.collect_garbage(LEASE * 2).await.unwrap(), 1);
    pause.release.send(()).unwrap();
    let answer = run.await.unwrap();
    assert!(
        matches!(answer, Err(TxError::Interrupted { .. })),
        "the transfer was made, yet: {answer:?}"
    );
}

/// The create lands but its answer is lost; before the retry,
/// recovery claims the record and commits it. The retry finds its own
/// record, no longer `pending`: `Superseded`, never `Canceled`.
#[tokio::test]
async fn a_retried_create_finding_its_record_committed_answers_superseded() {
    let (store, clock, _) = bank(&["A", "B"], 100).await;
    let faulty = FaultStore::new(Arc::new(store.clone())).lose_answer_at(1);
    let pause = faulty.pause_at(2);
    let coordinator = Coordinator::builder(faulty.clone())
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .build();
    let run = tokio::spawn(async move { coordinator.run(transfer("A", "B", 10)).await });
    pause.reached.await.unwrap();
    clock.advance(LEASE * 2);
    assert_eq!(
        roll_forward(store.clone())
            .run_once()
            .await
            .unwrap()
            .committed,
        1
    );
    pause.release.send(()).unwrap();
    let answer = run.await.unwrap();
    assert!(
        matches!(
            answer,
            Err(TxError::Superseded {
                state: Some(TxState::Done),
                ..
            })
        ),
        "the transfer was made, yet: {answer:?}"
    );
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (90, 110)
    );
}

/// One participant's store is down (its apply fails, outcome unknown)
/// while another refuses its change: the refusal explains the cancel, not
/// the store failure, whatever their order.
#[tokio::test]
async fn a_refusal_explains_the_cancel_better_than_a_store_failure() {
    let (store, clock, _) = bank(&["A"], 50).await;
    let ledger = tandem::MemoryStore::with_clock(clock);
    tandem::Store::insert_one(&ledger, &accounts(), doc! { "_id": "Z", "balance": 0_i64 })
        .await
        .unwrap();
    // Down once its identity is read (the first request of a process to a
    // named store): the apply fails.
    let down = FaultStore::new(Arc::new(ledger)).crash_after(1);
    let coordinator = Coordinator::builder(store.clone())
        .store("ledger", down)
        .build();
    let answer = coordinator
        .run(
            Transaction::new()
                .change(
                    DocumentChange::update(accounts(), "Z")
                        .inc("balance", 100_i64)
                        .in_store("ledger"),
                )
                .change(
                    DocumentChange::update(accounts(), "A")
                        .inc("balance", -100_i64)
                        .require_gte("balance", 100_i64),
                ),
        )
        .await;
    let Err(TxError::Canceled {
        cause, participant, ..
    }) = &answer
    else {
        panic!("{answer:?}")
    };
    assert!(
        matches!(cause, tandem::StepError::GuardFailed { .. }),
        "{answer:?}"
    );
    assert_eq!(participant.as_ref().map(|p| p.index), Some(1), "{answer:?}");
    assert_eq!(balance(&store, "A").await, 50);
}

/// Recovery's undo meets a participant store whose clock is behind
/// (its undo must wait) and one that is down (a failure): the pass reports
/// the failure, not a wait, and says why.
#[tokio::test]
async fn a_store_failure_beside_a_wait_is_reported_failed() {
    use tandem::{ManualClock, MemoryStore, Store};
    let (store, clock, _) = bank(&["A"], 100).await;
    let ledger = MemoryStore::with_clock(Arc::new(ManualClock::default()));
    ledger
        .insert_one(&accounts(), doc! { "_id": "Z", "balance": 0_i64 })
        .await
        .unwrap();
    let other = MemoryStore::with_clock(clock.clone());
    other
        .insert_one(&accounts(), doc! { "_id": "W", "balance": 0_i64 })
        .await
        .unwrap();
    let tx = Transaction::new()
        .change(DocumentChange::update(accounts(), "A").inc("balance", -10_i64))
        .change(
            DocumentChange::update(accounts(), "Z")
                .inc("balance", 5_i64)
                .in_store("ledger"),
        )
        .change(
            DocumentChange::update(accounts(), "W")
                .inc("balance", 5_i64)
                .in_store("down"),
        );
    // The owner writes its record, then its records store goes: `pending`.
    let owner = Coordinator::builder(FaultStore::new(Arc::new(store.clone())).crash_after(1))
        .store("ledger", ledger.clone())
        .store("down", other.clone())
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .early_commit(false)
        .build();
    let answer = owner.run(tx).await;
    assert!(
        matches!(
            answer,
            Err(TxError::Interrupted {
                state: Some(TxState::Pending),
                ..
            })
        ),
        "{answer:?}"
    );
    clock.advance(LEASE * 2);
    let worker = Coordinator::builder(store.clone())
        .store("ledger", ledger.clone())
        .store(
            "down",
            // Down once its identity is read (a store it cannot identify
            // is passed over, not claimed).
            FaultStore::new(Arc::new(other.clone())).crash_after(1),
        )
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .build()
        .recovery(RecoveryConfig::default());
    let report = worker.run_once().await.unwrap();
    assert_eq!((report.failed, report.waiting), (1, 0), "{report:?}");
}

/// A cancel whose undo is left to recovery still names the refusing
/// participant (`TxError::participant`, `refused_by`).
#[tokio::test]
async fn a_cancel_left_to_recovery_still_names_who_refused() {
    let mut left = 0;
    for n in 1..10 {
        let (store, _, _) = bank(&["A"], 1000).await;
        // B does not exist: its credit is refused (not found).
        let lossy = FaultStore::new(Arc::new(store.clone())).lose_at(n);
        let answer = Coordinator::builder(lossy)
            .build()
            .run(transfer("A", "B", 100))
            .await;
        if let Err(e @ TxError::Canceled { undone: false, .. }) = &answer {
            left += 1;
            assert_eq!(
                e.participant().map(|p| p.index),
                Some(1),
                "lost op {n}: {e:?}"
            );
        }
    }
    assert!(left > 0, "no lost answer left an undo to recovery");
}

/// `cancel` of a committed (`applied`) transaction answers its state
/// and leaves it to its owner: no claim, no takeover.
#[tokio::test]
async fn cancel_of_an_applied_transaction_takes_nothing_over() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    // Create, the applies, the move to `applied` (4 operations); then it crashes.
    let owner = Coordinator::builder(FaultStore::new(Arc::new(store.clone())).crash_after(4))
        .early_commit(false)
        .commit_point(CommitPoint::Done)
        .build();
    let receipt = owner.run(transfer("A", "B", 100)).await.expect("committed");
    assert_eq!(receipt.state, TxState::Applied);
    let plain = Coordinator::new(store.clone());
    assert_eq!(
        plain.cancel(&receipt.id, "operator").await,
        Ok(TxState::Applied)
    );
    let record = plain.record(&receipt.id).await.unwrap().unwrap();
    assert_eq!((record.state, record.epoch), (TxState::Applied, 0));
}

/// A worker that claimed a record and stalled, while another took it over
/// after its lease, reports the record lost to the other worker, not a
/// failure: its moves miss the new epoch.
#[tokio::test]
async fn a_record_taken_over_during_a_pass_is_reported_lost() {
    let (store, clock, _) = bank(&["A", "B"], 100).await;
    // The owner writes its record and its debit, then is gone.
    let owner = Coordinator::builder(FaultStore::new(Arc::new(store.clone())).crash_after(2))
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .early_commit(false)
        .build();
    let id = owner
        .run(transfer("A", "B", 10))
        .await
        .expect_err("the owner is gone")
        .id()
        .cloned()
        .expect("an id");
    clock.advance(LEASE * 2);

    // The first worker: 1 the clock, 2 the scan, 3 the claim; 4 waits.
    let slow_store = FaultStore::new(Arc::new(store.clone()));
    let after_claim = slow_store.pause_at(4);
    let slow = Coordinator::builder(slow_store)
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .build()
        .recovery(RecoveryConfig::default());
    let first = tokio::spawn(async move { slow.run_once().await });
    after_claim.reached.await.expect("the first worker claimed");

    // Its lease runs out; another worker takes the record and finishes it.
    clock.advance(LEASE * 4);
    let other = roll_forward(store.clone()).run_once().await.unwrap();
    assert_eq!(other.claimed, 1, "{other:?}");
    let record = Coordinator::new(store.clone())
        .record(&id)
        .await
        .unwrap()
        .unwrap();
    assert!(record.state.is_terminal(), "{record:?}");

    after_claim.release.send(()).unwrap();
    let report = first.await.unwrap().unwrap();
    assert_eq!(
        (report.claimed, report.lost, report.failed),
        (1, 1, 0),
        "{report:?}"
    );
}

/// A read while preparing (a `set`'s before-image) that fails transiently
/// is repeated under the coordinator's retry policy, as every other store
/// request is: the transaction then commits. It was answered
/// `Interrupted` at once ("not known"), for a transaction of which nothing
/// had been written, and whose store answered the next request.
#[tokio::test]
async fn a_transient_failure_while_preparing_is_repeated() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    let faulty = FaultStore::new(Arc::new(store.clone())).lose_at(1);
    let coordinator = Coordinator::builder(faulty.clone())
        .commit_point(CommitPoint::Done)
        .build();
    let answer = coordinator
        .run(
            Transaction::new()
                .change(DocumentChange::update(accounts(), "A").set("note", "paid"))
                .change(DocumentChange::update(accounts(), "B").inc("balance", -100_i64)),
        )
        .await;
    let receipt = answer.unwrap_or_else(|e| panic!("the read was lost once: {e:?}"));
    assert_eq!(receipt.state, TxState::Done);
    let a = get(&store, &accounts(), "A").await.unwrap();
    assert_eq!(a.get_str("note"), Ok("paid"));
    assert_eq!(balance(&store, "B").await, 900);
}
