//! A refusal names the participant it came from: its place in the
//! transaction, its document, and the `#[participant]` struct it was
//! declared from, on both strategies.

use bson::doc;
use serde::{Deserialize, Serialize};
use tandem::{
    participant, CommitPoint, Coordinator, MemoryStore, Namespace, StepError, Store, Strategy,
    Transaction, TxError,
};

#[participant(collection = "stock")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Stock {
    #[serde(rename = "_id")]
    sku: String,
    available: i64,
}

#[participant(collection = "coupons")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Coupon {
    #[serde(rename = "_id")]
    code: String,
    used: bool,
}

async fn shop() -> MemoryStore {
    let store = MemoryStore::new();
    store
        .insert_one(
            &Namespace::new("shop", "stock"),
            doc! { "_id": "kayak", "available": 3_i64 },
        )
        .await
        .unwrap();
    store
        .insert_one(
            &Namespace::new("shop", "coupons"),
            doc! { "_id": "SPRING", "used": true },
        )
        .await
        .unwrap();
    store
}

fn checkout() -> Transaction {
    Transaction::new()
        .change(
            Stock::change("kayak")
                .inc_available(-1)
                .require_available_gte(1),
        )
        .change(
            Coupon::change("SPRING")
                .set_used(true)
                .require_used_eq(false),
        )
}

#[tokio::test]
async fn a_refusal_names_its_participant_on_both_strategies() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let store = shop().await;
        let coordinator = Coordinator::builder(store.clone())
            .database("shop")
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build();
        let err = coordinator.run(checkout()).await.unwrap_err();
        assert!(
            matches!(
                &err,
                TxError::Canceled {
                    cause: StepError::GuardFailed { .. },
                    ..
                }
            ),
            "{strategy:?}: {err:?}"
        );
        let by = err
            .participant()
            .expect("the refusal names its participant");
        assert_eq!(by.index, 1, "{strategy:?}: the coupon is the second change");
        assert_eq!(by.namespace, Some(Namespace::new("shop", "coupons")));
        assert_eq!(by.id, Some(bson::Bson::String("SPRING".into())));
        assert_eq!(by.label, "shop.coupons/SPRING");
        assert!(err.refused_by::<Coupon>(), "{strategy:?}: {by:?}");
        assert!(!err.refused_by::<Stock>());
        // Nothing applied.
        let stock = store
            .find_one(&Namespace::new("shop", "stock"), doc! { "_id": "kayak" })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stock.get_i64("available").unwrap(), 3, "{strategy:?}");
    }
}

/// A refusal of the transaction as a whole names no participant.
#[tokio::test]
async fn a_refusal_of_the_whole_transaction_names_no_participant() {
    let store = shop().await;
    let coordinator = Coordinator::builder(store.clone()).database("shop").build();
    // Out of stock is refused by participant 0, with no type for an untyped change.
    let err = coordinator
        .run(
            Transaction::new().change(
                tandem::DocumentChange::update(Namespace::new("shop", "stock"), "kayak")
                    .inc("available", -5_i64)
                    .require_gte("available", 5_i64),
            ),
        )
        .await
        .unwrap_err();
    let by = err.participant().expect("a participant");
    assert_eq!((by.index, by.type_name), (0, None));
    assert!(!err.refused_by::<Stock>());
    // A duplicate id is no participant's refusal.
    let err = TxError::Duplicate {
        id: tandem::TxId::new("x").unwrap(),
        state: None,
    };
    assert!(err.participant().is_none());
}

