use tandem::participant;

#[participant(collection = "accounts")]
#[derive(Debug, Clone)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
}

fn main() {
    let _ = Account::change("A").inc_balance(1);
}
