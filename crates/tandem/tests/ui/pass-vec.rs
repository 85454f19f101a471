use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "carts")]
#[derive(Serialize, Deserialize)]
struct Cart {
    #[serde(rename = "_id")]
    id: String,
    items: Vec<String>,
    counts: Vec<i64>,
}

fn main() {
    let _ = Cart::change("c")
        .push_items("apple")
        .pull_counts(5_000_000_000);
    let f = Cart::fields();
    let _ = Cart::change("c")
        .push(f.items(), "pear".to_owned())
        .inc(f.counts().index(0), 1);
    let _ = Cart::change("c").set_items(vec!["a".to_owned()]);
}
