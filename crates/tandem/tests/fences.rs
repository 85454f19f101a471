//! One test per condition of the protocol's statements that, removed, left
//! the rest of the suite green (found by mutation testing): the lock in a
//! shared apply's filter, the state in garbage collection's, the
//! `lastModified` in a claim's, and the create deadline a coordinator checks
//! on its own record; and the `created` stamp every record move names, so
//! that no stalled worker moves the inert copy a late create writes, one
//! record at a time or in a finisher's round (the same with the commit at
//! the move to `applied` is the safety scenario
//! `stale_move_misses_the_inert_copy`, run on both stores); and a round's
//! move counted as the round's only when it moved every record.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use common::*;
use tandem::testing::{audit, FaultStore};
use tandem::{
    CommitPoint, Coordinator, DocumentChange, MemoryStore, RecoveryConfig, StepError, Store,
    Transaction, TxError, TxRecord, TxState,
};

const LEASE: Duration = Duration::from_secs(1);

async fn the_record(store: &MemoryStore) -> Option<TxRecord> {
    store
        .find_one(&records(), doc! {})
        .await
        .unwrap()
        .map(|d| TxRecord::from_document(d).unwrap())
}

/// Delivers again the records-store upsert that `faulty` kept: the create
/// whose answer was lost, landing late.
async fn deliver_lost_create(faulty: &FaultStore) {
    let create = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == records())
        .expect("the lost create");
    faulty.deliver_again(&create).await.unwrap();
}

fn worker(store: Arc<dyn Store>) -> tandem::RecoveryWorker {
    rolling_forward(store, LEASE)
}

/// A pending delete locks its document: a shared increment of it (which
/// has no exclusive condition of its own) must be refused, or its credit
/// would be deleted with the document after it was answered committed.
#[tokio::test]
async fn a_shared_increment_waits_for_the_lock_of_a_pending_delete() {
    let (store, _, _) = bank(&["A", "B"], 100).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    // 1 the create, 2 the apply (lock A); 3, the move, waits.
    let pause = faulty.pause_at(3);
    let deleter = Coordinator::builder(faulty)
        .lease(LEASE)
        .commit_point(CommitPoint::Done)
        .build();
    let delete = tokio::spawn(async move {
        deleter
            .run(Transaction::new().change(DocumentChange::delete(accounts(), "A")))
            .await
    });
    pause.reached.await.unwrap();
    let a = get(&store, &accounts(), "A").await.unwrap();
    assert!(
        a.get_document("_tandem")
            .is_ok_and(|t| t.get_str("lock").is_ok()),
        "the delete holds A: {a}"
    );

    let credit =
        Transaction::new().change(DocumentChange::update(accounts(), "A").inc("balance", 50_i64));
    let err = Coordinator::builder(store.clone())
        .lease(LEASE)
        .commit_point(CommitPoint::Done)
        .build()
        .run(credit)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TxError::Canceled {
                cause: StepError::Conflict { .. },
                ..
            }
        ),
        "{err:?}"
    );
    pause.release.send(()).unwrap();
    delete.await.unwrap().unwrap();
    assert!(get(&store, &accounts(), "A").await.is_none(), "A deleted");
}

/// Garbage collection removes finished records only: a record still
/// `applied` (its finisher stalled before the clears), however old, stays,
/// or its markers and its deferred credit would be left for good.
#[tokio::test]
async fn garbage_collection_leaves_a_record_in_flight() {
    let (store, clock, seeded) = bank(&["A", "B"], 100).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    // 1 the create, 2 and 3 the applies, 4 the move to `applied`; 5, the
    // clears, waits.
    let pause = faulty.pause_at(5);
    let slow = Coordinator::builder(faulty)
        .lease(LEASE)
        .commit_point(CommitPoint::Done)
        .early_commit(false)
        .build();
    let run = tokio::spawn(async move { slow.run(transfer("A", "B", 10)).await });
    pause.reached.await.unwrap();
    assert_eq!(the_record(&store).await.unwrap().state, TxState::Applied);

    clock.advance(LEASE * 100);
    let collector = worker(Arc::new(store.clone()));
    assert_eq!(collector.collect_garbage(LEASE).await.unwrap(), 0);
    assert_eq!(the_record(&store).await.unwrap().state, TxState::Applied);

    pause.release.send(()).unwrap();
    run.await.unwrap().unwrap();
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (90, 110)
    );
    audit(&store, &records(), &seeded)
        .await
        .unwrap()
        .assert_clean();
}

