//! The semantics of every `Store` method on a real server.

mod common;

use bson::{doc, Bson, Document};
use common::TestDb;
use tandem::store::{FindOptions, IndexSpec, ReturnDocument, Store, StoreErrorKind, UpdateOutcome};

#[tokio::test]
async fn insert_one_and_duplicate_key() {
    let Some(t) = TestDb::new("insert").await else {
        return;
    };
    let ns = t.ns("docs");
    t.store
        .insert_one(&ns, doc! { "_id": 1, "v": "a" })
        .await
        .unwrap();
    let err = t
        .store
        .insert_one(&ns, doc! { "_id": 1, "v": "b" })
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::DuplicateKey, "{err}");
    assert_eq!(err.code, Some(11000));
    assert!(!err.kind.is_retryable());
    let found = t.store.find_one(&ns, doc! { "_id": 1 }).await.unwrap();
    assert_eq!(found, Some(doc! { "_id": 1, "v": "a" }));
    t.drop().await;
}

#[tokio::test]
async fn update_one_matches_modifies_and_upserts() {
    let Some(t) = TestDb::new("update").await else {
        return;
    };
    let ns = t.ns("docs");
    t.store
        .insert_one(&ns, doc! { "_id": "a", "n": 1 })
        .await
        .unwrap();

    let out = t
        .store
        .update_one(&ns, doc! { "_id": "a" }, doc! { "$inc": { "n": 1 } }, false)
        .await
        .unwrap();
    assert_eq!(
        out,
        UpdateOutcome {
            matched: 1,
            modified: 1,
            upserted: false
        }
    );

    // Matched but nothing to change.
    let out = t
        .store
        .update_one(&ns, doc! { "_id": "a" }, doc! { "$set": { "n": 2 } }, false)
        .await
        .unwrap();
    assert_eq!((out.matched, out.modified, out.upserted), (1, 0, false));

    // No match, no upsert.
    let out = t
        .store
        .update_one(
            &ns,
            doc! { "_id": "zz" },
            doc! { "$set": { "n": 9 } },
            false,
        )
        .await
        .unwrap();
    assert_eq!(out, UpdateOutcome::default());
    assert_eq!(
        t.store.find_one(&ns, doc! { "_id": "zz" }).await.unwrap(),
        None
    );

    // Upsert inserts, with $setOnInsert applied only then.
    let out = t
        .store
        .update_one(
            &ns,
            doc! { "_id": "b" },
            doc! { "$set": { "n": 5 }, "$setOnInsert": { "created": true } },
            true,
        )
        .await
        .unwrap();
    assert_eq!((out.matched, out.modified, out.upserted), (0, 0, true));
    let out = t
        .store
        .update_one(
            &ns,
            doc! { "_id": "b" },
            doc! { "$set": { "n": 6 }, "$setOnInsert": { "created": false } },
            true,
        )
        .await
        .unwrap();
    assert_eq!((out.matched, out.modified, out.upserted), (1, 1, false));
    assert_eq!(
        t.store.find_one(&ns, doc! { "_id": "b" }).await.unwrap(),
        Some(doc! { "_id": "b", "n": 6, "created": true })
    );

    // $currentDate stamps the server's time.
    t.store
        .update_one(
            &ns,
            doc! { "_id": "a" },
            doc! { "$currentDate": { "lastModified": true } },
            false,
        )
        .await
        .unwrap();
    let a = t
        .store
        .find_one(&ns, doc! { "_id": "a" })
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(a.get("lastModified"), Some(Bson::DateTime(_))),
        "{a}"
    );
    t.drop().await;
}

