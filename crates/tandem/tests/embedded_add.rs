//! The embedded store's `$add` where it meets dates, as MongoDB computes it
//! (the protocol fences an insert's fill with `reservedAt + leaseMillis`).

use bson::doc;
use tandem::{MemoryStore, Namespace, Store};

/// A date plus a double: the double is rounded to milliseconds, as MongoDB does.
#[tokio::test]
async fn embedded_add_of_a_date_and_a_double_is_a_date_as_on_mongodb() {
    let store = MemoryStore::new();
    let ns = Namespace::new("db", "c");
    store
        .insert_one(
            &ns,
            doc! { "_id": 1, "at": bson::DateTime::from_millis(10_000) },
        )
        .await
        .unwrap();
    let found = store
        .find_one(
            &ns,
            doc! { "$expr": { "$eq": [
                { "$add": ["$at", 500.0] },
                bson::DateTime::from_millis(10_500),
            ] } },
        )
        .await;
    assert!(
        matches!(found, Ok(Some(_))),
        "MongoDB answers the document (date + 500.0 ms = date 10500); the embedded store: {found:?}"
    );
}

/// A date leaving the range is an error, not a saturated date.
#[tokio::test]
async fn embedded_add_overflowing_a_date_fails_as_on_mongodb() {
    let store = MemoryStore::new();
    let ns = Namespace::new("db", "c");
    store
        .insert_one(
            &ns,
            doc! { "_id": 1, "at": bson::DateTime::from_millis(10_000) },
        )
        .await
        .unwrap();
    let found = store
        .find_one(
            &ns,
            doc! { "$expr": { "$eq": [
                { "$add": ["$at", i64::MAX] },
                bson::DateTime::from_millis(i64::MAX),
            ] } },
        )
        .await;
    assert!(
        found.is_err(),
        "MongoDB fails the read (date overflow in $add); the embedded store: {found:?}"
    );
}
