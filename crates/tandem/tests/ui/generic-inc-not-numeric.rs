use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    owner: String,
}

fn main() {
    let f = Account::fields();
    let _ = Account::change("A").inc(f.owner(), "x".to_owned());
}
