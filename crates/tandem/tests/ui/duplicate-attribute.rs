use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "accounts")]
#[participant(collection = "ledgers", db = "bank")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    #[participant(id, id)]
    id: String,
    balance: i64,
}

fn main() {
    let _ = Account::change("A").inc_balance(1);
}
