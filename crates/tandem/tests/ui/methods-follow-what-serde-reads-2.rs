use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Deserializer, Serialize};
use tandem::participant;

fn lenient<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Option::<i64>::deserialize(d)
}

mod empty_as_none {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.as_deref().unwrap_or(""))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let s = String::deserialize(d)?;
        Ok((!s.is_empty()).then_some(s))
    }
}

#[participant(collection = "wallets")]
#[derive(Serialize, Deserialize)]
struct Wallet {
    #[serde(rename = "_id")]
    id: String,
    // Hash order, anywhere in the type: no equality guard, no typed path.
    per_currency: HashMap<String, i64>,
    by_day: BTreeMap<String, HashSet<String>>,
    boxed: Box<HashSet<String>>,
    // Read by a function, which may refuse an absent field: no typed path
    // (whose generic `unset` removes it).
    #[serde(deserialize_with = "lenient")]
    ceiling: Option<i64>,
    // Stored through a module that may write `None` as something else than
    // `null`: no presence guards.
    #[serde(with = "empty_as_none")]
    text: Option<String>,
}

fn main() {
    let f = Wallet::fields();
    let _ = f.per_currency();
    let _ = Wallet::change("W").require_by_day_eq(BTreeMap::new());
    let _ = Wallet::change("W").require_boxed_ne(Box::new(HashSet::new()));
    let _ = f.ceiling();
    let _ = Wallet::change("W").require_text_missing();
    // Still there.
    let _ = Wallet::change("W").unset_ceiling().require_text_eq(None).set_boxed(Box::new(HashSet::new()));
}
