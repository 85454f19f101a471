use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account {
    id: String,
    balance: i64,
}

fn main() {
    let _ = Account::change("A").inc_balance(1);
}
