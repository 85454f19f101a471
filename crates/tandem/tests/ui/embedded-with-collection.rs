use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(embedded, collection = "addresses")]
#[derive(Serialize, Deserialize)]
struct Address {
    city: String,
}

fn main() {}
