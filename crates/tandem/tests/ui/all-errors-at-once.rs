use serde::{Deserialize, Serialize};
use tandem::participant;

// Three mistakes: an unknown option, no collection, no id field.
#[participant(colection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account {
    id: String,
    balance: i64,
}

fn main() {
    let _ = Account::change("A").inc_balance(1).require_balance_gte(1);
}
