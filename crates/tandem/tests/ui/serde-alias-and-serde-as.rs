use serde::{Deserialize, Serialize};
use tandem::participant;

// `alias`: the struct would read `bal` while typed changes write `balance`.
// `serde_as` below `#[participant]`: how the field is stored is unknown here.
#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    #[serde(alias = "bal")]
    balance: i64,
    #[serde_as(as = "DisplayFromStr")]
    limit: i64,
}

fn main() {}
