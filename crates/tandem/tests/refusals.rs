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
