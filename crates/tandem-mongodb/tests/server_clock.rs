//! Server-clock deadline fencing on a real server: filters whose `$expr`
//! compares the server's `$$NOW` with a time, as participant steps carry them:
//!
//! ```text
//! { _id: "A", $expr: { $lt:  [ { $toLong: "$$NOW" }, <deadline ms> ] } }   before a deadline
//! { _id: "A", $expr: { $gte: [ { $toLong: "$$NOW" }, <time ms> ] } }       at or after a time
//! ```
//!
//! The same filters are run against the embedded [`MemoryStore`], which must
//! give the same answers. The direct date comparison `$lt: ["$$NOW", <date>]`
//! is where servers differ: MongoDB compares the two dates; SecantusDB (the
//! test server) treats `$$NOW` and a date as unordered, so `$lt`, `$gt` and
//! `$eq` match nothing and `$lte`, `$gte` and `$ne` match whatever the date.
//! The test tells the servers apart by the `secantusVersion` field that
//! SecantusDB adds to `buildInfo` (its `version` is the MongoDB version it
//! emulates, e.g. 8.2.11), and asserts each one's behaviour. That is why the
//! protocol converts `$$NOW` with `$toLong` before comparing.

mod common;

use bson::{doc, Bson, DateTime, Document};
use common::TestDb;
use futures::TryStreamExt;
use tandem::store::{FindOptions, Namespace, ReturnDocument, Store};
use tandem::MemoryStore;

/// 2000-01-01T00:00:00Z: long past.
const PAST_MS: i64 = 946_684_800_000;
/// 2100-01-01T00:00:00Z: far in the future.
const FUTURE_MS: i64 = 4_102_444_800_000;

/// Applies only before `deadline` (ms since the epoch).
fn before(deadline: i64) -> Document {
    doc! { "$lt": [ { "$toLong": "$$NOW" }, deadline ] }
}

/// Applies only at or after `time` (ms since the epoch).
fn from(time: i64) -> Document {
    doc! { "$gte": [ { "$toLong": "$$NOW" }, time ] }
}

/// The `buildInfo` reply of the test server.
async fn build_info(t: &TestDb) -> Document {
    t.store
        .client()
        .database("admin")
        .run_command(doc! { "buildInfo": 1 })
        .await
        .expect("buildInfo")
}

/// SecantusDB's version, when the server is SecantusDB: its `buildInfo`
/// carries a `secantusVersion` field next to the MongoDB version it emulates.
fn secantus_version(build_info: &Document) -> Option<String> {
    build_info
        .get_str("secantusVersion")
        .ok()
        .map(str::to_owned)
}

