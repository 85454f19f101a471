//! The protocol on the embedded store: commits, refusals, conflicts, fencing, recovery.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson};
use common::*;
use tandem::testing::{audit, FaultStore};
use tandem::{
    ChangeError, CommitPoint, ConflictPolicy, Coordinator, DocumentChange, MemoryStore, Namespace,
    PendingPolicy, RecoveryConfig, StepContext, StepError, Store, Transaction, TxError, TxEvent,
    TxId, TxState,
};

/// Writes a record of another owner, `state`, with the one participant
/// `participant`, last changed (and leased) at `at` milliseconds.
async fn stranger(
    store: &MemoryStore,
    id: String,
    state: &str,
    participant: bson::Document,
    at: i64,
) {
    store
        .insert_one(
            &records(),
            doc! {
                "_id": id, "state": state, "owner": "elsewhere",
                "epoch": 0_i64, "leaseMillis": 30_000_i64, "attempts": 0, "history": [],
                "participants": [participant],
                "lastModified": bson::DateTime::from_millis(at),
                "leaseStart": bson::DateTime::from_millis(at),
            },
        )
        .await
        .unwrap();
}

fn done(store: &MemoryStore) -> Coordinator {
    Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .build()
}

#[tokio::test]
async fn a_transfer_commits_and_leaves_no_marker() {
    let (store, _, seeded) = bank(&["A", "B"], 1000).await;
    let receipt = done(&store).run(transfer("A", "B", 100)).await.unwrap();
    assert_eq!(receipt.state, TxState::Done);
    assert_eq!(balance(&store, "A").await, 900);
    assert_eq!(balance(&store, "B").await, 1100);
    let a = get(&store, &accounts(), "A").await.unwrap();
    assert_eq!(a.get_array("pendingTransactions").unwrap().len(), 0);
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), 1);
    let record = &audit.records[0];
    let states: Vec<TxState> = record.history.iter().map(|h| h.state).collect();
    assert_eq!(
        states,
        [TxState::Pending, TxState::Applied, TxState::Done],
        "created pending: the record holds every change before any is applied"
    );
    assert!(record.created.is_some() && record.last_modified.is_some());
    assert!(
        record.finished_at.is_some(),
        "a TTL index can count from finishedAt"
    );
}

/// A `set` needs a before-image: read from the document (a round trip of
/// its own) unless its equality guard already says what the field holds.
#[tokio::test]
async fn round_trips_count_a_before_image_read_only_when_it_is_read() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    let coordinator = Coordinator::new(store.clone());
    let reopen = || async {
        store
            .update_one(
                &accounts(),
                doc! { "_id": "A" },
                doc! { "$set": { "status": "open" } },
                tandem::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
    };
    let set = |guarded: bool| {
        let change = DocumentChange::update(accounts(), "A").set("status", "closed");
        let change = if guarded {
            change.require_eq("status", "open")
        } else {
            change
        };
        Transaction::new().change(change)
    };
    reopen().await;
    let before = store.command_count();
    let guarded = coordinator.run(set(true)).await.unwrap();
    assert_eq!(guarded.round_trips, 2, "the guard gives the before-image");
    assert_eq!(store.command_count() - before, 2, "create, apply");
    coordinator.drain().await;
    reopen().await;
    let before = store.command_count();
    let read = coordinator.run(set(false)).await.unwrap();
    assert_eq!(read.round_trips, 3, "the before-image is read first");
    assert_eq!(store.command_count() - before, 3, "read, create, apply");
}

#[tokio::test]
async fn the_commit_point_returns_at_the_applies_and_drain_finishes() {
    let (store, _, seeded) = bank(&["A", "B"], 1000).await;
    let coordinator = Coordinator::new(store.clone());
    let receipt = coordinator.run(transfer("A", "B", 10)).await.unwrap();
    assert_eq!(receipt.state, TxState::Applied);
    assert_eq!(receipt.round_trips, 2, "create (pending), apply");
    let committed = audit(&store, &records(), &seeded).await.unwrap();
    assert_eq!(
        committed.count(TxState::Pending),
        1,
        "moved on by finishing"
    );
    coordinator.drain().await;
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), 1);
}

#[tokio::test]
async fn a_failed_guard_cancels_and_undoes_everything() {
    let (store, _, seeded) = bank(&["A", "B"], 50).await;
    let err = done(&store).run(transfer("A", "B", 100)).await.unwrap_err();
    match &err {
        TxError::Canceled {
            cause: StepError::GuardFailed { participant, guard },
            ..
        } => {
            assert_eq!(participant, "bank.accounts/A");
            assert_eq!(guard, "balance >= 100 (found 50)");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(balance(&store, "A").await, 50);
    assert_eq!(balance(&store, "B").await, 50, "B's credit was undone");
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Canceled), 1);
    assert!(audit.records[0]
        .last_error
        .as_deref()
        .unwrap()
        .contains("balance >= 100"));
}

#[tokio::test]
async fn a_missing_document_cancels_with_not_found() {
    let (store, _, _) = bank(&["A"], 100).await;
    let err = done(&store)
        .run(transfer("A", "nobody", 10))
        .await
        .unwrap_err();
    assert!(
        matches!(err, TxError::Canceled { cause: StepError::NotFound { ref participant }, .. } if participant == "bank.accounts/nobody"),
        "{err:?}"
    );
    assert_eq!(balance(&store, "A").await, 100);
}

