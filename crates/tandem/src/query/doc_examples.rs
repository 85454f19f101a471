//! The examples in the documentation of the evaluator, run as unit tests:
//! the module is internal, so rustdoc cannot run them.

#[test]
fn matches() {
    use crate::query::matches;
    use bson::doc;

    let account = doc! { "_id": "alice", "balance": 70, "pending": ["t1"] };
    assert!(matches(
        &account,
        &doc! { "balance": { "$gte": 50 }, "pending": "t1" }
    )
    .unwrap());
    assert!(!matches(&account, &doc! { "pending": { "$ne": "t1" } }).unwrap());
}

#[test]
fn matches_at() {
    use crate::query::matches_at;
    use bson::{doc, DateTime};

    let deadline = 1_735_689_600_000_i64; // 2025-01-01T00:00:00Z
    let step = doc! { "_id": "A", "$expr": { "$lt": [ { "$toLong": "$$NOW" }, deadline ] } };
    let account = doc! { "_id": "A" };
    assert!(matches_at(&account, &step, Some(DateTime::from_millis(deadline - 1))).unwrap());
    assert!(!matches_at(&account, &step, Some(DateTime::from_millis(deadline))).unwrap());
    assert!(matches_at(&account, &step, None).is_err());
}

#[test]
fn lookup() {
    use crate::query::lookup;
    use bson::{doc, Bson};

    let d = doc! { "a": { "b": [10, { "c": true }] } };
    assert_eq!(lookup(&d, "a.b.0"), Some(&Bson::Int32(10)));
    assert_eq!(lookup(&d, "a.b.1.c"), Some(&Bson::Boolean(true)));
    assert_eq!(lookup(&d, "a.x"), None);
}

#[test]
fn compare() {
    use crate::query::compare;
    use bson::Bson;
    use std::cmp::Ordering;

    assert_eq!(
        compare(&Bson::Int32(1), &Bson::Double(1.0)),
        Some(Ordering::Equal)
    );
    assert_eq!(
        compare(&Bson::Int64(2), &Bson::Double(1.5)),
        Some(Ordering::Greater)
    );
    assert_eq!(
        compare(&Bson::String("1000".into()), &Bson::Int32(100)),
        None
    );
}

#[test]
fn apply_update() {
    use crate::query::update::apply_update;
    use bson::{doc, DateTime};

    let mut d = doc! { "_id": 1, "balance": 100 };
    let update = doc! { "$inc": { "balance": -30 }, "$push": { "pending": "t1" } };
    apply_update(&mut d, &update, DateTime::now(), false).unwrap();
    assert_eq!(d, doc! { "_id": 1, "balance": 70, "pending": ["t1"] });

    // A failing operator leaves the document untouched, even after others applied.
    let bad = doc! { "$set": { "balance": 0 }, "$push": { "_id": 2 } };
    assert!(apply_update(&mut d, &bad, DateTime::now(), false).is_err());
    assert_eq!(d, doc! { "_id": 1, "balance": 70, "pending": ["t1"] });
}

#[test]
fn upsert_seed() {
    use crate::query::update::upsert_seed;
    use bson::doc;

    let filter = doc! { "_id": "t1", "meta.owner": "alice", "state": { "$ne": "done" } };
    assert_eq!(
        upsert_seed(&filter),
        doc! { "_id": "t1", "meta": { "owner": "alice" } }
    );
}

#[test]
fn validate_replacement() {
    use crate::query::update::validate_replacement;
    use bson::doc;

    assert!(validate_replacement(&doc! { "state": "done" }).is_ok());
    assert!(validate_replacement(&doc! { "$set": { "state": "done" } }).is_err());
}
