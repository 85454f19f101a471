use serde::{Deserialize, Serialize};
use tandem::{participant, DocumentChange, ParticipantDocument};

#[participant(collection = "accounts", db = "bank", marker = "txs")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
    #[serde(default)]
    txs: Vec<String>,
}

fn main() {
    assert_eq!(Account::MARKER, "txs");
    let change = DocumentChange::from(Account::change("A").inc_balance(1));
    assert_eq!(change.marker, "txs");
    assert_eq!(change.namespace.db, "bank");
}
