use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
}

fn main() {
    let _ = Account::change("A").inc_balance(1);
}
