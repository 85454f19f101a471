//! An inventory reservation with four participants: create the order (insert),
//! take the items from stock (guarded decrement), record the reservation
//! (insert), and empty the cart (delete). A guard failure rolls all of it back.
//!
//! ```sh
//! cargo run --example inventory
//! ```

use serde::{Deserialize, Serialize};
use tandem::{
    participant, CommitPoint, Coordinator, Namespace, ParticipantDocument, Transaction, TxError,
};
use tandem_suite::{demo_store, reset};

// ANCHOR: documents
#[participant(collection = "orders")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Order {
    #[serde(rename = "_id")]
    id: String,
    sku: String,
    quantity: i32,
}

#[participant(collection = "stock")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Stock {
    #[serde(rename = "_id")]
    sku: String,
    available: i32,
}

#[participant(collection = "reservations")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Reservation {
    #[serde(rename = "_id")]
    order: String,
    sku: String,
    quantity: i32,
}

#[participant(collection = "carts")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Cart {
    #[serde(rename = "_id")]
    customer: String,
    items: Vec<String>,
}
// ANCHOR_END: documents

// ANCHOR: reserve
fn reserve(order_id: &str, customer: &str, sku: &str, quantity: i32) -> Transaction {
    let order = Order {
        id: order_id.into(),
        sku: sku.into(),
        quantity,
    };
    let reservation = Reservation {
        order: order_id.into(),
        sku: sku.into(),
        quantity,
    };
    Transaction::new()
        .change(order.insert())
        .change(
            Stock::change(sku)
                .inc_available(-quantity)
                .require_available_gte(quantity),
        )
        .change(reservation.insert())
        .change(Cart::delete(customer))
}
// ANCHOR_END: reserve

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let demo = demo_store().await?;
    let (store, db) = (demo.store.clone(), demo.db.clone());
    println!("inventory demo on the {}", demo.description);
    let ns = |c: &str| Namespace::new(&db, c);
    reset(
        store.as_ref(),
        &ns(Stock::COLLECTION),
        &[bson::to_document(&Stock {
            sku: "kayak".into(),
            available: 3,
        })?],
    )
    .await?;
    for customer in ["ann", "bob"] {
        let cart = Cart {
            customer: customer.into(),
            items: vec!["kayak".into()],
        };
        reset(
            store.as_ref(),
            &ns(Cart::COLLECTION),
            &[bson::to_document(&cart)?],
        )
        .await?;
    }
    for (c, id) in [
        (Order::COLLECTION, "o-ann"),
        (Order::COLLECTION, "o-bob"),
        (Reservation::COLLECTION, "o-ann"),
        (Reservation::COLLECTION, "o-bob"),
    ] {
        store.delete_one(&ns(c), bson::doc! { "_id": id }).await?;
    }
    let coordinator = Coordinator::builder_shared(store.clone())
        .database(&db)
        .commit_point(CommitPoint::Done)
        .build();

    coordinator.run(reserve("o-ann", "ann", "kayak", 2)).await?;
    println!("  ann reserved 2 kayaks");

    match coordinator.run(reserve("o-bob", "bob", "kayak", 2)).await {
        Err(TxError::Canceled { cause, .. }) => {
            println!("  bob's reservation was rolled back: {cause}")
        }
        other => return Err(format!("expected a rollback, got {other:?}").into()),
    }

    let count = |c: &'static str, id: &'static str| {
        let store = store.clone();
        let place = ns(c);
        async move {
            let doc = store.find_one(&place, bson::doc! { "_id": id }).await?;
            // An undone insert leaves a fenced placeholder until garbage collection.
            Ok::<bool, tandem::StoreError>(doc.is_some_and(|d| {
                d.get("_tandem")
                    .and_then(|m| m.as_document())
                    .is_none_or(|m| !m.contains_key("ghost"))
            }))
        }
    };
    assert!(
        count(Order::COLLECTION, "o-ann").await?,
        "ann's order exists"
    );
    assert!(
        count(Reservation::COLLECTION, "o-ann").await?,
        "ann's reservation exists"
    );
    assert!(!count(Cart::COLLECTION, "ann").await?, "ann's cart is gone");
    assert!(
        !count(Order::COLLECTION, "o-bob").await?,
        "bob has no order"
    );
    assert!(
        !count(Reservation::COLLECTION, "o-bob").await?,
        "bob has no reservation"
    );
    assert!(count(Cart::COLLECTION, "bob").await?, "bob keeps his cart");
    let stock = store
        .find_one(&ns(Stock::COLLECTION), bson::doc! { "_id": "kayak" })
        .await?
        .ok_or("no stock")?;
    println!("  kayaks left: {}", stock.get_i32("available")?);
    assert_eq!(stock.get_i32("available")?, 1);
    // Background work finished, connections closed, before `main` returns.
    coordinator.shutdown().await;
    Ok(())
}
