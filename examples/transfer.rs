//! The classic tutorial's transfer: 100 moves from account A to account B.
//!
//! Runs on the embedded store; set `MONGODB_URI` to run it on a MongoDB server
//! (database `TANDEM_DB`, default `tandem_demo`).
//!
//! ```sh
//! cargo run --example transfer
//! MONGODB_URI=mongodb://127.0.0.1:27017 cargo run --example transfer
//! ```

use serde::{Deserialize, Serialize};
use tandem::{participant, CommitPoint, Coordinator, ParticipantDocument, Transaction, TxState};

// ANCHOR: account
/// An account, as in the tutorial: `{ _id, balance, pendingTransactions }`.
#[participant(collection = "accounts")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    name: String,
    balance: i64,
    #[serde(default, rename = "pendingTransactions")]
    pending: Vec<String>,
}
// ANCHOR_END: account

// ANCHOR: transfer
fn transfer(from: &str, to: &str, amount: i64) -> Transaction {
    Transaction::new()
        .change(
            Account::change(from)
                .inc_balance(-amount)
                .require_balance_gte(amount),
        )
        .change(Account::change(to).inc_balance(amount))
}
// ANCHOR_END: transfer

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The embedded store, or the MongoDB server at MONGODB_URI.
    let store = tandem_mongodb::store_from_env().await?;
    let db = std::env::var("TANDEM_DB").unwrap_or_else(|_| "tandem_demo".to_owned());
    println!("transfer demo on the {} store, database {db}", store.name());

    let coordinator = Coordinator::builder_shared(store)
        .database(&db)
        .commit_point(CommitPoint::Done)
        .on_event(|event| println!("  {event}"))
        .build();
    coordinator.ensure_indexes().await?;
    let accounts = coordinator.namespace_of::<Account>();
    coordinator
        .ensure_marker_index(None, &accounts, Account::MARKER)
        .await?;

    for name in ["A", "B"] {
        let start = Account {
            name: name.into(),
            balance: 1000,
            pending: vec![],
        };
        Account::put(&coordinator, &start).await?;
    }

    let receipt = coordinator.run(transfer("A", "B", 100)).await?;

    for name in ["A", "B"] {
        let account = Account::get(&coordinator, name)
            .await?
            .ok_or("account missing")?;
        println!(
            "  {}: balance {}, pendingTransactions {:?}",
            account.name, account.balance, account.pending
        );
        assert!(account.pending.is_empty(), "no marker is left");
        assert_eq!(account.balance, if name == "A" { 900 } else { 1100 });
    }
    let record = coordinator
        .record(&receipt.id)
        .await?
        .ok_or("record missing")?;
    println!("  transaction {} is {}", record.id, record.state);
    assert_eq!(record.state, TxState::Done);
    // Background work finished, connections closed, before `main` returns.
    coordinator.shutdown().await;
    Ok(())
}