#[tokio::test]
async fn a_balance_stored_as_a_string_is_a_type_mismatch() {
    let store = MemoryStore::new();
    store
        .insert_one(&accounts(), doc! { "_id": "A", "balance": "1000" })
        .await
        .unwrap();
    store
        .insert_one(&accounts(), doc! { "_id": "B", "balance": 0_i64 })
        .await
        .unwrap();
    let err = done(&store).run(transfer("A", "B", 10)).await.unwrap_err();
    assert!(
        matches!(err, TxError::Canceled { cause: StepError::TypeMismatch { ref path, .. }, .. } if path == "balance"),
        "{err:?}"
    );
    // Without a guard, the store itself refuses the increment.
    let tx = Transaction::new()
        .change(DocumentChange::update(accounts(), "A").inc("balance", 5_i64))
        .change(DocumentChange::update(accounts(), "B").inc("balance", -5_i64));
    let err = done(&store).run(tx).await.unwrap_err();
    assert!(
        matches!(
            err,
            TxError::Canceled {
                cause: StepError::TypeMismatch { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        get(&store, &accounts(), "B")
            .await
            .unwrap()
            .get_i64("balance")
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn invalid_input_is_refused_before_anything_is_written() {
    let (store, _, _) = bank(&["A", "B"], 100).await;
    let coordinator = done(&store);
    type Case = (Transaction, fn(&ChangeError) -> bool);
    let cases: Vec<Case> = vec![
        (Transaction::new(), |e| {
            matches!(e, ChangeError::NoParticipants)
        }),
        (
            Transaction::new()
                .change(DocumentChange::update(accounts(), "A").inc("balance", 0_i64)),
            |e| matches!(e, ChangeError::InvalidAmount { .. }),
        ),
        (
            Transaction::new().change(DocumentChange::update(accounts(), "A").set("$where", 1)),
            |e| matches!(e, ChangeError::InvalidPath { .. }),
        ),
        (
            Transaction::new()
                .change(DocumentChange::update(Namespace::new("bank", "acc$"), "A").inc("n", 1)),
            |e| matches!(e, ChangeError::InvalidNamespace { .. }),
        ),
        (
            Transaction::new()
                .change(DocumentChange::update(accounts(), "A").inc("balance", 1))
                .change(DocumentChange::update(accounts(), "A").inc("balance", 1)),
            |e| matches!(e, ChangeError::DuplicateParticipant { .. }),
        ),
        (Transaction::with_id(""), |e| {
            matches!(e, ChangeError::InvalidId { .. })
        }),
        (
            Transaction::new().change(
                DocumentChange::update(accounts(), "A")
                    .inc("n", 1)
                    .in_store("elsewhere"),
            ),
            |e| matches!(e, ChangeError::UnknownStore { .. }),
        ),
    ];
    for (tx, expected) in cases {
        let dbg = format!("{tx:?}");
        match coordinator.run(tx).await {
            Err(TxError::Invalid(e)) => assert!(expected(&e), "{dbg}: {e}"),
            other => panic!("{dbg}: {other:?}"),
        }
    }
    let mut too_many = Transaction::new();
    for i in 0..65 {
        too_many = too_many.change(DocumentChange::update(accounts(), format!("X{i}")).inc("n", 1));
    }
    assert!(matches!(
        coordinator.run(too_many).await,
        Err(TxError::Invalid(ChangeError::TooManyParticipants {
            count: 65,
            limit: 64
        }))
    ));
    assert!(
        store.documents(&records()).is_empty(),
        "no record was written"
    );
    assert_eq!(balance(&store, "A").await, 100);
}

#[tokio::test]
async fn a_duplicate_transaction_id_is_refused() {
    let (store, _, _) = bank(&["A", "B"], 100).await;
    let coordinator = done(&store);
    let tx = || {
        Transaction::with_id("pay-42")
            .change(DocumentChange::update(accounts(), "A").inc("balance", -1_i64))
            .change(DocumentChange::update(accounts(), "B").inc("balance", 1_i64))
    };
    coordinator.run(tx()).await.unwrap();
    let err = coordinator.run(tx()).await.unwrap_err();
    assert_eq!(
        err,
        TxError::Duplicate {
            id: TxId::new("pay-42").unwrap(),
            state: Some(TxState::Done),
        }
    );
    assert_eq!(balance(&store, "A").await, 99, "applied once");
}

#[tokio::test]
async fn increments_share_a_document_but_exclusive_changes_conflict() {
    let (store, _, seeded) = bank(&["A", "B", "C"], 1000).await;
    // Hold A with a pending increment: pause the first transaction before its `applied` move.
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let pause = faulty.pause_at(4); // create, pending, apply A, apply B | 5th = applied
    let slow = Coordinator::builder(faulty.clone())
        .commit_point(CommitPoint::Done)
        .build();
    let first = tokio::spawn(async move { slow.run(transfer("A", "B", 100)).await });
    // Operation 4 is the second apply; wait until it is reached.
    pause.reached.await.unwrap();
    let coordinator = done(&store);
    // Another increment of A is fine: increments commute.
    coordinator.run(transfer("A", "C", 10)).await.unwrap();
    // An exclusive change of A is not.
    let tx = Transaction::new()
        .change(DocumentChange::update(accounts(), "A").set("frozen", true))
        .change(DocumentChange::update(accounts(), "C").inc("balance", 1_i64));
    let err = coordinator.run(tx).await.unwrap_err();
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
    assert_eq!(balance(&store, "A").await, 890);
    assert_eq!(balance(&store, "C").await, 1010);
    assert!(get(&store, &accounts(), "A")
        .await
        .unwrap()
        .get("frozen")
        .is_none());
    audit(&store, &records(), &seeded)
        .await
        .unwrap()
        .assert_clean();
}

#[tokio::test]
async fn waiting_on_a_conflict_succeeds_once_the_holder_finishes() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let pause = faulty.pause_at(6); // after apply: the clear-marker steps
    let holder = Coordinator::builder(faulty)
        .commit_point(CommitPoint::Done)
        .build();
    let tx = Transaction::new()
        .change(DocumentChange::update(accounts(), "A").set("tier", "gold"))
        .change(DocumentChange::update(accounts(), "B").inc("balance", 1_i64));
    let first = tokio::spawn(async move { holder.run(tx).await });
    pause.reached.await.unwrap();
    let waiting = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .conflict(ConflictPolicy::Wait {
            timeout: Duration::from_secs(10),
        })
        .build();
    let second = tokio::spawn(async move {
        waiting
            .run(
                Transaction::new()
                    .change(DocumentChange::update(accounts(), "A").set("tier", "platinum")),
            )
            .await
    });
    pause.release.send(()).unwrap();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    let a = get(&store, &accounts(), "A").await.unwrap();
    assert_eq!(a.get_str("tier").unwrap(), "platinum");
}

#[tokio::test]
async fn insert_and_delete_commit() {
    let store = MemoryStore::new();
    let orders = Namespace::new("shop", "orders");
    let carts = Namespace::new("shop", "carts");
    store
        .insert_one(&carts, doc! { "_id": "cart-1", "items": ["x"] })
        .await
        .unwrap();
    let tx = Transaction::new()
        .change(DocumentChange::insert(
            orders.clone(),
            "o-1",
            doc! { "state": "UnPaid", "total": 5 },
        ))
        .change(DocumentChange::delete(carts.clone(), "cart-1").require_exists("items"));
    done(&store).run(tx).await.unwrap();
    let order = get(&store, &orders, "o-1").await.unwrap();
    assert_eq!(order.get_str("state").unwrap(), "UnPaid");
    assert_eq!(order.get_array("pendingTransactions").unwrap().len(), 0);
    assert!(get(&store, &carts, "cart-1").await.is_none());
}

#[tokio::test]
async fn insert_and_delete_roll_back() {
    let store = MemoryStore::new();
    let orders = Namespace::new("shop", "orders");
    let carts = Namespace::new("shop", "carts");
    store
        .insert_one(&carts, doc! { "_id": "cart-1", "items": ["x"] })
        .await
        .unwrap();
    store
        .insert_one(&accounts(), doc! { "_id": "A", "balance": 1_i64 })
        .await
        .unwrap();
    let tx = Transaction::new()
        .change(DocumentChange::insert(
            orders.clone(),
            "o-1",
            doc! { "state": "UnPaid" },
        ))
        .change(DocumentChange::delete(carts.clone(), "cart-1"))
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -5_i64)
                .require_gte("balance", 5_i64),
        );
    let coordinator = done(&store);
    let err = coordinator.run(tx).await.unwrap_err();
    assert!(matches!(
        err,
        TxError::Canceled {
            cause: StepError::GuardFailed { .. },
            ..
        }
    ));
    let cart = get(&store, &carts, "cart-1").await.unwrap();
    assert_eq!(
        cart.get_array("items").unwrap().len(),
        1,
        "the cart is still there"
    );
    assert!(cart
        .get_document("_tandem")
        .unwrap()
        .get("deleting")
        .is_none());
    // The undone insert leaves nothing: its `_id` is free at once.
    assert!(get(&store, &orders, "o-1").await.is_none());
    assert_eq!(store.documents(&records()).len(), 1, "the canceled record");
}

#[tokio::test]
async fn a_set_is_undone_from_the_before_image() {
    let store = MemoryStore::new();
    let orders = Namespace::new("shop", "orders");
    store
        .insert_one(
            &orders,
            doc! { "_id": 1, "state": "UnPaid", "note": "keep" },
        )
        .await
        .unwrap();
    store
        .insert_one(&accounts(), doc! { "_id": "A", "balance": 0_i64 })
        .await
        .unwrap();
    // No equality guard on `note`, so its before-image is read first.
    let tx = Transaction::new()
        .change(
            DocumentChange::update(orders.clone(), 1)
                .set("state", "Paid")
                .unset("note")
                .set("paidAt", "now"),
        )
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -5_i64)
                .require_gte("balance", 5_i64),
        );
    let err = done(&store).run(tx).await.unwrap_err();
    assert!(matches!(err, TxError::Canceled { .. }));
    let order = store
        .find_one(&orders, doc! { "_id": 1 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(order.get_str("state").unwrap(), "UnPaid");
    assert_eq!(order.get_str("note").unwrap(), "keep");
    assert!(order.get("paidAt").is_none());
}

/// The hole in the hand-written pattern: once markers are pulled, `{$ne: txid}`
/// matches again. A late apply carries its deadline, and the store's clock has passed it.
/// Found by an adversarial review: an equality guard also matches an array
/// that holds the value, and `null` also matches a missing field, so neither
/// pins what an undo must restore. They were taken for the before-image: a
/// canceled `pull` from an array guarded `tags == "sale"` left `tags:
/// "sale"` (the rest of the array gone), and a canceled `set` guarded
/// `coupon == null` left `coupon: null` on a document that had none. Now
/// the image is read unless a guard pins it exactly, and the apply requires
/// the field to hold the value itself.
#[tokio::test]
async fn a_guard_that_does_not_pin_a_field_is_not_its_before_image() {
    let (store, _, _) = bank(&["A"], 1000).await;
    let products = Namespace::new("shop", "products");
    store
        .insert_one(
            &products,
            doc! { "_id": "p", "tags": ["sale", "new"], "name": "x" },
        )
        .await
        .unwrap();
    let coordinator = Coordinator::new(store.clone());
    let refused_by_a_missing_account =
        || DocumentChange::update(accounts(), "missing").inc("balance", 1_i64);
    for change in [
        DocumentChange::update(products.clone(), "p")
            .pull("tags", "sale")
            .require_eq("tags", "sale"),
        DocumentChange::update(products.clone(), "p")
            .set("coupon", "SPRING")
            .require_eq("coupon", Bson::Null),
        DocumentChange::update(products.clone(), "p")
            .set("tags", "sold")
            .require_eq("tags", "sale"),
    ] {
        let before = get(&store, &products, "p").await.unwrap();
        let result = coordinator
            .run(
                Transaction::new()
                    .change(change)
                    .change(refused_by_a_missing_account()),
            )
            .await;
        assert!(
            matches!(result, Err(TxError::Canceled { .. })),
            "{result:?}"
        );
        coordinator.drain().await;
        let after = get(&store, &products, "p").await.unwrap();
        assert_eq!(after.get("tags"), before.get("tags"), "{after}");
        assert_eq!(after.get("coupon"), None, "{after}");
    }
    // A guard that does pin the field still saves the read (a `set` of a
    // scalar guarded by its value): one request fewer than with a guard
    // that does not; either way the undo restores the field.
    let mut requests = Vec::new();
    for (id, pinned) in [("q1", true), ("q2", false)] {
        store
            .insert_one(&products, doc! { "_id": id, "state": "open" })
            .await
            .unwrap();
        let change = DocumentChange::update(products.clone(), id).set("state", "closed");
        let change = if pinned {
            change.require_eq("state", "open")
        } else {
            change.require_ne("state", "shut")
        };
        let before = store.command_count();
        let result = coordinator
            .run(
                Transaction::new()
                    .change(change)
                    .change(refused_by_a_missing_account()),
            )
            .await;
        coordinator.drain().await;
        requests.push(store.command_count() - before);
        assert!(
            matches!(result, Err(TxError::Canceled { .. })),
            "{result:?}"
        );
        assert_eq!(
            get(&store, &products, id).await.unwrap().get_str("state"),
            Ok("open")
        );
    }
    assert_eq!(requests[0] + 1, requests[1], "{requests:?}");
}

/// Found by an adversarial review, after the fix above: a number in an
/// equality guard also matches a stored number of another type, so it was
/// taken for a before-image that changed `Int64(5)` into `5.0` on undo; an
/// image read as `null` let the apply through after an outside write of
/// `[null, "Y"]`, which the undo then overwrote; and the added condition
/// refused a guard holding on an array as a concurrent write. Numbers are
/// read now, `null` must be the field itself, and a guard that stands for a
/// `set` field's image requires the field itself to hold the value, with
/// every strategy, refusing an array with a typed `TypeMismatch`.
#[tokio::test]
async fn before_images_are_exact_and_refusals_typed() {
    let (store, _, _) = bank(&["A"], 1000).await;
    let products = Namespace::new("shop", "products");
    for d in [
        doc! { "_id": "d", "qty": 5_i64 },
        doc! { "_id": "c", "coupon": Bson::Null },
        doc! { "_id": "e", "tags": ["sale"] },
    ] {
        store.insert_one(&products, d).await.unwrap();
    }
    let refused_by_a_missing_account =
        || DocumentChange::update(accounts(), "missing").inc("balance", 1_i64);
    let coordinator = Coordinator::new(store.clone());

    // A numeric guard is no before-image.
    let answer = coordinator
        .run(
            Transaction::new()
                .change(
                    DocumentChange::update(products.clone(), "d")
                        .set("qty", 6_i64)
                        .require_eq("qty", 5.0_f64),
                )
                .change(refused_by_a_missing_account()),
        )
        .await;
    assert!(
        matches!(answer, Err(TxError::Canceled { .. })),
        "{answer:?}"
    );
    coordinator.drain().await;
    let d = get(&store, &products, "d").await.unwrap();
    assert_eq!(d.get("qty"), Some(&Bson::Int64(5)), "{d}");

    // An image read as null does not match an array holding null.
    let docs = FaultStore::new(Arc::new(store.clone()));
    let holding = Coordinator::builder(store.clone())
        .store("docs", docs.clone())
        .build();
    let apply = docs.pause_at(2); // 1: the image read; 2: the apply
    let run = {
        let holding = holding.clone();
        let products = products.clone();
        tokio::spawn(async move {
            holding
                .run(
                    Transaction::new()
                        .change(
                            DocumentChange::update(products, "c")
                                .set("coupon", "X")
                                .in_store("docs"),
                        )
                        .change(refused_by_a_missing_account()),
                )
                .await
        })
    };
    apply.reached.await.unwrap();
    store
        .update_one(
            &products,
            doc! { "_id": "c" },
            doc! { "$set": { "coupon": [Bson::Null, "Y"] } },
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    apply.release.send(()).unwrap();
    assert!(run.await.unwrap().is_err());
    holding.drain().await;
    let c = get(&store, &products, "c").await.unwrap();
    assert_eq!(
        c.get("coupon"),
        Some(&Bson::Array(vec![Bson::Null, "Y".into()])),
        "{c}"
    );

    // A guard standing for a set field's image, on an array: refused, typed, alike.
    for strategy in [tandem::Strategy::TwoPhase, tandem::Strategy::Native] {
        let answer = coordinator
            .run(
                Transaction::new().strategy(strategy).change(
                    DocumentChange::update(products.clone(), "e")
                        .set("tags", "clearance")
                        .require_eq("tags", "sale"),
                ),
            )
            .await;
        assert!(
            matches!(
                &answer,
                Err(TxError::Canceled {
                    cause: StepError::TypeMismatch { .. },
                    ..
                })
            ),
            "{strategy:?}: {answer:?}"
        );
    }
    coordinator.drain().await;
    let e = get(&store, &products, "e").await.unwrap();
    assert_eq!(e.get_array("tags").map(Vec::len), Ok(1), "{e}");
}

/// Found by an adversarial review: a record written by an earlier version,
/// whose apply did not count its debit in the field's pending sum, finished
/// by this version: its clear took off what had never been added, left the
/// sum at -100 for good, and a credit that could not fit was then admitted.
/// A change read back from such a record (no `countsDebits` in its spec)
/// takes nothing off.
#[tokio::test]
async fn a_record_of_an_earlier_version_leaves_the_pending_sum_at_zero() {
    // Stopped after one apply (recovery cancels: the debit's undo), or
    // after both (committed at the applies: the debit's clear).
    for (operations, committed, left) in [(2, false, 1000), (3, true, 900)] {
        let (store, clock, _) = bank(&["A", "B"], 1000).await;
        let dying = FaultStore::new(Arc::new(store.clone())).crash_after(operations);
        let id = match Coordinator::builder(dying)
            .retry(tandem::RetryPolicy::NONE)
            .build()
            .run(transfer("A", "B", 100))
            .await
        {
            Ok(receipt) => receipt.id,
            Err(e) => e.id().cloned().expect("an id"),
        };
        // As an earlier version wrote and applied it: no countsDebits in
        // the specs, nothing added to A's pending sum by the debit.
        store
            .update_one(
                &records(),
                doc! { "_id": id.as_str() },
                doc! { "$unset": {
                    "participants.0.spec.countsDebits": "",
                    "participants.1.spec.countsDebits": "",
                } },
                tandem::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
        store
            .update_one(
                &accounts(),
                doc! { "_id": "A" },
                doc! { "$inc": { "_tandem.credit.balance": -100_i64 } },
                tandem::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
        clock.advance(Duration::from_secs(60));
        let report = Coordinator::new(store.clone())
            .recovery(RecoveryConfig::default())
            .run_once()
            .await
            .unwrap();
        assert_eq!(report.committed == 1, committed, "{report:?}");
        let a = get(&store, &accounts(), "A").await.unwrap();
        assert_eq!(a.get_i64("balance"), Ok(left), "{a}");
        let sum = a
            .get_document("_tandem")
            .ok()
            .and_then(|t| t.get_document("credit").ok())
            .and_then(|c| c.get_i64("balance").ok())
            .unwrap_or(0);
        assert_eq!(sum, 0, "{a}");
    }
}

/// Found by an adversarial review: a deferred floating-point credit adds
/// zero at its apply, so that the store checks the field's type there; as
/// `0.0` it turned an integer balance into a double, which above 2^53
/// changes its value, and a cancel kept it. It adds an `Int32` zero, which
/// keeps every numeric type as it is.
#[tokio::test]
async fn a_canceled_float_credit_leaves_an_integer_balance_as_it_was() {
    let big: i64 = (1 << 53) + 1;
    let (store, _, _) = bank(&["A"], big).await;
    let result = Coordinator::new(store.clone())
        .run(
            Transaction::new()
                .change(DocumentChange::update(accounts(), "A").inc("balance", 0.5_f64))
                .change(DocumentChange::update(accounts(), "missing").inc("balance", 1_i64)),
        )
        .await;
    assert!(
        matches!(result, Err(TxError::Canceled { .. })),
        "{result:?}"
    );
    let a = get(&store, &accounts(), "A").await.unwrap();
    assert_eq!(a.get("balance"), Some(&Bson::Int64(big)), "{a}");
}

/// Found by an adversarial review: a debit is applied at once and given
/// back by its undo, so a credit must leave room for it too. T1's debit of
/// 100 on A (near the limit) is applied while its other participant is
/// held up; T2 credits A by 200 up to `i64::MAX` and commits; T1's other
/// participant refuses, and its undo of the debit could not fit: T1 stayed
/// `canceling`, its marker on A, for every recovery pass. Now the debit
/// counts with the credits pending on the field, and T2 is refused.
#[tokio::test]
async fn a_credit_leaves_room_for_the_undo_of_a_pending_debit() {
    let (store, clock, _) = bank(&[], 0).await;
    let other = MemoryStore::with_clock(clock.clone());
    let start = i64::MAX - 100;
    store
        .insert_one(
            &accounts(),
            doc! { "_id": "A", "balance": start, "pendingTransactions": [] },
        )
        .await
        .unwrap();
    let held = FaultStore::new(Arc::new(other.clone()));
    // After the read of its identity.
    let pause = held.pause_at(2);
    let first = Coordinator::builder(store.clone())
        .store("other", held)
        .commit_point(CommitPoint::Done)
        .build();
    let t1 = Transaction::new()
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -100_i64)
                .require_gte("balance", 100_i64),
        )
        .change(
            DocumentChange::update(accounts(), "Z")
                .in_store("other")
                .inc("balance", 1_i64),
        );
    let t1 = tokio::spawn(async move { first.run(t1).await });
    pause.reached.await.unwrap();
    assert_eq!(
        balance(&store, "A").await,
        start - 100,
        "T1's debit is applied"
    );

    let t2 = done(&store)
        .run(
            Transaction::new()
                .change(DocumentChange::update(accounts(), "A").inc("balance", 200_i64)),
        )
        .await;
    assert!(
        matches!(
            &t2,
            Err(TxError::Canceled {
                cause: StepError::Overflow { .. },
                ..
            })
        ),
        "{t2:?}"
    );
    pause.release.send(()).unwrap();
    assert!(matches!(t1.await.unwrap(), Err(TxError::Canceled { .. })));
    let a = get(&store, &accounts(), "A").await.unwrap();
    assert_eq!(a.get_i64("balance"), Ok(start), "{a}");
    assert_eq!(
        a.get_array("pendingTransactions").map(Vec::len),
        Ok(0),
        "{a}"
    );
    let states: Vec<String> = store
        .documents(&records())
        .iter()
        .map(|r| r.get_str("state").unwrap().to_owned())
        .collect();
    assert_eq!(states, ["canceled", "canceled"]);
}

#[tokio::test]
async fn a_late_apply_after_done_is_fenced() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let coordinator = done(&store);
    let receipt = coordinator.run(transfer("A", "B", 100)).await.unwrap();
    let record = coordinator.record(&receipt.id).await.unwrap().unwrap();
    let (deadline, marker) = (record.deadline(), record.marker());
    clock.advance(Duration::from_secs(31));
    // A stalled worker replays its apply of A now.
    let change = DocumentChange::update(accounts(), "A").inc("balance", -100_i64);
    let stores = tandem::Stores::new(Arc::new(store.clone()));
    let err = tandem::Participant::apply(
        &change,
        StepContext {
            tx: &receipt.id,
            marker: &marker,
            epoch: 0,
            deadline: Some(deadline),
            not_before: None,
            before: None,
            stores: &stores,
            lease: std::time::Duration::from_secs(30),
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(err, StepError::Expired { .. }), "{err:?}");
    assert_eq!(balance(&store, "A").await, 900, "not applied twice");
}

#[tokio::test]
async fn a_late_apply_after_a_cancel_that_undid_nothing_is_fenced() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    // The coordinator dies right after `pending`, before applying anything.
    let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(2);
    let dead = Coordinator::builder(faulty)
        .commit_point(CommitPoint::Done)
        .build();
    let err = dead.run(transfer("A", "B", 100)).await.unwrap_err();
    let id = err.id().unwrap().clone();
    assert!(
        matches!(
            err,
            TxError::Interrupted {
                state: Some(TxState::Pending),
                ..
            }
        ),
        "{err:?}"
    );
    clock.advance(Duration::from_secs(60));
    let report = done(&store)
        .recovery(RecoveryConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.canceled, 1);
    // Now the stalled worker wakes up and applies, with its epoch's deadline.
    let record = done(&store).record(&id).await.unwrap().unwrap();
    // Epoch 0 began when the record was created; the lease is the default 30 s.
    let deadline = bson::DateTime::from_millis(record.created.unwrap().timestamp_millis() + 30_000);
    let marker = record.marker();
    let stores = tandem::Stores::new(Arc::new(store.clone()));
    for (who, by) in [("A", -100_i64), ("B", 100)] {
        let change = DocumentChange::update(accounts(), who).inc("balance", by);
        let err = tandem::Participant::apply(
            &change,
            StepContext {
                tx: &id,
                marker: &marker,
                epoch: 0,
                deadline: Some(deadline),
                not_before: None,
                before: None,
                stores: &stores,
                lease: std::time::Duration::from_secs(30),
            },
        )
        .await
        .unwrap_err();
        assert!(matches!(err, StepError::Expired { .. }), "{who}: {err:?}");
    }
    assert_eq!(balance(&store, "A").await, 1000);
    assert_eq!(balance(&store, "B").await, 1000);
}

#[tokio::test]
async fn recovery_rolls_pending_forward_when_told_to() {
    let (store, clock, seeded) = bank(&["A", "B"], 1000).await;
    // The record is written; the applies' request fails (nothing landed).
    let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(1);
    let dead = Coordinator::builder(faulty)
        .commit_point(CommitPoint::Done)
        .build();
    assert!(dead.run(transfer("A", "B", 100)).await.is_err());
    assert_eq!(balance(&store, "A").await, 1000, "nothing applied");
    let coordinator = done(&store);
    let worker = coordinator.recovery(RecoveryConfig {
        pending: PendingPolicy::RollForward,
        ..RecoveryConfig::default()
    });
    let early = worker.run_once().await.unwrap();
    assert_eq!(
        early.claimed, 0,
        "the lease has not expired yet by the store's clock"
    );
    // The lease (30 s) and the clock margin (2 s) pass.
    clock.advance(Duration::from_secs(33));
    let report = worker.run_once().await.unwrap();
    assert_eq!((report.claimed, report.committed), (1, 1), "{report:?}");
    assert_eq!(balance(&store, "A").await, 900);
    assert_eq!(balance(&store, "B").await, 1100);
    audit(&store, &records(), &seeded)
        .await
        .unwrap()
        .assert_clean();
}

#[tokio::test]
async fn recovery_removes_a_stale_initial_record() {
    // tandem creates records `pending`; an `initial` one comes from a hand-written
    // coordinator or an older version, and recovery still removes it.
    let (store, clock, seeded) = bank(&["A", "B"], 1000).await;
    let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(1);
    let dead = Coordinator::builder(faulty).build();
    let err = dead.run(transfer("A", "B", 1)).await.unwrap_err();
    let id = match err {
        TxError::Interrupted {
            id,
            state: Some(TxState::Pending),
            ..
        } => id,
        other => panic!("{other:?}"),
    };
    let moved = store
        .update_one(
            &records(),
            doc! { "_id": id.as_str(), "state": "pending" },
            doc! { "$set": { "state": "initial" } },
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        moved.matched, 1,
        "the crash left the record pending, nothing applied"
    );
    clock.advance(Duration::from_secs(33));
    let report = done(&store)
        .recovery(RecoveryConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.removed, 1);
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert!(audit.records.is_empty());
}

/// Pauses a coordinator before its store operation number `op` and returns
/// the running transfer, what releases it, and the id of its record.
async fn paused_transfer(
    store: &MemoryStore,
    op: u64,
) -> (
    tokio::task::JoinHandle<Result<tandem::Receipt, TxError>>,
    tokio::sync::oneshot::Sender<()>,
    tandem::TxId,
) {
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let pause = faulty.pause_at(op);
    let slow = Coordinator::builder(faulty)
        .commit_point(CommitPoint::Done)
        .build();
    let running = tokio::spawn(async move { slow.run(transfer("A", "B", 100)).await });
    pause.reached.await.unwrap();
    let id = tandem::TxRecord::from_document(store.documents(&records()).remove(0))
        .unwrap()
        .id;
    (running, pause.release, id)
}

/// A transaction commits at its applies: an operator's cancel while its
/// owner may still apply cannot decide it, and fences the owner's record
/// moves only. The owner's applies land; it answers committed, and recovery
/// finishes it so.
#[tokio::test]
async fn cancel_cannot_stop_a_transaction_whose_applies_may_still_land() {
    let (store, clock, seeded) = bank(&["A", "B"], 1000).await;
    // Paused before its applies: the record is written, nothing applied.
    let (running, release, id) = paused_transfer(&store, 2).await;
    assert_eq!(balance(&store, "A").await, 1000);
    let coordinator = done(&store);
    let state = coordinator.cancel(&id, "operator request").await.unwrap();
    assert_eq!(
        state,
        TxState::Pending,
        "undecided until the applies' deadline"
    );
    release.send(()).unwrap();
    let receipt = running.await.unwrap().expect("committed at its applies");
    assert_eq!(
        receipt.state,
        TxState::Applied,
        "its move to applied was fenced"
    );
    assert_eq!(balance(&store, "A").await, 900);
    clock.advance(Duration::from_secs(33));
    let report = coordinator
        .recovery(RecoveryConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!((report.claimed, report.committed), (1, 1), "{report:?}");
    assert_eq!(balance(&store, "A").await, 900);
    assert_eq!(balance(&store, "B").await, 1100);
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), 1);
}

/// Once its applies can no longer land, a transaction that has not applied
/// everywhere is canceled at once, and its owner is fenced off.
#[tokio::test]
async fn cancel_takes_over_a_pending_transaction_and_fences_its_owner() {
    let (store, clock, seeded) = bank(&["A", "B"], 1000).await;
    let (running, release, id) = paused_transfer(&store, 2).await;
    // The lease (30 s) and the clock margin (2 s) pass while the owner stalls.
    clock.advance(Duration::from_secs(33));
    let coordinator = done(&store);
    let state = coordinator.cancel(&id, "operator request").await.unwrap();
    assert_eq!(state, TxState::Canceled);
    release.send(()).unwrap();
    let err = running.await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            TxError::Superseded {
                state: Some(TxState::Canceled),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(balance(&store, "A").await, 1000);
    assert_eq!(balance(&store, "B").await, 1000);
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Canceled), 1);
    let history = &audit.records[0].history;
    assert!(
        history
            .iter()
            .any(|h| h.event == "cancel: operator request"),
        "{history:?}"
    );
}

