//! A coordinator's next transaction meets the markers its own background
//! finisher has not cleared yet (`CommitPoint::Applied`, the default,
//! answers before they are). It waits for that finishing and goes on,
//! rather than being refused as a conflict with its caller's previous,
//! committed, change of the same document.

use std::time::Duration;

use bson::doc;
use tandem::{
    Coordinator, DocumentChange, MemoryStore, Namespace, StepError, Store, Transaction, TxError,
};

fn orders() -> Namespace {
    Namespace::new("shop", "orders")
}

async fn shop() -> MemoryStore {
    let store = MemoryStore::new();
    store
        .insert_one(
            &orders(),
            doc! { "_id": "o-1", "state": "new", "paid": 0_i64 },
        )
        .await
        .unwrap();
    store
}

fn set_state(from: &str, to: &str) -> Transaction {
    Transaction::new().change(
        DocumentChange::update(orders(), "o-1")
            .set("state", to)
            .require_eq("state", from),
    )
}

fn pay(amount: i64) -> Transaction {
    Transaction::new().change(DocumentChange::update(orders(), "o-1").inc("paid", amount))
}

async fn order(store: &MemoryStore) -> bson::Document {
    store
        .find_one(&orders(), doc! { "_id": "o-1" })
        .await
        .unwrap()
        .unwrap()
}

/// Each step of an order, one after another by one coordinator: every one
/// commits (before, the second was refused as a conflict with the first).
#[tokio::test]
async fn consecutive_changes_of_one_document_by_one_coordinator_commit() {
    for delay in [Duration::ZERO, Duration::from_secs(3600)] {
        let store = shop().await;
        let coordinator = Coordinator::builder(store.clone())
            .database("shop")
            .finish_delay(delay)
            .build();
        let steps = [
            set_state("new", "paid"),
            pay(30),
            pay(12),
            set_state("paid", "packed"),
            set_state("packed", "shipped"),
            pay(-2),
        ];
        for (n, tx) in steps.into_iter().enumerate() {
            let r = coordinator.run(tx).await;
            assert!(r.is_ok(), "finish delay {delay:?}, step {n}: {r:?}");
        }
        coordinator.drain().await;
        let order = order(&store).await;
        assert_eq!(order.get_str("state"), Ok("shipped"), "{order:?}");
        assert_eq!(order.get_i64("paid"), Ok(40), "{order:?}");
    }
}

/// Another coordinator's committed transaction still being finished is no
/// transaction of this one's: meeting it is a conflict, as before.
#[tokio::test]
async fn another_coordinators_unfinished_transaction_is_still_a_conflict() {
    let store = shop().await;
    let first = Coordinator::builder(store.clone())
        .database("shop")
        .finish_delay(Duration::from_secs(3600))
        .build();
    first.run(set_state("new", "paid")).await.unwrap();
    let second = Coordinator::builder(store.clone()).database("shop").build();
    let r = second.run(set_state("paid", "packed")).await;
    assert!(
        matches!(
            r,
            Err(TxError::Canceled {
                cause: StepError::Conflict { .. },
                ..
            })
        ),
        "{r:?}"
    );
    first.drain().await;
    second.run(set_state("paid", "packed")).await.unwrap();
    assert_eq!(order(&store).await.get_str("state"), Ok("packed"));
}

/// The same under the native strategy, after two-phase changes of the same
/// coordinator whose finishing is still to come.
#[tokio::test]
async fn a_native_change_after_ones_own_two_phase_change_commits() {
    let store = shop().await;
    let coordinator = Coordinator::builder(store.clone())
        .database("shop")
        .finish_delay(Duration::from_secs(3600))
        .build();
    coordinator.run(set_state("new", "paid")).await.unwrap();
    let r = coordinator
        .run(set_state("paid", "packed").strategy(tandem::Strategy::Native))
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(order(&store).await.get_str("state"), Ok("packed"));
}

/// Under `ConflictPolicy::Wait`, a transaction meeting its own coordinator's
/// unfinished transaction wakes the finisher as under `Fail`, rather than
/// backing off, finisher asleep, until the finisher's delay or its own
/// conflict timeout runs out (or, both past the lease, its apply expires
/// and it is canceled though under `Fail` it commits).
#[tokio::test]
async fn conflict_wait_does_not_wait_out_the_finish_delay_of_ones_own_transaction() {
    for delay in [Duration::from_secs(3600), Duration::MAX] {
        let store = shop().await;
        let coordinator = Coordinator::builder(store.clone())
            .database("shop")
            .finish_delay(delay)
            .conflict(tandem::ConflictPolicy::Wait {
                timeout: Duration::from_secs(3600),
            })
            .build();
        coordinator.run(set_state("new", "paid")).await.unwrap();
        // Far below the lease (30 s), the conflict timeout and the delay: the
        // finisher, woken, finishes the first at once.
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            coordinator.run(set_state("paid", "packed")),
        )
        .await;
        assert!(
            matches!(r, Ok(Ok(_))),
            "finish delay {delay:?}: waited for the finisher's delay: {r:?}"
        );
        assert_eq!(order(&store).await.get_str("state"), Ok("packed"));
    }
}

