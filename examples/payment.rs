//! A payment: the order goes `UnPaid → Paid` and the buyer's balance goes down
//! by the amount, all or nothing.
//!
//! Runs on the embedded store; set `MONGODB_URI` to run it on a MongoDB server
//! (database `TANDEM_DB`, default `tandem_demo`).
//!
//! ```sh
//! cargo run --example payment
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
// A crash on cue comes from tandem's testing kit (feature `test-util`).
use tandem::testing::FaultStore;
use tandem::{participant, CommitPoint, Coordinator, RecoveryConfig, Transaction, TxError};

// ANCHOR: documents
/// The state of an order, stored as a string.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
enum OrderState {
    UnPaid,
    Paid,
}

/// An order document in the `orders` collection.
#[participant(collection = "orders")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Order {
    #[serde(rename = "_id")]
    id: String,
    state: OrderState,
    amount: i64,
}

/// A balance document in the `balances` collection.
#[participant(collection = "balances")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Balance {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
}
// ANCHOR_END: documents

// ANCHOR: payment
/// Pay `order` from `buyer`'s balance: one transaction, two documents.
fn payment(order: &Order, buyer: &str) -> Transaction {
    Transaction::new()
        .change(
            Order::change(order.id.clone())
                .set_state(OrderState::Paid)
                .require_state_eq(OrderState::UnPaid),
        )
        .change(
            Balance::change(buyer)
                .inc_balance(-order.amount)
                .require_balance_gte(order.amount),
        )
}
// ANCHOR_END: payment

/// Prints the demo's documents as stored, with the markers tandem keeps on
/// them (but without its `_tandem` bookkeeping).
async fn show(coordinator: &Coordinator) -> Result<(), Box<dyn std::error::Error>> {
    let (orders, balances) = (
        coordinator.namespace_of::<Order>(),
        coordinator.namespace_of::<Balance>(),
    );
    let shown = [
        (&orders, "order-1"),
        (&orders, "order-2"),
        (&orders, "order-3"),
        (&balances, "alice"),
    ];
    let store = coordinator.stores().default_store();
    for (place, id) in shown {
        if let Some(mut doc) = store.find_one(place, bson::doc! { "_id": id }).await? {
            doc.remove("_tandem");
            println!("    {place}: {doc}");
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The embedded store, or the MongoDB server at MONGODB_URI.
    let store = tandem_mongodb::store_from_env().await?;
    let db = std::env::var("TANDEM_DB").unwrap_or_else(|_| "tandem_demo".to_owned());
    println!("payment demo on the {} store, database {db}", store.name());

    // ANCHOR: coordinator
    let coordinator = Coordinator::builder_shared(store.clone())
        .database(&db)
        .commit_point(CommitPoint::Done)
        .on_event(|event| println!("  {event}"))
        .build();
    // ANCHOR_END: coordinator

    let order1 = Order {
        id: "order-1".into(),
        state: OrderState::UnPaid,
        amount: 300,
    };
    let order2 = Order {
        id: "order-2".into(),
        state: OrderState::UnPaid,
        amount: 5000,
    };
    let order3 = Order {
        id: "order-3".into(),
        state: OrderState::UnPaid,
        amount: 200,
    };
    // Plain writes outside any transaction, to set the demo up (again).
    for order in [&order1, &order2, &order3] {
        Order::put(&coordinator, order).await?;
    }
    let alice = Balance {
        id: "alice".into(),
        balance: 1000,
    };
    Balance::put(&coordinator, &alice).await?;

    println!("\n1. alice pays order-1 (300 of her 1000):");
    // ANCHOR: run
    let receipt = coordinator.run(payment(&order1, "alice")).await?;
    println!("  committed: {} is {}", receipt.id, receipt.state);
    // ANCHOR_END: run
    show(&coordinator).await?;

    println!("\n2. alice tries to pay order-2 (5000, more than she has):");
    // ANCHOR: refused
    match coordinator.run(payment(&order2, "alice")).await {
        Err(TxError::Canceled {
            cause,
            undone: true,
            ..
        }) => println!("  canceled, nothing changed: {cause}"),
        // Decided canceled; recovery undoes what is left after the lease.
        Err(TxError::Canceled { cause, .. }) => {
            println!("  canceled, its undo left to recovery: {cause}")
        }
        other => return Err(format!("expected a cancellation, got {other:?}").into()),
    }
    // ANCHOR_END: refused
    show(&coordinator).await?;

    println!("\n3. the process dies in the middle of paying order-3; recovery rolls the half-done payment back:");
    // ANCHOR: crash
    // A store that stops answering after 2 operations (write the record, apply
    // the order): the coordinator "dies" with the order marked paid and the
    // balance not yet debited.
    let dying = FaultStore::new(store.clone()).crash_after(2);
    let lease = Duration::from_millis(500);
    let doomed = Coordinator::builder(dying)
        .database(&db)
        .lease(lease) // short, so that the demo does not wait long for it
        .on_event(|event| println!("  {event}"))
        .build();
    let err = doomed.run(payment(&order3, "alice")).await.unwrap_err();
    println!("  the coordinator stopped: {err}");

    // Recovery takes the transaction over once its lease, and the clock
    // margin after it, have run out by the store's clock: until then the dead
    // coordinator's last steps could still be on their way.
    println!(
        "  waiting for its lease ({lease:?}) and the clock margin ({:?})",
        coordinator.config().clock_margin
    );
    let recovery = coordinator.recovery(RecoveryConfig::default());
    let report = loop {
        let report = recovery.run_once().await?;
        if report.claimed > 0 {
            break report;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "  recovery: claimed {}, canceled {}",
        report.claimed, report.canceled
    );
    // ANCHOR_END: crash
    show(&coordinator).await?;

    let alice = Balance::get(&coordinator, "alice").await?;
    assert_eq!(alice.map(|b| b.balance), Some(700), "only order-1 was paid");
    println!("\nalice paid exactly once: balance 700");
    // Background work finished, connections closed, before `main` returns.
    coordinator.shutdown().await;
    Ok(())
}
