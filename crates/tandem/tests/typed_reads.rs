//! Typed reads through a coordinator: `get`, `find`, `in_flight`, `insert`.

use bson::doc;
use serde::{Deserialize, Serialize};
use tandem::{participant, Coordinator, MemoryStore, Store, StoreErrorKind, Transaction};

#[participant(collection = "orders")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Order {
    #[serde(rename = "_id")]
    id: String,
    amount: i64,
    state: String,
}

fn order(id: &str, amount: i64) -> Order {
    Order {
        id: id.into(),
        amount,
        state: "new".into(),
    }
}

#[tokio::test]
async fn typed_reads_skip_placeholders_and_see_transactions_in_flight() {
    let store = MemoryStore::new();
    let coordinator = Coordinator::builder(store.clone()).database("shop").build();
    let ns = coordinator.namespace_of::<Order>();
    assert_eq!(ns.to_string(), "shop.orders");

    coordinator.insert(&order("o-1", 30)).await.unwrap();
    let again = coordinator.insert(&order("o-1", 30)).await.unwrap_err();
    assert_eq!(again.kind, StoreErrorKind::DuplicateKey);
    assert_eq!(
        coordinator.get::<Order, _>("o-1").await.unwrap(),
        Some(order("o-1", 30))
    );
    assert_eq!(coordinator.get::<Order, _>("o-9").await.unwrap(), None);

    // An insert's placeholder is no order.
    store
        .insert_one(&ns, doc! { "_id": "o-ghost", "_tandem": { "ghost": true } })
        .await
        .unwrap();
    assert_eq!(coordinator.get::<Order, _>("o-ghost").await.unwrap(), None);
    let all: Vec<Order> = coordinator.find(doc! {}, None).await.unwrap();
    assert_eq!(all, vec![order("o-1", 30)]);

    // A committed transaction leaves nothing in flight.
    coordinator
        .run(Transaction::new().change(Order::change("o-1").set_state("paid".to_owned())))
        .await
        .unwrap();
    coordinator.drain().await;
    assert!(!coordinator.in_flight::<Order, _>("o-1").await.unwrap());
    assert_eq!(
        coordinator
            .get::<Order, _>("o-1")
            .await
            .unwrap()
            .map(|o| o.state),
        Some("paid".to_owned())
    );
    // A marker means a transaction is in flight.
    store
        .update_one(
            &ns,
            doc! { "_id": "o-1" },
            doc! { "$push": { "pendingTransactions": "t-7#0123456789ab" } },
            false,
        )
        .await
        .unwrap();
    assert!(coordinator.in_flight::<Order, _>("o-1").await.unwrap());
    assert!(!coordinator.in_flight::<Order, _>("o-9").await.unwrap());

    // A document that is not an order says so.
    store
        .insert_one(
            &ns,
            doc! { "_id": "o-bad", "amount": "lots", "state": "new" },
        )
        .await
        .unwrap();
    let err = coordinator.get::<Order, _>("o-bad").await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::TypeMismatch, "{err}");
    assert!(err.message.contains("shop.orders/"), "{err}");
}