#[tokio::test]
async fn garbage_collection_removes_records_and_leaves_documents_clean() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let coordinator = done(&store);
    coordinator.run(transfer("A", "B", 1)).await.unwrap();
    let a = get(&store, &accounts(), "A").await.unwrap();
    assert_eq!(
        a.get_document("_tandem").unwrap(),
        &doc! { "pending": 0, "credit": { "balance": 0_i64 }, "room": 0_i64 },
        "a finished transaction keeps nothing on its documents but zero counts \
         (changes under the default marker field count nothing more): {a}"
    );
    let worker = coordinator.recovery(RecoveryConfig::default());
    let refused = worker.collect_garbage(Duration::from_secs(31)).await;
    assert!(
        matches!(&refused, Err(e) if e.kind == tandem::StoreErrorKind::BadRequest),
        "below the lease (30 s) plus the clock margin (2 s): {refused:?}"
    );
    assert_eq!(
        worker
            .collect_garbage(Duration::from_secs(3600))
            .await
            .unwrap(),
        0,
        "too young"
    );
    clock.advance(Duration::from_secs(3601));
    assert_eq!(
        worker
            .collect_garbage(Duration::from_secs(3600))
            .await
            .unwrap(),
        1
    );
    // Nothing pending on A any more: its zero credit sum goes too.
    let mut tidy = a.clone();
    tidy.insert("_tandem", doc! { "pending": 0 });
    assert_eq!(get(&store, &accounts(), "A").await.unwrap(), tidy);
    assert!(store.documents(&records()).is_empty());
}

/// A TTL age longer than an index holds is refused, and nothing is sent:
/// `ensure_ttl(Duration::MAX)` (meaning "keep finished records for good")
/// overflowed rounding its seconds up, which panicked in a debug build and
/// in a release build wrapped around to an index expiring every finished
/// record at once, below the lease plus the margin that the age was
/// checked against (a late copy of a create would then write its record
/// again, live). The same for the placeholders' index, whose age is the
/// lease plus the margin.
#[tokio::test]
async fn a_ttl_age_longer_than_an_index_holds_is_refused() {
    let (store, _, _) = bank(&["A"], 1000).await;
    let coordinator = done(&store);
    let longest = Duration::from_secs(tandem::config::MAX_TTL_SECS);
    for age in [
        Duration::MAX,
        Duration::from_secs(u64::MAX),
        longest + Duration::from_millis(1),
    ] {
        let before = store.command_count();
        let refused = coordinator.ensure_ttl(age).await;
        assert!(
            matches!(&refused, Err(e) if e.kind == tandem::StoreErrorKind::BadRequest),
            "{age:?}: {refused:?}"
        );
        assert_eq!(store.command_count(), before, "{age:?}: nothing sent");
    }
    coordinator.ensure_ttl(longest).await.unwrap();

    let forever = tandem::Coordinator::builder(store.clone())
        .lease(Duration::MAX)
        .build();
    let before = store.command_count();
    let refused = forever.ensure_placeholder_ttl(None, &accounts()).await;
    assert!(
        matches!(&refused, Err(e) if e.kind == tandem::StoreErrorKind::BadRequest),
        "{refused:?}"
    );
    assert_eq!(store.command_count(), before, "nothing sent");
}

/// A TTL index on records made by a coordinator with a short lease, where
/// another coordinator of the same records registered a longer one, is
/// refused: a late copy of that coordinator's create could land after its
/// record expired, and write it again live. Before, only the calling
/// coordinator's own lease was checked, and the index was made.
#[tokio::test]
async fn a_ttl_age_below_a_registered_lease_is_refused() {
    let (store, _, _) = bank(&["A"], 1000).await;
    let long = tandem::Coordinator::builder(store.clone())
        .lease(Duration::from_secs(600))
        .build();
    long.register_lease().await.unwrap();
    let short = tandem::Coordinator::builder(store.clone())
        .lease(Duration::from_secs(5))
        .build();
    let refused = short.ensure_ttl(Duration::from_secs(60)).await;
    assert!(
        matches!(&refused, Err(e) if e.kind == tandem::StoreErrorKind::BadRequest
            && e.message.contains("tandem_leases")),
        "{refused:?}"
    );
    short
        .ensure_ttl(Duration::from_secs(600) + tandem::CoordinatorConfig::default().clock_margin)
        .await
        .unwrap();
}

