//! A retry under an idempotency key sent inside the key's window finds the
//! id taken, even when its own record's create lands after the window.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tandem::testing::FaultStore;
use tandem::{Store, TxState};

/// A payment under a key commits; 9.5 s later, inside its 10 s window,
/// the caller retries. The retry's create loses its answer on the way (its
/// request still in flight), its repeat meets the first payment's record,
/// and it waits out its create deadline (a lease, 1 s). Meanwhile the
/// window ends, garbage collection runs, and the first create lands, live.
/// The key must still be taken: the retry was sent inside the window, and
/// its create could land live until its lease had passed. Before, the
/// stub's end was the window's (the longest lease counted only for runs
/// begun before the first one finished): collection removed the record,
/// the late create took the id, and the retry paid a second time.
#[tokio::test]
async fn a_retry_inside_the_window_whose_create_lands_after_it_pays_nothing() {
    let window = Duration::from_secs(10);
    let (store, clock, _) = bank(&["A", "B"], 0).await;
    store
        .update_one(
            &accounts(),
            bson::doc! { "_id": "A" },
            bson::doc! { "$set": { "balance": 100_i64 } },
            Default::default(),
        )
        .await
        .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let first = keyed_coordinator(shared.clone(), LEASE, window)
        .run(keyed_payment("order-9", 10))
        .await
        .expect("the first payment commits");
    assert_eq!(first.state, TxState::Done);

    // Inside the window, the caller retries.
    clock.advance(Duration::from_millis(9_500));
    let faulty = FaultStore::new(shared.clone()).keeping_upserts();
    let second = keyed_coordinator(faulty.clone(), LEASE, window);
    second
        .register_lease()
        .await
        .expect("registering the lease");
    // Its record's create (operation 1) loses its answer, still on its way;
    // the repeat (2) meets the first record; the look at it (3); the wait
    // for the create deadline reads the clock (4): stopped there.
    let base = faulty.ops();
    let faulty = faulty.lose_at(base + 1);
    let pause = faulty.pause_at(base + 4);
    let run = tokio::spawn(async move { second.run(keyed_payment("order-9", 10)).await });
    pause
        .reached
        .await
        .expect("the retry waits for its create deadline");

    // The window ends; collection runs; the lost create lands in time.
    clock.advance(Duration::from_millis(600));
    let collector = window_collector(shared.clone(), window);
    collector.collect_garbage(LEASE).await.expect("collection");
    let create = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == records())
        .expect("the lost create was kept");
    let _ = faulty.deliver_again(&create).await;
    pause.release.send(()).expect("the coordinator waits");
    // Past its create deadline, inside its applies' (the create's landing
    // plus the lease).
    clock.advance(Duration::from_millis(500));
    let answer = run.await.expect("the coordinator's task");

    clock.advance(LEASE * 4);
    let report = collector.run_once().await.expect("recovery pass");
    let (a, b) = (balance(&store, "A").await, balance(&store, "B").await);
    assert_eq!(
        (a, b),
        (90, 10),
        "a retry sent 9.5 s into a 10 s window paid again: answered {answer:?}; {report:?}"
    );
    assert!(
        answer.is_err(),
        "the retry answered {answer:?}, yet paid nothing"
    );
}
