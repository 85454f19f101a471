use serde::{Deserialize, Serialize};
use tandem::{participant, DocumentChange, Namespace};

#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
}

fn main() {
    let typed = Account::change("A")
        .inc_balance(-100)
        .require_balance_gte(100);
    let by_hand = DocumentChange::update(Namespace::new("", "accounts"), "A")
        .inc("balance", -100_i64)
        .require_gte("balance", 100_i64);
    assert_eq!(DocumentChange::from(typed), by_hand);
}