/// A coordinator whose lease is as long as a `Duration` holds ("never
/// take my transactions over"), whose record create lost its answer and
/// whose retry met another record under the id, answers `Interrupted`
/// (its own first attempt may still land, and its create deadline never
/// passes): it added the lease to the current instant to bound its wait,
/// which overflowed and panicked.
#[tokio::test]
async fn a_retried_create_under_the_longest_lease_meeting_a_taken_id_is_interrupted() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    // Another transaction's record under the id.
    store
        .insert_one(
            &records(),
            doc! { "_id": "pay-1", "state": "done", "token": "another" },
        )
        .await
        .unwrap();
    // The first operation, the record's create, is lost on its way.
    let faulty = tandem::testing::FaultStore::new(std::sync::Arc::new(store.clone())).lose_at(1);
    let coordinator = tandem::Coordinator::builder(faulty)
        .lease(Duration::MAX)
        .commit_point(tandem::CommitPoint::Done)
        .build();
    let tx = tandem::Transaction::with_id("pay-1")
        .change(tandem::DocumentChange::update(accounts(), "B").inc("balance", 5_i64));
    let answer = tokio::time::timeout(Duration::from_secs(30), coordinator.run(tx))
        .await
        .expect("answers without waiting for a deadline that never passes");
    assert!(
        matches!(&answer, Err(TxError::Interrupted { state: None, .. })),
        "{answer:?}"
    );
    assert_eq!(balance(&store, "B").await, 1000);
}

/// Garbage collection goes in batches, not record by record: 600 finished
/// transfers are collected with a clock reading, one page of the scan, two
/// deletes (up to 500 records each), the read of the longest registered
/// lease and the removal of expired stubs, and one update dropping the two
/// accounts' credit sums.
#[tokio::test]
async fn garbage_collection_removes_records_in_batches() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let coordinator = done(&store);
    for _ in 0..600 {
        coordinator.run(transfer("A", "B", 1)).await.unwrap();
    }
    clock.advance(Duration::from_secs(40));
    let worker = coordinator.recovery(RecoveryConfig::default());
    let before = store.command_count();
    assert_eq!(
        worker
            .collect_garbage(Duration::from_secs(32))
            .await
            .unwrap(),
        600
    );
    assert_eq!(
        store.command_count() - before,
        7,
        "now, find, 2 deletes, registered lease, stubs, credit sums"
    );
    assert!(store.documents(&records()).is_empty());
}

/// A transfer under the caller's id `id`, of `amount` from `from` to `to`.
fn keyed_transfer(id: &str, from: &str, to: &str, amount: i64) -> Transaction {
    Transaction::with_id(id)
        .change(
            DocumentChange::update(accounts(), from)
                .inc("balance", -amount)
                .require_gte("balance", amount),
        )
        .change(DocumentChange::update(accounts(), to).inc("balance", amount))
}

/// A keyed transaction keeps its id for its own coordinator's idempotency
/// window, whoever collects its record: a collector with a shorter window
/// (another application sharing the records, `tandem gc` with its default
/// of a day) removed the record of a payment its caller had been promised a
/// week for, and a retry inside that week paid again.
#[tokio::test]
async fn a_collector_with_a_shorter_window_keeps_the_writers_promise() {
    let day = Duration::from_secs(86_400);
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let coordinator = Coordinator::builder(store.clone())
        .idempotency_window(7 * day)
        .build();
    coordinator
        .run(keyed_transfer("K", "A", "B", 100))
        .await
        .unwrap();
    coordinator.drain().await;
    let collector = Coordinator::new(store.clone()).recovery(RecoveryConfig {
        idempotency_window: day,
        ..RecoveryConfig::default()
    });
    let collect = || async {
        let mut total = 0;
        loop {
            total += collector
                .collect_garbage(Duration::from_secs(3600))
                .await
                .unwrap();
            if collector.caught_up() {
                return total;
            }
        }
    };

    // Two days on: past the collector's window, inside the writer's.
    clock.advance(2 * day);
    collect().await;
    collect().await;
    let retry = coordinator.run(keyed_transfer("K", "A", "B", 100)).await;
    assert!(
        matches!(
            retry,
            Err(TxError::Duplicate {
                state: Some(TxState::Done),
                ..
            })
        ),
        "{retry:?}"
    );
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (900, 1100)
    );

    // Past the writer's window the stub goes.
    clock.advance(6 * day);
    collect().await;
    assert!(get(&store, &records(), "K").await.is_none());
}

/// A keyed run of a coordinator with a long lease stalls before its create
/// lands; the caller's retry under the same key, through a coordinator with
/// a shorter lease and window, pays and finishes; a collector removes its
/// record once that record's own create deadline and age allow. The stalled
/// create then landed live (its own deadline, a long lease after its start,
/// had not passed), met no record under the id, and paid a second time.
/// Every coordinator now writes its lease to the leases collection before
/// its first keyed create, and collection keeps a keyed id taken for at
/// least the longest lease there plus the clock margin.
#[tokio::test]
async fn a_keyed_id_stays_taken_for_the_longest_lease_of_any_coordinator() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let long = Coordinator::builder(faulty.clone())
        .lease(Duration::from_secs(60))
        .idempotency_window(Duration::ZERO)
        .build();
    // A first keyed run, so that what the next one sends first is its create.
    long.run(keyed_transfer("W", "A", "B", 1)).await.unwrap();
    long.drain().await;
    let pause = faulty.pause_at(faulty.ops() + 1);
    let first = tokio::spawn(async move { long.run(keyed_transfer("K", "A", "B", 100)).await });
    pause.reached.await.expect("the first run sends its create");

    let short = Coordinator::builder(store.clone())
        .lease(Duration::from_secs(5))
        .idempotency_window(Duration::ZERO)
        .build();
    short.run(keyed_transfer("K", "A", "B", 100)).await.unwrap();
    short.drain().await;
    clock.advance(Duration::from_secs(10));
    let collector = short.recovery(RecoveryConfig {
        idempotency_window: Duration::ZERO,
        ..RecoveryConfig::default()
    });
    collector
        .collect_garbage(Duration::from_secs(7))
        .await
        .unwrap();

    pause.release.send(()).unwrap();
    let answer = first.await.unwrap();
    assert!(
        matches!(
            answer,
            Err(TxError::Duplicate {
                state: Some(TxState::Done),
                ..
            })
        ),
        "{answer:?}"
    );
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (899, 1101),
        "the payment under K landed once"
    );

    // Past the longest lease and the margin, the id is free again.
    clock.advance(Duration::from_secs(60));
    collector
        .collect_garbage(Duration::from_secs(7))
        .await
        .unwrap();
    collector
        .collect_garbage(Duration::from_secs(7))
        .await
        .unwrap();
    assert!(get(&store, &records(), "K").await.is_none());
}

/// A garbage collector that stalled between its scan (which found `K`
/// `done`, inside its idempotency window) and its stub update wakes after
/// the old `K` was stubbed and removed, and a new transaction under the id
/// `K` reached `done`. Its stub update must not touch the new record: with a
/// filter of the id and state alone it made the new record a stub whose
/// window was already over, the next collection removed it seconds old, a
/// late copy of its create then landed live, and recovery rolled it forward:
/// the new transaction's debit landed twice.
#[tokio::test]
async fn a_stalled_stub_update_leaves_a_new_record_under_the_id_alone() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let config = || RecoveryConfig {
        idempotency_window: Duration::from_secs(100),
        pending: PendingPolicy::RollForward,
        ..RecoveryConfig::default()
    };
    let age = Duration::from_secs(32);

    // The collectors' window alone decides.
    let first = Coordinator::builder(store.clone())
        .idempotency_window(Duration::ZERO)
        .build();
    first.run(keyed_transfer("K", "A", "B", 100)).await.unwrap();
    first.drain().await;
    clock.advance(Duration::from_secs(40));

    // The stalled collector: its operations are the clock, the scan, the stub.
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let stalled = Coordinator::new(faulty.clone()).recovery(config());
    let pause = faulty.pause_at(3);
    let stalled = tokio::spawn(async move { stalled.collect_garbage(age).await });
    pause.reached.await.unwrap();

    // Another collector stubs the old `K`, and removes the stub after its
    // window and the longest lease plus the margin (32 s).
    let collector = Coordinator::new(store.clone()).recovery(config());
    assert_eq!(collector.collect_garbage(age).await.unwrap(), 1);
    clock.advance(Duration::from_secs(100));
    collector.collect_garbage(age).await.unwrap();
    assert!(store.documents(&records()).is_empty(), "the old K is gone");

    // A new transaction under `K`, its create kept to be delivered again.
    let kept = FaultStore::new(Arc::new(store.clone())).keeping_upserts();
    let second = Coordinator::new(kept.clone());
    second.run(keyed_transfer("K", "A", "B", 50)).await.unwrap();
    second.drain().await;
    assert_eq!(balance(&store, "A").await, 850);
    let new_record = get(&store, &records(), "K").await.unwrap();

    // The stalled collector wakes and finds nothing of its own to stub.
    pause.release.send(()).unwrap();
    assert_eq!(stalled.await.unwrap().unwrap(), 0);
    assert_eq!(get(&store, &records(), "K").await, Some(new_record.clone()));

    // The next collection leaves the record, seconds old, where it is, so a
    // late copy of its create meets it and writes nothing.
    collector.collect_garbage(age).await.unwrap();
    assert_eq!(get(&store, &records(), "K").await, Some(new_record));
    let create = kept
        .upserts()
        .into_iter()
        .find(|u| u.ns == records())
        .expect("the create");
    let late = kept.deliver_again(&create).await;
    assert_eq!(late.unwrap_err().kind, tandem::StoreErrorKind::DuplicateKey);
    clock.advance(Duration::from_secs(33));
    collector.run_once().await.unwrap();
    assert_eq!(
        balance(&store, "A").await,
        850,
        "the new K was applied once"
    );
    assert_eq!(balance(&store, "B").await, 1150);
}

/// A collector configured with a shorter lease than a coordinator's may not
/// collect that coordinator's record before the record's own create
/// deadline: a late copy of its create (its first attempt lost its answer,
/// the retry wrote the record, the transaction finished) would then land
/// live after the collection, `pending` at epoch 0, and recovery rolling it
/// forward would pay a second time. The record carries its create deadline;
/// collection waits for it, whatever the collector's own lease.
#[tokio::test]
async fn collection_waits_for_the_create_deadline_of_a_longer_lease() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let faulty = FaultStore::new(Arc::new(store.clone()))
        .keeping_upserts()
        .lose_at(1);
    let coordinator = Coordinator::builder(faulty.clone())
        .lease(Duration::from_secs(60))
        .early_commit(false)
        .commit_point(CommitPoint::Done)
        .build();
    let receipt = coordinator.run(transfer("A", "B", 100)).await.unwrap();
    assert_eq!(receipt.state, TxState::Done);
    assert_eq!(balance(&store, "A").await, 900);

    clock.advance(Duration::from_secs(10));
    let short = Coordinator::builder(store.clone())
        .lease(Duration::from_secs(5))
        .build()
        .recovery(RecoveryConfig {
            pending: PendingPolicy::RollForward,
            ..RecoveryConfig::default()
        });
    assert_eq!(
        short.collect_garbage(Duration::from_secs(7)).await.unwrap(),
        0
    );

    let lost = faulty
        .upserts()
        .into_iter()
        .next()
        .expect("the lost create");
    let late = faulty.deliver_again(&lost).await;
    assert_eq!(
        late.unwrap_err().kind,
        tandem::StoreErrorKind::DuplicateKey,
        "the late copy meets the record"
    );
    clock.advance(Duration::from_secs(70));
    short.run_once().await.unwrap();
    assert_eq!(balance(&store, "A").await, 900, "debited once");
    assert_eq!(balance(&store, "B").await, 1100);
    // Past its create deadline plus the margin, the record goes.
    assert_eq!(
        short.collect_garbage(Duration::from_secs(7)).await.unwrap(),
        1
    );
}

/// The lease and margin of [`RetryMeetingAnotherRecord`].
const RETRY_LEASE: Duration = Duration::from_secs(30);
const RETRY_MARGIN: Duration = Duration::from_secs(2);

/// A keyed transfer under an id an earlier transfer took, whose record's
/// create lost its first answer (kept, to land late) and met the earlier
/// record on its retry, stopped at the first clock read of its wait for the
/// create deadline: the store, its clock, the fault store with the kept
/// create, the pause, the running transfer, and a recovery worker that
/// keeps no stubs and rolls forward.
struct RetryMeetingAnotherRecord {
    store: MemoryStore,
    clock: Arc<tandem::ManualClock>,
    faulty: FaultStore,
    pause: tandem::testing::Pause,
    run: tokio::task::JoinHandle<Result<tandem::Receipt, TxError>>,
    worker: tandem::RecoveryWorker,
}