/// A transaction meeting two of its own coordinator's unfinished
/// transactions, one on each of its documents, commits: the finishing it
/// waits for at the first document finishes the second's holder too, which
/// is then no conflict with anything (it was refused as one, its holder
/// finished before it was asked about).
#[tokio::test]
async fn a_transaction_meeting_two_of_its_own_unfinished_transactions_commits() {
    for delay in [Duration::from_secs(3600), Duration::MAX] {
        let store = shop().await;
        store
            .insert_one(
                &orders(),
                doc! { "_id": "o-2", "state": "new", "paid": 0_i64 },
            )
            .await
            .unwrap();
        let coordinator = Coordinator::builder(store.clone())
            .database("shop")
            .finish_delay(delay)
            .build();
        let mark = |id: &str, from: &str, to: &str| {
            DocumentChange::update(orders(), id)
                .set("state", to)
                .require_eq("state", from)
        };
        coordinator
            .run(Transaction::new().change(mark("o-1", "new", "paid")))
            .await
            .unwrap();
        coordinator
            .run(Transaction::new().change(mark("o-2", "new", "paid")))
            .await
            .unwrap();
        let r = coordinator
            .run(
                Transaction::new()
                    .change(mark("o-1", "paid", "packed"))
                    .change(mark("o-2", "paid", "packed")),
            )
            .await;
        assert!(r.is_ok(), "finish delay {delay:?}: {r:?}");
        for id in ["o-1", "o-2"] {
            let order = store
                .find_one(&orders(), doc! { "_id": id })
                .await
                .unwrap()
                .unwrap();
            assert_eq!(order.get_str("state"), Ok("packed"), "{order:?}");
        }
    }
}

/// A holder of its own coordinator's that is finished while the
/// transaction's other applies are still on their way (a slow store, a
/// repeat after a transient failure) is no conflict either: by the time the
/// transaction looks at its conflicts, the holder is no longer waiting for
/// the finisher, and the document is free. (Under the default
/// `finish_delay` of zero the finisher runs beside the next transaction, so
/// this is the common race, not a rare one.)
#[tokio::test]
async fn an_own_holder_finished_while_other_applies_are_on_their_way_is_no_conflict() {
    let store = shop().await;
    let slow_inner = MemoryStore::new();
    let slow_ns = Namespace::new("shop", "labels");
    slow_inner
        .insert_one(&slow_ns, doc! { "_id": "l-1", "state": "a" })
        .await
        .unwrap();
    let slow = tandem::testing::FaultStore::new(std::sync::Arc::new(slow_inner));
    let coordinator = Coordinator::builder(store.clone())
        .database("shop")
        .store("slow", slow.clone())
        .finish_delay(Duration::from_secs(3600))
        .build();
    let label = move |from: &str, to: &str| {
        DocumentChange::update(slow_ns.clone(), "l-1")
            .in_store("slow")
            .set("state", to)
            .require_eq("state", from)
    };
    // The slow store's identity is read, its markers cleared: from here on
    // the next transaction's apply there is its next request.
    coordinator
        .run(Transaction::new().change(label("a", "b")))
        .await
        .unwrap();
    coordinator.drain().await;
    coordinator.run(set_state("new", "paid")).await.unwrap();
    let pause = slow.pause_at(slow.ops() + 1);
    let second = tokio::spawn({
        let coordinator = coordinator.clone();
        let order = DocumentChange::update(orders(), "o-1")
            .set("state", "packed")
            .require_eq("state", "paid");
        let label = label("b", "c");
        async move {
            coordinator
                .run(Transaction::new().change(order).change(label))
                .await
        }
    });
    // The order's apply has met the first transaction's marker; the label's
    // apply is held. The first transaction is finished meanwhile.
    pause.reached.await.unwrap();
    coordinator.drain().await;
    pause.release.send(()).unwrap();
    let r = second.await.unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(order(&store).await.get_str("state"), Ok("packed"));
}

