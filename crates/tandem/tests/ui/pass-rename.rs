use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "people")]
#[derive(Serialize, Deserialize)]
#[serde(rename_all(
    serialize = "SCREAMING-KEBAB-CASE",
    deserialize = "SCREAMING-KEBAB-CASE"
))]
struct Person {
    #[serde(rename = "_id")]
    id: String,
    first_name: String,
    #[serde(rename(serialize = "yrs", deserialize = "yrs"))]
    age: i32,
    // One name, its two sides given by two attributes.
    #[serde(rename(serialize = "town"))]
    #[serde(rename(deserialize = "town"))]
    city: String,
}

fn main() {
    assert_eq!(Person::fields().first_name().path(), "FIRST-NAME");
    assert_eq!(Person::fields().age().path(), "yrs");
    assert_eq!(Person::fields().city().path(), "town");
    let _ = Person::change("p").set_first_name("Ada").inc_age(1);
}