impl RetryMeetingAnotherRecord {
    async fn start() -> Self {
        let (store, clock, _) = bank(&["A", "B"], 100).await;
        let pay = |amount: i64| keyed_transfer("taken", "A", "B", amount);
        let builder = |store: Arc<dyn Store>| {
            Coordinator::builder_shared(store)
                .lease(RETRY_LEASE)
                .clock_margin(RETRY_MARGIN)
                .commit_point(CommitPoint::Done)
                // The worker's window alone decides: it keeps no stubs.
                .idempotency_window(Duration::ZERO)
        };
        builder(Arc::new(store.clone()))
            .build()
            .run(pay(10))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(60));
        // The create (1) loses its answer; the retry (2) meets the first
        // record; the look (3); the wait's clock read (4).
        let faulty = FaultStore::new(Arc::new(store.clone())).keeping_upserts();
        let second = builder(Arc::new(faulty.clone())).build();
        // Counted from the transaction's first operation, after its lease.
        second.register_lease().await.unwrap();
        let base = faulty.ops();
        let faulty = faulty.lose_at(base + 1);
        let pause = faulty.pause_at(base + 4);
        let run = tokio::spawn(async move { second.run(pay(5)).await });
        let worker = builder(Arc::new(store.clone()))
            .build()
            .recovery(RecoveryConfig {
                idempotency_window: Duration::ZERO,
                pending: PendingPolicy::RollForward,
                ..RecoveryConfig::default()
            });
        RetryMeetingAnotherRecord {
            store,
            clock,
            faulty,
            pause,
            run,
            worker,
        }
    }
}

/// Delivers the create that `faulty` lost, which must land live.
async fn deliver_the_lost_create(faulty: &FaultStore) {
    let create = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == records())
        .unwrap();
    let landed = faulty.deliver_again(&create).await.unwrap().unwrap();
    assert!(!tandem::TxRecord::from_document(landed).unwrap().is_inert());
}

/// Found by an adversarial review: a retry whose record's `_id` was taken
/// waited out the create deadline, looked again, and answered `Duplicate`
/// ("this one wrote nothing") when its record was not there. But its lost
/// first attempt may have landed live meanwhile (once the other record was
/// collected), and been finished by recovery and collected in turn before
/// the look: then the transaction was made. Not finding its own record
/// after the wait, the coordinator now answers `Interrupted`. (It also waits
/// past the create deadline plus the margin, as a clock that steps back
/// within it would otherwise let a copy land live after the look.)
#[tokio::test]
async fn a_retry_that_meets_another_record_answers_interrupted_not_duplicate() {
    let mut r = RetryMeetingAnotherRecord::start().await;
    (&mut r.pause.reached).await.unwrap();
    // Meanwhile the first record goes, the lost create lands in time, and
    // recovery (rolling forward) makes the transaction; its record goes too.
    let age = RETRY_LEASE + RETRY_MARGIN;
    assert_eq!(r.worker.collect_garbage(age).await.unwrap(), 1);
    deliver_the_lost_create(&r.faulty).await;
    r.clock.advance(age + RETRY_MARGIN);
    assert_eq!(r.worker.run_once().await.unwrap().committed, 1);
    assert_eq!(balance(&r.store, "A").await, 85, "the transaction was made");
    r.clock.advance(age + RETRY_MARGIN);
    assert_eq!(r.worker.collect_garbage(age).await.unwrap(), 1);
    // The coordinator wakes, finds no record of its own: the outcome is unknown.
    r.pause.release.send(()).unwrap();
    let answer = r.run.await.unwrap();
    assert!(
        matches!(answer, Err(TxError::Interrupted { .. })),
        "{answer:?}"
    );
}

/// Found by an adversarial review: the same retry looked again as soon as
/// the records store's clock read the create deadline, and answered
/// `Duplicate`; the clock then stepped back 1.5 s (within the 2 s margin),
/// the other record was collected, and the lost first attempt landed live:
/// recovery made the transaction answered as not made. The look waits for
/// the deadline plus the margin now; a clock that does not get there within
/// the lease plus the margin of local time gets `Interrupted`. (Time is
/// paused: the coordinator's wait runs on it, the store's clock does not.)
#[tokio::test(start_paused = true)]
async fn a_retry_looks_again_only_past_the_create_deadline_plus_the_margin() {
    let mut r = RetryMeetingAnotherRecord::start().await;
    (&mut r.pause.reached).await.unwrap();
    r.clock.advance(RETRY_LEASE); // the create deadline, not yet past the margin
    r.pause.release.send(()).unwrap();
    let answer = r.run.await.unwrap();
    assert!(
        matches!(answer, Err(TxError::Interrupted { .. })),
        "{answer:?}"
    );
    // What the answer covers: a step back within the margin, the other
    // record collected, the lost create landing live, recovery making it.
    let age = RETRY_LEASE + RETRY_MARGIN;
    assert_eq!(r.worker.collect_garbage(age).await.unwrap(), 1);
    r.clock.rewind(Duration::from_millis(1500));
    deliver_the_lost_create(&r.faulty).await;
    r.clock.advance(Duration::from_secs(120));
    r.worker.run_once().await.unwrap();
    assert_eq!(balance(&r.store, "A").await, 85);
}

#[tokio::test]
async fn events_report_every_state_change() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let coordinator = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .on_event(move |e| sink.lock().unwrap().push(e.clone()))
        .build();
    coordinator.run(transfer("A", "B", 1)).await.unwrap();
    let moves: Vec<(TxState, TxState)> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            TxEvent::StateChanged { from, to, .. } => Some((*from, *to)),
            _ => None,
        })
        .collect();
    assert_eq!(
        moves,
        [
            (TxState::Pending, TxState::Applied),
            (TxState::Applied, TxState::Done)
        ]
    );
}

#[tokio::test]
async fn participants_in_a_named_store_take_part() {
    let (store, clock, _) = bank(&["A"], 1000).await;
    // Deadlines are set by the records' store and judged by each participant's:
    // their clocks must agree far closer than the lease.
    let other = MemoryStore::with_clock(clock);
    other
        .insert_one(&accounts(), doc! { "_id": "Z", "balance": 0_i64 })
        .await
        .unwrap();
    let coordinator = Coordinator::builder(store.clone())
        .store("ledger", other.clone())
        .commit_point(CommitPoint::Done)
        .build();
    let tx = Transaction::new()
        .change(DocumentChange::update(accounts(), "A").inc("balance", -7_i64))
        .change(
            DocumentChange::update(accounts(), "Z")
                .inc("balance", 7_i64)
                .in_store("ledger"),
        );
    coordinator.run(tx).await.unwrap();
    assert_eq!(balance(&store, "A").await, 993);
    let z = other
        .find_one(&accounts(), doc! { "_id": "Z" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(z.get("balance"), Some(&Bson::Int64(7)));
    assert!(store
        .find_one(&accounts(), doc! { "_id": "Z" })
        .await
        .unwrap()
        .is_none());
}

/// A transaction whose participant store stays down is claimed pass after
/// pass: its history keeps the newest 32 lines while `attempts` counts every
/// claim, and each claim after the first doubles its lease, up to eight times.
#[tokio::test]
async fn a_record_recovered_in_vain_stays_bounded_and_backs_off() {
    let (store, clock, _) = bank(&["A"], 1000).await;
    let down = FaultStore::new(Arc::new(store.clone()));
    let ledger = MemoryStore::with_clock(clock.clone());
    ledger
        .insert_one(&accounts(), doc! { "_id": "Z", "balance": 0_i64 })
        .await
        .unwrap();
    let ledger_down = FaultStore::new(Arc::new(ledger.clone()));
    let tx = Transaction::new()
        .change(DocumentChange::update(accounts(), "A").inc("balance", -7_i64))
        .change(
            DocumentChange::update(accounts(), "Z")
                .inc("balance", -7_i64)
                .in_store("ledger"),
        );
    // The coordinator dies after its applies (record, A; Z in the ledger):
    // committed at its applies; the ledger then stays down, so recovery
    // cannot tell that Z's apply landed.
    let dead = Coordinator::builder(down.crash_after(2))
        .store("ledger", ledger_down.clone())
        .commit_point(CommitPoint::Done)
        .build();
    assert!(dead.run(tx).await.is_ok());
    // Down once the recovering process has read its identity (a store it
    // cannot identify is passed over, not claimed).
    let ledger_down = ledger_down.clone().crash_after(ledger_down.ops() + 1);
    let coordinator = Coordinator::builder(store.clone())
        .store("ledger", ledger_down)
        .build();
    let worker = coordinator.recovery(RecoveryConfig::default());
    let mut leases = Vec::new();
    for pass in 0..40 {
        // The longest lease (8 x 30 s) and the clock margin pass each time.
        clock.advance(Duration::from_secs(8 * 30 + 3));
        let report = worker.run_once().await.unwrap();
        assert_eq!(
            (report.claimed, report.failed),
            (1, 1),
            "pass {pass}: {report:?}"
        );
        let record =
            tandem::TxRecord::from_document(store.documents(&records()).remove(0)).unwrap();
        leases.push(record.lease_millis / 1000);
        assert!(
            record.history.len() <= 32,
            "pass {pass}: {} lines",
            record.history.len()
        );
        assert_eq!(record.attempts, pass + 1);
    }
    assert_eq!(&leases[..5], &[30, 60, 120, 240, 240]);
}

/// An operator's cancel is no failed recovery attempt. Cancels of a
/// transaction that cannot be decided yet (its applies may still land)
/// leave its `attempts` as they were, so the lease recovery gives it when
/// it rolls it forward is its first attempts' (not eight times the lease,
/// which would keep it from every worker that long if that attempt failed).
#[tokio::test]
async fn cancels_do_not_back_off_recovery() {
    let (store, clock, seeded) = bank(&["A", "B"], 1000).await;
    let id = stuck_transfer(&store).await;
    let coordinator = done(&store);
    for n in 0..4 {
        let state = coordinator.cancel(&id, "operator request").await.unwrap();
        assert_eq!(state, TxState::Pending, "cancel {n}: undecided");
    }
    let record = coordinator.record(&id).await.unwrap().unwrap();
    assert_eq!(record.attempts, 0, "{record:?}");
    // The lease (30 s) and the clock margin (2 s) pass: nothing was applied.
    clock.advance(Duration::from_secs(33));
    let worker = coordinator.recovery(RecoveryConfig {
        pending: PendingPolicy::RollForward,
        ..RecoveryConfig::default()
    });
    let report = worker.run_once().await.unwrap();
    assert_eq!((report.claimed, report.committed), (1, 1), "{report:?}");
    let record = coordinator.record(&id).await.unwrap().unwrap();
    // Claimed to be probed, then again to roll forward: one attempt of
    // recovery (a pass counts once, whatever it claims), and the second
    // claim doubles the lease, once.
    assert_eq!(record.attempts, 1, "{record:?}");
    assert_eq!(record.lease_millis, 60_000, "{record:?}");
    assert_eq!(balance(&store, "A").await, 900);
    assert_eq!(balance(&store, "B").await, 1100);
    audit(&store, &records(), &seeded)
        .await
        .unwrap()
        .assert_clean();
}

/// Recovery pages past records it cannot act on yet (long leases), oldest
/// first, instead of looking at the oldest `batch` only: they used to starve
/// every record behind them.
#[tokio::test]
async fn recovery_is_not_starved_by_long_leases() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let stuck = |lease: u64| {
        let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(1);
        Coordinator::builder(faulty)
            .lease(Duration::from_secs(lease))
            .build()
    };
    for _ in 0..5 {
        let err = stuck(3600).run(transfer("A", "B", 1)).await.unwrap_err();
        assert!(matches!(err, TxError::Interrupted { .. }), "{err:?}");
    }
    clock.advance(Duration::from_secs(1));
    for _ in 0..3 {
        stuck(30).run(transfer("A", "B", 1)).await.unwrap_err();
    }
    clock.advance(Duration::from_secs(33));
    let worker = done(&store).recovery(RecoveryConfig {
        batch: 2,
        ..RecoveryConfig::default()
    });
    let first = worker.run_once().await.unwrap();
    assert_eq!((first.claimed, first.canceled), (2, 2), "{first:?}");
    let second = worker.run_once().await.unwrap();
    assert_eq!((second.claimed, second.canceled), (1, 1), "{second:?}");
    let pending = store
        .documents(&records())
        .into_iter()
        .filter(|d| d.get_str("state") == Ok("pending"))
        .count();
    assert_eq!(pending, 5, "the long leases still run");
}

/// A batch larger than a store's page limit can say (`usize::MAX`, the
/// largest `tandem recover --batch` takes) recovers and collects every
/// record due, as any large batch does: the page limit is an `i64`, and
/// the batch wrapped around to `-1`, a limit of one record, so a pass
/// claimed one record and ended its round, and a backlog grew by every
/// transaction abandoned but one per pass.
#[tokio::test]
async fn a_batch_past_what_a_page_limit_holds_takes_every_record_due() {
    let (store, clock, seeded) = bank(&["A", "B"], 1000).await;
    for _ in 0..3 {
        let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(1);
        let err = Coordinator::new(faulty)
            .run(transfer("A", "B", 1))
            .await
            .unwrap_err();
        assert!(matches!(err, TxError::Interrupted { .. }), "{err:?}");
    }
    clock.advance(Duration::from_secs(33));
    let worker = done(&store).recovery(RecoveryConfig {
        batch: usize::MAX,
        ..RecoveryConfig::default()
    });
    let report = worker.run_once().await.unwrap();
    assert_eq!((report.claimed, report.canceled), (3, 3), "{report:?}");
    clock.advance(Duration::from_secs(33));
    let worker = done(&store).recovery(RecoveryConfig {
        batch: usize::MAX,
        idempotency_window: Duration::ZERO,
        ..RecoveryConfig::default()
    });
    let removed = worker
        .collect_garbage(Duration::from_secs(32))
        .await
        .unwrap();
    assert_eq!(removed, 3);
    assert!(store.documents(&records()).is_empty());
    audit(&store, &records(), &seeded)
        .await
        .unwrap()
        .assert_clean();
}

/// Garbage collection pages past finished records it cannot rebuild (a kind
/// this process does not know), instead of stopping at them.
/// A record this process cannot drive (a participant kind it does not
/// know, or a document change in a store it does not have) is left
/// unclaimed, by recovery and by an operator's cancel alike: claiming it
/// would raise its epoch, its attempts and its back-off (fencing off its
/// owner) with nothing here able to drive it.
#[tokio::test]
async fn a_record_this_process_cannot_drive_is_not_claimed() {
    let (store, clock, _) = bank(&["A"], 1000).await;
    let participants = [
        doc! { "kind": "not-registered-here", "label": "x", "spec": {} },
        doc! { "kind": "document", "label": "remote/A", "spec": { "store": "remote" } },
    ];
    for (i, participant) in participants.iter().enumerate() {
        store
            .insert_one(
                &records(),
                doc! {
                    "_id": format!("foreign-{i}"), "state": "pending", "owner": "elsewhere",
                    "epoch": 0_i64, "leaseMillis": 30_000_i64, "attempts": 0, "history": [],
                    "participants": [participant.clone()],
                    "lastModified": bson::DateTime::from_millis(0),
                    "leaseStart": bson::DateTime::from_millis(0),
                },
            )
            .await
            .unwrap();
    }
    clock.advance(Duration::from_secs(3600));
    let coordinator = done(&store);
    let worker = coordinator.recovery(RecoveryConfig::default());
    let report = worker.run_once().await.unwrap();
    assert_eq!((report.claimed, report.failed), (0, 2), "{report:?}");
    let ids = [
        tandem::TxId::new("foreign-0").unwrap(),
        tandem::TxId::new("foreign-1").unwrap(),
    ];
    let refused = worker.cancel(&ids[0], "operator").await.unwrap_err();
    assert!(
        matches!(
            &refused,
            TxError::Invalid(ChangeError::UnknownKind { kind }) if kind == "not-registered-here"
        ),
        "{refused:?}"
    );
    let refused = worker.cancel(&ids[1], "operator").await.unwrap_err();
    assert!(
        matches!(
            &refused,
            TxError::Invalid(ChangeError::UnknownStore { store, .. }) if store == "remote"
        ),
        "{refused:?}"
    );
    for record in store.documents(&records()) {
        assert_eq!(record.get_i64("epoch"), Ok(0), "{record}");
        assert_eq!(record.get_i32("attempts"), Ok(0), "{record}");
    }
}

/// Found by an adversarial review: the records recovery cannot drive here
/// stayed in its scan's batch, never claimed, so their `lastModified` never
/// moved and every pass picked the same ones first: with a batch of 2, two
/// of them hid a stuck transfer for good. The scan pages past them now.
#[tokio::test]
async fn recovery_is_not_starved_by_records_it_cannot_drive() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    for i in 0..2 {
        stranger(
            &store,
            format!("foreign-{i}"),
            "pending",
            doc! { "kind": "document", "label": "remote/A", "spec": { "store": "remote" } },
            0,
        )
        .await;
    }
    clock.advance(Duration::from_secs(3600));
    // A transfer whose coordinator stops right after writing its record.
    let dying = FaultStore::new(Arc::new(store.clone())).crash_after(1);
    let err = Coordinator::builder(dying)
        .retry(tandem::RetryPolicy::NONE)
        .build()
        .run(transfer("A", "B", 10))
        .await
        .unwrap_err();
    let id = err.id().cloned().expect("an id");
    clock.advance(Duration::from_secs(3600));
    let coordinator = Coordinator::new(store.clone());
    let worker = coordinator.recovery(RecoveryConfig {
        batch: 2,
        ..RecoveryConfig::default()
    });
    let report = worker.run_once().await.unwrap();
    assert_eq!((report.failed, report.canceled), (2, 1), "{report:?}");
    let record = coordinator.record(&id).await.unwrap().unwrap();
    assert_eq!(record.state, TxState::Canceled);
}

