use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    pending_transactions: i64,
}

fn main() {
    let _ = Account::change("A");
}
