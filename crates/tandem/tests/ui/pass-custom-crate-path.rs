mod facade {
    pub use tandem as engine;
}

use serde::{Deserialize, Serialize};

#[facade::engine::participant(collection = "accounts", crate = "crate::facade::engine")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
}

fn main() {
    let change: tandem::DocumentChange = Account::change("A").inc_balance(1).into();
    assert_eq!(change.namespace.collection, "accounts");
}
