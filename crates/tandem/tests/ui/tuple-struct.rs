use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account(String, i64);

fn main() {
    let _ = Account::change("A");
}
