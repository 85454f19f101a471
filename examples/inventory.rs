//! An inventory reservation with four participants: create the order (insert),
//! take the items from stock (guarded decrement), record the reservation
//! (insert), and empty the cart (delete). A guard failure rolls all of it back.
//!
//! ```sh
//! cargo run --example inventory
//! ```

use serde::{Deserialize, Serialize};
use tandem::{participant, CommitPoint, Coordinator, Transaction, TxError};

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
    // The embedded store, or the MongoDB server at MONGODB_URI.
    let store = tandem_mongodb::store_from_env().await?;
    let db = std::env::var("TANDEM_DB").unwrap_or_else(|_| "tandem_demo".to_owned());
    println!(
        "inventory demo on the {} store, database {db}",
        store.name()
    );
    let coordinator = Coordinator::builder_shared(store)
        .database(&db)
        .commit_point(CommitPoint::Done)
        .build();

    // Stock and carts as they were (plain writes, outside any transaction);
    // orders under ids of this run, so that the demo can run again.
    let kayaks = Stock {
        sku: "kayak".into(),
        available: 3,
    };
    Stock::put(&coordinator, &kayaks).await?;
    for customer in ["ann", "bob"] {
        let cart = Cart {
            customer: customer.into(),
            items: vec!["kayak".into()],
        };
        Cart::put(&coordinator, &cart).await?;
    }
    let run = bson::oid::ObjectId::new().to_hex();
    let (ann_order, bob_order) = (format!("o-ann-{run}"), format!("o-bob-{run}"));

    coordinator
        .run(reserve(&ann_order, "ann", "kayak", 2))
        .await?;
    println!("  ann reserved 2 kayaks");

    match coordinator
        .run(reserve(&bob_order, "bob", "kayak", 2))
        .await
    {
        Err(TxError::Canceled { cause, .. }) => {
            println!("  bob's reservation was rolled back: {cause}")
        }
        other => return Err(format!("expected a rollback, got {other:?}").into()),
    }

    // Typed reads leave out the placeholder an undone insert leaves behind
    // (a fence, until garbage collection).
    assert!(
        Order::get(&coordinator, &ann_order).await?.is_some(),
        "ann's order exists"
    );
    assert!(
        Reservation::get(&coordinator, &ann_order).await?.is_some(),
        "ann's reservation exists"
    );
    assert!(
        Cart::get(&coordinator, "ann").await?.is_none(),
        "ann's cart is gone"
    );
    assert!(
        Order::get(&coordinator, &bob_order).await?.is_none(),
        "bob has no order"
    );
    assert!(
        Reservation::get(&coordinator, &bob_order).await?.is_none(),
        "bob has no reservation"
    );
    assert!(
        Cart::get(&coordinator, "bob").await?.is_some(),
        "bob keeps his cart"
    );
    let stock = Stock::get(&coordinator, "kayak").await?.ok_or("no stock")?;
    println!("  kayaks left: {}", stock.available);
    assert_eq!(stock.available, 1);
    // Background work finished, connections closed, before `main` returns.
    coordinator.shutdown().await;
    Ok(())
}
