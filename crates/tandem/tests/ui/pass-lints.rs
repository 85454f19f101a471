//! Generated code raises no warnings, even with strict lints.
#![deny(warnings, missing_docs, unused, clippy::all)]

use serde::{Deserialize, Serialize};
use tandem::participant;

/// An account.
#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
pub struct Account {
    /// The id.
    #[serde(rename = "_id")]
    pub id: String,
    /// The balance.
    pub balance: i64,
    /// Labels.
    pub tags: Vec<String>,
}

/// A private document nobody uses.
#[participant(collection = "unused")]
#[derive(Serialize, Deserialize)]
struct Unused {
    #[serde(rename = "_id")]
    id: i64,
    r#type: Option<u8>,
}

fn main() {
    let _ = Account::change("A").inc_balance(1);
}
