use serde::{Deserialize, Serialize};
use tandem::participant;

mod as_text {
    pub fn serialize<S: serde::Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let text: String = serde::Deserialize::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A date type with a time zone parameter, stored as text (as chrono's is).
#[derive(Serialize, Deserialize, Clone, PartialEq)]
struct DateTime<Tz>(String, std::marker::PhantomData<Tz>);

#[derive(Serialize, Deserialize, Clone, PartialEq)]
struct Utc;

fn is_zero(v: &i64) -> bool {
    *v == 0
}

fn standard_tier() -> Option<String> {
    Some("standard".into())
}

#[participant(collection = "wallets")]
#[derive(Serialize, Deserialize)]
struct Wallet {
    #[serde(rename = "_id")]
    id: String,
    // Stored as text: "99" >= "100" as text.
    #[serde(with = "as_text")]
    balance: i64,
    // Absent when zero, read as zero: `$ne: 0` would pass on the absent field.
    #[serde(default, skip_serializing_if = "is_zero")]
    approved: i64,
    // Stored as text, which does not sort as time.
    expires: DateTime<Utc>,
    renewals: Vec<DateTime<Utc>>,
    // Absent when `None`, but read as `Some("standard")`: a missing field is
    // not `None` here.
    #[serde(default = "standard_tier", skip_serializing_if = "Option::is_none")]
    tier: Option<String>,
}

fn main() {
    let _ = Wallet::change("w").require_balance_gte(100);
    let _ = Wallet::change("w").require_approved_ne(0);
    let _ = Wallet::change("w").inc_approved(1);
    let _ = Wallet::fields().approved();
    let at = DateTime(String::new(), std::marker::PhantomData);
    let _ = Wallet::change("w").require_expires_gt(at);
    // No typed path either: the generic ordered guards would compare text.
    let _ = Wallet::fields().expires();
    let _ = Wallet::fields().renewals();
    let _ = Wallet::change("w").require_tier_missing();
    let _ = Wallet::change("w").require_tier_eq(None::<String>);
}
