//! What is the embedded store's own: `_id` order, first matches, command
//! counts, its ids and sizes. What every store must do is the store contract
//! (`crate::testing::store_contract`), run on this store by
//! `tests/store_contract.rs`.

use super::id::{hash_bson, IdBuildHasher};
use super::*;
use crate::clock::ManualClock;
use bson::{doc, DateTime};
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

mod concurrency;
mod depth;
mod expr_now;
mod sizes;

fn ns() -> Namespace {
    Namespace::new("db", "c")
}

#[test]
fn ids_that_differ_only_at_the_end_spread_over_the_low_bits() {
    // Transaction ids are ObjectIds in hex: made in one second by one
    // process, they share all but their last characters. The hash table
    // picks buckets by the low bits of the hash.
    let buckets: std::collections::HashSet<u64> = (0..4096)
        .map(|_| {
            let id = Bson::String(bson::oid::ObjectId::new().to_hex());
            let mut h = IdBuildHasher::default().build_hasher();
            hash_bson(&id, &mut h);
            h.finish() & 4095
        })
        .collect();
    assert!(
        buckets.len() > 2048,
        "4096 ids fell into {} of 4096 buckets",
        buckets.len()
    );
}

async fn store_with(docs: Vec<Document>) -> MemoryStore {
    let s = MemoryStore::new();
    for d in docs {
        s.insert_one(&ns(), d).await.unwrap();
    }
    s
}

/// Decimal amounts through the store: `$inc` adds in decimal (an integer
/// field becoming a decimal), a guard's `$expr` adds and subtracts in
/// decimal, and a refused `$inc` (a double and a decimal) changes nothing.
#[tokio::test]
async fn decimal_increments_and_guards() {
    let dec = |t: &str| Bson::Decimal128(t.parse().unwrap());
    let s = store_with(vec![
        doc! { "_id": "a", "balance": dec("100.10") },
        doc! { "_id": "b", "balance": 5 },
        doc! { "_id": "c", "balance": 1.5 },
    ])
    .await;
    let inc = |id: &'static str, by: Bson| {
        let s = &s;
        async move {
            s.update_one(
                &ns(),
                doc! {
                    "_id": id,
                    // Enough left: balance + by >= 0.
                    "$expr": { "$gte": [{ "$add": ["$balance", by.clone()] }, 0] },
                },
                doc! { "$inc": { "balance": by } },
                crate::store::UpdateOptions::default(),
            )
            .await
        }
    };
    let matched = |r: Result<crate::store::UpdateOutcome, StoreError>| r.unwrap().matched;
    assert_eq!(matched(inc("a", dec("-20.25")).await), 1);
    assert_eq!(matched(inc("a", dec("-79.86")).await), 0, "not enough");
    assert_eq!(matched(inc("b", dec("-0.50")).await), 1);
    let balance = |id: &'static str| {
        let s = &s;
        async move {
            s.find_one(&ns(), doc! { "_id": id })
                .await
                .unwrap()
                .and_then(|d| d.get("balance").cloned())
        }
    };
    let bytes = |v: Option<Bson>| match v {
        Some(Bson::Decimal128(d)) => d.bytes(),
        other => panic!("not a decimal: {other:?}"),
    };
    assert_eq!(bytes(balance("a").await), bytes(Some(dec("79.85"))));
    assert_eq!(bytes(balance("b").await), bytes(Some(dec("4.50"))));
    let e = s
        .update_one(
            &ns(),
            doc! { "_id": "c" },
            doc! { "$inc": { "balance": dec("1") } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::BadRequest);
    assert_eq!(balance("c").await, Some(Bson::Double(1.5)));
    // `$subtract` in a guard: 79.85 - 79.85 is 0.00, not below 0.
    assert!(s
        .exists(
            &ns(),
            doc! { "_id": "a", "$expr": { "$gte": [{ "$subtract": ["$balance", dec("79.85")] }, 0] } },
        )
        .await
        .unwrap());
}

