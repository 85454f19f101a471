use serde::{Deserialize, Serialize};
use tandem::participant;

// The attribute macro sees `cfg_attr` unexpanded: it would take `balance` as the
// stored name while serde writes `bal`.
#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
#[cfg_attr(all(), serde(rename_all = "camelCase"))]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    #[cfg_attr(all(), serde(rename = "bal"))]
    balance: i64,
    #[cfg_attr(any(), participant(skip))]
    owner: String,
    // Nested, it is read just the same by serde.
    #[cfg_attr(all(), cfg_attr(all(), serde(rename = "n")))]
    nick: String,
}

fn main() {
    let _ = Account::change("A").inc_balance(1);
}