#[tokio::test]
async fn update_each_sends_one_command_and_counts_matches() {
    let Some(t) = TestDb::new("update_each").await else {
        return;
    };
    let ns = t.ns("docs");
    for id in ["a", "b", "c"] {
        t.store
            .insert_one(&ns, doc! { "_id": id, "n": 1, "s": "text" })
            .await
            .unwrap();
    }
    let before = t.store.metrics();
    let matched = t
        .store
        .update_each(
            &ns,
            vec![
                (doc! { "_id": "a" }, doc! { "$inc": { "n": 10 } }),
                (
                    doc! { "_id": "b", "n": { "$gte": 1 } },
                    doc! { "$inc": { "n": 20 } },
                ),
                // Matches nothing: the others still land.
                (doc! { "_id": "c", "n": 5 }, doc! { "$inc": { "n": 30 } }),
            ],
        )
        .await
        .unwrap();
    assert_eq!(matched, 2);
    let after = t.store.metrics();
    assert_eq!(after.update_each - before.update_each, 1);
    assert_eq!(
        after.total - before.total,
        1,
        "one command for three statements"
    );
    let n = |d: Option<Document>| d.unwrap().get_i32("n").unwrap();
    assert_eq!(
        n(t.store.find_one(&ns, doc! { "_id": "a" }).await.unwrap()),
        11
    );
    assert_eq!(
        n(t.store.find_one(&ns, doc! { "_id": "b" }).await.unwrap()),
        21
    );
    assert_eq!(
        n(t.store.find_one(&ns, doc! { "_id": "c" }).await.unwrap()),
        1
    );

    // A statement that fails is reported with its kind; unordered, the others land.
    let err = t
        .store
        .update_each(
            &ns,
            vec![
                (doc! { "_id": "a" }, doc! { "$inc": { "s": 1 } }),
                (doc! { "_id": "c" }, doc! { "$inc": { "n": 1 } }),
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::TypeMismatch, "{err}");
    assert_eq!(
        n(t.store.find_one(&ns, doc! { "_id": "c" }).await.unwrap()),
        2
    );
    t.drop().await;
}

/// Records keep their newest history lines with `$push: {$each, $slice: -n}`.
#[tokio::test]
async fn push_with_slice_keeps_the_newest_elements() {
    let Some(t) = TestDb::new("slice").await else {
        return;
    };
    let ns = t.ns("docs");
    t.store
        .insert_one(&ns, doc! { "_id": 1, "history": [1, 2, 3] })
        .await
        .unwrap();
    for n in 4..=6 {
        t.store
            .update_one(
                &ns,
                doc! { "_id": 1 },
                doc! { "$push": { "history": { "$each": [n], "$slice": -3 } } },
                false,
            )
            .await
            .unwrap();
    }
    let d = t
        .store
        .find_one(&ns, doc! { "_id": 1 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        d.get_array("history").unwrap(),
        &vec![Bson::Int32(4), Bson::Int32(5), Bson::Int32(6)]
    );
    t.drop().await;
}

#[tokio::test]
async fn array_operators_and_ne_on_arrays() {
    let Some(t) = TestDb::new("arrays").await else {
        return;
    };
    let ns = t.ns("docs");
    t.store
        .insert_one(&ns, doc! { "_id": 1, "list": ["a", "b"] })
        .await
        .unwrap();
    t.store
        .insert_one(&ns, doc! { "_id": 2, "list": ["c"] })
        .await
        .unwrap();
    t.store
        .insert_one(&ns, doc! { "_id": 3, "list": [] })
        .await
        .unwrap();

    // $ne on an array matches documents whose array holds no such element.
    let ids = ids(t
        .store
        .find(&ns, doc! { "list": { "$ne": "a" } }, sort_by_id())
        .await
        .unwrap());
    assert_eq!(ids, vec![Bson::Int32(2), Bson::Int32(3)]);
    // Equality on an array means "contains".
    let ids = ids_of(&t, &ns, doc! { "list": "b" }).await;
    assert_eq!(ids, vec![Bson::Int32(1)]);
    // "list.0": { $exists: false } means "empty or missing".
    let ids = ids_of(&t, &ns, doc! { "list.0": { "$exists": false } }).await;
    assert_eq!(ids, vec![Bson::Int32(3)]);

    // A guarded $addToSet on a nested path applies once.
    for _ in 0..2 {
        t.store
            .update_one(
                &ns,
                doc! { "_id": 1, "_tandem.tombstones": { "$ne": "tx1" } },
                doc! { "$addToSet": { "_tandem.tombstones": "tx1" } },
                false,
            )
            .await
            .unwrap();
    }
    let out = t
        .store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$addToSet": { "_tandem.tombstones": "tx1" } },
            false,
        )
        .await
        .unwrap();
    assert_eq!((out.matched, out.modified), (1, 0));
    let one = t
        .store
        .find_one(&ns, doc! { "_id": 1 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        one.get_document("_tandem").unwrap(),
        &doc! { "tombstones": ["tx1"] }
    );

    // $push and $pull.
    t.store
        .update_one(
            &ns,
            doc! { "_id": 2 },
            doc! { "$push": { "list": "d" } },
            false,
        )
        .await
        .unwrap();
    t.store
        .update_one(
            &ns,
            doc! { "_id": 2 },
            doc! { "$pull": { "list": "c" } },
            false,
        )
        .await
        .unwrap();
    let two = t
        .store
        .find_one(&ns, doc! { "_id": 2 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(two.get_array("list").unwrap(), &vec![Bson::from("d")]);

    // $and / $or / $in / $nin / ranges.
    let ids = ids_of(
        &t,
        &ns,
        doc! { "$or": [ { "_id": 1 }, { "_id": { "$gte": 3 } } ], "_id": { "$nin": [3] } },
    )
    .await;
    assert_eq!(ids, vec![Bson::Int32(1)]);
    let ids = ids_of(
        &t,
        &ns,
        doc! { "$and": [ { "_id": { "$in": [1, 2, 3] } }, { "_id": { "$lt": 3, "$gt": 1 } } ] },
    )
    .await;
    assert_eq!(ids, vec![Bson::Int32(2)]);
    t.drop().await;
}

#[tokio::test]
async fn find_one_and_update_returns_before_or_after() {
    let Some(t) = TestDb::new("fam").await else {
        return;
    };
    let ns = t.ns("docs");
    t.store
        .insert_one(&ns, doc! { "_id": 1, "n": 1 })
        .await
        .unwrap();

    let before = t
        .store
        .find_one_and_update(
            &ns,
            doc! { "_id": 1 },
            doc! { "$inc": { "n": 1 } },
            ReturnDocument::Before,
            false,
        )
        .await
        .unwrap();
    assert_eq!(before, Some(doc! { "_id": 1, "n": 1 }));
    let after = t
        .store
        .find_one_and_update(
            &ns,
            doc! { "_id": 1 },
            doc! { "$inc": { "n": 1 } },
            ReturnDocument::After,
            false,
        )
        .await
        .unwrap();
    assert_eq!(after, Some(doc! { "_id": 1, "n": 3 }));

    // No match, no upsert: nothing.
    let none = t
        .store
        .find_one_and_update(
            &ns,
            doc! { "_id": 1, "n": 0 },
            doc! { "$inc": { "n": 1 } },
            ReturnDocument::After,
            false,
        )
        .await
        .unwrap();
    assert_eq!(none, None);

    // Upsert returning the document before: there was none.
    let before = t
        .store
        .find_one_and_update(
            &ns,
            doc! { "_id": 2 },
            doc! { "$set": { "n": 1 } },
            ReturnDocument::Before,
            true,
        )
        .await
        .unwrap();
    assert_eq!(before, None);
    assert_eq!(
        t.store.find_one(&ns, doc! { "_id": 2 }).await.unwrap(),
        Some(doc! { "_id": 2, "n": 1 })
    );

    // Upsert returning the document after.
    let after = t
        .store
        .find_one_and_update(
            &ns,
            doc! { "_id": 3 },
            doc! { "$set": { "n": 1 }, "$setOnInsert": { "new": true } },
            ReturnDocument::After,
            true,
        )
        .await
        .unwrap();
    assert_eq!(after, Some(doc! { "_id": 3, "n": 1, "new": true }));
    t.drop().await;
}

#[tokio::test]
async fn replace_one_and_delete_one() {
    let Some(t) = TestDb::new("replace").await else {
        return;
    };
    let ns = t.ns("docs");
    t.store
        .insert_one(&ns, doc! { "_id": 1, "a": 1, "b": 2 })
        .await
        .unwrap();

    let out = t
        .store
        .replace_one(&ns, doc! { "_id": 1 }, doc! { "_id": 1, "c": 3 })
        .await
        .unwrap();
    assert_eq!((out.matched, out.modified, out.upserted), (1, 1, false));
    assert_eq!(
        t.store.find_one(&ns, doc! { "_id": 1 }).await.unwrap(),
        Some(doc! { "_id": 1, "c": 3 })
    );
    // A replacement without _id keeps the _id.
    t.store
        .replace_one(&ns, doc! { "_id": 1 }, doc! { "d": 4 })
        .await
        .unwrap();
    assert_eq!(
        t.store.find_one(&ns, doc! { "_id": 1 }).await.unwrap(),
        Some(doc! { "_id": 1, "d": 4 })
    );
    let out = t
        .store
        .replace_one(&ns, doc! { "_id": 2 }, doc! { "_id": 2, "x": 1 })
        .await
        .unwrap();
    assert_eq!(out, UpdateOutcome::default());
    assert_eq!(
        t.store.find_one(&ns, doc! { "_id": 2 }).await.unwrap(),
        None
    );

    assert_eq!(t.store.delete_one(&ns, doc! { "_id": 1 }).await.unwrap(), 1);
    assert_eq!(t.store.delete_one(&ns, doc! { "_id": 1 }).await.unwrap(), 0);
    assert_eq!(
        t.store.find_one(&ns, doc! { "_id": 1 }).await.unwrap(),
        None
    );
    t.drop().await;
}

#[tokio::test]
async fn find_sorts_and_limits() {
    let Some(t) = TestDb::new("find").await else {
        return;
    };
    let ns = t.ns("docs");
    for (id, n, group) in [
        (1, 30, "x"),
        (2, 10, "x"),
        (3, 50, "y"),
        (4, 20, "x"),
        (5, 40, "x"),
    ] {
        t.store
            .insert_one(&ns, doc! { "_id": id, "n": n, "group": group })
            .await
            .unwrap();
    }
    let all = t
        .store
        .find(&ns, doc! {}, FindOptions::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 5);

    let top = t
        .store
        .find(
            &ns,
            doc! { "group": "x" },
            FindOptions {
                sort: Some(doc! { "n": -1 }),
                limit: Some(2),
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(top), vec![Bson::Int32(5), Bson::Int32(1)]);

    let asc = t
        .store
        .find(
            &ns,
            doc! { "n": { "$gte": 20 } },
            FindOptions {
                sort: Some(doc! { "n": 1 }),
                limit: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        ids(asc),
        vec![
            Bson::Int32(4),
            Bson::Int32(1),
            Bson::Int32(5),
            Bson::Int32(3)
        ]
    );
    let none = t
        .store
        .find(&ns, doc! { "group": "z" }, FindOptions::default())
        .await
        .unwrap();
    assert!(none.is_empty());
    // A collection that does not exist is empty.
    let missing = t
        .store
        .find(&t.ns("missing"), doc! {}, FindOptions::default())
        .await
        .unwrap();
    assert!(missing.is_empty());
    t.drop().await;
}

#[tokio::test]
async fn inc_of_a_string_is_a_type_mismatch() {
    let Some(t) = TestDb::new("types").await else {
        return;
    };
    let ns = t.ns("docs");
    t.store
        .insert_one(&ns, doc! { "_id": 1, "s": "text", "big": i64::MAX })
        .await
        .unwrap();
    let err = t
        .store
        .update_one(&ns, doc! { "_id": 1 }, doc! { "$inc": { "s": 1 } }, false)
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::TypeMismatch, "{err}");
    assert_eq!(err.code, Some(14));

    let err = t
        .store
        .find_one_and_update(
            &ns,
            doc! { "_id": 1 },
            doc! { "$inc": { "s": 1 } },
            ReturnDocument::After,
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::TypeMismatch, "{err}");

    let err = t
        .store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$inc": { "big": 1_i64 } },
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Overflow, "{err}");
    assert!(err.code.is_some());
    // Nothing changed.
    assert_eq!(
        t.store.find_one(&ns, doc! { "_id": 1 }).await.unwrap(),
        Some(doc! { "_id": 1, "s": "text", "big": i64::MAX })
    );
    t.drop().await;
}

#[tokio::test]
async fn documents_over_16_mib_are_too_large() {
    let Some(t) = TestDb::new("large").await else {
        return;
    };
    let ns = t.ns("docs");
    let mib = 1024 * 1024;

    // Inserting a document over the limit.
    let err = t
        .store
        .insert_one(&ns, doc! { "_id": 1, "blob": "x".repeat(16 * mib) })
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::DocumentTooLarge, "{err}");

    // Growing a document over the limit with an update.
    t.store
        .insert_one(&ns, doc! { "_id": 2, "blob": "x".repeat(12 * mib) })
        .await
        .unwrap();
    let err = t
        .store
        .update_one(
            &ns,
            doc! { "_id": 2 },
            doc! { "$set": { "more": "y".repeat(5 * mib) } },
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::DocumentTooLarge, "{err}");
    assert!(err.code.is_some());

    let err = t
        .store
        .find_one_and_update(
            &ns,
            doc! { "_id": 2 },
            doc! { "$set": { "more": "y".repeat(5 * mib) } },
            ReturnDocument::After,
            false,
        )
        .await
        .unwrap_err();
    // MongoDB answers 17419/10334 (DocumentTooLarge). SecantusDB 0.7.0b3 fails
    // this findAndModify with code 1 (InternalError, "internal server error"),
    // which is mapped as it is: Other, not retried.
    assert!(
        err.kind == StoreErrorKind::DocumentTooLarge
            || (err.kind == StoreErrorKind::Other && err.code == Some(1)),
        "{err}"
    );
    let two = t
        .store
        .find_one(&ns, doc! { "_id": 2 })
        .await
        .unwrap()
        .unwrap();
    assert!(!two.contains_key("more"));
    t.drop().await;
}

#[tokio::test]
async fn ensure_index_is_idempotent() {
    let Some(t) = TestDb::new("index").await else {
        return;
    };
    let ns = t.ns("txns");
    let ttl = IndexSpec {
        name: "expires".into(),
        keys: doc! { "expiresAt": 1 },
        expire_after_secs: Some(3600),
        partial_filter: None,
    };
    let partial = IndexSpec {
        name: "state_lastModified".into(),
        keys: doc! { "state": 1, "lastModified": 1 },
        expire_after_secs: None,
        partial_filter: Some(doc! { "state": { "$in": ["pending", "applied"] } }),
    };
    for _ in 0..2 {
        t.store.ensure_index(&ns, ttl.clone()).await.unwrap();
        t.store.ensure_index(&ns, partial.clone()).await.unwrap();
    }

    let mut cursor = t
        .store
        .collection(&ns)
        .list_indexes()
        .await
        .expect("list indexes");
    let mut found = Vec::new();
    while cursor.advance().await.unwrap() {
        found.push(cursor.deserialize_current().unwrap());
    }
    let by_name = |name: &str| {
        found
            .iter()
            .find(|m| m.options.as_ref().and_then(|o| o.name.as_deref()) == Some(name))
            .unwrap_or_else(|| panic!("index {name} in {found:?}"))
            .clone()
    };
    let e = by_name("expires");
    assert_eq!(e.keys, doc! { "expiresAt": 1 });
    assert_eq!(
        e.options.unwrap().expire_after,
        Some(std::time::Duration::from_secs(3600))
    );
    let p = by_name("state_lastModified");
    assert_eq!(
        p.options.unwrap().partial_filter_expression,
        Some(doc! { "state": { "$in": ["pending", "applied"] } })
    );

    // The same name with another definition is refused.
    let err = t
        .store
        .ensure_index(
            &ns,
            IndexSpec {
                expire_after_secs: Some(60),
                ..ttl
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::BadRequest, "{err}");
    assert!(matches!(err.code, Some(85) | Some(86)), "{err:?}");
    t.drop().await;
}

#[tokio::test]
async fn metrics_count_commands_per_kind() {
    let Some(t) = TestDb::new("metrics").await else {
        return;
    };
    let ns = t.ns("docs");
    let start = t.store.metrics();
    assert_eq!(start.ping, 1, "connect pings once: {start:?}");

    t.store.insert_one(&ns, doc! { "_id": 1 }).await.unwrap();
    let _ = t.store.insert_one(&ns, doc! { "_id": 1 }).await;
    t.store
        .update_one(&ns, doc! { "_id": 1 }, doc! { "$set": { "a": 1 } }, false)
        .await
        .unwrap();
    t.store
        .find_one_and_update(
            &ns,
            doc! { "_id": 1 },
            doc! { "$set": { "a": 2 } },
            ReturnDocument::After,
            false,
        )
        .await
        .unwrap();
    t.store
        .replace_one(&ns, doc! { "_id": 1 }, doc! { "b": 1 })
        .await
        .unwrap();
    t.store.find_one(&ns, doc! { "_id": 1 }).await.unwrap();
    t.store
        .find(&ns, doc! {}, FindOptions::default())
        .await
        .unwrap();
    t.store.delete_one(&ns, doc! { "_id": 1 }).await.unwrap();
    t.store.now().await.unwrap();

    // Clones share the counters.
    let m = t.store.clone().metrics();
    assert_eq!(m.insert_one, 2);
    assert_eq!(m.update_one, 1);
    assert_eq!(m.find_one_and_update, 1);
    assert_eq!(m.replace_one, 1);
    assert_eq!(m.find_one, 1);
    assert_eq!(m.find, 1);
    assert_eq!(m.delete_one, 1);
    assert_eq!(m.hello, 1);
    assert_eq!(m.create_indexes, 0);
    assert_eq!(m.total, start.total + 9);
    assert_eq!(m.failures, 1);
    assert_eq!(m.retries, 0);
    assert_eq!(m.get(tandem_mongodb::Command::InsertOne), 2);
    assert_eq!(t.store.name(), "mongodb");
    t.drop().await;
}

fn sort_by_id() -> FindOptions {
    FindOptions {
        sort: Some(doc! { "_id": 1 }),
        limit: None,
    }
}

fn ids(docs: Vec<Document>) -> Vec<Bson> {
    docs.into_iter()
        .map(|d| d.get("_id").cloned().unwrap_or(Bson::Null))
        .collect()
}

async fn ids_of(t: &TestDb, ns: &tandem::store::Namespace, filter: Document) -> Vec<Bson> {
    ids(t.store.find(ns, filter, sort_by_id()).await.unwrap())
}
