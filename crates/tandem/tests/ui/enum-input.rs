use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "states")]
#[derive(Serialize, Deserialize)]
enum State {
    Paid,
    UnPaid,
}

fn main() {
    let _ = State::Paid;
}
