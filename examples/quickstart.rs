//! The README's program, complete: a store, a coordinator, recovery in the
//! background, and one payment (the order goes `UnPaid → Paid` and the buyer's
//! balance goes down by the amount, all or nothing).
//!
//! Runs on the embedded store; set `MONGODB_URI` to run it on a MongoDB server
//! (database `TANDEM_DB`, default `shop`).
//!
//! ```sh
//! cargo run --example quickstart
//! ```
//!
//! README.md shows the part between the `readme` anchors as it is, and
//! `tests-integration/tests/readme.rs` checks that the two match.

// ANCHOR: readme
use serde::{Deserialize, Serialize};
use tandem::{participant, Coordinator, RecoveryConfig, Transaction};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
enum OrderState {
    UnPaid,
    Paid,
}

#[participant(collection = "orders")]
#[derive(Serialize, Deserialize)]
struct Order {
    #[serde(rename = "_id")]
    id: String,
    state: OrderState,
    amount: i64,
}

#[participant(collection = "balances")]
#[derive(Serialize, Deserialize)]
struct Balance {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The embedded store, or the MongoDB server at MONGODB_URI.
    let store = tandem_mongodb::store_from_env().await?;
    let db = std::env::var("TANDEM_DB").unwrap_or_else(|_| "shop".to_owned());
    let coordinator = Coordinator::builder_shared(store).database(&db).build();
    // The index on the transaction records that recovery's scans use
    // (idempotent: at every start-up; the embedded store needs none).
    coordinator.ensure_indexes().await?;

    // ANCHOR: recovery
    // Recovery finishes what a crashed or interrupted run left behind: once at
    // start-up, then in the background until `stop` is sent.
    let recovery = coordinator.recovery(RecoveryConfig::default());
    recovery.run_once().await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let background = tokio::spawn(async move {
        recovery
            .run_until(async {
                let _ = stopped.await;
            })
            .await
    });
    // ANCHOR_END: recovery

    // Plain writes outside any transaction, to set the example up (again).
    let order = Order {
        id: "order-1".into(),
        state: OrderState::UnPaid,
        amount: 300,
    };
    Order::put(&coordinator, &order).await?;
    let alice = Balance {
        id: "alice".into(),
        balance: 1000,
    };
    Balance::put(&coordinator, &alice).await?;

    let payment = Transaction::new()
        .change(
            Order::change("order-1")
                .set_state(OrderState::Paid)
                .require_state_eq(OrderState::UnPaid),
        )
        .change(
            Balance::change("alice")
                .inc_balance(-300)
                .require_balance_gte(300),
        );
    let receipt = coordinator.run(payment).await?; // both documents change, or neither does
    println!("committed: {}", receipt.id);
    let alice = Balance::get(&coordinator, "alice")
        .await?
        .ok_or("no alice")?;
    println!("alice has {} left", alice.balance);

    // ANCHOR: shutdown
    // On the way out: stop recovery, then let the background work finish
    // (committed credits land) and close the store.
    let _ = stop.send(());
    background.await?;
    coordinator.shutdown().await;
    // ANCHOR_END: shutdown
    Ok(())
}
// ANCHOR_END: readme