/// A claim names the `lastModified` it scanned. A recovery worker that
/// scanned a `pending` record and stalled before claiming it, while another
/// worker finished the transaction, the record was collected and a create
/// that arrived late wrote an inert copy (same id, token, epoch 0,
/// `pending`), must not claim the copy for the record it scanned: it would
/// roll the transfer forward a second time.
#[tokio::test]
async fn a_stalled_claim_misses_the_inert_copy() {
    let (store, clock, _) = bank(&["A", "B"], 100).await;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // The coordinator: 1 the create (answer lost, request kept), 2 the
    // create again, 3 and 4 the applies; 5, its move, waits.
    let faulty = FaultStore::new(shared.clone()).keeping_upserts().lose_at(1);
    let stall = faulty.pause_at(5);
    let owner = Coordinator::builder(faulty.clone())
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .build();
    let run = tokio::spawn(async move { owner.run(transfer("A", "B", 10)).await });
    stall.reached.await.unwrap();
    clock.advance(LEASE * 2);

    // A worker that scans (operations 1 and 2) and stalls before its claim (3).
    let slow_store = FaultStore::new(shared.clone());
    let before_claim = slow_store.pause_at(3);
    let slow = worker(Arc::new(slow_store));
    let late = tokio::spawn(async move { slow.run_once().await });
    before_claim.reached.await.unwrap();

    let other = worker(shared.clone());
    assert_eq!(other.run_once().await.unwrap().committed, 1);
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (90, 110)
    );
    clock.advance(LEASE * 2);
    assert_eq!(other.collect_garbage(LEASE).await.unwrap(), 1);
    deliver_lost_create(&faulty).await;
    assert!(the_record(&store).await.unwrap().is_inert());

    before_claim.release.send(()).unwrap();
    let report = late.await.unwrap().unwrap();
    assert_eq!(
        (report.scanned, report.claimed, report.committed),
        (1, 0, 0),
        "{report:?}"
    );
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (90, 110),
        "transferred once"
    );
    drop(stall.release);
    let _ = run.await;
}

/// A record the store writes at or after its create deadline is inert, even
/// the coordinator's own single create: it must cancel, not apply (recovery
/// cancels an inert record without touching a document, so applies made
/// under it would stay, markers and all).
#[tokio::test]
async fn a_create_landing_after_its_deadline_is_canceled_not_applied() {
    let (store, clock, seeded) = bank(&["A", "B"], 100).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    // 1, the create, waits while the clock passes its deadline.
    let pause = faulty.pause_at(1);
    let slow = Coordinator::builder(faulty)
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .build();
    let run = tokio::spawn(async move { slow.run(transfer("A", "B", 10)).await });
    pause.reached.await.unwrap();
    clock.advance(LEASE * 2);
    pause.release.send(()).unwrap();
    let answer = run.await.unwrap();
    assert!(
        matches!(answer, Err(TxError::Canceled { undone: true, .. })),
        "{answer:?}"
    );
    assert_eq!(the_record(&store).await.unwrap().state, TxState::Canceled);
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (100, 100)
    );
    audit(&store, &records(), &seeded)
        .await
        .unwrap()
        .assert_clean();
}

/// Commit at the applies (the default): the coordinator stalls before its
/// apply of B; recovery rolls forward and commits, and the record is
/// collected; the create's lost copy lands inert. The coordinator's apply
/// is refused (expired) and its cancel must not move the inert copy: it was
/// told canceled with every change undone, for a transfer that was made.
#[tokio::test]
async fn early_commit_cancel_lands_on_the_inert_copy() {
    let (store, clock, _) = bank(&["A", "B"], 100).await;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // 1 the lost create, 2 the retried create, 3 A's apply, 4 B's apply.
    let faulty = FaultStore::new(shared.clone()).keeping_upserts().lose_at(1);
    let pause = faulty.pause_at(4);
    let coordinator = Coordinator::builder(faulty.clone())
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .build();
    let run = tokio::spawn(async move { coordinator.run(transfer("A", "B", 10)).await });
    pause
        .reached
        .await
        .expect("the coordinator reaches B's apply");
    assert_eq!(balance(&store, "A").await, 90, "A's debit applied");

    clock.advance(LEASE * 2);
    let rescuer = worker(shared.clone());
    let report = rescuer.run_once().await.unwrap();
    assert_eq!(report.committed, 1, "{report:?}");
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (90, 110)
    );
    clock.advance(LEASE * 2);
    assert_eq!(rescuer.collect_garbage(LEASE).await.unwrap(), 1);

    deliver_lost_create(&faulty).await;
    assert!(the_record(&store).await.expect("the late copy").is_inert());

    pause.release.send(()).unwrap();
    let answer = run.await.unwrap();
    let after = the_record(&store).await.expect("the inert copy stays");
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
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

