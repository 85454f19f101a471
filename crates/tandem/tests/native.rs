//! The native strategy on the embedded store: the same declarations, the same typed errors.

mod common;

use std::sync::Arc;

use bson::doc;
use common::*;
use tandem::testing::FaultStore;
use tandem::{
    ChangeError, CommitPoint, Coordinator, DocumentChange, MemoryStore, Namespace, StepError,
    Store, Strategy, Transaction, TxError, TxState,
};

fn native(store: &MemoryStore) -> Coordinator {
    Coordinator::builder(store.clone())
        .strategy(Strategy::Native)
        .build()
}

#[tokio::test]
async fn a_native_transfer_commits_without_a_record() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    let receipt = native(&store).run(transfer("A", "B", 100)).await.unwrap();
    assert_eq!(receipt.state, TxState::Done);
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (900, 1100)
    );
    assert!(
        store.documents(&records()).is_empty(),
        "native leaves no record"
    );
    let a = get(&store, &accounts(), "A").await.unwrap();
    assert!(a.get("_tandem").is_none(), "no tombstone, no lock");
}

#[tokio::test]
async fn a_native_refusal_changes_nothing_and_is_typed_like_two_phase() {
    let (store, _, _) = bank(&["A", "B"], 50).await;
    // B is credited first, then A's guard fails: B's credit must be undone.
    let tx = || {
        Transaction::new()
            .change(DocumentChange::update(accounts(), "B").inc("balance", 100_i64))
            .change(
                DocumentChange::update(accounts(), "A")
                    .inc("balance", -100_i64)
                    .require_gte("balance", 100_i64),
            )
    };
    let native_err = native(&store).run(tx()).await.unwrap_err();
    let two_phase_err = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .build()
        .run(tx())
        .await
        .unwrap_err();
    for err in [&native_err, &two_phase_err] {
        match err {
            TxError::Canceled {
                cause: StepError::GuardFailed { participant, guard },
                ..
            } => {
                assert_eq!(participant, "bank.accounts/A");
                assert_eq!(guard, "balance >= 100 (found 50)");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (50, 50)
    );
}

#[tokio::test]
async fn native_insert_update_delete_are_all_or_nothing() {
    let store = MemoryStore::new();
    let orders = Namespace::new("shop", "orders");
    let carts = Namespace::new("shop", "carts");
    store
        .insert_one(&carts, doc! { "_id": "c", "items": ["x"] })
        .await
        .unwrap();
    store
        .insert_one(&orders, doc! { "_id": "taken" })
        .await
        .unwrap();
    let tx = Transaction::new()
        .change(DocumentChange::insert(
            orders.clone(),
            "o-1",
            doc! { "state": "UnPaid" },
        ))
        .change(DocumentChange::delete(carts.clone(), "c"))
        .change(DocumentChange::insert(orders.clone(), "taken", doc! {}));
    let err = native(&store).run(tx).await.unwrap_err();
    assert!(
        matches!(
            err,
            TxError::Canceled {
                cause: StepError::AlreadyExists { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(get(&store, &orders, "o-1").await.is_none());
    assert!(get(&store, &carts, "c").await.is_some());

    let tx = Transaction::new()
        .change(DocumentChange::insert(
            orders.clone(),
            "o-1",
            doc! { "state": "UnPaid" },
        ))
        .change(DocumentChange::delete(carts.clone(), "c"));
    native(&store).run(tx).await.unwrap();
    assert!(get(&store, &orders, "o-1").await.is_some());
    assert!(get(&store, &carts, "c").await.is_none());
}

#[tokio::test]
async fn native_respects_documents_held_by_two_phase_transactions() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let pause = faulty.pause_at(6); // A holds its exclusive lock; wait before `applied`
    let holder = Coordinator::builder(faulty)
        .commit_point(CommitPoint::Done)
        .build();
    let held = Transaction::new()
        .change(DocumentChange::update(accounts(), "A").set("tier", "gold"))
        .change(DocumentChange::update(accounts(), "B").inc("balance", 1_i64));
    let first = tokio::spawn(async move { holder.run(held).await });
    pause.reached.await.unwrap();
    let err = native(&store).run(transfer("A", "B", 5)).await.unwrap_err();
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
    first.await.unwrap().unwrap();
    assert_eq!(balance(&store, "A").await, 1000);
}

#[tokio::test]
async fn native_refuses_transactions_spanning_stores_or_custom_participants() {
    let (store, _, _) = bank(&["A"], 10).await;
    let coordinator = Coordinator::builder(store.clone())
        .store("other", MemoryStore::new())
        .strategy(Strategy::Native)
        .build();
    let tx = Transaction::new()
        .change(DocumentChange::update(accounts(), "A").inc("balance", -1_i64))
        .change(
            DocumentChange::update(accounts(), "Z")
                .inc("balance", 1_i64)
                .in_store("other"),
        );
    let err = coordinator.run(tx).await.unwrap_err();
    match err {
        TxError::Invalid(ChangeError::NativeUnavailable { reason }) => {
            assert!(reason.contains("several stores"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // The same declaration runs with the two-phase strategy when asked per transaction.
    let tx = Transaction::new()
        .strategy(Strategy::TwoPhase)
        .change(DocumentChange::update(accounts(), "A").inc("balance", -1_i64));
    coordinator.run(tx).await.unwrap();
    coordinator.drain().await;
    assert_eq!(balance(&store, "A").await, 9);
}

#[tokio::test]
async fn native_validates_input_like_two_phase() {
    let (store, _, _) = bank(&["A"], 10).await;
    let err = native(&store)
        .run(
            Transaction::new()
                .change(DocumentChange::update(accounts(), "A").inc("balance", 0_i64)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, TxError::Invalid(ChangeError::InvalidAmount { .. })),
        "{err:?}"
    );
    let err = native(&store).run(Transaction::new()).await.unwrap_err();
    assert!(
        matches!(err, TxError::Invalid(ChangeError::NoParticipants)),
        "{err:?}"
    );
}

/// `Strategy::Auto` runs natively when it can, two-phase when it cannot,
/// and says which and why (receipt and event).
#[tokio::test]
async fn auto_picks_native_on_one_store_and_two_phase_across_stores() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = events.clone();
    // The second store reads the same (manual) clock.
    let other = MemoryStore::with_clock(clock.clone());
    other
        .insert_one(
            &accounts(),
            doc! { "_id": "Z", "balance": 0_i64, "pendingTransactions": [] },
        )
        .await
        .unwrap();
    let coordinator = Coordinator::builder(store.clone())
        .store("other", other.clone())
        .strategy(Strategy::Auto)
        .commit_point(CommitPoint::Done)
        .on_event(move |e| {
            if let tandem::TxEvent::StrategyChosen {
                strategy, reason, ..
            } = e
            {
                seen.lock().unwrap().push((*strategy, reason.clone()));
            }
        })
        .build();

    let receipt = coordinator.run(transfer("A", "B", 100)).await.unwrap();
    assert_eq!(receipt.strategy, Strategy::Native);
    assert!(
        store.documents(&records()).is_empty(),
        "native leaves no record"
    );

    let across = Transaction::new()
        .change(DocumentChange::update(accounts(), "A").inc("balance", -5_i64))
        .change(
            DocumentChange::update(accounts(), "Z")
                .in_store("other")
                .inc("balance", 5_i64),
        );
    let receipt = coordinator.run(across).await.unwrap();
    assert_eq!(receipt.strategy, Strategy::TwoPhase);
    assert_eq!(
        store.documents(&records()).len(),
        1,
        "two-phase keeps a record"
    );
    assert_eq!(balance(&store, "A").await, 895);

    let chosen = events.lock().unwrap().clone();
    assert_eq!(chosen.len(), 2, "{chosen:?}");
    assert_eq!(chosen[0].0, Strategy::Native);
    assert!(chosen[0].1.contains("native transactions"), "{chosen:?}");
    assert_eq!(chosen[1].0, Strategy::TwoPhase);
    assert!(
        chosen[1].1.contains("span the stores default and other"),
        "{chosen:?}"
    );
}

/// A native transaction under a caller-chosen id (an idempotency key) writes
/// its record in the same transaction, so that a retry under the id is told
/// `Duplicate` and pays nothing: without it, a keyed payment run natively
/// (or by `Auto`, which picks native) ran again on every retry.
#[tokio::test]
async fn a_keyed_native_transaction_is_refused_as_duplicate_on_retry() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    for strategy in [Strategy::Native, Strategy::Auto, Strategy::TwoPhase] {
        let coordinator = Coordinator::builder(store.clone())
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build();
        let key = format!("pay-{strategy:?}");
        let pay = || {
            Transaction::with_id(&key)
                .change(
                    DocumentChange::update(accounts(), "A")
                        .inc("balance", -100_i64)
                        .require_gte("balance", 100_i64),
                )
                .change(DocumentChange::update(accounts(), "B").inc("balance", 100_i64))
        };
        let receipt = coordinator.run(pay()).await.unwrap();
        assert_eq!(receipt.state, TxState::Done);
        let again = coordinator.run(pay()).await;
        assert!(
            matches!(
                &again,
                Err(TxError::Duplicate {
                    state: Some(TxState::Done),
                    ..
                })
            ),
            "{strategy:?}: {again:?}"
        );
    }
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (700, 1300),
        "each key paid once"
    );
    let native = get(&store, &records(), "pay-Native").await.unwrap();
    let record = tandem::TxRecord::from_document(native.clone()).unwrap();
    assert_eq!(record.state, TxState::Done, "{native}");
    assert!(record.keyed && record.participants.is_empty(), "{native}");
}

/// A keyed native transaction on a store other than the default one, where
/// its record would live, cannot keep the record in the same transaction:
/// `Native` refuses it (nothing written), and `Auto` runs it two-phase.
#[tokio::test]
async fn a_keyed_transaction_on_another_store_is_not_run_natively() {
    let (store, clock, _) = bank(&["A"], 1000).await;
    let other = MemoryStore::with_clock(clock.clone());
    for id in ["Y", "Z"] {
        other
            .insert_one(
                &accounts(),
                doc! { "_id": id, "balance": 10_i64, "pendingTransactions": [] },
            )
            .await
            .unwrap();
    }
    let on_other = || {
        Transaction::with_id("k-1")
            .change(
                DocumentChange::update(accounts(), "Y")
                    .in_store("other")
                    .inc("balance", -1_i64),
            )
            .change(
                DocumentChange::update(accounts(), "Z")
                    .in_store("other")
                    .inc("balance", 1_i64),
            )
    };
    let coordinator = |strategy| {
        Coordinator::builder(store.clone())
            .store("other", other.clone())
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build()
    };
    let refused = coordinator(Strategy::Native).run(on_other()).await;
    assert!(
        matches!(
            &refused,
            Err(TxError::Invalid(ChangeError::NativeUnavailable { reason })) if reason.contains("caller-chosen id")
        ),
        "{refused:?}"
    );
    let receipt = coordinator(Strategy::Auto).run(on_other()).await.unwrap();
    assert_eq!(receipt.strategy, Strategy::TwoPhase);
    assert_eq!(store.documents(&records()).len(), 1, "its record");
}

/// Native runs leave no record, so they report themselves in an event.
#[tokio::test]
async fn native_runs_emit_an_event_with_their_outcome() {
    let (store, _, _) = bank(&["A", "B"], 100).await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let coordinator = Coordinator::builder(store.clone())
        .strategy(Strategy::Native)
        .on_event(move |e| {
            if let tandem::TxEvent::NativeFinished { outcome, error, .. } = e {
                sink.lock().unwrap().push((*outcome, error.is_some()));
            }
        })
        .build();
    coordinator.run(transfer("A", "B", 10)).await.unwrap();
    coordinator
        .run(transfer("A", "B", 1_000))
        .await
        .unwrap_err();
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            (Some(TxState::Done), false),
            (Some(TxState::Canceled), true)
        ]
    );
}

/// A coordinator returning at `done`, with `strategy`.
fn review_coordinator(store: &MemoryStore, strategy: Strategy) -> Coordinator {
    Coordinator::builder(store.clone())
        .strategy(strategy)
        .commit_point(CommitPoint::Done)
        .build()
}

/// A keyed native transaction names the refusing participant by its index in
/// the transaction: the record the coordinator adds first must not shift it.
#[tokio::test]
async fn a_keyed_native_refusal_names_the_participant_by_its_own_index() {
    let (store, _, _) = bank(&["A", "B"], 50).await;
    let tx = |key: &str| {
        Transaction::with_id(key)
            .change(DocumentChange::update(accounts(), "B").inc("balance", 100_i64))
            .change(
                DocumentChange::update(accounts(), "A")
                    .inc("balance", -100_i64)
                    .require_gte("balance", 100_i64),
            )
    };
    for (strategy, key) in [
        (Strategy::TwoPhase, "k-2pc"),
        (Strategy::Native, "k-native"),
    ] {
        let err = review_coordinator(&store, strategy)
            .run(tx(key))
            .await
            .unwrap_err();
        match err {
            TxError::Canceled {
                cause: StepError::GuardFailed { .. },
                participant: Some(p),
                ..
            } => assert_eq!(
                (p.index, p.label.as_str()),
                (1, "bank.accounts/A"),
                "{strategy:?}"
            ),
            other => panic!("{strategy:?}: {other:?}"),
        }
    }
}

/// Two participants whose `_id`s print alike (the number 7 and the string
/// "7") are two documents; a refusal of the second must not name the first.
/// The native store names the refusing change by its label, which both
/// share: the answer names neither (two-phase names the second).
#[tokio::test]
async fn a_native_refusal_names_the_right_one_of_two_participants_labeled_alike() {
    let store = MemoryStore::new();
    store
        .insert_one(&accounts(), doc! { "_id": 7_i32, "balance": 100_i64 })
        .await
        .unwrap();
    store
        .insert_one(&accounts(), doc! { "_id": "7", "balance": 0_i64 })
        .await
        .unwrap();
    let tx = || {
        Transaction::new()
            .change(DocumentChange::update(accounts(), 7_i32).inc("balance", 10_i64))
            .change(
                DocumentChange::update(accounts(), "7")
                    .inc("balance", -10_i64)
                    .require_gte("balance", 10_i64),
            )
    };
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let err = review_coordinator(&store, strategy)
            .run(tx())
            .await
            .unwrap_err();
        match (strategy, err) {
            (
                Strategy::TwoPhase,
                TxError::Canceled {
                    cause: StepError::GuardFailed { .. },
                    participant: Some(p),
                    ..
                },
            ) => assert_eq!(
                (p.index, p.id.clone()),
                (1, Some(bson::Bson::String("7".into())))
            ),
            (
                Strategy::Native,
                TxError::Canceled {
                    cause: StepError::GuardFailed { .. },
                    participant: None,
                    ..
                },
            ) => {}
            (strategy, other) => panic!("{strategy:?}: {other:?}"),
        }
    }
}

/// An exclusive increment (under an upper-bound guard) that would overflow a
/// 64-bit integer: two-phase reports `Overflow`; native must too, not a
/// `Conflict` with a "(concurrent write)" that no retry resolves.
#[tokio::test]
async fn a_native_exclusive_increment_that_overflows_is_an_overflow() {
    let store = MemoryStore::new();
    store
        .insert_one(
            &accounts(),
            doc! { "_id": "A", "balance": i64::MAX - 5, "pendingTransactions": [] },
        )
        .await
        .unwrap();
    let tx = || {
        Transaction::new().change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", 10_i64)
                .require_lte("balance", i64::MAX),
        )
    };
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let err = review_coordinator(&store, strategy)
            .run(tx())
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                TxError::Canceled {
                    cause: StepError::Overflow { .. },
                    ..
                }
            ),
            "{strategy:?}: {err:?}"
        );
    }
}

