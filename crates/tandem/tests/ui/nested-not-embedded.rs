use serde::{Deserialize, Serialize};
use tandem::participant;

#[derive(Serialize, Deserialize)]
struct Address {
    city: String,
}

#[participant(collection = "customers")]
#[derive(Serialize, Deserialize)]
struct Customer {
    #[serde(rename = "_id")]
    id: String,
    #[participant(nested)]
    address: Address,
}

fn main() {}
