use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "boxes")]
#[derive(Serialize, Deserialize)]
struct Boxed<T> {
    #[serde(rename = "_id")]
    id: String,
    value: T,
}

fn main() {
    let _ = Boxed::<i64>::change("A");
}
