//! Typed reads through a coordinator: `get`, `find`, `in_flight`, `insert`,
//! `put`, on the coordinator and as generated on the `#[participant]` type.

use std::sync::Arc;

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
            tandem::store::UpdateOptions::default(),
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

#[tokio::test]
async fn the_generated_functions_read_and_write_typed_documents() {
    let store = MemoryStore::new();
    let coordinator = Arc::new(Coordinator::builder(store.clone()).database("shop").build());
    let ns = coordinator.namespace_of::<Order>();

    Order::insert_now(&coordinator, &order("o-1", 30))
        .await
        .unwrap();
    Order::insert_now(&coordinator, &order("o-2", 40))
        .await
        .unwrap();
    let taken = Order::insert_now(&coordinator, &order("o-1", 99))
        .await
        .unwrap_err();
    assert_eq!(taken.kind, StoreErrorKind::DuplicateKey);

    // Through the Arc and through the coordinator itself.
    assert_eq!(
        Order::get(&coordinator, "o-1").await.unwrap(),
        Some(order("o-1", 30))
    );
    assert_eq!(
        Order::get(&*coordinator, "o-2").await.unwrap(),
        Some(order("o-2", 40))
    );
    assert_eq!(Order::get(&coordinator, "o-3").await.unwrap(), None);
    let big = Order::find(&coordinator, doc! { "amount": { "$gte": 35 } })
        .await
        .unwrap();
    assert_eq!(big, vec![order("o-2", 40)]);

    // A placeholder an insert reserved is no order, and is in flight.
    store
        .insert_one(&ns, doc! { "_id": "o-ghost", "_tandem": { "ghost": true } })
        .await
        .unwrap();
    assert_eq!(Order::get(&coordinator, "o-ghost").await.unwrap(), None);
    assert_eq!(Order::find(&coordinator, doc! {}).await.unwrap().len(), 2);
    assert!(Order::in_flight(&coordinator, "o-ghost").await.unwrap());

    // `put` replaces a settled document, and inserts a missing one.
    let mut paid = order("o-1", 30);
    paid.state = "paid".into();
    Order::put(&coordinator, &paid).await.unwrap();
    assert_eq!(
        Order::get(&coordinator, "o-1").await.unwrap(),
        Some(paid.clone())
    );
    Order::put(&coordinator, &order("o-4", 5)).await.unwrap();
    assert_eq!(
        Order::get(&coordinator, "o-4").await.unwrap(),
        Some(order("o-4", 5))
    );

    // After a transaction the document is settled again, and `put` works.
    coordinator
        .run(Transaction::new().change(Order::change("o-2").inc_amount(2)))
        .await
        .unwrap();
    coordinator.drain().await;
    assert!(!Order::in_flight(&coordinator, "o-2").await.unwrap());
    Order::put(&coordinator, &order("o-2", 41)).await.unwrap();

    // With a transaction in flight, `put` changes nothing and says why;
    // so does it for a placeholder.
    store
        .update_one(
            &ns,
            doc! { "_id": "o-2" },
            doc! { "$push": { "pendingTransactions": "t-7#0123456789ab" } },
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert!(Order::in_flight(&coordinator, "o-2").await.unwrap());
    let refused = Order::put(&coordinator, &order("o-2", 0))
        .await
        .unwrap_err();
    assert_eq!(refused.kind, StoreErrorKind::InFlight, "{refused}");
    assert!(refused.message.contains("shop.orders/"), "{refused}");
    let raw = store
        .find_one(&ns, doc! { "_id": "o-2" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(raw.get_i64("amount").unwrap(), 41);
    assert_eq!(raw.get_array("pendingTransactions").unwrap().len(), 1);
    let refused = Order::put(&coordinator, &order("o-ghost", 1))
        .await
        .unwrap_err();
    assert_eq!(refused.kind, StoreErrorKind::InFlight, "{refused}");
    let raw = store
        .find_one(&ns, doc! { "_id": "o-ghost" })
        .await
        .unwrap()
        .unwrap();
    assert!(raw.get("amount").is_none(), "{raw}");
}

/// Right after `run` answers at the commit point, the background finisher may
/// not have cleared the markers yet: `put` waits for it rather than refusing
/// a document whose transaction is already committed.
#[tokio::test]
async fn put_waits_for_this_coordinators_finishing() {
    let store = MemoryStore::new();
    let coordinator = Coordinator::builder(store.clone()).database("shop").build();
    coordinator.insert(&order("o-1", 30)).await.unwrap();
    coordinator
        .run(Transaction::new().change(Order::change("o-1").set_state("paid".to_owned())))
        .await
        .unwrap();
    // Nothing has yielded to the finisher yet: the marker is still there.
    assert!(coordinator.in_flight::<Order, _>("o-1").await.unwrap());
    coordinator.put(&order("o-1", 45)).await.unwrap();
    assert_eq!(
        coordinator.get::<Order, _>("o-1").await.unwrap(),
        Some(order("o-1", 45))
    );

    // A transaction in flight that is not this coordinator's to finish is
    // still refused, and the document is left as it is.
    let ns = coordinator.namespace_of::<Order>();
    store
        .update_one(
            &ns,
            doc! { "_id": "o-1" },
            doc! { "$push": { "pendingTransactions": "t-7#0123456789ab" } },
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    let err = coordinator.put(&order("o-1", 99)).await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::InFlight, "{err}");
    assert_eq!(
        coordinator.get::<Order, _>("o-1").await.unwrap(),
        Some(order("o-1", 45))
    );
}

/// `in_flight` answers for the moment of its read: a transaction can apply
/// between it and a later `get`, which then sees a debit that is undone.
/// `get_settled` reads once, and refuses a document with a change in flight.
#[tokio::test]
async fn get_settled_never_returns_half_a_transaction() {
    use tandem::testing::FaultStore;
    use tandem::DocumentChange;

    let store = MemoryStore::new();
    let orders = tandem::Namespace::new("shop", "orders");
    store
        .insert_one(
            &orders,
            doc! { "_id": "o-1", "amount": 100_i64, "state": "new" },
        )
        .await
        .unwrap();
    let docs = FaultStore::new(Arc::new(store.clone()));
    let coordinator = Coordinator::builder(store.clone())
        .database("shop")
        .store("docs", docs.clone())
        .build();
    let reader = Coordinator::builder(store.clone()).database("shop").build();
    assert!(!reader.in_flight::<Order, _>("o-1").await.unwrap());

    // A change of o-1 and one of a missing order: o-1's apply lands, the
    // other is refused, and the coordinator stops before its undo (the
    // third operation on "docs": the applies, then the undo).
    let undo = docs.pause_at(3);
    let running = coordinator.clone();
    let run = tokio::spawn(async move {
        running
            .run(
                Transaction::new()
                    .change(
                        DocumentChange::update(orders.clone(), "o-1")
                            .in_store("docs")
                            .inc("amount", -10_i64),
                    )
                    .change(
                        DocumentChange::update(orders.clone(), "missing")
                            .in_store("docs")
                            .inc("amount", 10_i64),
                    ),
            )
            .await
    });
    undo.reached.await.unwrap();
    let half = reader.get::<Order, _>("o-1").await.unwrap().unwrap();
    assert_eq!(half.amount, 90, "get sees the change in flight");
    let refused = reader.get_settled::<Order, _>("o-1").await.unwrap_err();
    assert_eq!(refused.kind, StoreErrorKind::InFlight, "{refused}");

    undo.release.send(()).unwrap();
    assert!(run.await.unwrap().is_err(), "the transfer is refused");
    let settled = reader.get_settled::<Order, _>("o-1").await.unwrap();
    assert_eq!(settled.map(|o| o.amount), Some(100));
    assert_eq!(reader.get_settled::<Order, _>("none").await.unwrap(), None);
}
