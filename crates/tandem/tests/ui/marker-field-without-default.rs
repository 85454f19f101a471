use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "accounts", marker = "pending")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    pending: Vec<String>,
}

fn main() {
    let _ = Account::change("A");
}
