use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
}

fn main() {
    let _ = Account::change("A").inc_balance("x");
}
