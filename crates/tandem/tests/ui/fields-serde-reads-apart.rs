use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use tandem::participant;

#[derive(Deserialize)]
struct Legacy {
    #[serde(rename = "_id")]
    id: String,
    #[serde(rename = "bal")]
    balance: i64,
}

impl From<Legacy> for FromLegacy {
    fn from(l: Legacy) -> Self {
        FromLegacy { id: l.id, balance: l.balance }
    }
}

// Read through another type: the typed changes would write `balance`,
// which the struct reads from `bal`.
#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
#[serde(from = "Legacy")]
struct FromLegacy {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
}

#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
    // Seen unevaluated: the field has typed changes in builds without it.
    #[cfg(any())]
    secret: i64,
    // A catch-all would read `_tandem` and the marker, and write them back;
    // in an `Option`, or skipped by this attribute alone, too.
    #[serde(flatten)]
    extra: BTreeMap<String, i64>,
    #[serde(flatten)]
    more: Option<HashMap<String, i64>>,
    #[participant(skip)]
    #[serde(flatten)]
    rest: bson::Document,
    // Skipped by this attribute, but serde reads and writes the marker.
    #[participant(skip)]
    #[serde(default, rename = "pendingTransactions")]
    pending: i64,
    // Skipped on one side only, stored as tandem's own field.
    #[serde(skip_serializing, rename = "_tandem")]
    audit: Option<String>,
}

#[participant(embedded)]
#[derive(Serialize, Deserialize)]
struct Codes {
    // `codes.01` is no path tandem accepts.
    #[serde(rename = "01")]
    first: i64,
}

fn main() {}
