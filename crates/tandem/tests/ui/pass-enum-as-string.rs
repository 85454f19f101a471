use serde::{Deserialize, Serialize};
use tandem::{participant, DocumentChange, Namespace};

#[derive(Serialize, Deserialize)]
enum OrderState {
    UnPaid,
    Paid,
}

#[participant(collection = "orders")]
#[derive(Serialize, Deserialize)]
struct Order {
    #[serde(rename = "_id")]
    id: String,
    state: OrderState,
}

fn main() {
    let typed = Order::change("o1")
        .set_state(OrderState::Paid)
        .require_state_eq(OrderState::UnPaid);
    let by_hand = DocumentChange::update(Namespace::new("", "orders"), "o1")
        .set("state", "Paid")
        .require_eq("state", "UnPaid");
    assert_eq!(DocumentChange::from(typed), by_hand);
}