/// The background finisher moves the records of one round from `pending`
/// to `applied` in one statement (`_id: {$in}`, state, epoch, tokens). Its
/// round stalls; recovery finishes both transfers and they are collected;
/// the lost create of the first lands inert, with the first record's id,
/// token, epoch and state. The batch must not move it: its `created` stamp
/// is not before the round's earliest create deadline.
#[tokio::test]
async fn a_finisher_round_misses_the_inert_copy() {
    let (store, clock, _) = bank(&["A", "B", "C", "D"], 100).await;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // X: 1 the lost create, 2 the retried create, 3 and 4 the applies;
    // Y: 5 the create, 6 and 7 the applies; 8, the round's move, waits.
    let faulty = FaultStore::new(shared.clone()).keeping_upserts().lose_at(1);
    let stall = faulty.pause_at(8);
    let coordinator = Arc::new(
        Coordinator::builder(faulty.clone())
            .lease(LEASE)
            .clock_margin(Duration::ZERO)
            .commit_point(CommitPoint::Applied)
            .finish_delay(Duration::from_secs(3600))
            .build(),
    );
    coordinator.run(transfer("A", "B", 10)).await.unwrap();
    coordinator.run(transfer("C", "D", 10)).await.unwrap();
    let draining = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move { coordinator.drain().await })
    };
    stall
        .reached
        .await
        .expect("the finisher's round reaches its move");
    let states: Vec<TxState> = store
        .documents(&records())
        .into_iter()
        .map(|d| TxRecord::from_document(d).unwrap().state)
        .collect();
    assert_eq!(states, [TxState::Pending, TxState::Pending]);

    clock.advance(LEASE * 2);
    let rescuer = worker(shared.clone());
    assert_eq!(rescuer.run_once().await.unwrap().committed, 2);
    clock.advance(LEASE * 2);
    assert_eq!(rescuer.collect_garbage(LEASE).await.unwrap(), 2);
    deliver_lost_create(&faulty).await;
    assert!(the_record(&store).await.expect("the late copy").is_inert());

    stall.release.send(()).unwrap();
    draining.await.unwrap();
    let after = the_record(&store).await.expect("the inert copy stays");
    assert_eq!(
        after.state,
        TxState::Pending,
        "the round's move left the inert copy alone"
    );
    assert_eq!(
        [
            balance(&store, "A").await,
            balance(&store, "B").await,
            balance(&store, "C").await,
            balance(&store, "D").await
        ],
        [90, 110, 90, 110]
    );
}

/// A finisher round's move of its records to `applied` counts as the
/// round's only when it moved every one of them: recovery claimed one
/// record of the round before the move (a new epoch), so the move misses
/// it, and its markers must stay for recovery's probe. Taken for moved,
/// they were cleared, recovery then found no marker and canceled a
/// transfer whose caller had been told committed and whose credit landed.
#[tokio::test]
async fn a_finisher_round_leaves_a_claimed_record_to_recovery() {
    let (store, clock, _) = bank(&["A", "B", "C", "D"], 100).await;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // X: 1 the create, 2 and 3 the applies; Y: 4, 5 and 6; 7, the round's
    // move, waits.
    let faulty = FaultStore::new(shared.clone());
    let stall = faulty.pause_at(7);
    let coordinator = Arc::new(
        Coordinator::builder(faulty.clone())
            .lease(LEASE)
            .clock_margin(Duration::ZERO)
            .commit_point(CommitPoint::Applied)
            .finish_delay(Duration::from_secs(3600))
            .build(),
    );
    let x = coordinator.run(transfer("A", "B", 10)).await.unwrap().id;
    coordinator.run(transfer("C", "D", 10)).await.unwrap();
    let draining = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move { coordinator.drain().await })
    };
    stall.reached.await.expect("the round reaches its move");

    // Recovery claims X alone (one per pass: 1 the clock, 2 the scan,
    // 3 the claim) and stalls before its probe.
    clock.advance(LEASE * 2);
    let slow_store = FaultStore::new(shared.clone());
    let after_claim = slow_store.pause_at(4);
    let slow = Coordinator::builder_shared(Arc::new(slow_store))
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .build()
        .recovery(RecoveryConfig {
            batch: 1,
            ..RecoveryConfig::default()
        });
    let recovering = tokio::spawn(async move { slow.run_once().await });
    after_claim.reached.await.expect("recovery claimed X");
    let claimed = coordinator.record(&x).await.unwrap().unwrap();
    assert_eq!((claimed.state, claimed.epoch), (TxState::Pending, 1));

    stall.release.send(()).unwrap();
    draining.await.unwrap();
    after_claim.release.send(()).unwrap();
    let report = recovering.await.unwrap().unwrap();
    assert_eq!(report.committed, 1, "{report:?}");
    let x = coordinator.record(&x).await.unwrap().unwrap();
    assert_eq!(x.state, TxState::Done, "committed, as its caller was told");
    assert_eq!(
        [
            balance(&store, "A").await,
            balance(&store, "B").await,
            balance(&store, "C").await,
            balance(&store, "D").await
        ],
        [90, 110, 90, 110]
    );
}
