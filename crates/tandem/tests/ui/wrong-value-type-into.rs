use serde::{Deserialize, Serialize};
use tandem::participant;

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
    let _ = Order::change("o")
        .require_state_eq(OrderState::UnPaid)
        .set_state("Paid");
}