/// A native plan describes the native run: every change made at once inside
/// the transaction, nothing left for commit, no undo (a refusal aborts).
#[tokio::test]
async fn a_native_plan_describes_the_native_run() {
    let (store, _, _) = bank(&["A", "B"], 10).await;
    let plan = review_coordinator(&store, Strategy::Native).explain(&transfer("A", "B", 5));
    let text = plan.to_string();
    assert!(text.contains("apply:     add 5 to balance"), "{text}");
    assert!(text.contains("apply:     add -5 to balance"), "{text}");
    assert!(
        !text.contains("at commit:") && !text.contains("undo:") && !text.contains("check that"),
        "the native plan describes two-phase steps:\n{text}"
    );
    let two_phase = review_coordinator(&store, Strategy::TwoPhase).explain(&transfer("A", "B", 5));
    assert!(two_phase
        .to_string()
        .contains("at commit: add 5 to balance"));
}

/// Two-phase, exclusive: the apply misses because a plain write changed
/// `note` after the before-image was read. That is a concurrent write, also
/// when the change increments a double above `i64::MAX` (which cannot
/// overflow): not an `Overflow`.
#[tokio::test]
async fn a_concurrent_write_beside_a_large_double_is_a_conflict() {
    let store = MemoryStore::new();
    store
        .insert_one(
            &accounts(),
            doc! { "_id": "A", "score": 1.0e19_f64, "note": "a", "pendingTransactions": [] },
        )
        .await
        .unwrap();
    let faulty = FaultStore::new(Arc::new(store.clone()));
    // 1 the read of the before-image, 2 the create, 3 the apply.
    let pause = faulty.pause_at(3);
    let c = Coordinator::builder(faulty.clone())
        .commit_point(CommitPoint::Done)
        .build();
    let tx = Transaction::new().change(
        DocumentChange::update(accounts(), "A")
            .inc("score", 1_i64)
            .set("note", "b"),
    );
    let run = tokio::spawn(async move { c.run(tx).await });
    pause.reached.await.unwrap();
    store
        .update_one(
            &accounts(),
            doc! { "_id": "A" },
            doc! { "$set": { "note": "z" } },
            Default::default(),
        )
        .await
        .unwrap();
    pause.release.send(()).unwrap();
    let answer = run.await.unwrap();
    assert!(
        matches!(
            answer,
            Err(TxError::Canceled {
                cause: StepError::Conflict { .. },
                ..
            })
        ),
        "a concurrent write, answered {answer:?}"
    );
}
