use bson::oid::ObjectId;
use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "a")]
#[derive(Serialize, Deserialize)]
struct ByObjectId {
    #[serde(rename = "_id")]
    id: ObjectId,
    n: i32,
}

#[participant(collection = "b")]
#[derive(Serialize, Deserialize)]
struct ByI64 {
    #[participant(id)]
    #[serde(rename = "_id")]
    key: i64,
    n: i32,
}

#[participant(collection = "c")]
#[derive(Serialize, Deserialize)]
struct ByOptionalObjectId {
    #[serde(rename = "_id", skip_serializing_if = "Option::is_none")]
    id: Option<ObjectId>,
    n: i32,
}

fn main() {
    let oid = ObjectId::new();
    let _ = ByObjectId::change(oid).inc_n(1);
    let _ = ByI64::change(5_000_000_000).inc_n(1);
    let _ = ByI64::delete(7);
    let _ = ByOptionalObjectId::change(oid).inc_n(1);
}
