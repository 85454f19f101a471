use serde::{Deserialize, Serialize};
use tandem::participant;

// Each side of serde named apart: the struct would read `bal` (or the
// camel-case names) while typed changes write `balance` (or snake case).
#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
#[serde(rename_all(serialize = "snake_case", deserialize = "camelCase"))]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    #[serde(rename(serialize = "balance", deserialize = "bal"))]
    balance: i64,
    #[serde(rename(deserialize = "lim"))]
    limit: i64,
    #[serde(rename(serialize = "owner_name"))]
    owner: String,
    // Both sides one name: accepted.
    #[serde(rename(serialize = "credit", deserialize = "credit"))]
    credit_line: i64,
}

fn main() {}