/// More records this process cannot drive than one pass reads (16 pages
/// of `batch`): each pass went back to the oldest and read the same ones,
/// and the transfer behind them was never reached. A pass now goes on where
/// the last one stopped.
#[tokio::test]
async fn recovery_reaches_records_behind_more_pages_than_a_pass_reads() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    for i in 0..40 {
        stranger(
            &store,
            format!("foreign-{i:02}"),
            "pending",
            doc! { "kind": "document", "label": "remote/A", "spec": { "store": "remote" } },
            0,
        )
        .await;
    }
    clock.advance(Duration::from_secs(3600));
    let dying = FaultStore::new(Arc::new(store.clone())).crash_after(1);
    let err = Coordinator::builder(dying)
        .retry(tandem::RetryPolicy::NONE)
        .build()
        .run(transfer("A", "B", 10))
        .await
        .unwrap_err();
    let id = err.id().cloned().expect("an id");
    clock.advance(Duration::from_secs(3600));
    let coordinator = Coordinator::new(store.clone());
    let worker = coordinator.recovery(RecoveryConfig {
        batch: 2,
        ..RecoveryConfig::default()
    });
    assert!(worker.caught_up(), "a worker that has not run is caught up");
    let first = worker.run_once().await.unwrap();
    assert_eq!((first.failed, first.canceled), (32, 0), "{first:?}");
    assert!(
        !worker.caught_up(),
        "the first pass stopped at its page limit"
    );
    let second = worker.run_once().await.unwrap();
    assert_eq!((second.failed, second.canceled), (8, 1), "{second:?}");
    let record = coordinator.record(&id).await.unwrap().unwrap();
    assert_eq!(record.state, TxState::Canceled);
    assert_eq!(balance(&store, "A").await, 1000);
    // Read to the end: the next pass starts from the oldest again.
    let third = worker.run_once().await.unwrap();
    assert_eq!(third.failed, 32, "{third:?}");
}

/// A hand-written participant whose undo always fails (its service is
/// down).
#[derive(Debug)]
struct Uncompensating;

#[async_trait::async_trait]
impl tandem::Participant for Uncompensating {
    fn kind(&self) -> &str {
        "test.uncompensating"
    }
    fn spec(&self) -> Result<bson::Document, ChangeError> {
        Ok(doc! {})
    }
    fn label(&self) -> String {
        "uncompensating".into()
    }
    async fn apply(&self, _: StepContext<'_>) -> Result<(), StepError> {
        Ok(())
    }
    async fn compensate(&self, _: StepContext<'_>) -> Result<(), StepError> {
        Err(StepError::Store {
            participant: self.label(),
            source: tandem::StoreError::new(tandem::StoreErrorKind::Unavailable, "service down"),
        })
    }
    async fn clear_marker(&self, _: StepContext<'_>) -> Result<(), StepError> {
        Ok(())
    }
}

/// Found by an adversarial review of the resuming scan: a pass passed a
/// transfer while its lease still ran; records that kept failing were due
/// again whenever the cursor came to them, so every pass filled its batch,
/// no pass reached the end, and the transfer, behind the cursor, was never
/// looked at again (nor did `tandem recover`'s loop end). A round of passes
/// now reads only the records changed before it started, so it ends.
#[tokio::test]
async fn a_record_passed_before_it_was_due_is_recovered_in_the_next_round() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    for i in 1..=3 {
        stranger(
            &store,
            format!("stuck-{i}"),
            "canceling",
            doc! { "kind": "test.uncompensating", "label": "uncompensating", "spec": {} },
            i,
        )
        .await;
    }
    clock.advance(Duration::from_secs(3600));
    // A transfer whose coordinator, with a lease of an hour, stops right
    // after writing its record.
    let dying = FaultStore::new(Arc::new(store.clone())).crash_after(1);
    let err = Coordinator::builder(dying)
        .lease(Duration::from_secs(3600))
        .retry(tandem::RetryPolicy::NONE)
        .build()
        .run(transfer("A", "B", 10))
        .await
        .unwrap_err();
    let id = err.id().cloned().expect("an id");
    let coordinator = Coordinator::builder(store.clone())
        .kind("test.uncompensating", |_| Ok(Box::new(Uncompensating)))
        .build();
    let worker = coordinator.recovery(RecoveryConfig {
        batch: 2,
        ..RecoveryConfig::default()
    });
    let mut rounds_ended = 0;
    for _ in 0..40 {
        clock.advance(Duration::from_secs(300));
        let report = worker.run_once().await.unwrap();
        assert!(report.claimed <= 2, "{report:?}");
        rounds_ended += usize::from(worker.caught_up());
    }
    let record = coordinator.record(&id).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        TxState::Canceled,
        "the transfer, due from the 12th pass, is recovered"
    );
    assert_eq!(balance(&store, "A").await, 1000);
    assert!(
        rounds_ended >= 10,
        "rounds end: {rounds_ended} of 40 passes"
    );
}

/// A hand-written participant whose `forget` always fails (its service is
/// gone).
#[derive(Debug)]
struct Unforgetting;

#[async_trait::async_trait]
impl tandem::Participant for Unforgetting {
    fn kind(&self) -> &str {
        "test.unforgetting"
    }
    fn spec(&self) -> Result<bson::Document, ChangeError> {
        Ok(doc! {})
    }
    fn label(&self) -> String {
        "unforgetting".into()
    }
    async fn apply(&self, _: StepContext<'_>) -> Result<(), StepError> {
        Ok(())
    }
    async fn compensate(&self, _: StepContext<'_>) -> Result<(), StepError> {
        Ok(())
    }
    async fn clear_marker(&self, _: StepContext<'_>) -> Result<(), StepError> {
        Ok(())
    }
    async fn forget(&self, _: StepContext<'_>) -> Result<(), StepError> {
        Err(StepError::Store {
            participant: self.label(),
            source: tandem::StoreError::new(tandem::StoreErrorKind::Unavailable, "service down"),
        })
    }
}

/// Finished records whose `forget` fails keep their place, oldest first:
/// a batch of them took every collection's batch, and nothing behind them
/// was ever collected. A collection now goes on where the last one stopped.
#[tokio::test]
async fn garbage_collection_is_not_starved_by_records_whose_forget_fails() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    for i in 0..2 {
        stranger(
            &store,
            format!("unforgetting-{i}"),
            "done",
            doc! { "kind": "test.unforgetting", "label": "unforgetting", "spec": {} },
            0,
        )
        .await;
    }
    let coordinator = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .kind("test.unforgetting", |_| Ok(Box::new(Unforgetting)))
        .build();
    let receipt = coordinator.run(transfer("A", "B", 1)).await.unwrap();
    let worker = coordinator.recovery(RecoveryConfig {
        batch: 2,
        ..RecoveryConfig::default()
    });
    clock.advance(Duration::from_secs(3601));
    let older_than = Duration::from_secs(3600);
    assert_eq!(worker.collect_garbage(older_than).await.unwrap(), 0);
    assert!(!worker.caught_up(), "stopped after a full batch");
    assert_eq!(worker.collect_garbage(older_than).await.unwrap(), 1);
    assert!(coordinator.record(&receipt.id).await.unwrap().is_none());
    assert!(worker.caught_up());
    assert_eq!(
        store.documents(&records()).len(),
        2,
        "the records whose forget fails stay"
    );
}

#[tokio::test]
async fn garbage_collection_is_not_starved_by_unknown_kinds() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    for i in 0..3 {
        stranger(
            &store,
            format!("foreign-{i}"),
            "done",
            doc! { "kind": "not-registered-here", "label": "x", "spec": {} },
            0,
        )
        .await;
    }
    let coordinator = done(&store);
    for _ in 0..2 {
        coordinator.run(transfer("A", "B", 1)).await.unwrap();
    }
    clock.advance(Duration::from_secs(3601));
    let worker = coordinator.recovery(RecoveryConfig {
        batch: 2,
        ..RecoveryConfig::default()
    });
    assert_eq!(
        worker
            .collect_garbage(Duration::from_secs(3600))
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store.documents(&records()).len(),
        3,
        "the foreign records stay"
    );
}