#[tokio::test]
async fn insert_generates_ids_and_rejects_duplicates() {
    let s = MemoryStore::new();
    s.insert_one(&ns(), doc! { "a": 1 }).await.unwrap();
    let docs = s.documents(&ns());
    assert_eq!(docs.len(), 1);
    assert!(matches!(docs[0].get("_id"), Some(Bson::ObjectId(_))));
    assert_eq!(docs[0].keys().next().map(String::as_str), Some("_id"));

    s.insert_one(&ns(), doc! { "x": 1, "_id": 5 })
        .await
        .unwrap();
    // _id is moved first, as MongoDB does.
    assert_eq!(
        s.find_one(&ns(), doc! { "_id": 5 }).await.unwrap(),
        Some(doc! { "_id": 5, "x": 1 })
    );
    let e = s
        .insert_one(&ns(), doc! { "_id": 5, "y": 2 })
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::DuplicateKey);
    assert_eq!(e.code, Some(11000));
    // Numerically equal _ids are the same _id.
    let e = s.insert_one(&ns(), doc! { "_id": 5.0 }).await.unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::DuplicateKey);
    assert_eq!(
        s.find_one(&ns(), doc! { "_id": 5_i64 }).await.unwrap(),
        Some(doc! { "_id": 5, "x": 1 })
    );
    let e = s.insert_one(&ns(), doc! { "_id": [1] }).await.unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::BadRequest);
    // Namespaces are separate.
    s.insert_one(&Namespace::new("db", "other"), doc! { "_id": 5 })
        .await
        .unwrap();
    assert_eq!(s.documents(&ns()).len(), 2);
    assert!(s.documents(&Namespace::new("nope", "nope")).is_empty());
}

#[tokio::test]
async fn documents_are_ordered_by_id() {
    let s = store_with(vec![
        doc! { "_id": "b" },
        doc! { "_id": 10 },
        doc! { "_id": "a" },
        doc! { "_id": 2.5 },
        doc! { "_id": ObjectId::from_bytes([0; 12]) },
        doc! { "_id": 3_i64 },
    ])
    .await;
    let ids: Vec<Bson> = s
        .documents(&ns())
        .into_iter()
        .map(|d| d.get("_id").unwrap().clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            Bson::Double(2.5),
            Bson::Int64(3),
            Bson::Int32(10),
            Bson::String("a".into()),
            Bson::String("b".into()),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
        ]
    );
    let found = s
        .find(&ns(), doc! {}, FindOptions::default())
        .await
        .unwrap();
    assert_eq!(found.len(), 6);
    assert_eq!(found[0], doc! { "_id": 2.5 });
}