/// A cancel at a participant for another reason than its own conditions (a
/// conflict with a transaction holding its document) names the participant,
/// but is no refusal of it: a shop asking `refused_by::<Coupon>()` must not
/// tell its customer "coupon already used" for a coupon that is free.
#[tokio::test]
async fn a_conflict_at_a_participant_is_not_its_refusal() {
    let store = shop().await;
    store
        .replace_one(
            &Namespace::new("shop", "coupons"),
            doc! { "_id": "SPRING" },
            doc! { "_id": "SPRING", "used": false },
        )
        .await
        .unwrap();
    // Another transaction holds the coupon: its record and its apply
    // landed (the commit point), then its store failed for good.
    let dying = tandem::testing::FaultStore::new(std::sync::Arc::new(store.clone())).crash_after(3);
    let holder = Coordinator::builder(dying).database("shop").build();
    holder
        .run(Transaction::new().change(Coupon::change("SPRING").set_used(true)))
        .await
        .unwrap();
    let coupon = store
        .find_one(&Namespace::new("shop", "coupons"), doc! { "_id": "SPRING" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        coupon.get_array("pendingTransactions").map(Vec::len),
        Ok(1),
        "held: {coupon:?}"
    );
    let coordinator = Coordinator::builder(store.clone()).database("shop").build();
    let err = coordinator.run(checkout()).await.unwrap_err();
    assert!(
        matches!(
            &err,
            TxError::Canceled {
                cause: StepError::Conflict { .. },
                ..
            }
        ),
        "{err:?}"
    );
    let by = err.participant().expect("the cancel names its participant");
    assert!(by.is::<Coupon>(), "{by:?}");
    assert!(
        !err.refused_by::<Coupon>(),
        "a conflict is no refusal: {err:?}"
    );
    assert!(!err.refused_by::<Stock>());
}

/// A refusal by one change's own conditions is the answer even where an
/// earlier change of the transaction met a conflict: the transaction is
/// refused again however often it is retried (the coupon is used), which a
/// conflict does not say. Answered as the stock's conflict, a shop asking
/// `refused_by::<Coupon>()` told its customer to try again.
#[tokio::test]
async fn a_refusal_is_the_answer_beside_an_earlier_changes_conflict() {
    let store = shop().await;
    // Another coordinator's committed transaction holds the kayak while
    // its finishing waits.
    let holder = Coordinator::builder(store.clone())
        .database("shop")
        .finish_delay(std::time::Duration::from_secs(3600))
        .build();
    holder
        .run(
            Transaction::new().change(
                tandem::DocumentChange::update(Namespace::new("shop", "stock"), "kayak")
                    .set("name", "Kayak"),
            ),
        )
        .await
        .unwrap();
    let coordinator = Coordinator::builder(store.clone()).database("shop").build();
    // The stock's change is the first, the coupon's (used already) the second.
    let err = coordinator.run(checkout()).await.unwrap_err();
    assert!(
        matches!(
            &err,
            TxError::Canceled {
                cause: StepError::GuardFailed { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.refused_by::<Coupon>(), "{err:?}");
    assert_eq!(err.participant().map(|p| p.index), Some(1));
    holder.drain().await;
}

/// The same while preparing: a document found missing is the answer even
/// where an earlier change's before-image could not be read (its store
/// failed). Nothing was written; the transaction is refused whatever that
/// read would have found, which "outcome unknown" (`Interrupted`) does not
/// say.
#[tokio::test]
async fn a_refusal_while_preparing_is_the_answer_beside_a_store_failure() {
    let store = shop().await;
    let failing = tandem::testing::FaultStore::new(std::sync::Arc::new(store.clone()));
    let other = tandem::MemoryStore::new();
    let coordinator = Coordinator::builder(failing.clone())
        .database("shop")
        .store("other", other)
        .retry(tandem::RetryPolicy::NONE)
        .build();
    failing.crash_now();
    let err = coordinator
        .run(
            Transaction::new()
                .change(
                    tandem::DocumentChange::update(Namespace::new("shop", "stock"), "kayak")
                        .set("available", 2_i64),
                )
                .change(
                    tandem::DocumentChange::update(Namespace::new("shop", "coupons"), "SPRING")
                        .in_store("other")
                        .set("used", true),
                ),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            TxError::Canceled {
                cause: StepError::NotFound { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.participant().map(|p| p.index), Some(1));
}

/// Which step errors are refusals by the change's own conditions.
#[test]
fn refusals_are_the_changes_own_conditions() {
    let p = || "shop.coupons/SPRING".to_owned();
    let refusals = [
        StepError::NotFound { participant: p() },
        StepError::AlreadyExists { participant: p() },
        StepError::GuardFailed {
            participant: p(),
            guard: "used == false (found true)".into(),
        },
    ];
    let others = [
        StepError::Conflict {
            participant: p(),
            holder: "t-1".into(),
        },
        StepError::Expired { participant: p() },
        StepError::Fenced { participant: p() },
        StepError::Store {
            participant: p(),
            source: tandem::StoreError::new(tandem::StoreErrorKind::Transient, "reset"),
        },
    ];
    for e in &refusals {
        assert!(e.is_refusal(), "{e:?}");
    }
    for e in &others {
        assert!(!e.is_refusal(), "{e:?}");
    }
}
