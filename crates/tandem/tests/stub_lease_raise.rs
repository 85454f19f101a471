//! A stub keeps an idempotency key taken for the longest lease registered
//! by the time it is removed, not only by the time it was written.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tandem::testing::FaultStore;
use tandem::{Store, TxState};

/// A payment under a key commits through a coordinator with a 1 s lease,
/// the only one registered so far; a collection right after makes its
/// record a stub until the window (10 s) and that lease have passed. Then
/// a coordinator with a 30 s lease starts (a new service, or a deploy
/// that raised the lease) and registers it. 9.5 s into the window the
/// caller retries through it; the retry's create loses its answer on the
/// way, its repeat meets the stub, and it waits out its create deadline
/// (30 s). At 11.5 s a collection removes the stub (its end was fixed
/// when the registry said 1 s) and the lost create lands, live, well
/// before its create deadline. The retry then finds its own record and
/// pays a second time, though it was sent inside the window.
#[tokio::test]
async fn a_stub_outlives_a_longer_lease_registered_after_it_was_written() {
    let window = Duration::from_secs(10);
    let long = Duration::from_secs(30);
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
        .run(keyed_payment("order-11", 10))
        .await
        .expect("the first payment commits");
    assert_eq!(first.state, TxState::Done);

    // A collection at the smallest age: the record becomes a stub.
    let collector = window_collector(shared.clone(), window);
    clock.advance(Duration::from_millis(1_500));
    assert_eq!(
        collector.collect_garbage(LEASE).await.expect("collection"),
        1
    );
    let stub = get(&store, &records(), "order-11")
        .await
        .expect("a stub is kept");
    assert!(stub.contains_key("stubUntil"), "not a stub: {stub:?}");

    // Inside the window, the caller retries through a coordinator with a
    // longer lease, registered before its create.
    clock.advance(Duration::from_millis(8_000));
    let faulty = FaultStore::new(shared.clone()).keeping_upserts();
    let second = keyed_coordinator(faulty.clone(), long, window);
    second
        .register_lease()
        .await
        .expect("registering the lease");
    // Its record's create (operation 1) loses its answer, still on its way;
    // the repeat (2) meets the stub; the look at it (3); the wait for the
    // create deadline reads the clock (4): stopped there.
    let base = faulty.ops();
    let faulty = faulty.lose_at(base + 1);
    let pause = faulty.pause_at(base + 4);
    let run = tokio::spawn(async move { second.run(keyed_payment("order-11", 10)).await });
    pause
        .reached
        .await
        .expect("the retry waits for its create deadline");

    // The window ends and the 1 s the stub was written for passes;
    // collection runs; the lost create lands, long before its deadline.
    clock.advance(Duration::from_millis(2_000));
    collector.collect_garbage(LEASE).await.expect("collection");
    let create = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == records())
        .expect("the lost create was kept");
    let _ = faulty.deliver_again(&create).await;
    // Past the retry's create deadline (sent at 9.5 s, 30 s lease),
    // inside its applies' (the create's landing at 11.5 s plus 30 s).
    clock.advance(Duration::from_millis(28_500));
    pause.release.send(()).expect("the coordinator waits");
    let answer = run.await.expect("the coordinator's task");

    clock.advance(long * 4);
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

/// The stub kept longer for a lease registered after it was written still
/// goes: once the window, its own floor and the floor registered now have
/// passed, a collection removes it, and the key runs again.
#[tokio::test]
async fn a_stub_kept_for_a_later_lease_still_goes() {
    let window = Duration::from_secs(10);
    let long = Duration::from_secs(30);
    let (store, clock, _) = bank(&["A", "B"], 100).await;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    keyed_coordinator(shared.clone(), LEASE, window)
        .run(keyed_payment("order-11", 10))
        .await
        .expect("the first payment commits");
    let collector = window_collector(shared.clone(), window);
    clock.advance(Duration::from_millis(1_500));
    collector.collect_garbage(LEASE).await.expect("collection");
    keyed_coordinator(shared.clone(), long, window)
        .register_lease()
        .await
        .expect("registering the lease");

    // Past the window and the floor the stub counted, not the later one.
    clock.advance(Duration::from_millis(10_000));
    collector.collect_garbage(LEASE).await.expect("collection");
    assert!(
        get(&store, &records(), "order-11").await.is_some(),
        "the stub went before the lease registered since had passed"
    );
    // Past the window and both floors.
    clock.advance(Duration::from_millis(31_000));
    collector.collect_garbage(LEASE).await.expect("collection");
    assert_eq!(get(&store, &records(), "order-11").await, None);
    let again = keyed_coordinator(shared.clone(), LEASE, window)
        .run(keyed_payment("order-11", 10))
        .await
        .expect("the key runs again once its stub is gone");
    assert_eq!(again.state, TxState::Done);
    assert_eq!(balance(&store, "A").await, 80);
}
