use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use tandem::participant;

fn some_default() -> Option<String> {
    Some("default".into())
}

#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
    // Serialized in hash order: equal values need not be equal in BSON.
    per_currency: HashMap<String, i64>,
    regions: Vec<HashSet<String>>,
    // Written by serde, never read: the struct reads its default.
    #[serde(skip_deserializing)]
    cached: i64,
    // An absent field reads as `Some("default")`.
    #[serde(default = "some_default")]
    note: Option<String>,
}

fn main() {
    let _ = Account::change("A").require_per_currency_eq(HashMap::new());
    let _ = Account::change("A").pull_regions(HashSet::new());
    let _ = Account::change("A").set_cached(1);
    let _ = Account::change("A").require_note_missing();
    // Still there: a set, and `None` as serde stores it.
    let _ = Account::change("A").set_per_currency(HashMap::new()).unset_note();
}
