use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "ledgers")]
#[derive(Serialize, Deserialize)]
struct Ledger {
    #[serde(rename = "_id")]
    id: i64,
    total: i64,
}

fn main() {
    let _ = Ledger::change("L1").inc_total(1);
}
