use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(embedded)]
#[derive(Serialize, Deserialize)]
struct Pair<'a, T> {
    left: &'a str,
    right: T,
}

fn main() {}
