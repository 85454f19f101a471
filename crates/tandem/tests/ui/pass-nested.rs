use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(embedded)]
#[derive(Serialize, Deserialize)]
struct Geo {
    lat: f64,
}

#[participant(embedded)]
#[derive(Serialize, Deserialize)]
struct Address {
    city: String,
    #[participant(nested)]
    geo: Option<Geo>,
}

#[participant(collection = "customers")]
#[derive(Serialize, Deserialize)]
struct Customer {
    #[serde(rename = "_id")]
    id: String,
    #[participant(nested)]
    address: Address,
}

fn main() {
    let f = Customer::fields();
    assert_eq!(f.address().geo().lat().path(), "address.geo.lat");
    let _ = Customer::change("c")
        .set(f.address().city(), "Oslo".to_owned())
        .inc(f.address().geo().lat(), 1.5)
        .require_eq(f.address().city(), "Bergen".to_owned());
}
