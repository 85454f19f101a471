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
use tandem::{
    participant, CommitPoint, Coordinator, Namespace, ParticipantDocument, Transaction, TxState,
};
use tandem_suite::{demo_store, reset};

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
    let demo = demo_store().await?;
    let (store, db) = (demo.store.clone(), demo.db.clone());
    println!("transfer demo on the {}", demo.description);
    let accounts = Namespace::new(&db, Account::COLLECTION);
    let start = |name: &str| Account {
        name: name.into(),
        balance: 1000,
        pending: vec![],
    };
    reset(
        store.as_ref(),
        &accounts,
        &[
            bson::to_document(&start("A"))?,
            bson::to_document(&start("B"))?,
        ],
    )
    .await?;

    let coordinator = Coordinator::builder_shared(store.clone())
        .database(&db)
        .commit_point(CommitPoint::Done)
        .on_event(|event| println!("  {event}"))
        .build();
    coordinator.ensure_indexes().await?;
    coordinator
        .ensure_marker_index(None, &accounts, Account::MARKER)
        .await?;

    let receipt = coordinator.run(transfer("A", "B", 100)).await?;

    for name in ["A", "B"] {
        let doc = store
            .find_one(&accounts, bson::doc! { "_id": name })
            .await?
            .ok_or("account missing")?;
        let account: Account = bson::from_document(doc)?;
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