/// Leaves account A as an apply of a debit of 100 under `marker` leaves it:
/// the marker pushed, the pending count raised, the balance debited.
async fn debit_as_applied(store: &tandem::MemoryStore, marker: &tandem::TxId) {
    store
        .update_one(
            &accounts(),
            doc! { "_id": "A" },
            doc! {
                "$push": { "pendingTransactions": marker.as_str() },
                "$set": { "_tandem.pending": 1_i32 },
                "$inc": { "balance": -100_i64 },
            },
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
}

/// An apply that comes after its deadline does not take a marker it finds
/// for its own: a later epoch of recovery, rolling the transaction forward
/// after it found this epoch's applies missing, may have pushed it, and may
/// still cancel. Before, the apply answered `Ok` on any marker it found, so a
/// stalled coordinator could answer committed for a transaction that
/// recovery was canceling (a counterexample of the model, 23 steps). Before
/// the deadline, the marker is still its own.
#[tokio::test]
async fn an_apply_after_its_deadline_does_not_take_a_marker_for_its_own() {
    let (store, clock, _) = bank(&["A"], 1000).await;
    let id = tandem::TxId::new("late").unwrap();
    let marker = id.marker(Some("tag"));
    debit_as_applied(&store, &marker).await;
    let stores = tandem::Stores::new(Arc::new(store.clone()));
    let change = DocumentChange::update(accounts(), "A").inc("balance", -100_i64);
    let apply = |deadline| {
        let change = change.clone();
        let stores = &stores;
        let id = &id;
        let marker = &marker;
        async move {
            tandem::Participant::apply(
                &change,
                StepContext {
                    tx: id,
                    marker,
                    epoch: 0,
                    deadline: Some(deadline),
                    not_before: None,
                    before: None,
                    stores,
                    lease: std::time::Duration::from_secs(30),
                },
            )
            .await
        }
    };
    let now = tandem::Clock::now(clock.as_ref());
    let later = bson::DateTime::from_millis(now.timestamp_millis() + 1_000);
    apply(later)
        .await
        .expect("before the deadline, the marker is its own");
    clock.advance(Duration::from_secs(2));
    let err = apply(later).await.unwrap_err();
    assert!(matches!(err, StepError::Expired { .. }), "{err:?}");
    assert_eq!(balance(&store, "A").await, 900, "applied once");
}

/// Recovery's question, "did this apply land?", asked while the store's
/// clock is just short of the fence: the first read (marker and fence in one
/// filter) finds nothing, the clock then reads past the fence, and steps
/// back within the margin before the second read. The marker is there, so
/// the answer must be yes: a second read under the fence again would find
/// nothing, and recovery would roll back a transaction its coordinator
/// answered committed.
#[tokio::test]
async fn a_probe_finds_a_marker_that_is_there_when_the_clock_steps_back() {
    let (store, clock, _) = bank(&["A"], 1000).await;
    let id = tandem::TxId::new("probed").unwrap();
    let marker = id.marker(Some("tag"));
    debit_as_applied(&store, &marker).await;
    let fault = tandem::testing::FaultStore::new(Arc::new(store.clone()));
    let stores = tandem::Stores::new(Arc::new(fault.clone()));
    let change = DocumentChange::update(accounts(), "A").inc("balance", -100_i64);
    let now = tandem::Clock::now(clock.as_ref());
    let fence = bson::DateTime::from_millis(now.timestamp_millis() + 5);
    // Operation 1: the first read, 5 ms short of the fence; 2: the clock
    // read, once moved 10 ms on; 3: the second read, after a step back of 50 ms.
    let clock_read = fault.pause_at(2);
    let probe = tandem::Participant::applied(
        &change,
        StepContext {
            tx: &id,
            marker: &marker,
            epoch: 1,
            deadline: Some(now),
            not_before: Some(fence),
            before: None,
            stores: &stores,
            lease: std::time::Duration::from_secs(30),
        },
    );
    let steps = async {
        clock_read.reached.await.expect("the probe reads the clock");
        clock.advance(Duration::from_millis(10));
        let second_read = fault.pause_at(3);
        clock_read.release.send(()).unwrap();
        second_read.reached.await.expect("the probe reads again");
        clock.rewind(Duration::from_millis(50));
        second_read.release.send(()).unwrap();
    };
    let (answer, ()) = tokio::join!(probe, steps);
    assert!(answer.expect("the probe answers"), "the marker is there");
}

/// With early commit off (for recovery workers of a version that roll a
/// `pending` record back without asking), the commit point is the record's
/// move to `applied`: three round trips, and the record says so.
#[tokio::test]
async fn early_commit_can_be_turned_off() {
    let (store, _, seeded) = bank(&["A", "B"], 1000).await;
    let coordinator = Coordinator::builder(store.clone())
        .early_commit(false)
        .build();
    let receipt = coordinator.run(transfer("A", "B", 10)).await.unwrap();
    assert_eq!(receipt.round_trips, 3, "create (pending), apply, applied");
    let record = coordinator.record(&receipt.id).await.unwrap().unwrap();
    assert!(!record.early_commit);
    assert_ne!(record.state, TxState::Pending, "moved before the answer");
    coordinator.drain().await;
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), 1);
}

/// A one-time bonus: paid from A to B only while B has no `bonus` yet.
fn grant_bonus() -> Transaction {
    Transaction::new()
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(
            DocumentChange::update(accounts(), "B")
                .inc("bonus", 10_i64)
                .require_missing("bonus"),
        )
}

/// A `require_missing` guard shared its document with increments, like a
/// lower bound. But a credit to a shared document is deferred to the clear
/// after the commit, and a deferred credit to a missing field creates it
/// when it lands: the guard is not monotone under it (found by an
/// adversarial review; a "missing" guard now holds its document alone). Here the first grant is answered committed (at its applies); its
/// clear, which lands the credit, has not run yet when the second grant
/// starts. In the serial order the answers imply (first, then second) the
/// second's guard `bonus is missing` is false, so it must be refused; it is
/// admitted, and the bonus is paid twice.
#[tokio::test]
async fn a_missing_guard_sees_a_committed_credit_still_to_land() {
    let (store, _clock, seeded) = bank(&["A", "B"], 1000).await;
    // The first coordinator's finisher is held before its first operation
    // after the applies (1: the record; 2, 3: the applies, one request
    // each through the wrapper; 4: the move to `applied`), as a busy
    // finisher or a slow store would hold it.
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let finisher = faulty.pause_at(4);
    let first = Coordinator::new(faulty);
    let receipt = first
        .run(grant_bonus())
        .await
        .expect("the first grant commits");
    assert_eq!(receipt.state, TxState::Applied, "committed at its applies");
    finisher.reached.await.expect("the finisher starts");

    // Strictly after the first grant was answered committed.
    let second = Coordinator::new(store.clone());
    let again = second.run(grant_bonus()).await;

    finisher.release.send(()).unwrap();
    first.drain().await;
    second.drain().await;
    let b = get(&store, &accounts(), "B").await.unwrap();
    // Refused: B is held by the first grant until its finisher clears it
    // (or, once cleared, the bonus is there).
    assert!(
        matches!(
            again,
            Err(TxError::Canceled {
                cause: StepError::GuardFailed { .. } | StepError::Conflict { .. },
                ..
            })
        ),
        "the second grant must be refused: B's bonus was committed before it began; \
         got {again:?}, and B ends {b}"
    );
    assert_eq!(b.get_i64("bonus").ok(), Some(10), "paid once: {b}");
    assert_eq!(balance(&store, "A").await, 990);
    audit(&store, &records(), &seeded)
        .await
        .unwrap()
        .assert_clean();
}

/// A transfer from A to B, and a fee of 1 from A to F, A's debit through the
/// store name "main" (the default store under a second name).
fn a_fee_through_main() -> Transaction {
    transfer("A", "B", 100)
        .change(
            DocumentChange::update(accounts(), "A")
                .in_store("main")
                .inc("balance", -1_i64)
                .require_gte("balance", 1_i64),
        )
        .change(DocumentChange::update(accounts(), "F").inc("balance", 1_i64))
}

/// A transaction may not name one document twice (the second change would
/// find the first's marker and take it for its own apply). The check keys a
/// document by store *name*, namespace and `_id`; one database registered
/// under two names (the default store, and the same client as a named
/// store for changes that say `in_store`) names one document twice
/// unnoticed. Whichever of A's two debits applied second met the other's
/// marker on A (the same marker: one transaction) and answered "applied
/// already": the transaction committed with one of A's debits never made
/// (here the transfer's 100), and the money was created (found by an
/// adversarial review). The second change now carries a marker of its own.
#[tokio::test]
async fn one_database_under_two_store_names_names_a_document_twice() {
    let (store, _clock, seeded) = bank(&["A", "B", "F"], 1000).await;
    let coordinator = Coordinator::builder(store.clone())
        .store("main", store.clone())
        .build();
    let result = coordinator.run(a_fee_through_main()).await;
    coordinator.drain().await;
    // The record keeps the second change's own marker, for recovery.
    let id = result.as_ref().expect("committed").id.clone();
    let record = coordinator.record(&id).await.unwrap().expect("the record");
    let own: Vec<Option<&str>> = record
        .participants
        .iter()
        .map(|p| p.marker.as_deref())
        .collect();
    let expected = format!("{}/2", record.marker().as_str());
    assert_eq!(own, [None, None, Some(expected.as_str()), None]);
    let total =
        balance(&store, "A").await + balance(&store, "B").await + balance(&store, "F").await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(balance(&store, "A").await, 899, "both debits of A landed");
    assert!(
        result.is_err() || total == 3000,
        "committed ({result:?}) with A {}, B {}, F {}: {} created",
        balance(&store, "A").await,
        balance(&store, "B").await,
        balance(&store, "F").await,
        total - 3000
    );
    audit(&store, &records(), &seeded)
        .await
        .unwrap()
        .assert_clean();
}

/// A transaction that changes one document alone and also shares it,
/// through two store names of one database, conflicts with itself: it is
/// refused at once, naming itself, under `ConflictPolicy::Wait` too, which
/// waited its whole timeout for itself (found by an adversarial review). The
/// store sees the same commands as under `Fail`.
#[tokio::test]
async fn a_transaction_holding_a_document_itself_does_not_wait_for_itself() {
    let mut commands = Vec::new();
    for policy in [
        ConflictPolicy::Fail,
        ConflictPolicy::Wait {
            timeout: Duration::from_secs(30),
        },
    ] {
        let (store, _clock, seeded) = bank(&["A", "B"], 1000).await;
        let coordinator = Coordinator::builder(store.clone())
            .store("main", store.clone())
            .conflict(policy)
            .build();
        let before = store.command_count();
        let result = coordinator
            .run(
                Transaction::new()
                    .change(DocumentChange::update(accounts(), "A").set("tier", "gold"))
                    .change(
                        DocumentChange::update(accounts(), "A")
                            .in_store("main")
                            .inc("balance", -1_i64)
                            .require_gte("balance", 1_i64),
                    )
                    .change(DocumentChange::update(accounts(), "B").inc("balance", 1_i64)),
            )
            .await;
        coordinator.drain().await;
        let id = result.as_ref().err().and_then(|e| e.id()).cloned();
        assert!(
            matches!(&result, Err(TxError::Canceled { cause: StepError::Conflict { holder, .. }, .. })
                if Some(holder.as_str()) == id.as_ref().map(|i| i.as_str())),
            "{policy:?}: {result:?}"
        );
        commands.push(store.command_count() - before);
        audit(&store, &records(), &seeded)
            .await
            .unwrap()
            .assert_clean();
    }
    assert_eq!(commands[0], commands[1], "Fail, then Wait");
}

/// The same transaction, its coordinator dying after the record, after
/// some or after all of the applies: recovery rebuilds each change's own
/// marker from the record, probes for it, and finishes the transaction one
/// way or the other, with both of A's debits or neither.
#[tokio::test]
async fn recovery_rebuilds_the_own_marker_of_a_document_named_twice() {
    for operations in 1..=4 {
        let (store, clock, seeded) = bank(&["A", "B", "F"], 1000).await;
        let dying = FaultStore::new(Arc::new(store.clone())).crash_after(operations);
        let coordinator = Coordinator::builder(dying.clone())
            .store("main", dying)
            .retry(tandem::RetryPolicy::NONE)
            .build();
        let _ = coordinator.run(a_fee_through_main()).await;
        clock.advance(Duration::from_secs(120));
        let recovered = Coordinator::builder(store.clone())
            .store("main", store.clone())
            .build();
        let worker = recovered.recovery(RecoveryConfig::default());
        // A pass may leave a record waiting for a fence: a few passes, the
        // clock moved on between them.
        for _ in 0..4 {
            worker.run_once().await.unwrap();
            clock.advance(Duration::from_secs(120));
        }
        let audit = audit(&store, &records(), &seeded).await.unwrap();
        audit.assert_clean();
        let (a, b, f) = (
            balance(&store, "A").await,
            balance(&store, "B").await,
            balance(&store, "F").await,
        );
        assert_eq!(a + b + f, 3000, "after {operations} operations");
        let committed = audit.count(TxState::Done) == 1;
        assert_eq!(
            (a, b, f),
            if committed {
                (899, 1100, 1001)
            } else {
                (1000, 1000, 1000)
            },
            "after {operations} operations, committed: {committed}"
        );
    }
}

