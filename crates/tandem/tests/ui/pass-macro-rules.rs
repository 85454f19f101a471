use serde::{Deserialize, Serialize};
use tandem::participant;
use tandem::ParticipantDocument;

// Options given through `macro_rules!` arrive in invisible groups.
macro_rules! document {
    ($name:ident, $collection:literal, $db:expr) => {
        #[participant(collection = $collection, db = $db)]
        #[derive(Serialize, Deserialize)]
        struct $name {
            #[serde(rename = "_id")]
            id: String,
            balance: i64,
        }
    };
}

document!(Account, "accounts", "bank");

fn main() {
    assert_eq!(Account::COLLECTION, "accounts");
    assert_eq!(Account::DB, Some("bank"));
    let _ = Account::change("a").inc_balance(1);
}