/// Runs `filter` through every filtering call of `store` on `ns`, where the
/// only document is `{_id: "A", n: <n>}`, and returns whether each call
/// matched; all of them must agree. The updates are no-ops on `n`, so the
/// document is left as it was.
async fn matched_by_every_call(store: &dyn Store, ns: &Namespace, filter: &Document) -> bool {
    let no_op = doc! { "$inc": { "n": 0 } };
    let found_one = store.find_one(ns, filter.clone()).await.unwrap().is_some();
    let found = store
        .find(ns, filter.clone(), FindOptions::default())
        .await
        .unwrap()
        .len();
    let counted = store.count(ns, filter.clone()).await.unwrap();
    let updated = store
        .update_one(
            ns,
            filter.clone(),
            no_op.clone(),
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap()
        .matched;
    let returned = store
        .find_one_and_update(
            ns,
            filter.clone(),
            no_op.clone(),
            tandem::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .unwrap()
        .is_some();
    let each = store
        .update_each(ns, vec![(filter.clone(), no_op)])
        .await
        .unwrap();
    let all = [
        u64::from(found_one),
        found as u64,
        counted,
        updated,
        u64::from(returned),
        each,
    ];
    assert!(
        all == [0; 6] || all == [1; 6],
        "{}: calls disagree on {filter}: find_one, find, count, update_one, find_one_and_update, update_each = {all:?}",
        store.name()
    );
    all[0] == 1
}

#[tokio::test]
async fn to_long_now_fences_steps_by_deadline() {
    let Some(t) = TestDb::new("clock_fence").await else {
        return;
    };
    let ns = t.ns("docs");
    let memory = MemoryStore::new();
    for store in [&t.store as &dyn Store, &memory] {
        store
            .insert_one(
                &ns,
                doc! { "_id": "A", "n": 0, "pendingTransactions": ["T"] },
            )
            .await
            .unwrap();
    }
    let cases = [
        // Before a far-future deadline: applies.
        (doc! { "_id": "A", "$expr": before(FUTURE_MS) }, true),
        // Before a deadline long past: does not.
        (doc! { "_id": "A", "$expr": before(PAST_MS) }, false),
        // At or after a time long past: applies.
        (
            doc! { "_id": "A", "pendingTransactions": "T", "$expr": from(PAST_MS) },
            true,
        ),
        // At or after a far-future time: does not.
        (
            doc! { "_id": "A", "pendingTransactions": "T", "$expr": from(FUTURE_MS) },
            false,
        ),
        // The other clauses still count.
        (
            doc! { "_id": "A", "pendingTransactions": "U", "$expr": from(PAST_MS) },
            false,
        ),
        // Inside `$and` and `$or`, and without an `_id` (a scan).
        (
            doc! { "$and": [ { "_id": "A" }, { "$expr": before(FUTURE_MS) } ] },
            true,
        ),
        (
            doc! { "$or": [ { "_id": "Z" }, { "$expr": before(PAST_MS) } ] },
            false,
        ),
        (doc! { "n": 0, "$expr": before(FUTURE_MS) }, true),
        // Both bounds at once: now lies between them.
        (
            doc! { "_id": "A", "$expr": { "$and": [ from(PAST_MS), before(FUTURE_MS) ] } },
            true,
        ),
    ];
    for (filter, expected) in &cases {
        for store in [&t.store as &dyn Store, &memory] {
            let matched = matched_by_every_call(store, &ns, filter).await;
            assert_eq!(matched, *expected, "{} on {filter}", store.name());
        }
    }

    // A fenced update really applies, and a fenced-off one really does not.
    for store in [&t.store as &dyn Store, &memory] {
        let applied = store
            .update_one(
                &ns,
                doc! { "_id": "A", "$expr": before(FUTURE_MS) },
                doc! { "$inc": { "n": 1 } },
                tandem::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(
            (applied.matched, applied.modified),
            (1, 1),
            "{}",
            store.name()
        );
        let fenced_off = store
            .update_one(
                &ns,
                doc! { "_id": "A", "$expr": before(PAST_MS) },
                doc! { "$inc": { "n": 1 } },
                tandem::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(fenced_off.matched, 0, "{}", store.name());
        assert_eq!(
            store
                .delete_one(&ns, doc! { "_id": "A", "$expr": from(FUTURE_MS) })
                .await
                .unwrap(),
            0,
            "{}",
            store.name()
        );
        let now = store.find_one(&ns, doc! { "_id": "A" }).await.unwrap();
        assert_eq!(
            now,
            Some(doc! { "_id": "A", "n": 1, "pendingTransactions": ["T"] }),
            "{}",
            store.name()
        );
    }
    t.drop().await;
}

#[tokio::test]
async fn upsert_ignores_expr_when_inserting() {
    let Some(t) = TestDb::new("clock_upsert").await else {
        return;
    };
    let ns = t.ns("docs");
    let memory = MemoryStore::new();
    for store in [&t.store as &dyn Store, &memory] {
        let out = store
            .update_one(
                &ns,
                doc! { "_id": "new", "state": "s", "$expr": before(PAST_MS) },
                doc! { "$set": { "n": 1 } },
                tandem::store::UpdateOptions::upsert(),
            )
            .await
            .unwrap();
        assert!(out.upserted, "{}: {out:?}", store.name());
        assert_eq!(
            store.find_one(&ns, doc! { "_id": "new" }).await.unwrap(),
            Some(doc! { "_id": "new", "state": "s", "n": 1 }),
            "{}",
            store.name()
        );
    }
    t.drop().await;
}

#[tokio::test]
async fn direct_date_comparison_with_now_differs_between_servers() {
    let Some(t) = TestDb::new("clock_date").await else {
        return;
    };
    let info = build_info(&t).await;
    let secantus = secantus_version(&info);
    println!(
        "server: version {:?}, secantusVersion {:?}",
        info.get("version"),
        secantus
    );
    let ns = t.ns("docs");
    let memory = MemoryStore::new();
    for store in [&t.store as &dyn Store, &memory] {
        store
            .insert_one(&ns, doc! { "_id": "A", "n": 0 })
            .await
            .unwrap();
    }
    let past = DateTime::from_millis(PAST_MS);
    let future = DateTime::from_millis(FUTURE_MS);
    // (expression, matches on MongoDB, matches on SecantusDB). On SecantusDB
    // `$$NOW` and a date are unordered whatever the date: `$lt`, `$gt` and
    // `$eq` never hold, `$lte`, `$gte` and `$ne` always do (so a direct
    // `$gte` fence would open early there; the `$toLong` form is right).
    let date_forms = [
        (doc! { "$lt": [ "$$NOW", future ] }, true, false),
        (doc! { "$lt": [ "$$NOW", past ] }, false, false),
        (doc! { "$lte": [ "$$NOW", future ] }, true, true),
        (doc! { "$lte": [ "$$NOW", past ] }, false, true),
        (doc! { "$gt": [ "$$NOW", past ] }, true, false),
        (doc! { "$gt": [ "$$NOW", future ] }, false, false),
        (doc! { "$gte": [ "$$NOW", past ] }, true, true),
        (doc! { "$gte": [ "$$NOW", future ] }, false, true),
        (doc! { "$eq": [ "$$NOW", future ] }, false, false),
        (doc! { "$ne": [ "$$NOW", future ] }, true, true),
        (doc! { "$lt": [ past, "$$NOW" ] }, true, false),
    ];
    let mut differences = 0;
    for (expr, on_mongodb, on_secantus) in &date_forms {
        let filter = doc! { "_id": "A", "$expr": expr.clone() };
        // The memory store follows MongoDB.
        assert_eq!(
            matched_by_every_call(&memory, &ns, &filter).await,
            *on_mongodb,
            "memory on {filter}"
        );
        let matched = matched_by_every_call(&t.store, &ns, &filter).await;
        println!(
            "server: {expr} -> {} (MongoDB: {})",
            if matched {
                "matches"
            } else {
                "matches nothing"
            },
            if *on_mongodb {
                "matches"
            } else {
                "matches nothing"
            },
        );
        differences += usize::from(matched != *on_mongodb);
        match &secantus {
            None => assert_eq!(matched, *on_mongodb, "MongoDB on {filter}"),
            Some(v) => assert_eq!(
                matched, *on_secantus,
                "SecantusDB {v} on {filter} no longer behaves as recorded: \
                 update this test (and the notes on the $$NOW/date gap)"
            ),
        }
    }
    println!(
        "{differences} of {} direct date forms answer differently from MongoDB",
        date_forms.len()
    );
    // The `$toLong` form works whatever the server.
    for filter in [
        doc! { "_id": "A", "$expr": before(FUTURE_MS) },
        doc! { "_id": "A", "$expr": from(PAST_MS) },
    ] {
        assert!(
            matched_by_every_call(&t.store, &ns, &filter).await,
            "{filter}"
        );
        assert!(
            matched_by_every_call(&memory, &ns, &filter).await,
            "{filter}"
        );
    }
    // Dates compare with dates on every server when `$$NOW` is not involved.
    for (expr, expected) in [
        (doc! { "$lt": [ past, future ] }, true),
        (doc! { "$gte": [ past, future ] }, false),
    ] {
        let filter = doc! { "_id": "A", "$expr": expr };
        assert_eq!(
            matched_by_every_call(&t.store, &ns, &filter).await,
            expected,
            "{filter}"
        );
        assert_eq!(
            matched_by_every_call(&memory, &ns, &filter).await,
            expected,
            "{filter}"
        );
    }
    t.drop().await;
}

#[tokio::test]
async fn server_now_is_close_to_the_client_clock() {
    let Some(t) = TestDb::new("clock_skew").await else {
        return;
    };
    let ns = t.ns("docs");
    t.store.insert_one(&ns, doc! { "_id": "A" }).await.unwrap();
    // A generous bound: this is a sanity check, not a clock-sync test.
    let bound_ms = 5 * 60 * 1000;
    let client = DateTime::now().timestamp_millis();
    let near = doc! {
        "_id": "A",
        "$expr": { "$and": [ from(client - bound_ms), before(client + bound_ms) ] },
    };
    assert!(
        t.store.find_one(&ns, near).await.unwrap().is_some(),
        "the server's $$NOW is more than {bound_ms} ms from the client's clock"
    );
    // The value itself, as an aggregation projects it.
    let mut cursor = t
        .store
        .collection(&ns)
        .aggregate(vec![
            doc! { "$project": { "_id": 0, "now": { "$toLong": "$$NOW" } } },
        ])
        .await
        .expect("aggregate $$NOW");
    let projected = cursor
        .try_next()
        .await
        .expect("read $$NOW")
        .expect("one document");
    let server = match projected.get("now") {
        Some(Bson::Int64(ms)) => *ms,
        other => panic!("$toLong of $$NOW gave {other:?}"),
    };
    let skew = server - client;
    println!("server $$NOW - client clock = {skew} ms");
    assert!(skew.abs() < bound_ms, "skew {skew} ms");
    // The store's own clock (from `hello`) agrees as well.
    let hello = t.store.now().await.unwrap().timestamp_millis();
    assert!(
        (hello - server).abs() < bound_ms,
        "hello {hello}, $$NOW {server}"
    );
    t.drop().await;
}