/// A coordinator used from one runtime after another (a blocking wrapper
/// that builds a runtime per call, tests sharing a coordinator): a
/// finisher spawned on a runtime that ended before it first ran leaves its
/// transactions to recovery, as one that panicked does. It held them for
/// good, marked running, so no finisher was started again: `drain` and
/// `shutdown` waited forever, and so did a later transaction meeting their
/// markers, waiting for that finishing.
#[test]
fn a_finisher_whose_runtime_ended_before_it_ran_holds_nothing_up() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let first = runtime();
    let store = first.block_on(shop());
    let coordinator = Coordinator::builder(store.clone()).database("shop").build();
    // Answers once committed; the finisher it spawns has not run yet when
    // the runtime ends.
    first
        .block_on(coordinator.run(set_state("new", "paid")))
        .unwrap();
    drop(first);
    let second = runtime();
    second.block_on(async {
        let limit = Duration::from_secs(10);
        let drained = tokio::time::timeout(limit, coordinator.drain()).await;
        assert!(
            drained.is_ok(),
            "drain waited for a finisher that never runs"
        );
        // The first is left to recovery, its marker kept until then: a
        // conflict, answered at once.
        let r = tokio::time::timeout(limit, coordinator.run(pay(5))).await;
        assert!(
            matches!(
                r,
                Ok(Err(TxError::Canceled {
                    cause: StepError::Conflict { .. },
                    ..
                }))
            ),
            "{r:?}"
        );
        // A transaction committed now is finished by a finisher of its own.
        store
            .insert_one(&orders(), doc! { "_id": "o-2", "paid": 0_i64 })
            .await
            .unwrap();
        coordinator
            .run(
                Transaction::new()
                    .change(DocumentChange::update(orders(), "o-2").inc("paid", 5_i64)),
            )
            .await
            .unwrap();
        let drained = tokio::time::timeout(limit, coordinator.drain()).await;
        assert!(drained.is_ok(), "the next finisher did not run");
        let o2 = store
            .find_one(&orders(), doc! { "_id": "o-2" })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(o2.get_i64("paid"), Ok(5), "{o2:?}");
        assert_eq!(
            o2.get_array("pendingTransactions").map(Vec::len),
            Ok(0),
            "finished: {o2:?}"
        );
    });
}

/// A caller's credit, committed and waiting for its finishing (where it
/// lands: credits are deferred to the commit), then an exclusive change of
/// the same field by the same caller: the second commits, on the field as
/// the credit left it. Its before-image was read while the credit was still
/// to land, so once that finishing was done its apply no longer matched,
/// and it was refused as a conflict with a concurrent write: the credit.
#[tokio::test]
async fn an_exclusive_change_after_ones_own_credit_commits_on_what_the_credit_left() {
    for delay in [Duration::ZERO, Duration::from_secs(3600)] {
        let store = shop().await;
        let coordinator = Coordinator::builder(store.clone())
            .database("shop")
            .finish_delay(delay)
            .build();
        coordinator.run(pay(30)).await.unwrap();
        let r = coordinator
            .run(
                Transaction::new().change(
                    DocumentChange::update(orders(), "o-1")
                        .set("state", "refunding")
                        .inc("paid", -5_i64)
                        .require_gte("paid", 30_i64),
                ),
            )
            .await;
        assert!(r.is_ok(), "finish delay {delay:?}: {r:?}");
        coordinator.drain().await;
        let order = order(&store).await;
        assert_eq!(order.get_i64("paid"), Ok(25), "{order:?}");
        assert_eq!(order.get_str("state"), Ok("refunding"), "{order:?}");
    }
}

/// The same for another process's credit under `ConflictPolicy::Wait`: the
/// exclusive change waits it out and commits, rather than waiting until its
/// timeout on a before-image read before the credit landed.
#[tokio::test]
async fn an_exclusive_change_waiting_out_another_coordinators_credit_commits() {
    let store = shop().await;
    let first = Coordinator::builder(store.clone())
        .database("shop")
        .finish_delay(Duration::from_secs(3600))
        .build();
    first.run(pay(30)).await.unwrap();
    let second = Coordinator::builder(store.clone())
        .database("shop")
        .conflict(tandem::ConflictPolicy::Wait {
            timeout: Duration::from_secs(20),
        })
        .build();
    let run = tokio::spawn({
        let second = second.clone();
        async move {
            second
                .run(
                    Transaction::new()
                        .change(DocumentChange::update(orders(), "o-1").set("paid", 7_i64)),
                )
                .await
        }
    });
    // On this single-threaded runtime the spawned run goes on until its
    // first backoff (the embedded store answers every request at once):
    // it has met the first's marker. Then the first is finished.
    tokio::task::yield_now().await;
    first.drain().await;
    let r = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("waited out its whole conflict timeout")
        .unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(order(&store).await.get_i64("paid"), Ok(7));
}

/// A caller's credit, committed and waiting for its finishing (where a
/// credit to a shared document lands), then a debit of the same field
/// guarded by the balance the credit makes: the debit commits, under
/// either strategy. It was refused (`GuardFailed`, "insufficient funds")
/// by the caller's own committed credit not having landed yet.
#[tokio::test]
async fn a_guarded_debit_after_ones_own_credit_commits() {
    for strategy in [tandem::Strategy::TwoPhase, tandem::Strategy::Native] {
        for delay in [Duration::ZERO, Duration::from_secs(3600)] {
            let store = shop().await;
            let coordinator = Coordinator::builder(store.clone())
                .database("shop")
                .finish_delay(delay)
                .build();
            coordinator.run(pay(30)).await.unwrap();
            let r = coordinator
                .run(
                    Transaction::new()
                        .change(
                            DocumentChange::update(orders(), "o-1")
                                .inc("paid", -5_i64)
                                .require_gte("paid", 5_i64),
                        )
                        .strategy(strategy),
                )
                .await;
            assert!(r.is_ok(), "{strategy:?}, finish delay {delay:?}: {r:?}");
            coordinator.drain().await;
            assert_eq!(order(&store).await.get_i64("paid"), Ok(25));
        }
    }
}