/// A transaction that is canceled must leave every document as it found
/// it. A `set` of a field whose parent is missing creates the parent; the
/// undo restores the before-image, "missing", with an `$unset` of the
/// field, which leaves the parent behind as an empty document. A `set` past
/// the end of an array pads it with nulls; the undo's `$unset` of the
/// element leaves a null in its place (as MongoDB does, and the embedded
/// store with it), and the padding stayed (found by an adversarial review).
/// The image is now taken where the change creates more than its field:
/// the missing parent, the padded array.
#[tokio::test]
async fn a_canceled_set_leaves_no_parent_and_no_padding_behind() {
    let (store, _clock, seeded) = bank(&["A"], 100).await;
    let orders = tandem::Namespace::new("shop", "orders");
    let order = bson::doc! { "_id": "o1", "state": "UnPaid", "tags": ["new"] };
    tandem::Store::insert_one(&store, &orders, order.clone())
        .await
        .unwrap();
    let coordinator = Coordinator::new(store.clone());
    let refused = coordinator
        .run(
            Transaction::new()
                .change(
                    DocumentChange::update(orders.clone(), "o1")
                        .set("shipping.carrier", "UPS")
                        .set("tags.3", "gift"),
                )
                // Refused: A holds 100. The order's change is undone.
                .change(
                    DocumentChange::update(accounts(), "A")
                        .inc("balance", -500_i64)
                        .require_gte("balance", 500_i64),
                ),
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(TxError::Canceled {
                cause: StepError::GuardFailed { .. },
                ..
            })
        ),
        "{refused:?}"
    );
    coordinator.drain().await;
    let after = get(&store, &orders, "o1").await.unwrap();
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Canceled), 1);
    assert!(
        audit.records[0].conflicts().is_empty(),
        "nobody else wrote the order: {:?}",
        audit.records[0].conflicts()
    );
    assert!(
        after.get("shipping").is_none(),
        "the canceled transaction left `shipping` behind: {after}"
    );
    assert_eq!(
        after.get_array("tags").unwrap(),
        order.get_array("tags").unwrap(),
        "the canceled transaction left the array padded: {after}"
    );

    // An `unset` of an array's element leaves a null in its place: undone,
    // the element is back, and no outside write is reported.
    tandem::Store::insert_one(
        &store,
        &orders,
        bson::doc! { "_id": "o2", "tags": ["a", "b", "c"] },
    )
    .await
    .unwrap();
    let refused = coordinator
        .run(
            Transaction::new()
                .change(DocumentChange::update(orders.clone(), "o2").unset("tags.1"))
                .change(
                    DocumentChange::update(accounts(), "A")
                        .inc("balance", -500_i64)
                        .require_gte("balance", 500_i64),
                ),
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");
    coordinator.drain().await;
    let o2 = get(&store, &orders, "o2").await.unwrap();
    assert_eq!(
        o2.get_array("tags").unwrap(),
        &vec![Bson::from("a"), Bson::from("b"), Bson::from("c")],
        "{o2}"
    );
    let audit = tandem::testing::audit(&store, &records(), &seeded)
        .await
        .unwrap();
    audit.assert_clean();
    assert!(
        audit.records.iter().all(|r| r.conflicts().is_empty()),
        "nobody else wrote the orders"
    );

    // An increment under the parent a `set` creates has an undo of its own:
    // the image stays at the set's field (the parent, emptied, stays).
    let refused = coordinator
        .run(
            Transaction::new()
                .change(
                    DocumentChange::update(orders.clone(), "o2")
                        .set("stats.last", "x")
                        .inc("stats.count", 1_i64),
                )
                .change(
                    DocumentChange::update(accounts(), "A")
                        .inc("balance", -500_i64)
                        .require_gte("balance", 500_i64),
                ),
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");
    coordinator.drain().await;
    let o2 = get(&store, &orders, "o2").await.unwrap();
    let stats = o2.get_document("stats").map(|s| s.len()).unwrap_or(0);
    assert!(
        o2.get("stats").is_none()
            || (stats == 1 && o2.get_document("stats").unwrap().get("count").is_some()),
        "undone, the count at 0 at most: {o2}"
    );
    tandem::testing::audit(&store, &records(), &seeded)
        .await
        .unwrap()
        .assert_clean();
}

/// A record an earlier version wrote, of a change guarded by "missing" that
/// shared its document then (its credit deferred to the clear, no lock), is
/// finished as it was applied: its spec says nothing of holding the
/// document alone, and the change read back shares it. Worked out again
/// under today's rule, the credit counted as landed at apply: committed, B
/// never got it, and the pending sum stayed for good (found by an
/// adversarial review of the change that made "missing" exclusive).
#[tokio::test]
async fn a_newer_recovery_finishes_an_older_versions_missing_guard_credit() {
    for point in [CommitPoint::Applied, CommitPoint::Done] {
        let (store, clock, seeded) = bank(&["A", "B"], 1000).await;
        // The record and both applies; then the coordinator dies.
        let dying = FaultStore::new(Arc::new(store.clone())).crash_after(3);
        let coordinator = Coordinator::builder(dying)
            .commit_point(point)
            .retry(tandem::RetryPolicy::NONE)
            .build();
        let answer = coordinator.run(grant_bonus()).await;
        let id = match &answer {
            Ok(receipt) => receipt.id.clone(),
            Err(e) => e.id().cloned().expect("an id"),
        };
        // The record and B as the earlier version wrote them: no
        // `missingHeldAlone` in the spec; the credit deferred, not held;
        // and (older still) no room reserved for the clear and no count of
        // the marker by its field.
        store
            .update_one(
                &records(),
                doc! { "_id": id.as_str() },
                doc! { "$unset": {
                    "participants.1.spec.missingHeldAlone": "",
                    "participants.1.spec.reservesRoom": "",
                    "participants.1.spec.countsMarks": "",
                } },
                tandem::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
        let b = get(&store, &accounts(), "B").await.unwrap();
        let marker = b.get_array("pendingTransactions").unwrap()[0].clone();
        store
            .replace_one(
                &accounts(),
                doc! { "_id": "B" },
                doc! {
                    "_id": "B", "balance": 1000_i64, "pendingTransactions": [marker],
                    "_tandem": { "credit": { "bonus": 10_i64 }, "pending": 1 },
                },
            )
            .await
            .unwrap();

        clock.advance(Duration::from_secs(120));
        let recovered = Coordinator::new(store.clone());
        let worker = recovered.recovery(RecoveryConfig::default());
        for _ in 0..4 {
            worker.run_once().await.unwrap();
            clock.advance(Duration::from_secs(120));
        }
        let audit = audit(&store, &records(), &seeded).await.unwrap();
        let committed = audit.count(TxState::Done) == 1;
        let a = balance(&store, "A").await;
        let b = get(&store, &accounts(), "B").await.unwrap();
        let bonus = b.get_i64("bonus").ok();
        assert_eq!(
            (a, bonus),
            if committed {
                (990, Some(10))
            } else {
                (1000, None)
            },
            "{point:?}: answered {answer:?}, committed: {committed}; A {a}, B {b}"
        );
        audit.assert_clean();
    }
}

/// The same through another marker field: the conflict names no one
/// ("pending under another marker field"), and the transaction still does
/// not wait for itself.
#[tokio::test(start_paused = true)]
async fn wait_does_not_wait_for_its_own_hold_under_another_marker_field() {
    use std::time::Duration;
    let mut elapsed = Vec::new();
    for policy in [
        ConflictPolicy::Fail,
        ConflictPolicy::Wait {
            timeout: Duration::from_secs(30),
        },
    ] {
        let (store, _clock, _) = bank(&["A", "B"], 1000).await;
        let coordinator = Coordinator::builder(store.clone())
            .store("main", store.clone())
            .conflict(policy)
            .build();
        let started = tokio::time::Instant::now();
        let result = coordinator
            .run(
                Transaction::new()
                    .change(
                        DocumentChange::update(accounts(), "A")
                            .in_store("main")
                            .marker("otherPending")
                            .inc("balance", -1_i64)
                            .require_gte("balance", 1_i64),
                    )
                    .change(DocumentChange::update(accounts(), "A").set("tier", "gold"))
                    .change(DocumentChange::update(accounts(), "B").inc("balance", 1_i64)),
            )
            .await;
        coordinator.drain().await;
        elapsed.push((policy, started.elapsed(), format!("{result:?}")));
    }
    assert!(
        elapsed.iter().all(|(_, e, _)| *e < Duration::from_secs(5)),
        "{elapsed:#?}"
    );
}

/// A hand-written participant whose undo, clear and forget panic.
#[derive(Debug)]
struct Panicking;

#[async_trait::async_trait]
impl tandem::Participant for Panicking {
    fn kind(&self) -> &str {
        "test.panicking"
    }
    fn spec(&self) -> Result<bson::Document, ChangeError> {
        Ok(doc! {})
    }
    fn label(&self) -> String {
        "panicking".into()
    }
    async fn apply(&self, _: StepContext<'_>) -> Result<(), StepError> {
        Ok(())
    }
    async fn compensate(&self, _: StepContext<'_>) -> Result<(), StepError> {
        panic!("a hand-written participant's undo panics")
    }
    async fn clear_marker(&self, _: StepContext<'_>) -> Result<(), StepError> {
        panic!("a hand-written participant's clear panics")
    }
    async fn forget(&self, _: StepContext<'_>) -> Result<(), StepError> {
        panic!("a hand-written participant's forget panics")
    }
}

/// A recovery worker told to stop while its pass waits on a store that
/// does not answer stops. `run_until` watched its shutdown only between
/// passes, so a hung store kept the worker, and whoever awaited it on the
/// way out of the process, from ever stopping.
#[tokio::test(start_paused = true)]
async fn a_worker_stops_on_shutdown_while_its_store_hangs() {
    let (store, _clock, _) = bank(&["A", "B"], 1000).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    // The pass's first store call (reading the clock) never answers.
    let pause = faulty.pause_at(1);
    let coordinator = Coordinator::builder(faulty).build();
    let worker = coordinator.recovery(RecoveryConfig::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(async move {
        worker
            .run_until(async {
                let _ = stopped.await;
            })
            .await
    });
    pause.reached.await.expect("the pass reaches the store");
    stop.send(()).expect("the worker is still running");
    // With time paused, the runtime moves the clock on to the timeout
    // at once if the worker cannot return: a failure, not a wait.
    let report = tokio::time::timeout(Duration::from_secs(3600), run)
        .await
        .expect("run_until returns once its shutdown completes, mid-pass")
        .expect("the worker's task ends without a panic");
    assert_eq!(report, tandem::RecoveryReport::default());
    drop(pause.release);
}

/// A panic in a hand-written participant's step during a recovery pass
/// (its undo of a `canceling` record, its clear of an `applied` one) fails
/// that record, as a store failure does, and the pass goes on with the
/// others, as the background finisher's rounds do. It took the whole pass
/// down: `run_once` panicked, a transfer stuck beside it was dropped half
/// driven (claimed and left), and `run_until`'s task ended, so that
/// recovery stopped for every transaction, and started again it met the
/// same record first.
#[tokio::test]
async fn a_panicking_participant_fails_its_record_not_the_recovery_pass() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    for (i, state) in ["canceling", "applied"].into_iter().enumerate() {
        stranger(
            &store,
            format!("poisoned-{i}"),
            state,
            doc! { "kind": "test.panicking", "label": "panicking", "spec": {} },
            0,
        )
        .await;
    }
    let transfer_id = stuck_transfer(&store).await;
    clock.advance(Duration::from_secs(33));
    let coordinator = Coordinator::builder(store.clone())
        .kind("test.panicking", |_| {
            Ok(Box::new(Panicking) as Box<dyn tandem::Participant>)
        })
        .build();
    let worker = coordinator.recovery(RecoveryConfig::default());
    let pass = tokio::spawn(async move { worker.run_once().await });
    let report = pass
        .await
        .expect("the pass goes on past a participant that panics")
        .unwrap();
    assert_eq!(
        (report.claimed, report.failed, report.canceled),
        (3, 2, 1),
        "{report:?}"
    );
    let record = coordinator.record(&transfer_id).await.unwrap().unwrap();
    assert_eq!(record.state, TxState::Canceled);
    assert_eq!(balance(&store, "A").await, 1000);
    assert_eq!(balance(&store, "B").await, 1000);
    for (i, state) in [TxState::Canceling, TxState::Applied]
        .into_iter()
        .enumerate()
    {
        let id = TxId::new(format!("poisoned-{i}")).unwrap();
        let record = coordinator.record(&id).await.unwrap().unwrap();
        assert_eq!((record.state, record.epoch), (state, 1), "{record:?}");
    }
}

/// Garbage collection keeps a record whose hand-written participant's
/// `forget` panics, as one whose `forget` fails, and collects the others:
/// the panic took the whole collection down.
#[tokio::test]
async fn a_panicking_forget_keeps_its_record_not_the_collection() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    stranger(
        &store,
        "poisoned".into(),
        "done",
        doc! { "kind": "test.panicking", "label": "panicking", "spec": {} },
        0,
    )
    .await;
    let coordinator = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .kind("test.panicking", |_| {
            Ok(Box::new(Panicking) as Box<dyn tandem::Participant>)
        })
        .build();
    let receipt = coordinator.run(transfer("A", "B", 10)).await.unwrap();
    clock.advance(Duration::from_secs(40));
    let worker = coordinator.recovery(RecoveryConfig::default());
    let collection =
        tokio::spawn(async move { worker.collect_garbage(Duration::from_secs(32)).await });
    let removed = collection
        .await
        .expect("the collection goes on past a participant that panics")
        .unwrap();
    assert_eq!(removed, 1);
    assert!(coordinator.record(&receipt.id).await.unwrap().is_none());
    let kept = coordinator
        .record(&TxId::new("poisoned").unwrap())
        .await
        .unwrap();
    assert!(kept.is_some());
}

/// Garbage collection passes over a record whose kind's factory panics,
/// as over one it refuses, and collects the others: the panic took the
/// whole collection down.
#[tokio::test]
async fn a_panicking_kind_factory_keeps_its_record_not_the_collection() {
    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    stranger(
        &store,
        "poisoned".into(),
        "done",
        doc! { "kind": "test.unbuildable", "label": "unbuildable", "spec": {} },
        0,
    )
    .await;
    let coordinator = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .kind(
            "test.unbuildable",
            |_| -> Result<Box<dyn tandem::Participant>, ChangeError> {
                panic!("a kind's factory panics")
            },
        )
        .build();
    let receipt = coordinator.run(transfer("A", "B", 10)).await.unwrap();
    clock.advance(Duration::from_secs(40));
    let worker = coordinator.recovery(RecoveryConfig::default());
    let collection =
        tokio::spawn(async move { worker.collect_garbage(Duration::from_secs(32)).await });
    let removed = collection
        .await
        .expect("the collection goes on past a kind that panics")
        .unwrap();
    assert_eq!(removed, 1);
    assert!(coordinator.record(&receipt.id).await.unwrap().is_none());
    let kept = coordinator
        .record(&TxId::new("poisoned").unwrap())
        .await
        .unwrap();
    assert!(kept.is_some());
}