#[tokio::test]
async fn update_each_runs_every_statement_and_counts_one_command() {
    let s = store_with(vec![
        doc! { "_id": 1, "n": 1 },
        doc! { "_id": 2, "n": 1, "s": "text" },
        doc! { "_id": 3, "n": 1 },
    ])
    .await;
    let before = s.command_count();
    let matched = s
        .update_each(
            &ns(),
            vec![
                (doc! { "_id": 1 }, doc! { "$inc": { "n": 1 } }),
                (doc! { "_id": 2, "n": 5 }, doc! { "$inc": { "n": 1 } }),
                (
                    doc! { "_id": 3, "n": { "$gte": 1 } },
                    doc! { "$inc": { "n": 2 } },
                ),
            ],
        )
        .await
        .unwrap();
    assert_eq!(matched, 2);
    assert_eq!(s.command_count() - before, 1);
    // Unordered: a failing statement does not stop the ones after it.
    let err = s
        .update_each(
            &ns(),
            vec![
                (doc! { "_id": 2 }, doc! { "$inc": { "s": 1 } }),
                (doc! { "_id": 3 }, doc! { "$inc": { "n": 10 } }),
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::TypeMismatch, "{err}");
    let n = |d: Option<Document>| d.unwrap().get_i32("n").unwrap();
    assert_eq!(n(s.find_one(&ns(), doc! { "_id": 1 }).await.unwrap()), 2);
    assert_eq!(n(s.find_one(&ns(), doc! { "_id": 2 }).await.unwrap()), 1);
    assert_eq!(n(s.find_one(&ns(), doc! { "_id": 3 }).await.unwrap()), 13);
}

#[tokio::test]
async fn update_one_and_outcomes() {
    let s = store_with(vec![
        doc! { "_id": 1, "n": 1, "tag": "x" },
        doc! { "_id": 2, "n": 1, "tag": "x" },
    ])
    .await;
    let o = s
        .update_one(
            &ns(),
            doc! { "tag": "x" },
            doc! { "$inc": { "n": 1 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        o,
        UpdateOutcome {
            matched: 1,
            modified: 1,
            upserted: false
        }
    );
    // Only the first match (smallest _id) changed.
    assert_eq!(
        s.documents(&ns()),
        vec![
            doc! { "_id": 1, "n": 2, "tag": "x" },
            doc! { "_id": 2, "n": 1, "tag": "x" }
        ]
    );
    // A no-op update matches without modifying.
    let o = s
        .update_one(
            &ns(),
            doc! { "_id": 2 },
            doc! { "$set": { "n": 1 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        o,
        UpdateOutcome {
            matched: 1,
            modified: 0,
            upserted: false
        }
    );
    // Guarded updates: the _id matches but the guard does not.
    let o = s
        .update_one(
            &ns(),
            doc! { "_id": 2, "n": 5 },
            doc! { "$set": { "n": 9 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(o, UpdateOutcome::default());
    let o = s
        .update_one(
            &ns(),
            doc! { "_id": 3 },
            doc! { "$set": { "n": 9 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(o, UpdateOutcome::default());
    let o = s
        .update_one(
            &Namespace::new("x", "y"),
            doc! {},
            doc! { "$set": { "n": 9 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(o, UpdateOutcome::default());
    // _id via $eq also takes the direct path.
    let o = s
        .update_one(
            &ns(),
            doc! { "_id": { "$eq": 2 } },
            doc! { "$set": { "n": 7 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(o.modified, 1);
    assert_eq!(
        s.find_one(&ns(), doc! { "n": 7 }).await.unwrap(),
        Some(doc! { "_id": 2, "n": 7, "tag": "x" })
    );
    // Filters with _id operators scan.
    let o = s
        .update_one(
            &ns(),
            doc! { "_id": { "$gt": 1 } },
            doc! { "$set": { "n": 8 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(o.modified, 1);
    assert_eq!(
        s.find_one(&ns(), doc! { "_id": 2 })
            .await
            .unwrap()
            .unwrap()
            .get_i32("n")
            .unwrap(),
        8
    );
}

#[tokio::test]
async fn failed_updates_leave_the_document_untouched() {
    let s = store_with(vec![doc! { "_id": 1, "a": 1, "s": "text" }]).await;
    let before = s.documents(&ns());
    // $set applies before $inc fails: nothing may be kept.
    let e = s
        .update_one(
            &ns(),
            doc! { "_id": 1 },
            doc! { "$set": { "a": 2 }, "$inc": { "s": 1 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
    assert_eq!(e.code, Some(14));
    assert_eq!(s.documents(&ns()), before);
    let e = s
        .find_one_and_update(
            &ns(),
            doc! { "_id": 1 },
            doc! { "$set": { "a": 2 }, "$push": { "s": 1 } },
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
    assert_eq!(s.documents(&ns()), before);
    let e = s
        .update_one(
            &ns(),
            doc! { "_id": 1 },
            doc! { "$set": { "_id": 2 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::BadRequest);
    let e = s
        .update_one(
            &ns(),
            doc! { "a": { "$bogus": 1 } },
            doc! { "$set": { "a": 2 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::BadRequest);
    assert!(e.message.contains("$bogus"));
    assert_eq!(s.documents(&ns()), before);
}

#[tokio::test]
async fn upserts() {
    let s = MemoryStore::with_clock(Arc::new(ManualClock::default()));
    let o = s
        .update_one(
            &ns(),
            doc! { "_id": "t1", "state": { "$ne": "done" }, "meta.kind": "transfer" },
            doc! { "$set": { "state": "initial" }, "$setOnInsert": { "created": true }, "$currentDate": { "at": true } },
            crate::store::UpdateOptions::upsert(),)
        .await
        .unwrap();
    assert_eq!(
        o,
        UpdateOutcome {
            matched: 0,
            modified: 0,
            upserted: true
        }
    );
    let now = s.clock().now();
    assert_eq!(
        s.documents(&ns()),
        vec![
            doc! { "_id": "t1", "meta": { "kind": "transfer" }, "state": "initial", "created": true, "at": now }
        ]
    );
    // Matching now: $setOnInsert is not applied.
    let o = s
        .update_one(
            &ns(),
            doc! { "_id": "t1" },
            doc! { "$set": { "state": "pending" }, "$setOnInsert": { "created": false } },
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap();
    assert_eq!(
        o,
        UpdateOutcome {
            matched: 1,
            modified: 1,
            upserted: false
        }
    );
    assert!(s
        .find_one(&ns(), doc! {})
        .await
        .unwrap()
        .unwrap()
        .get_bool("created")
        .unwrap());
    // An upsert whose seed _id exists (the guard failed) is a duplicate, as in MongoDB.
    let e = s
        .update_one(
            &ns(),
            doc! { "_id": "t1", "state": "initial" },
            doc! { "$set": { "x": 1 } },
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::DuplicateKey);
    // Without an _id in the filter, one is generated and put first.
    let d = s
        .find_one_and_update(
            &ns(),
            doc! { "k": 1 },
            doc! { "$inc": { "n": 1 } },
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                .with_upsert(true),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.keys().collect::<Vec<_>>(), vec!["_id", "k", "n"]);
    assert!(matches!(d.get("_id"), Some(Bson::ObjectId(_))));
    // Before is None for an upsert.
    let before = s
        .find_one_and_update(
            &ns(),
            doc! { "k": 2 },
            doc! { "$inc": { "n": 1 } },
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::Before)
                .with_upsert(true),
        )
        .await
        .unwrap();
    assert_eq!(before, None);
    assert_eq!(s.documents(&ns()).len(), 3);
    // A failing upsert inserts nothing.
    let e = s
        .update_one(
            &ns(),
            doc! { "_id": "u", "s": "x" },
            doc! { "$inc": { "s": 1 } },
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
    assert_eq!(s.documents(&ns()).len(), 3);
    // No upsert without the flag.
    let d = s
        .find_one_and_update(
            &ns(),
            doc! { "k": 3 },
            doc! { "$inc": { "n": 1 } },
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .unwrap();
    assert_eq!(d, None);
    assert_eq!(s.documents(&ns()).len(), 3);
}

#[tokio::test]
async fn delete_one_deletes_the_first_match() {
    let s = store_with(vec![
        doc! { "_id": 1, "k": "a" },
        doc! { "_id": 2, "k": "a" },
        doc! { "_id": 3, "k": "b" },
    ])
    .await;
    assert_eq!(s.delete_one(&ns(), doc! { "k": "a" }).await.unwrap(), 1);
    assert_eq!(
        s.documents(&ns()),
        vec![doc! { "_id": 2, "k": "a" }, doc! { "_id": 3, "k": "b" }]
    );
    assert_eq!(
        s.delete_one(&ns(), doc! { "_id": 3, "k": "a" })
            .await
            .unwrap(),
        0
    );
    assert_eq!(s.delete_one(&ns(), doc! { "_id": 3 }).await.unwrap(), 1);
    assert_eq!(s.delete_one(&ns(), doc! { "_id": 3 }).await.unwrap(), 0);
    assert_eq!(
        s.delete_one(&Namespace::new("x", "y"), doc! {})
            .await
            .unwrap(),
        0
    );
    assert_eq!(s.documents(&ns()), vec![doc! { "_id": 2, "k": "a" }]);
}

#[tokio::test]
async fn find_sorts_and_limits() {
    let s = store_with(vec![
        doc! { "_id": 1, "state": "pending", "at": DateTime::from_millis(30), "p": 1 },
        doc! { "_id": 2, "state": "done", "at": DateTime::from_millis(10), "p": 2 },
        doc! { "_id": 3, "state": "pending", "at": DateTime::from_millis(20), "p": 1 },
        doc! { "_id": 4, "state": "pending", "p": 2 },
        doc! { "_id": 5, "state": "pending", "at": DateTime::from_millis(5), "p": 1.5 },
    ])
    .await;
    let ids = |docs: Vec<Document>| {
        docs.iter()
            .map(|d| d.get_i32("_id").unwrap())
            .collect::<Vec<_>>()
    };
    let opts = |sort: Document, limit: Option<i64>| FindOptions {
        sort: Some(sort),
        limit,
    };

    let found = s
        .find(
            &ns(),
            doc! { "state": "pending" },
            opts(doc! { "at": 1 }, None),
        )
        .await
        .unwrap();
    // Missing sorts first.
    assert_eq!(ids(found), vec![4, 5, 3, 1]);
    let found = s
        .find(
            &ns(),
            doc! { "state": "pending" },
            opts(doc! { "at": -1 }, Some(2)),
        )
        .await
        .unwrap();
    assert_eq!(ids(found), vec![1, 3]);
    let found = s
        .find(&ns(), doc! {}, opts(doc! { "p": -1, "_id": 1 }, None))
        .await
        .unwrap();
    assert_eq!(ids(found), vec![2, 4, 5, 1, 3]);
    let found = s
        .find(&ns(), doc! {}, opts(doc! { "p": 1 }, Some(-3)))
        .await
        .unwrap();
    assert_eq!(ids(found), vec![1, 3, 5]);
    let found = s
        .find(
            &ns(),
            doc! {},
            FindOptions {
                sort: None,
                limit: Some(2),
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(found), vec![1, 2]);
    let found = s
        .find(
            &ns(),
            doc! {},
            FindOptions {
                sort: None,
                limit: Some(0),
            },
        )
        .await
        .unwrap();
    assert_eq!(found.len(), 5);
    let found = s
        .find(&ns(), doc! { "_id": 3 }, FindOptions::default())
        .await
        .unwrap();
    assert_eq!(ids(found), vec![3]);
    let e = s
        .find(&ns(), doc! {}, opts(doc! { "p": 2 }, None))
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::BadRequest);
    assert!(s
        .find(&Namespace::new("x", "y"), doc! {}, FindOptions::default())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn clock_and_counters() {
    let clock = Arc::new(ManualClock::default());
    let s = MemoryStore::with_clock(clock.clone());
    assert_eq!(s.name(), "memory");
    let t0 = s.now().await.unwrap();
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        s.now().await.unwrap().timestamp_millis(),
        t0.timestamp_millis() + 5000
    );
    assert_eq!(s.clock().now(), clock.now());
    s.insert_one(&ns(), doc! { "_id": 1 }).await.unwrap();
    let _ = s.insert_one(&ns(), doc! { "_id": 1 }).await;
    s.find_one(&ns(), doc! {}).await.unwrap();
    s.find(&ns(), doc! {}, FindOptions::default())
        .await
        .unwrap();
    s.update_one(
        &ns(),
        doc! {},
        doc! { "$set": { "a": 1 } },
        crate::store::UpdateOptions::default(),
    )
    .await
    .unwrap();
    s.find_one_and_update(
        &ns(),
        doc! {},
        doc! { "$set": { "a": 2 } },
        crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
    )
    .await
    .unwrap();
    s.replace_one(&ns(), doc! {}, doc! { "a": 3 })
        .await
        .unwrap();
    s.delete_one(&ns(), doc! {}).await.unwrap();
    s.ensure_index(
        &ns(),
        crate::store::IndexSpec {
            name: "i".into(),
            keys: doc! { "a": 1 },
            expire_after_secs: None,
            partial_filter: None,
        },
    )
    .await
    .unwrap();
    // Clones share data and counters.
    let c = s.clone();
    c.now().await.unwrap();
    assert_eq!(s.command_count(), 12);
    assert_eq!(MemoryStore::default().command_count(), 0);
}

/// An `_id` is kept when it compares equal as MongoDB compares values: a
/// document `_id` with its fields in another order is another `_id`
/// (refused, code 66; taken for the same one, the store held the document
/// under a key its `_id` no longer had, and an upsert then made a second
/// document with the same `_id`), a number of another type is the same.
#[tokio::test]
async fn an_id_is_kept_as_values_compare() {
    let store = MemoryStore::new();
    let c = ns();
    store
        .insert_one(&c, doc! { "_id": { "x": 1, "y": 2 }, "v": 0 })
        .await
        .unwrap();
    let reordered = store
        .update_one(
            &c,
            doc! { "_id": { "x": 1, "y": 2 } },
            doc! { "$set": { "_id": { "y": 2, "x": 1 } } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(reordered.code, Some(66), "{reordered}");
    let replaced = store
        .replace_one(
            &c,
            doc! { "_id": { "x": 1, "y": 2 } },
            doc! { "_id": { "y": 2, "x": 1 }, "v": 1 },
        )
        .await
        .unwrap_err();
    assert_eq!(replaced.code, Some(66), "{replaced}");
    store
        .update_one(
            &c,
            doc! { "_id": { "y": 2, "x": 1 } },
            doc! { "$set": { "v": 2 } },
            crate::store::UpdateOptions::default().with_upsert(true),
        )
        .await
        .unwrap();
    let all = store.documents(&c);
    assert_eq!(all.len(), 2, "two different _ids: {all:?}");
    assert_eq!(all[0], doc! { "_id": { "x": 1, "y": 2 }, "v": 0 });

    store
        .insert_one(&c, doc! { "_id": 1, "v": 0 })
        .await
        .unwrap();
    let outcome = store
        .update_one(
            &c,
            doc! { "_id": 1 },
            doc! { "$set": { "_id": 1.0, "v": 1 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.matched, 1);
    assert_eq!(
        store
            .find_one(&c, doc! { "_id": 1_i64 })
            .await
            .unwrap()
            .map(|d| d.get_i32("v").ok()),
        Some(Some(1))
    );
}

/// A sorted `find` with a limit returns the first matches of a stable
/// sort, ties in `_id` order, whatever the limit: the first `limit` are
/// selected before they are sorted, which must not change which ones.
#[tokio::test]
async fn a_sorted_find_with_a_limit_takes_the_first_of_a_stable_sort() {
    let store = MemoryStore::new();
    let mut all = Vec::new();
    for i in 0..60_i32 {
        // Ids out of order, keys with many ties, some missing (null).
        let id = (i * 37) % 61;
        let mut d = doc! { "_id": id };
        if i % 7 != 0 {
            d.insert("k", (i * 13) % 5);
        }
        store.insert_one(&ns(), d.clone()).await.unwrap();
        all.push(d);
    }
    let in_id_order = store
        .find(&ns(), doc! {}, FindOptions::default())
        .await
        .unwrap();
    for descending in [false, true] {
        let key = |d: &Document| d.get("k").cloned().unwrap_or(Bson::Null);
        let mut want = in_id_order.clone();
        want.sort_by(|a, b| {
            let o = total_cmp(&key(a), &key(b));
            if descending {
                o.reverse()
            } else {
                o
            }
        });
        for limit in [0_i64, 1, 2, 5, 30, 59, 60, 61, 200] {
            let got = store
                .find(
                    &ns(),
                    doc! {},
                    FindOptions {
                        sort: Some(doc! { "k": if descending { -1 } else { 1 } }),
                        limit: Some(limit),
                    },
                )
                .await
                .unwrap();
            let n = if limit == 0 {
                want.len()
            } else {
                (limit as usize).min(want.len())
            };
            assert_eq!(got, want[..n], "descending {descending}, limit {limit}");
        }
    }
    assert_eq!(all.len(), in_id_order.len());
}

/// `update_many` checks its update once for all matches: a malformed one
/// is refused before any match is touched, one changing `_id` fails at the
/// first match and leaves it as it was, and a good one changes every match
/// as `update_one` changes each.
#[tokio::test]
async fn update_many_checks_its_update_once_with_the_same_answers() {
    let docs = || {
        (1..=3)
            .map(|i| doc! { "_id": i, "n": 1, "h": ["a"], "t": ["a", "b"], "s": "x" })
            .collect::<Vec<_>>()
    };
    let store = store_with(docs()).await;
    for (update, code) in [
        (doc! { "$set": { "n": 2 }, "$inc": { "n": 1 } }, 40),
        (doc! { "$set": { "n": 2, "_id": 9 } }, 66),
        (doc! { "$set": { "n": 2 }, "$bogus": { "n": 1 } }, 9),
    ] {
        let e = store
            .update_many(&ns(), doc! {}, update.clone())
            .await
            .unwrap_err();
        assert_eq!(e.code, Some(code), "{update}: {e}");
        assert_eq!(store.documents(&ns()), docs(), "{update}");
    }
    let update = doc! {
        "$set": { "s": "y" },
        "$inc": { "n": 2 },
        "$push": { "h": { "$each": ["b"], "$slice": -2 } },
        "$pull": { "t": "a" },
    };
    let one_by_one = store_with(docs()).await;
    for i in 1..=3 {
        one_by_one
            .update_one(&ns(), doc! { "_id": i }, update.clone(), Default::default())
            .await
            .unwrap();
    }
    let many = store.update_many(&ns(), doc! {}, update).await.unwrap();
    assert_eq!((many.matched, many.modified), (3, 3));
    assert_eq!(store.documents(&ns()), one_by_one.documents(&ns()));
}
