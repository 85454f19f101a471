//! The store contract: what every [`Store`] must do, one case at a time.
//!
//! Each case is an `async fn` over a [`StoreFactory`] and a database name: it
//! takes a [fresh](StoreFactory::fresh) store, works in collections of that
//! database, and panics with a message if the store does not keep the
//! contract. The cases cover every method of the trait and the filter and
//! update subset the [`store`](crate::store) module documents: outcomes
//! (matched, modified, upserted), duplicate keys, guards, upserts and
//! `$setOnInsert`, `findAndModify` before and after, replacements keeping the
//! `_id`, delete counts, sorts and limits, counts, `update_each`, indexes,
//! the error kinds the protocol tells apart, `$expr` on the store's clock as
//! the protocol writes it, array markers, dotted paths, and numbers that are
//! equal across types.
//!
//! [`CASES`] lists them all (name and function), and
//! [`store_contract_tests!`](crate::store_contract_tests) turns the list into
//! one `#[tokio::test]` per case for a given factory: the embedded store runs
//! them in `cargo test` (`crates/tandem/tests/store_contract.rs`), a server
//! in `crates/tandem-mongodb/tests/store_contract.rs`, on whatever server
//! `MONGODB_URI` names.
//!
//! A case asserts only what MongoDB does. Where the test server (SecantusDB)
//! answers otherwise, the case says so next to the assertion, and the
//! difference is listed in the guide's chapter on stores.
//!
//! The file is long because it holds one concern only: the contract's cases,
//! each a short independent `async fn` read on its own, in the order the
//! trait lists its methods. Splitting it would only scatter one list.

use std::future::Future;
use std::pin::Pin;

use bson::{doc, Bson, DateTime, Document};

use super::StoreFactory;
use crate::store::{
    FindOptions, IndexSpec, Namespace, ReturnDocument, Store, StoreError, StoreErrorKind,
    UpdateOutcome,
};

/// The future of one case run, as [`Case::run`] returns it.
pub type CaseFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One case of the contract: its name (the name of its function in this
/// module) and a way to run it on any factory.
#[derive(Clone, Copy)]
pub struct Case {
    /// The case's name, e.g. `"insert_and_duplicate_key"`.
    pub name: &'static str,
    /// Runs the case on a factory, in the database of the given name.
    pub run: for<'a> fn(&'a dyn StoreFactory, &'a str) -> CaseFuture<'a>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case").field("name", &self.name).finish()
    }
}

/// Lists every case of the contract, once, for [`CASES`] and for
/// [`store_contract_tests!`](crate::store_contract_tests): it expands
/// `__store_contract_expand!` with the given mode and the list of case names.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_contract_list {
    ($($mode:tt)*) => {
        $crate::__store_contract_expand! {
            [$($mode)*]
            insert_and_duplicate_key,
            ids_equal_across_numeric_types,
            numbers_equal_across_types_in_filters,
            type_tells_equal_values_apart,
            expressions_reach_array_elements,
            is_number_tells_numbers_apart,
            numeric_segments_in_filters,
            update_outcomes,
            guarded_updates,
            upsert_and_set_on_insert,
            upserts_build_documents_in_path_order,
            current_date_stamps_the_store_clock,
            find_one_and_update_before_and_after,
            find_one_and_update_returns_the_listed_fields,
            replace_keeps_the_id,
            delete_counts,
            delete_many_deletes_every_match,
            update_many_updates_every_match,
            id_lists_match_each_listed_document,
            find_sorts_and_limits,
            count_counts_matches,
            missing_collections_are_empty,
            update_each_is_unordered,
            ensure_index_is_idempotent,
            drop_index_is_idempotent,
            inc_of_a_string_is_a_type_mismatch,
            push_to_a_non_array_is_a_type_mismatch,
            inc_promotes_and_overflows,
            failed_updates_change_nothing,
            documents_over_16_mib_are_too_large,
            malformed_requests_are_bad_requests,
            expr_now_fences_by_the_store_clock,
            placeholders_carry_their_validity,
            documents_are_measured_as_bson,
            missing_elements_rank_below_null,
            array_markers,
            push_with_slice_keeps_the_newest,
            dotted_paths,
            comparison_and_logical_operators,
            unset_and_set_outcomes,
            nan_is_in_no_range,
            update_paths_with_leading_zero_segments,
            min_and_max_key_bound_every_value,
            decimals_compare_as_numbers,
            dotted_null_through_arrays_without_documents,
            negated_types_and_present_nulls,
            find_one_and_update_upserts_collide_on_the_id,
            clock_estimate_follows_the_store_clock,
            native_transactions_are_all_or_nothing,
        }
    };
}

/// The expansions of [`__store_contract_list!`]: the [`CASES`] table, or
/// one test per case.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_contract_expand {
    ([cases] $($name:ident,)*) => {
        /// Every case of the contract, in the order of this module.
        pub const CASES: &[Case] = &[
            $(Case {
                name: stringify!($name),
                run: |factory, db| Box::pin($name(factory, db)),
            },)*
        ];
    };
    ([tests $setup:path, $teardown:path] $($name:ident,)*) => {
        $(
            #[::tokio::test]
            async fn $name() {
                let Some((factory, db)) = $setup(stringify!($name)).await else {
                    return;
                };
                $crate::testing::store_contract::$name(&factory, &db).await;
                $teardown(factory, db).await;
            }
        )*

        #[test]
        fn every_contract_case_has_a_test() {
            let tested = [$(stringify!($name)),*];
            let cases: ::std::vec::Vec<&str> = $crate::testing::store_contract::CASES
                .iter()
                .map(|case| case.name)
                .collect();
            assert_eq!(&tested[..], &cases[..]);
        }
    };
}

/// Generates one `#[tokio::test]` per case of the
/// [store contract](crate::testing::store_contract), plus a test that the
/// generated tests are exactly [`CASES`](crate::testing::store_contract::CASES).
///
/// `setup` is an `async fn(&'static str) -> Option<(F, String)>` given the
/// case's name: a [`StoreFactory`](crate::testing::StoreFactory) and the
/// database the case may use, or `None` to skip the case (say, when no
/// server is configured). The optional `teardown`, an
/// `async fn(F, String)`, runs after a case that passed (to drop its
/// database, say). The calling crate needs `tokio` with its `macros` feature.
///
/// ```ignore
/// use tandem::testing::MemoryFactory;
///
/// async fn setup(_case: &'static str) -> Option<(MemoryFactory, String)> {
///     Some((MemoryFactory::new(), "contract".to_string()))
/// }
///
/// tandem::store_contract_tests!(setup);
/// ```
#[macro_export]
macro_rules! store_contract_tests {
    ($setup:path) => {
        async fn __store_contract_no_teardown<F>(_factory: F, _db: ::std::string::String) {}
        $crate::__store_contract_list!(tests $setup, __store_contract_no_teardown);
    };
    ($setup:path, $teardown:path) => {
        $crate::__store_contract_list!(tests $setup, $teardown);
    };
}

crate::__store_contract_list!(cases);

// Helpers.

fn docs(db: &str) -> Namespace {
    Namespace::new(db, "docs")
}

async fn seed(store: &dyn Store, ns: &Namespace, docs: Vec<Document>) {
    for d in docs {
        store.insert_one(ns, d).await.expect("seeding a document");
    }
}

async fn get(store: &dyn Store, ns: &Namespace, id: impl Into<Bson>) -> Option<Document> {
    store
        .find_one(ns, doc! { "_id": id.into() })
        .await
        .expect("reading a document by _id")
}

fn by_id() -> FindOptions {
    FindOptions {
        sort: Some(doc! { "_id": 1 }),
        limit: None,
    }
}

/// The `_id`s of the documents matching `filter`, in `_id` order.
async fn ids(store: &dyn Store, ns: &Namespace, filter: Document) -> Vec<Bson> {
    let found = store
        .find(ns, filter.clone(), by_id())
        .await
        .unwrap_or_else(|e| panic!("find {filter}: {e}"));
    found
        .into_iter()
        .map(|d| d.get("_id").cloned().unwrap_or(Bson::Null))
        .collect()
}

fn int_ids(ids: &[i32]) -> Vec<Bson> {
    ids.iter().map(|&i| Bson::Int32(i)).collect()
}

/// Asserts that `result` failed with `kind`, and returns the error.
fn fails<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    kind: StoreErrorKind,
    what: &str,
) -> StoreError {
    match result {
        Ok(v) => panic!("{what}: expected {kind:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind, kind, "{what}: {e}");
            e
        }
    }
}

fn outcome(matched: u64, modified: u64, upserted: bool) -> UpdateOutcome {
    UpdateOutcome {
        matched,
        modified,
        upserted,
    }
}

// The cases.

/// `insertOne` stores the document as given, with `_id` first; a second
/// insert of the same `_id` fails with [`StoreErrorKind::DuplicateKey`] (code
/// 11000), is not retryable, and leaves the first document as it was. A
/// document without `_id` gets an ObjectId.
pub async fn insert_and_duplicate_key<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    store
        .insert_one(&ns, doc! { "_id": 1, "v": "a" })
        .await
        .expect("the first insert");
    let err = fails(
        store.insert_one(&ns, doc! { "_id": 1, "v": "b" }).await,
        StoreErrorKind::DuplicateKey,
        "inserting the same _id again",
    );
    assert_eq!(err.code, Some(11000), "{err}");
    assert!(!err.kind.is_retryable());
    assert!(!err.kind.outcome_unknown());
    assert_eq!(
        get(store.as_ref(), &ns, 1).await,
        Some(doc! { "_id": 1, "v": "a" })
    );

    store
        .insert_one(&ns, doc! { "x": 1, "_id": 2 })
        .await
        .expect("an insert with _id last");
    let two = get(store.as_ref(), &ns, 2).await.expect("document 2");
    assert_eq!(two.keys().next().map(String::as_str), Some("_id"), "{two}");
    assert_eq!(two, doc! { "_id": 2, "x": 1 });

    store
        .insert_one(&ns, doc! { "generated": true })
        .await
        .expect("an insert without _id");
    let generated = store
        .find_one(&ns, doc! { "generated": true })
        .await
        .unwrap()
        .expect("the document without _id");
    assert!(
        matches!(generated.get("_id"), Some(Bson::ObjectId(_))),
        "{generated}"
    );
    assert_eq!(
        generated.keys().next().map(String::as_str),
        Some("_id"),
        "{generated}"
    );
    // Namespaces are separate.
    store
        .insert_one(&Namespace::new(db, "other"), doc! { "_id": 1 })
        .await
        .expect("the same _id in another collection");
    assert_eq!(store.count(&ns, doc! {}).await.unwrap(), 3);
}

/// `_id`s that are numerically equal are the same `_id`: 5, 5_i64 and 5.0
/// collide on insert and find one another.
pub async fn ids_equal_across_numeric_types<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(store.as_ref(), &ns, vec![doc! { "_id": 5, "x": 1 }]).await;
    for id in [Bson::Double(5.0), Bson::Int64(5)] {
        fails(
            store.insert_one(&ns, doc! { "_id": id.clone() }).await,
            StoreErrorKind::DuplicateKey,
            &format!("inserting _id {id:?} next to _id 5"),
        );
        assert_eq!(
            store
                .find_one(&ns, doc! { "_id": id.clone() })
                .await
                .unwrap(),
            Some(doc! { "_id": 5, "x": 1 }),
            "find_one by _id {id:?}"
        );
    }
    let out = store
        .update_one(
            &ns,
            doc! { "_id": 5_i64 },
            doc! { "$set": { "x": 2 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false));
    assert_eq!(
        store.delete_one(&ns, doc! { "_id": 5.0 }).await.unwrap(),
        1,
        "delete by _id 5.0"
    );
    assert_eq!(store.count(&ns, doc! {}).await.unwrap(), 0);
}

/// In filters, 7, 7_i64 and 7.0 are equal: plain equality, `$eq`, `$in`,
/// `$ne`, `$nin` and the ranges compare numbers by value.
pub async fn numbers_equal_across_types_in_filters<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "n": 7 },
            doc! { "_id": 2, "n": 7_i64 },
            doc! { "_id": 3, "n": 7.0 },
            doc! { "_id": 4, "n": 7.5 },
            doc! { "_id": 5, "n": "7" },
        ],
    )
    .await;
    let s = store.as_ref();
    for seven in [Bson::Int32(7), Bson::Int64(7), Bson::Double(7.0)] {
        assert_eq!(
            ids(s, &ns, doc! { "n": seven.clone() }).await,
            int_ids(&[1, 2, 3]),
            "n == {seven:?}"
        );
        assert_eq!(
            ids(s, &ns, doc! { "n": { "$eq": seven.clone() } }).await,
            int_ids(&[1, 2, 3]),
            "$eq {seven:?}"
        );
        assert_eq!(
            ids(s, &ns, doc! { "n": { "$in": [seven.clone()] } }).await,
            int_ids(&[1, 2, 3]),
            "$in [{seven:?}]"
        );
        assert_eq!(
            ids(s, &ns, doc! { "n": { "$ne": seven.clone() } }).await,
            int_ids(&[4, 5]),
            "$ne {seven:?}"
        );
        assert_eq!(
            ids(s, &ns, doc! { "n": { "$nin": [seven.clone()] } }).await,
            int_ids(&[4, 5]),
            "$nin [{seven:?}]"
        );
        // Ranges compare numbers only: the string "7" is in no numeric range.
        assert_eq!(
            ids(s, &ns, doc! { "n": { "$gt": seven.clone() } }).await,
            int_ids(&[4]),
            "$gt {seven:?}"
        );
        assert_eq!(
            ids(s, &ns, doc! { "n": { "$lte": seven.clone() } }).await,
            int_ids(&[1, 2, 3]),
            "$lte {seven:?}"
        );
    }
    // A guard on a value written as another type still holds.
    let out = store
        .update_one(
            &ns,
            doc! { "_id": 2, "n": 7.0 },
            doc! { "$inc": { "n": 1 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false));
    assert_eq!(get(s, &ns, 2).await, Some(doc! { "_id": 2, "n": 8_i64 }));
}

/// `$type` tells apart what equality does not: the numeric types, at any
/// depth (an embedded field, an array element), with the alias `"number"`
/// for all four; a value of the type or an array holding one matches, a
/// missing field never does. (Before-images rely on it.)
pub async fn type_tells_equal_values_apart<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "n": 7, "m": { "q": 5.0 } },
            doc! { "_id": 2, "n": 7_i64, "m": { "q": 5_i64 } },
            doc! { "_id": 3, "n": 7.0, "a": ["x", 5.0] },
            doc! { "_id": 4, "n": "7" },
            doc! { "_id": 5 },
        ],
    )
    .await;
    let s = store.as_ref();
    for (name, expected) in [
        ("int", &[1][..]),
        ("long", &[2]),
        ("double", &[3]),
        ("string", &[4]),
        ("number", &[1, 2, 3]),
    ] {
        assert_eq!(
            ids(s, &ns, doc! { "n": { "$type": name } }).await,
            int_ids(expected),
            "n $type {name}"
        );
    }
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$eq": 7, "$type": "double" } }).await,
        int_ids(&[3]),
        "with an equality"
    );
    assert_eq!(
        ids(s, &ns, doc! { "m": { "q": 5 }, "m.q": { "$type": "long" } }).await,
        int_ids(&[2]),
        "an embedded field"
    );
    assert_eq!(
        ids(s, &ns, doc! { "a.1": { "$type": "double" } }).await,
        int_ids(&[3]),
        "an array element"
    );
    assert_eq!(
        ids(s, &ns, doc! { "a": { "$type": "string" } }).await,
        int_ids(&[3]),
        "an array holding one"
    );
    assert_eq!(
        ids(s, &ns, doc! { "a": { "$type": ["array", "null"] } }).await,
        int_ids(&[3]),
        "a list of types; an array itself"
    );
    assert_eq!(
        ids(s, &ns, doc! { "z": { "$type": "null" } }).await,
        int_ids(&[]),
        "a missing field has no type"
    );
}

/// `updateOne` reports what it did: matched and modified, matched but
/// unchanged (a no-op `$set`), or nothing matched; it updates one document
/// only, even when several match.
pub async fn update_outcomes<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "n": 1, "tag": "x" },
            doc! { "_id": 2, "n": 1, "tag": "x" },
        ],
    )
    .await;
    let out = store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$inc": { "n": 1 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false), "an $inc");
    let out = store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$set": { "n": 2 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 0, false), "a $set to the same value");
    let out = store
        .update_one(
            &ns,
            doc! { "_id": "missing" },
            doc! { "$set": { "n": 9 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, UpdateOutcome::default(), "no match");
    assert_eq!(get(store.as_ref(), &ns, "missing").await, None);

    let out = store
        .update_one(
            &ns,
            doc! { "tag": "x" },
            doc! { "$set": { "tag": "y" } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false), "two matches");
    assert_eq!(
        store.count(&ns, doc! { "tag": "y" }).await.unwrap(),
        1,
        "one document updated"
    );
    assert_eq!(
        store.count(&ns, doc! { "tag": "x" }).await.unwrap(),
        1,
        "the other left alone"
    );
}

/// A guard (a condition next to the `_id`) decides whether the update
/// applies: a failed guard matches nothing and changes nothing; a guarded
/// update applied twice applies once.
pub async fn guarded_updates<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![doc! { "_id": "A", "balance": 100_i64, "state": "open" }],
    )
    .await;
    let debit = || {
        (
            doc! { "_id": "A", "balance": { "$gte": 60_i64 }, "state": "open" },
            doc! { "$inc": { "balance": -60_i64 } },
        )
    };
    let (filter, update) = debit();
    let out = store
        .update_one(&ns, filter, update, crate::store::UpdateOptions::default())
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false), "the first debit");
    let (filter, update) = debit();
    let out = store
        .update_one(&ns, filter, update, crate::store::UpdateOptions::default())
        .await
        .unwrap();
    assert_eq!(
        out,
        UpdateOutcome::default(),
        "the guard refuses the second"
    );
    let out = store
        .update_one(
            &ns,
            doc! { "_id": "A", "state": "closed" },
            doc! { "$set": { "balance": 0_i64 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, UpdateOutcome::default());
    assert_eq!(
        get(store.as_ref(), &ns, "A").await,
        Some(doc! { "_id": "A", "balance": 40_i64, "state": "open" })
    );
    // The same guard through findAndModify.
    let (filter, update) = debit();
    let returned = store
        .find_one_and_update(
            &ns,
            filter,
            update,
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .unwrap();
    assert_eq!(returned, None);
}

/// An upsert that matches nothing inserts the filter's equalities (dotted
/// ones as subdocuments) with the update and `$setOnInsert` applied; one
/// that matches updates and ignores `$setOnInsert`. An upsert whose filter
/// names an existing `_id` but whose guard fails is a duplicate key. Without
/// an `_id` in the filter, the new document gets an ObjectId, first.
pub async fn upsert_and_set_on_insert<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let out = store
        .update_one(
            &ns,
            doc! { "_id": "t1", "state": { "$ne": "done" }, "meta.kind": "transfer" },
            doc! { "$set": { "state": "initial" }, "$setOnInsert": { "created": true } },
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(0, 0, true), "the upsert inserts");
    assert_eq!(
        get(store.as_ref(), &ns, "t1").await,
        Some(doc! {
            "_id": "t1", "meta": { "kind": "transfer" }, "state": "initial", "created": true
        })
    );
    let out = store
        .update_one(
            &ns,
            doc! { "_id": "t1" },
            doc! { "$set": { "state": "pending" }, "$setOnInsert": { "created": false } },
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false), "the upsert matches");
    assert_eq!(
        get(store.as_ref(), &ns, "t1").await,
        Some(doc! {
            "_id": "t1", "meta": { "kind": "transfer" }, "state": "pending", "created": true
        })
    );
    // The _id exists, the guard fails: the insert collides.
    let err = fails(
        store
            .update_one(
                &ns,
                doc! { "_id": "t1", "state": "initial" },
                doc! { "$set": { "x": 1 } },
                crate::store::UpdateOptions::upsert(),
            )
            .await,
        StoreErrorKind::DuplicateKey,
        "an upsert whose guard fails on an existing _id",
    );
    assert_eq!(err.code, Some(11000), "{err}");
    // No _id in the filter: one is generated, and put first.
    let out = store
        .update_one(
            &ns,
            doc! { "k": 1 },
            doc! { "$inc": { "n": 1 } },
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(0, 0, true));
    let new = store
        .find_one(&ns, doc! { "k": 1 })
        .await
        .unwrap()
        .expect("the upserted document");
    assert!(matches!(new.get("_id"), Some(Bson::ObjectId(_))), "{new}");
    assert_eq!(new.keys().collect::<Vec<_>>(), vec!["_id", "k", "n"]);
    // A failing upsert inserts nothing.
    fails(
        store
            .update_one(
                &ns,
                doc! { "_id": "u", "s": "text" },
                doc! { "$inc": { "s": 1 } },
                crate::store::UpdateOptions::upsert(),
            )
            .await,
        StoreErrorKind::TypeMismatch,
        "an upsert whose $inc meets the filter's string",
    );
    assert_eq!(get(store.as_ref(), &ns, "u").await, None);
    assert_eq!(store.count(&ns, doc! {}).await.unwrap(), 2);
}

/// An upsert builds its document as MongoDB does: `_id` first, then the
/// filter's equalities in path order (a `$in` of one value counts as an
/// equality), then the fields the update creates, in path order too,
/// whatever the order the filter and the update list them in. A path with
/// two equalities cannot seed the document: the upsert fails with
/// [`StoreErrorKind::BadRequest`] (code 54).
pub async fn upserts_build_documents_in_path_order<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let out = store
        .update_one(
            &ns,
            doc! { "b": 0, "arr": { "$in": ["x"] }, "_id": 1, "m.y": 1, "m.x": 1 },
            doc! {
                "$setOnInsert": { "z": 1 },
                "$set": { "c": 1, "a": 1 },
                "$inc": { "ab": 1 },
            },
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(0, 0, true));
    let created = get(store.as_ref(), &ns, 1)
        .await
        .expect("the upserted document");
    assert_eq!(
        created.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["_id", "arr", "b", "m", "a", "ab", "c", "z"],
        "{created}"
    );
    assert_eq!(
        created
            .get_document("m")
            .map(|m| m.keys().cloned().collect::<Vec<_>>()),
        Ok(vec!["x".to_string(), "y".to_string()]),
        "{created}"
    );
    assert_eq!(created.get("arr"), Some(&Bson::from("x")));

    let err = fails(
        store
            .update_one(
                &ns,
                doc! { "_id": 2, "$and": [ { "b": 0 }, { "b": 0 } ] },
                doc! { "$set": { "a": 1 } },
                crate::store::UpdateOptions::upsert(),
            )
            .await,
        StoreErrorKind::BadRequest,
        "an upsert with two equalities on one path",
    );
    assert_eq!(err.code, Some(54), "{err}");
    assert_eq!(get(store.as_ref(), &ns, 2).await, None);
}

/// `$currentDate: {field: true}` stamps the store's clock (the one
/// [`Store::now`] reads), as a date.
pub async fn current_date_stamps_the_store_clock<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(store.as_ref(), &ns, vec![doc! { "_id": 1 }]).await;
    let before = store.now().await.expect("the store's clock");
    let out = store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$currentDate": { "lastModified": true } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false));
    let after = store.now().await.expect("the store's clock");
    let stamped = match get(store.as_ref(), &ns, 1)
        .await
        .and_then(|d| d.get("lastModified").cloned())
    {
        Some(Bson::DateTime(t)) => t,
        other => panic!("lastModified is a date, not {other:?}"),
    };
    // The server's two clock readings are a millisecond apart at best.
    let slack = 1_000;
    assert!(
        stamped.timestamp_millis() >= before.timestamp_millis() - slack
            && stamped.timestamp_millis() <= after.timestamp_millis() + slack,
        "{stamped} is not between {before} and {after}"
    );
}

/// `findAndModify` with a projection of top-level fields returns those the
/// document has and `_id`, in the document's order, before or after the
/// update and for an upsert, and changes the document as without one.
pub async fn find_one_and_update_returns_the_listed_fields<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![doc! { "_id": 1, "n": 1, "big": { "x": [1, 2, 3] }, "s": "a" }],
    )
    .await;
    let options = |ret| {
        crate::store::FindOneAndUpdateOptions::returning(ret).with_fields(&["s", "n", "absent"])
    };
    let inc = || doc! { "$inc": { "n": 1 } };
    let before = store
        .find_one_and_update(
            &ns,
            doc! { "_id": 1 },
            inc(),
            options(ReturnDocument::Before),
        )
        .await
        .unwrap();
    assert_eq!(before, Some(doc! { "_id": 1, "n": 1, "s": "a" }));
    let after = store
        .find_one_and_update(
            &ns,
            doc! { "_id": 1 },
            inc(),
            options(ReturnDocument::After),
        )
        .await
        .unwrap();
    assert_eq!(after, Some(doc! { "_id": 1, "n": 3, "s": "a" }));
    assert_eq!(
        get(store.as_ref(), &ns, 1).await,
        Some(doc! { "_id": 1, "n": 3, "big": { "x": [1, 2, 3] }, "s": "a" }),
        "the document keeps every field"
    );
    let upserted = store
        .find_one_and_update(
            &ns,
            doc! { "_id": 2, "s": { "$in": [] } },
            doc! { "$setOnInsert": { "s": "b", "big": [1] }, "$currentDate": { "n": true } },
            options(ReturnDocument::After).with_upsert(true),
        )
        .await
        .unwrap()
        .expect("the upserted document");
    assert_eq!(
        upserted.keys().map(String::as_str).collect::<Vec<_>>(),
        ["_id", "n", "s"]
    );
    assert!(upserted.get_datetime("n").is_ok(), "{upserted}");
}

/// `findAndModify` returns the document before or after the update, nothing
/// when no document matches, and, for an upsert, nothing before and the new
/// document after.
pub async fn find_one_and_update_before_and_after<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(store.as_ref(), &ns, vec![doc! { "_id": 1, "n": 1 }]).await;
    let inc = || doc! { "$inc": { "n": 1 } };
    let before = store
        .find_one_and_update(
            &ns,
            doc! { "_id": 1 },
            inc(),
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::Before),
        )
        .await
        .unwrap();
    assert_eq!(before, Some(doc! { "_id": 1, "n": 1 }));
    let after = store
        .find_one_and_update(
            &ns,
            doc! { "_id": 1 },
            inc(),
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .unwrap();
    assert_eq!(after, Some(doc! { "_id": 1, "n": 3 }));
    let none = store
        .find_one_and_update(
            &ns,
            doc! { "_id": 1, "n": 0 },
            inc(),
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .unwrap();
    assert_eq!(none, None, "no match");
    let none = store
        .find_one_and_update(
            &ns,
            doc! { "k": 3 },
            inc(),
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .unwrap();
    assert_eq!(none, None, "no match, no upsert");
    assert_eq!(store.count(&ns, doc! {}).await.unwrap(), 1);

    let before = store
        .find_one_and_update(
            &ns,
            doc! { "_id": 2 },
            doc! { "$set": { "n": 1 } },
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::Before)
                .with_upsert(true),
        )
        .await
        .unwrap();
    assert_eq!(before, None, "an upsert had no document before");
    assert_eq!(
        get(store.as_ref(), &ns, 2).await,
        Some(doc! { "_id": 2, "n": 1 })
    );
    let after = store
        .find_one_and_update(
            &ns,
            doc! { "_id": 3 },
            doc! { "$set": { "n": 1 }, "$setOnInsert": { "new": true } },
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                .with_upsert(true),
        )
        .await
        .unwrap();
    assert_eq!(after, Some(doc! { "_id": 3, "n": 1, "new": true }));
}

/// `replaceOne` replaces the whole document but keeps its `_id` (a
/// replacement may repeat it or leave it out), reports an identical
/// replacement as unmodified, never upserts, and refuses to change the `_id`.
pub async fn replace_keeps_the_id<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(store.as_ref(), &ns, vec![doc! { "_id": 1, "a": 1, "b": 2 }]).await;
    let out = store
        .replace_one(&ns, doc! { "_id": 1 }, doc! { "_id": 1, "c": 3 })
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false));
    assert_eq!(
        get(store.as_ref(), &ns, 1).await,
        Some(doc! { "_id": 1, "c": 3 })
    );
    let out = store
        .replace_one(&ns, doc! { "c": 3 }, doc! { "d": 4 })
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false), "a replacement without _id");
    assert_eq!(
        get(store.as_ref(), &ns, 1).await,
        Some(doc! { "_id": 1, "d": 4 })
    );
    let out = store
        .replace_one(&ns, doc! { "_id": 1 }, doc! { "d": 4 })
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 0, false), "the same document again");
    // Another order inside a sub-document, or the other zero, is another
    // document: stored, and counted. (The embedded store took both for the
    // same, and dropped the replacement.)
    for (from, to) in [
        (
            doc! { "s": { "x": 1, "y": 2 } },
            doc! { "s": { "y": 2, "x": 1 } },
        ),
        (doc! { "z": 0.0 }, doc! { "z": -0.0 }),
    ] {
        store
            .replace_one(&ns, doc! { "_id": 1 }, from)
            .await
            .unwrap();
        let out = store
            .replace_one(&ns, doc! { "_id": 1 }, to.clone())
            .await
            .unwrap();
        assert_eq!(out, outcome(1, 1, false), "{to}");
        let stored = get(store.as_ref(), &ns, 1).await.unwrap();
        let mut expected = doc! { "_id": 1 };
        expected.extend(to.clone());
        assert_eq!(
            bson::to_vec(&stored).unwrap(),
            bson::to_vec(&expected).unwrap(),
            "{stored} for {to}"
        );
    }
    store
        .replace_one(&ns, doc! { "_id": 1 }, doc! { "d": 4 })
        .await
        .unwrap();
    let out = store
        .replace_one(&ns, doc! { "_id": 2 }, doc! { "_id": 2, "x": 1 })
        .await
        .unwrap();
    assert_eq!(out, UpdateOutcome::default(), "no match");
    assert_eq!(get(store.as_ref(), &ns, 2).await, None, "no upsert");
    fails(
        store
            .replace_one(&ns, doc! { "_id": 1 }, doc! { "_id": 2, "d": 4 })
            .await,
        StoreErrorKind::BadRequest,
        "a replacement with another _id",
    );
    assert_eq!(
        get(store.as_ref(), &ns, 1).await,
        Some(doc! { "_id": 1, "d": 4 })
    );
}

/// `deleteOne` deletes one matching document and says how many it deleted:
/// 1, then 0 when nothing matches (a guard that fails included).
pub async fn delete_counts<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "k": "a" },
            doc! { "_id": 2, "k": "a" },
            doc! { "_id": 3, "k": "b" },
        ],
    )
    .await;
    assert_eq!(store.delete_one(&ns, doc! { "k": "a" }).await.unwrap(), 1);
    assert_eq!(store.count(&ns, doc! { "k": "a" }).await.unwrap(), 1);
    assert_eq!(
        store
            .delete_one(&ns, doc! { "_id": 3, "k": "a" })
            .await
            .unwrap(),
        0,
        "a guard that fails"
    );
    assert_eq!(store.delete_one(&ns, doc! { "_id": 3 }).await.unwrap(), 1);
    assert_eq!(store.delete_one(&ns, doc! { "_id": 3 }).await.unwrap(), 0);
    assert_eq!(get(store.as_ref(), &ns, 3).await, None);
    assert_eq!(store.count(&ns, doc! {}).await.unwrap(), 1);
}

/// `updateMany` updates every match in one request and says how many: an
/// `$or` of per-document guards (id, epoch, token) with a guard on the state
/// updates exactly the documents whose own branch holds, each with the whole
/// update (a `$set`, an `$inc`, a `$push` with `$slice`, a `$currentDate`);
/// again, it matches nothing.
pub async fn update_many_updates_every_match<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "state": "pending", "epoch": 0, "token": "a", "n": 1, "h": [] },
            doc! { "_id": 2, "state": "pending", "epoch": 1, "token": "b", "n": 1, "h": [] },
            doc! { "_id": 3, "state": "applied", "epoch": 0, "token": "c", "n": 1, "h": [] },
            doc! { "_id": 4, "state": "pending", "epoch": 0, "token": "other", "n": 1, "h": [] },
            doc! { "_id": 5, "state": "pending", "epoch": 0, "token": "e", "n": 1, "h": [] },
        ],
    )
    .await;
    let filter = doc! {
        "state": "pending",
        "$or": [
            { "_id": 1, "epoch": 0, "token": "a" },
            { "_id": 2, "epoch": 0, "token": "b" },
            { "_id": 3, "epoch": 0, "token": "c" },
            { "_id": 4, "epoch": 0, "token": "d" },
            { "_id": 9, "epoch": 0, "token": "z" },
        ],
    };
    let update = doc! {
        "$set": { "state": "applied" },
        "$inc": { "n": 1 },
        "$push": { "h": { "$each": ["moved"], "$slice": -2 } },
        "$currentDate": { "at": true },
    };
    let outcome = store
        .update_many(&ns, filter.clone(), update.clone())
        .await
        .unwrap();
    assert_eq!((outcome.matched, outcome.modified), (1, 1), "{outcome:?}");
    let one = get(store.as_ref(), &ns, 1).await.unwrap();
    assert_eq!(one.get_str("state").unwrap(), "applied");
    assert_eq!(one.get_i32("n").unwrap(), 2);
    assert_eq!(one.get_array("h").unwrap(), &vec![Bson::from("moved")]);
    assert!(one.get_datetime("at").is_ok(), "{one}");
    for id in [2, 4, 5] {
        let d = get(store.as_ref(), &ns, id).await.unwrap();
        assert_eq!(d.get_str("state").unwrap(), "pending", "document {id}");
        assert_eq!(d.get_i32("n").unwrap(), 1, "document {id}");
    }
    let again = store
        .update_many(&ns, filter, update.clone())
        .await
        .unwrap();
    assert_eq!(again.matched, 0, "again");
    let all = store
        .update_many(
            &ns,
            doc! { "state": "pending" },
            doc! { "$inc": { "n": 10 } },
        )
        .await
        .unwrap();
    assert_eq!((all.matched, all.modified), (3, 3));
    let none = store
        .update_many(&Namespace::new(db, "nothing_here"), doc! {}, update)
        .await
        .unwrap();
    assert_eq!(none.matched, 0);
}

/// An `_id: {$in: [...]}` list matches each listed document once, whatever
/// the order of the list, its repeats, its ids that match nothing, or the
/// numeric type of an id (3.0 finds 3); the rest of the filter still
/// applies, in `find`, `count`, `updateMany` and `deleteMany`.
pub async fn id_lists_match_each_listed_document<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        (1..=6)
            .map(|i| doc! { "_id": i, "n": i })
            .chain([doc! { "_id": "x", "n": 7 }])
            .collect(),
    )
    .await;
    let list = || bson::bson!([5, 1, 1, 9, 3.0, "x", "y"]);
    let listed = doc! { "_id": { "$in": list() } };
    assert_eq!(
        ids(store.as_ref(), &ns, listed.clone()).await,
        vec![
            Bson::Int32(1),
            Bson::Int32(3),
            Bson::Int32(5),
            Bson::from("x")
        ],
        "every listed document, once"
    );
    let guarded = doc! { "_id": { "$in": list() }, "n": { "$gte": 3 } };
    assert_eq!(
        ids(store.as_ref(), &ns, guarded.clone()).await,
        vec![Bson::Int32(3), Bson::Int32(5), Bson::from("x")],
        "the rest of the filter applies"
    );
    assert_eq!(store.count(&ns, guarded.clone()).await.unwrap(), 3);
    let out = store
        .update_many(&ns, guarded.clone(), doc! { "$inc": { "n": 100 } })
        .await
        .unwrap();
    assert_eq!((out.matched, out.modified), (3, 3), "{out:?}");
    for (id, n) in [(1, 1), (3, 103), (5, 105)] {
        let d = get(store.as_ref(), &ns, id).await.unwrap();
        assert_eq!(d.get_i32("n").unwrap(), n, "document {id}");
    }
    let deleted = store
        .delete_many(&ns, doc! { "_id": { "$in": list() }, "n": { "$lt": 100 } })
        .await
        .unwrap();
    assert_eq!(deleted, 1, "only document 1 is listed and below 100");
    assert_eq!(
        ids(store.as_ref(), &ns, doc! {}).await,
        vec![
            Bson::Int32(2),
            Bson::Int32(3),
            Bson::Int32(4),
            Bson::Int32(5),
            Bson::Int32(6),
            Bson::from("x")
        ]
    );
}

/// `deleteMany` deletes every match in one request and says how many: an
/// `$in` of ids with a guard on other fields deletes only the documents that
/// pass the guard, and nothing matching deletes nothing.
pub async fn delete_many_deletes_every_match<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "state": "done", "age": 10 },
            doc! { "_id": 2, "state": "done", "age": 1 },
            doc! { "_id": 3, "state": "pending", "age": 10 },
            doc! { "_id": 4, "state": "canceled", "age": 10 },
            doc! { "_id": 5, "state": "done", "age": 10 },
        ],
    )
    .await;
    let filter = doc! {
        "_id": { "$in": [1, 2, 3, 4, 9] },
        "state": { "$in": ["done", "canceled"] },
        "age": { "$gte": 5 },
    };
    assert_eq!(store.delete_many(&ns, filter.clone()).await.unwrap(), 2);
    for (id, left) in [(1, false), (2, true), (3, true), (4, false), (5, true)] {
        assert_eq!(
            get(store.as_ref(), &ns, id).await.is_some(),
            left,
            "document {id}"
        );
    }
    assert_eq!(store.delete_many(&ns, filter).await.unwrap(), 0, "again");
    assert_eq!(
        store
            .delete_many(&Namespace::new(db, "nothing_here"), doc! {})
            .await
            .unwrap(),
        0
    );
    assert_eq!(store.delete_many(&ns, doc! {}).await.unwrap(), 3);
    assert_eq!(store.count(&ns, doc! {}).await.unwrap(), 0);
}

/// `find` returns every match, sorted by one or more keys in either
/// direction (missing values first when ascending), and at most `limit` of
/// them (0 meaning no limit).
pub async fn find_sorts_and_limits<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let at = DateTime::from_millis;
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "state": "pending", "at": at(30), "p": 1 },
            doc! { "_id": 2, "state": "done", "at": at(10), "p": 2 },
            doc! { "_id": 3, "state": "pending", "at": at(20), "p": 1 },
            doc! { "_id": 4, "state": "pending", "p": 2 },
            doc! { "_id": 5, "state": "pending", "at": at(5), "p": 1.5 },
        ],
    )
    .await;
    let sorted = |sort: Document, limit: Option<i64>| FindOptions {
        sort: Some(sort),
        limit,
    };
    let found = |filter: Document, options: FindOptions| {
        let store = store.clone();
        let ns = ns.clone();
        async move {
            let docs = store
                .find(&ns, filter.clone(), options.clone())
                .await
                .unwrap_or_else(|e| panic!("find {filter} {options:?}: {e}"));
            docs.iter()
                .map(|d| d.get_i32("_id").expect("an i32 _id"))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        found(doc! { "state": "pending" }, sorted(doc! { "at": 1 }, None)).await,
        vec![4, 5, 3, 1],
        "ascending, missing first"
    );
    assert_eq!(
        found(
            doc! { "state": "pending" },
            sorted(doc! { "at": -1 }, Some(2))
        )
        .await,
        vec![1, 3],
        "descending, limited"
    );
    assert_eq!(
        found(doc! {}, sorted(doc! { "p": -1, "_id": 1 }, None)).await,
        vec![2, 4, 5, 1, 3],
        "two keys, numbers of mixed types"
    );
    assert_eq!(
        found(doc! {}, sorted(doc! { "_id": -1 }, Some(0))).await,
        vec![5, 4, 3, 2, 1],
        "a limit of 0 is no limit"
    );
    let mut all = found(doc! {}, FindOptions::default()).await;
    all.sort_unstable();
    assert_eq!(all, vec![1, 2, 3, 4, 5], "no options");
    assert_eq!(
        found(
            doc! {},
            FindOptions {
                sort: None,
                limit: Some(2)
            }
        )
        .await
        .len(),
        2
    );
    assert!(found(doc! { "state": "gone" }, by_id()).await.is_empty());
}

/// `countDocuments` counts the matches.
pub async fn count_counts_matches<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        (1..=5)
            .map(|i| doc! { "_id": i, "even": i % 2 == 0, "n": i })
            .collect(),
    )
    .await;
    assert_eq!(store.count(&ns, doc! {}).await.unwrap(), 5);
    assert_eq!(store.count(&ns, doc! { "even": true }).await.unwrap(), 2);
    assert_eq!(
        store
            .count(&ns, doc! { "n": { "$gte": 2, "$lt": 5 } })
            .await
            .unwrap(),
        3
    );
    assert_eq!(store.count(&ns, doc! { "n": 9 }).await.unwrap(), 0);
}

/// A collection that does not exist reads as empty, and writes other than
/// inserts and upserts find nothing in it.
pub async fn missing_collections_are_empty<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = Namespace::new(db, "missing");
    assert!(store
        .find(&ns, doc! {}, FindOptions::default())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.find_one(&ns, doc! {}).await.unwrap(), None);
    assert_eq!(store.count(&ns, doc! {}).await.unwrap(), 0);
    assert_eq!(store.delete_one(&ns, doc! {}).await.unwrap(), 0);
    let out = store
        .update_one(
            &ns,
            doc! {},
            doc! { "$set": { "a": 1 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, UpdateOutcome::default());
    let out = store
        .replace_one(&ns, doc! {}, doc! { "a": 1 })
        .await
        .unwrap();
    assert_eq!(out, UpdateOutcome::default());
    assert_eq!(store.count(&ns, doc! {}).await.unwrap(), 0);
}

/// `update_each` applies every statement on its own (unordered), counts the
/// statements that matched, and after a failing statement still applies
/// the others, then reports the failure's kind.
pub async fn update_each_is_unordered<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        ["a", "b", "c"]
            .into_iter()
            .map(|id| doc! { "_id": id, "n": 1, "s": "text" })
            .collect(),
    )
    .await;
    let matched = store
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
    let n = |d: Option<Document>| d.expect("the document").get_i32("n").expect("n");
    assert_eq!(n(get(store.as_ref(), &ns, "a").await), 11);
    assert_eq!(n(get(store.as_ref(), &ns, "b").await), 21);
    assert_eq!(n(get(store.as_ref(), &ns, "c").await), 1);

    let err = fails(
        store
            .update_each(
                &ns,
                vec![
                    (doc! { "_id": "a" }, doc! { "$inc": { "s": 1 } }),
                    (doc! { "_id": "c" }, doc! { "$inc": { "n": 1 } }),
                ],
            )
            .await,
        StoreErrorKind::TypeMismatch,
        "a statement incrementing a string",
    );
    assert_eq!(err.code, Some(14), "{err}");
    assert_eq!(n(get(store.as_ref(), &ns, "a").await), 11);
    assert_eq!(n(get(store.as_ref(), &ns, "c").await), 2);
}

/// `ensure_index` creates the indexes the protocol asks for (a TTL index, an
/// index with a partial filter) and may be called again with the same
/// definition; the collection works as before.
pub async fn ensure_index_is_idempotent<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = Namespace::new(db, "txns");
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
        store
            .ensure_index(&ns, ttl.clone())
            .await
            .expect("the TTL index");
        store
            .ensure_index(&ns, partial.clone())
            .await
            .expect("the partial index");
    }
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "state": "pending", "lastModified": DateTime::from_millis(1) },
            doc! { "_id": 2, "state": "done", "lastModified": DateTime::from_millis(2) },
        ],
    )
    .await;
    assert_eq!(
        ids(
            store.as_ref(),
            &ns,
            doc! { "state": { "$in": ["pending", "applied"] } }
        )
        .await,
        int_ids(&[1])
    );
}

/// `drop_index` drops an index by name and may be called again once it is
/// gone, or for a collection that does not exist; the collection's
/// documents stay.
pub async fn drop_index_is_idempotent<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = Namespace::new(db, "txns");
    store
        .ensure_index(
            &ns,
            IndexSpec {
                name: "expires".into(),
                keys: doc! { "expiresAt": 1 },
                expire_after_secs: Some(0),
                partial_filter: None,
            },
        )
        .await
        .expect("the TTL index");
    seed(store.as_ref(), &ns, vec![doc! { "_id": 1, "n": 1 }]).await;
    for _ in 0..2 {
        store
            .drop_index(&ns, "expires")
            .await
            .expect("dropped, or already gone");
    }
    store
        .drop_index(&Namespace::new(db, "never_written"), "expires")
        .await
        .expect("no collection, nothing to drop");
    assert_eq!(ids(store.as_ref(), &ns, doc! {}).await, int_ids(&[1]));
}

/// `$inc` of a string fails with [`StoreErrorKind::TypeMismatch`] (code 14),
/// through `updateOne` and `findAndModify`, and changes nothing.
pub async fn inc_of_a_string_is_a_type_mismatch<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let original = doc! { "_id": 1, "s": "text", "n": 1 };
    seed(store.as_ref(), &ns, vec![original.clone()]).await;
    let err = fails(
        store
            .update_one(
                &ns,
                doc! { "_id": 1 },
                doc! { "$inc": { "s": 1 } },
                crate::store::UpdateOptions::default(),
            )
            .await,
        StoreErrorKind::TypeMismatch,
        "updateOne $inc of a string",
    );
    assert_eq!(err.code, Some(14), "{err}");
    assert!(!err.kind.outcome_unknown());
    fails(
        store
            .find_one_and_update(
                &ns,
                doc! { "_id": 1 },
                doc! { "$inc": { "s": 1 } },
                crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
            )
            .await,
        StoreErrorKind::TypeMismatch,
        "findAndModify $inc of a string",
    );
    fails(
        store
            .update_one(
                &ns,
                doc! { "_id": 1 },
                doc! { "$inc": { "n": "one" } },
                crate::store::UpdateOptions::default(),
            )
            .await,
        StoreErrorKind::TypeMismatch,
        "$inc by a string",
    );
    assert_eq!(get(store.as_ref(), &ns, 1).await, Some(original));
}

/// `$push` to a field that is not an array fails with
/// [`StoreErrorKind::TypeMismatch`], and changes nothing.
pub async fn push_to_a_non_array_is_a_type_mismatch<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let original = doc! { "_id": 1, "s": "text" };
    seed(store.as_ref(), &ns, vec![original.clone()]).await;
    fails(
        store
            .update_one(
                &ns,
                doc! { "_id": 1 },
                doc! { "$push": { "s": "x" } },
                crate::store::UpdateOptions::default(),
            )
            .await,
        StoreErrorKind::TypeMismatch,
        "$push to a string",
    );
    assert_eq!(get(store.as_ref(), &ns, 1).await, Some(original));
}

/// `$inc` keeps the wider type (an i32 plus an i64 is an i64, plus a double
/// a double), turns an i32 that would overflow into an i64, creates a
/// missing field with the increment, and fails with
/// [`StoreErrorKind::Overflow`] past the i64 range, changing nothing.
pub async fn inc_promotes_and_overflows<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![doc! { "_id": 1, "a": 1, "b": 1, "c": i32::MAX, "big": i64::MAX }],
    )
    .await;
    store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$inc": { "a": 1_i64, "b": 0.5, "c": 1, "new": 2 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        get(store.as_ref(), &ns, 1).await,
        Some(doc! {
            "_id": 1, "a": 2_i64, "b": 1.5, "c": i64::from(i32::MAX) + 1,
            "big": i64::MAX, "new": 2
        })
    );
    let err = fails(
        store
            .update_one(
                &ns,
                doc! { "_id": 1 },
                doc! { "$inc": { "big": 1_i64 } },
                crate::store::UpdateOptions::default(),
            )
            .await,
        StoreErrorKind::Overflow,
        "$inc past i64::MAX",
    );
    assert!(err.code.is_some(), "{err:?}");
    assert!(!err.kind.outcome_unknown());
    assert_eq!(
        get(store.as_ref(), &ns, 1)
            .await
            .and_then(|d| d.get("big").cloned()),
        Some(Bson::Int64(i64::MAX))
    );
}

/// An update is all or nothing: when one of its operators fails, the ones
/// before it are not kept.
pub async fn failed_updates_change_nothing<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let original = doc! { "_id": 1, "a": 1, "s": "text", "list": ["x"] };
    seed(store.as_ref(), &ns, vec![original.clone()]).await;
    fails(
        store
            .update_one(
                &ns,
                doc! { "_id": 1 },
                doc! {
                    "$set": { "a": 2 },
                    "$push": { "list": "y" },
                    "$inc": { "s": 1 },
                },
                crate::store::UpdateOptions::default(),
            )
            .await,
        StoreErrorKind::TypeMismatch,
        "$set and $push with a failing $inc",
    );
    fails(
        store
            .find_one_and_update(
                &ns,
                doc! { "_id": 1 },
                doc! { "$set": { "a": 2 }, "$push": { "s": 1 } },
                crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::Before),
            )
            .await,
        StoreErrorKind::TypeMismatch,
        "$set with a failing $push",
    );
    assert_eq!(get(store.as_ref(), &ns, 1).await, Some(original));
}

/// A document over 16 MiB is refused with
/// [`StoreErrorKind::DocumentTooLarge`], whether inserted or grown by an
/// update, and the stored document stays as it was.
pub async fn documents_over_16_mib_are_too_large<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let mib = 1024 * 1024;
    fails(
        store
            .insert_one(&ns, doc! { "_id": 1, "blob": "x".repeat(16 * mib) })
            .await,
        StoreErrorKind::DocumentTooLarge,
        "inserting a document over the limit",
    );
    assert_eq!(get(store.as_ref(), &ns, 1).await, None);

    seed(
        store.as_ref(),
        &ns,
        vec![doc! { "_id": 2, "blob": "x".repeat(12 * mib) }],
    )
    .await;
    let err = fails(
        store
            .update_one(
                &ns,
                doc! { "_id": 2 },
                doc! { "$set": { "more": "y".repeat(5 * mib) } },
                crate::store::UpdateOptions::default(),
            )
            .await,
        StoreErrorKind::DocumentTooLarge,
        "growing a document over the limit",
    );
    assert!(err.code.is_some(), "{err:?}");
    let err = store
        .find_one_and_update(
            &ns,
            doc! { "_id": 2 },
            doc! { "$set": { "more": "y".repeat(5 * mib) } },
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .expect_err("findAndModify growing a document over the limit");
    // MongoDB answers 17419/10334 (DocumentTooLarge). SecantusDB 0.7.0b3 fails
    // this findAndModify with code 1 (InternalError, "internal server error"),
    // which a store maps as it is: Other, not retried. (Listed in the guide's
    // server differences.)
    assert!(
        err.kind == StoreErrorKind::DocumentTooLarge
            || (err.kind == StoreErrorKind::Other && err.code == Some(1)),
        "{err}"
    );
    let two = get(store.as_ref(), &ns, 2).await.expect("document 2");
    assert!(!two.contains_key("more"));
}

/// Malformed requests fail with [`StoreErrorKind::BadRequest`] and change
/// nothing: an unknown filter or update operator, an update without
/// operators, a replacement with operators, a change of `_id`, conflicting
/// update paths, a sort direction other than ±1. (An array as `_id`, which
/// MongoDB refuses, is not in the contract: the test server stores it.)
pub async fn malformed_requests_are_bad_requests<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let original = doc! { "_id": 1, "a": 1 };
    seed(store.as_ref(), &ns, vec![original.clone()]).await;
    let update = |filter: Document, update: Document| {
        let store = store.clone();
        let ns = ns.clone();
        async move {
            store
                .update_one(&ns, filter, update, crate::store::UpdateOptions::default())
                .await
        }
    };
    let bad = StoreErrorKind::BadRequest;
    let err = fails(
        update(doc! { "a": { "$bogus": 1 } }, doc! { "$set": { "a": 2 } }).await,
        bad,
        "an unknown filter operator",
    );
    assert!(!err.kind.outcome_unknown());
    fails(
        store
            .find(&ns, doc! { "$bogus": [] }, FindOptions::default())
            .await,
        bad,
        "an unknown top-level filter operator",
    );
    fails(
        store.find_one(&ns, doc! { "a": { "$bogus": 1 } }).await,
        bad,
        "find_one with an unknown operator",
    );
    fails(
        store.count(&ns, doc! { "a": { "$bogus": 1 } }).await,
        bad,
        "count with an unknown operator",
    );
    fails(
        store.delete_one(&ns, doc! { "a": { "$bogus": 1 } }).await,
        bad,
        "delete_one with an unknown operator",
    );
    fails(
        update(doc! { "_id": 1 }, doc! { "$bogus": { "a": 2 } }).await,
        bad,
        "an unknown update operator",
    );
    fails(
        update(doc! { "_id": 1 }, doc! { "a": 2 }).await,
        bad,
        "an update without operators",
    );
    fails(
        update(doc! { "_id": 1 }, doc! { "$set": { "_id": 2 } }).await,
        bad,
        "$set of _id",
    );
    fails(
        update(
            doc! { "_id": 1 },
            doc! { "$set": { "a": 2 }, "$inc": { "a": 1 } },
        )
        .await,
        bad,
        "two operators on one path",
    );
    fails(
        update(doc! { "_id": 1 }, doc! { "$set": { "a": 2, "a.b": 1 } }).await,
        bad,
        "a path and its prefix",
    );
    fails(
        store
            .replace_one(&ns, doc! { "_id": 1 }, doc! { "$set": { "a": 2 } })
            .await,
        bad,
        "a replacement with an operator",
    );
    fails(
        store
            .find(
                &ns,
                doc! {},
                FindOptions {
                    sort: Some(doc! { "a": 2 }),
                    limit: None,
                },
            )
            .await,
        bad,
        "a sort direction of 2",
    );
    assert_eq!(get(store.as_ref(), &ns, 1).await, Some(original));
}

/// `$expr` comparing `{$toLong: "$$NOW"}` with milliseconds, as the
/// protocol fences its steps, is judged by the store's clock, in every
/// filtering call.
pub async fn expr_now_fences_by_the_store_clock<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![doc! { "_id": "A", "n": 0 }, doc! { "_id": "B", "n": 0 }],
    )
    .await;
    let now = store
        .now()
        .await
        .expect("the store's clock")
        .timestamp_millis();
    let hour = 3_600_000;
    let before = |deadline: i64| doc! { "$lt": [ { "$toLong": "$$NOW" }, deadline ] };
    let from = |time: i64| doc! { "$gte": [ { "$toLong": "$$NOW" }, time ] };
    // Open: before a deadline an hour away, from a time an hour ago.
    for open in [before(now + hour), from(now - hour)] {
        let filter = doc! { "_id": "A", "$expr": open.clone() };
        let out = store
            .update_one(
                &ns,
                filter.clone(),
                doc! { "$inc": { "n": 1 } },
                crate::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(out, outcome(1, 1, false), "{open}");
        assert!(store.find_one(&ns, filter.clone()).await.unwrap().is_some());
        assert_eq!(
            store
                .count(&ns, doc! { "$expr": open.clone() })
                .await
                .unwrap(),
            2
        );
    }
    // Closed: past a deadline an hour ago, before a time an hour away.
    for closed in [before(now - hour), from(now + hour)] {
        let filter = doc! { "_id": "A", "$expr": closed.clone() };
        let out = store
            .update_one(
                &ns,
                filter.clone(),
                doc! { "$inc": { "n": 1 } },
                crate::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(out, UpdateOutcome::default(), "{closed}");
        assert_eq!(
            store
                .find_one_and_update(
                    &ns,
                    filter.clone(),
                    doc! { "$inc": { "n": 1 } },
                    crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                )
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            store
                .update_each(&ns, vec![(filter.clone(), doc! { "$inc": { "n": 1 } })])
                .await
                .unwrap(),
            0
        );
        assert_eq!(store.find_one(&ns, filter.clone()).await.unwrap(), None);
        assert_eq!(store.delete_one(&ns, filter.clone()).await.unwrap(), 0);
        assert_eq!(
            store
                .replace_one(&ns, filter.clone(), doc! { "n": 100 })
                .await
                .unwrap(),
            UpdateOutcome::default()
        );
        assert_eq!(
            store
                .count(&ns, doc! { "$expr": closed.clone() })
                .await
                .unwrap(),
            0
        );
    }
    assert_eq!(
        get(store.as_ref(), &ns, "A").await,
        Some(doc! { "_id": "A", "n": 2 })
    );
    // The deadline fences a delete too.
    assert_eq!(
        store
            .delete_one(&ns, doc! { "_id": "B", "$expr": before(now + hour) })
            .await
            .unwrap(),
        1
    );
}

/// `{$bsonSize: "$$ROOT"}` in a filter's `$expr` is the document's size as
/// BSON, to the byte (the room an apply checks, with what is reserved under
/// `_tandem.room`, `$ifNull` of a missing one as zero), and a missing
/// field's `$bsonSize` is null.
pub async fn documents_are_measured_as_bson<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let plain = doc! { "_id": "plain", "text": "x".repeat(1000), "n": 1_i64 };
    let reserved = doc! { "_id": "reserved", "text": "y", "_tandem": { "room": 500_i64 } };
    seed(store.as_ref(), &ns, vec![plain.clone(), reserved.clone()]).await;
    let len = |d: &Document| {
        let mut bytes = Vec::new();
        d.to_writer(&mut bytes).unwrap();
        i64::try_from(bytes.len()).unwrap()
    };
    let fits = |most: i64| {
        doc! { "$lte": [
            { "$add": [{ "$bsonSize": "$$ROOT" }, { "$ifNull": ["$_tandem.room", 0_i64] }] },
            most,
        ] }
    };
    for (d, extra) in [(&plain, 0), (&reserved, 500)] {
        let id = d.get("_id").unwrap().clone();
        let total = len(d) + extra;
        for (most, expected) in [(total, true), (total - 1, false)] {
            let found = store
                .exists(&ns, doc! { "_id": id.clone(), "$expr": fits(most) })
                .await
                .unwrap();
            assert_eq!(found, expected, "{id} within {most} (it takes {total})");
        }
    }
    let missing = store
        .exists(
            &ns,
            doc! { "_id": "plain", "$expr": { "$eq": [{ "$bsonSize": "$nothing" }, Bson::Null] } },
        )
        .await
        .unwrap();
    assert!(missing, "the size of a missing field is null");
}

/// `$arrayElemAt` past an array's end is missing, which ranks below `null`
/// in `$expr`, while a `null` element is not missing: what tells a shared
/// increment that would pad an array from one of an element that exists.
pub async fn missing_elements_rank_below_null<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![doc! { "_id": "a", "items": [1_i32, Bson::Null], "map": { "5": 1_i32 } }],
    )
    .await;
    let present = |path: &str, i: i32| {
        doc! { "_id": "a", "$expr": { "$cond": [
            { "$isArray": format!("${path}") },
            { "$gte": [{ "$arrayElemAt": [format!("${path}"), i] }, Bson::Null] },
            true,
        ] } }
    };
    let mut found = Vec::new();
    for (path, i) in [
        ("items", 0),
        ("items", 1),
        ("items", 2),
        ("map", 9),
        ("none", 3),
    ] {
        found.push(store.exists(&ns, present(path, i)).await.unwrap());
    }
    assert_eq!(found, [true, true, false, true, true]);
}

/// An insert's placeholder carries its validity, judged by the store's
/// clock: the reservation (`$currentDate` with `$max` of the lease) keeps
/// the longer lease; the fill's fence `now < reservedAt + leaseMillis`
/// (`$add` of `$toLong` of a date and a number) holds for a fresh
/// placeholder only, never without `leaseMillis`; and the filter of the
/// expired ones matches the others.
pub async fn placeholders_carry_their_validity<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let reserve = |lease: i64| {
        doc! {
            "$currentDate": { "_tandem.reservedAt": true },
            "$max": { "_tandem.leaseMillis": lease },
        }
    };
    for (id, lease) in [("fresh", 3_600_000_i64), ("zero", 0), ("long", 3_600_000)] {
        let out = store
            .update_one(
                &ns,
                doc! { "_id": id, "_tandem.ghost": true },
                reserve(lease),
                crate::store::UpdateOptions::upsert(),
            )
            .await
            .unwrap();
        assert!(out.upserted, "{id}");
    }
    // A shorter lease does not shorten a placeholder's.
    store
        .update_one(
            &ns,
            doc! { "_id": "long", "_tandem.ghost": true },
            reserve(1),
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap();
    let long = get(store.as_ref(), &ns, "long").await.unwrap();
    let meta = long.get_document("_tandem").unwrap();
    assert_eq!(meta.get_bool("ghost"), Ok(true), "{long}");
    assert_eq!(meta.get_i64("leaseMillis"), Ok(3_600_000), "{long}");
    assert!(meta.get_datetime("reservedAt").is_ok(), "{long}");
    let now = store.now().await.unwrap().timestamp_millis();
    let at = bson::DateTime::from_millis(now);
    seed(
        store.as_ref(),
        &ns,
        vec![doc! { "_id": "legacy", "_tandem": { "ghost": true, "reservedAt": at } }],
    )
    .await;
    let valid = doc! {
        "$lt": [
            { "$toLong": "$$NOW" },
            { "$add": [ { "$toLong": "$_tandem.reservedAt" }, "$_tandem.leaseMillis" ] },
        ]
    };
    let mut valid_ids = Vec::new();
    for id in ["fresh", "zero", "long", "legacy"] {
        if store
            .exists(&ns, doc! { "_id": id, "$expr": valid.clone() })
            .await
            .unwrap()
        {
            valid_ids.push(id);
        }
    }
    assert_eq!(valid_ids, ["fresh", "long"]);
    // Expired: "zero" by its own lease; "legacy" (no lease) by the cutoff.
    let cutoff = bson::DateTime::from_millis(now + 3_600_000);
    let mut expired: Vec<String> = store
        .find(
            &ns,
            crate::document::expired_placeholders(cutoff),
            crate::store::FindOptions::default(),
        )
        .await
        .unwrap()
        .iter()
        .map(|d| d.get_str("_id").unwrap().to_owned())
        .collect();
    expired.sort();
    assert_eq!(expired, ["legacy", "zero"]);
    let cutoff = bson::DateTime::from_millis(now - 3_600_000);
    assert_eq!(
        store
            .count(&ns, crate::document::expired_placeholders(cutoff))
            .await
            .unwrap(),
        1
    );
}

/// The marker idiom: equality on an array means "contains", `$ne` "holds no
/// such element", `"list.0": {$exists: false}` "empty or missing"; `$push`
/// and `$pull` add and remove an id; a guarded `$addToSet` on a nested path
/// applies once.
pub async fn array_markers<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let s = store.as_ref();
    seed(
        s,
        &ns,
        vec![
            doc! { "_id": 1, "list": ["a", "b"] },
            doc! { "_id": 2, "list": ["c"] },
            doc! { "_id": 3, "list": [] },
            doc! { "_id": 4 },
        ],
    )
    .await;
    assert_eq!(
        ids(s, &ns, doc! { "list": { "$ne": "a" } }).await,
        int_ids(&[2, 3, 4])
    );
    assert_eq!(ids(s, &ns, doc! { "list": "b" }).await, int_ids(&[1]));
    assert_eq!(
        ids(s, &ns, doc! { "list": { "$in": ["b", "c"] } }).await,
        int_ids(&[1, 2])
    );
    assert_eq!(
        ids(s, &ns, doc! { "list": { "$nin": ["b", "c"] } }).await,
        int_ids(&[3, 4])
    );
    assert_eq!(
        ids(s, &ns, doc! { "list.0": { "$exists": false } }).await,
        int_ids(&[3, 4])
    );
    assert_eq!(
        ids(s, &ns, doc! { "list.0": { "$exists": true } }).await,
        int_ids(&[1, 2])
    );
    assert_eq!(ids(s, &ns, doc! { "list.1": "b" }).await, int_ids(&[1]));
    assert_eq!(ids(s, &ns, doc! { "list": [] }).await, int_ids(&[3]));
    assert_eq!(
        ids(s, &ns, doc! { "list": ["a", "b"] }).await,
        int_ids(&[1]),
        "equality with a whole array"
    );

    // Mark and unmark, as the protocol does: only while unmarked, only while marked.
    let mark = |id: i32| {
        (
            doc! { "_id": id, "list": { "$ne": "tx" } },
            doc! { "$push": { "list": "tx" } },
        )
    };
    for _ in 0..2 {
        let (filter, update) = mark(2);
        store
            .update_one(&ns, filter, update, crate::store::UpdateOptions::default())
            .await
            .unwrap();
    }
    let (filter, update) = mark(4);
    let out = store
        .update_one(&ns, filter, update, crate::store::UpdateOptions::default())
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false), "$push creates the array");
    assert_eq!(
        get(s, &ns, 2).await,
        Some(doc! { "_id": 2, "list": ["c", "tx"] })
    );
    assert_eq!(
        get(s, &ns, 4).await,
        Some(doc! { "_id": 4, "list": ["tx"] })
    );
    let out = store
        .update_one(
            &ns,
            doc! { "_id": 2, "list": "tx" },
            doc! { "$pull": { "list": "tx" } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false));
    let out = store
        .update_one(
            &ns,
            doc! { "_id": 2 },
            doc! { "$pull": { "list": "tx" } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 0, false), "$pull of an absent element");
    let out = store
        .update_one(
            &ns,
            doc! { "_id": 3 },
            doc! { "$pull": { "missing": "tx" } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 0, false), "$pull from a missing field");
    assert_eq!(get(s, &ns, 2).await, Some(doc! { "_id": 2, "list": ["c"] }));
    assert_eq!(get(s, &ns, 3).await, Some(doc! { "_id": 3, "list": [] }));

    // $pull removes every equal element, numbers equal across types included.
    store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$set": { "nums": [1, 2_i64, 1.0, 3, 1_i64] } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$pull": { "nums": 1 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        get(s, &ns, 1).await.and_then(|d| d.get("nums").cloned()),
        Some(Bson::Array(vec![Bson::Int64(2), Bson::Int32(3)]))
    );

    // A document given to $pull is a condition on the elements (every
    // element holding those fields goes); under `$eq`, only equal elements
    // go. Two-phase and native pulls of a document send it so.
    store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$set": { "items": [
                { "sku": "a" }, { "sku": "a", "qty": 2 }, { "sku": "b" }, { "sku": "a" },
            ] } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$pull": { "items": { "$eq": { "sku": "a" } } } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        get(s, &ns, 1).await.and_then(|d| d.get("items").cloned()),
        Some(bson::bson!([{ "sku": "a", "qty": 2 }, { "sku": "b" }])),
        "$pull of {{$eq: document}} removes the equal elements only"
    );
    store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$pull": { "items": { "sku": "a" } } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        get(s, &ns, 1).await.and_then(|d| d.get("items").cloned()),
        Some(bson::bson!([{ "sku": "b" }])),
        "$pull of a plain document removes every element it matches"
    );

    // A guarded $addToSet on a nested path applies once.
    for _ in 0..2 {
        store
            .update_one(
                &ns,
                doc! { "_id": 1, "_tandem.tombstones": { "$ne": "tx1" } },
                doc! { "$addToSet": { "_tandem.tombstones": "tx1" } },
                crate::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
    }
    let out = store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$addToSet": { "_tandem.tombstones": "tx1" } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 0, false), "$addToSet of a present element");
    assert_eq!(
        get(s, &ns, 1)
            .await
            .and_then(|d| d.get_document("_tandem").ok().cloned()),
        Some(doc! { "tombstones": ["tx1"] })
    );
}

/// `$push` with `$each` and a negative `$slice` keeps the newest elements,
/// as records keep their newest history lines.
pub async fn push_with_slice_keeps_the_newest<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![doc! { "_id": 1, "history": [1, 2, 3] }],
    )
    .await;
    for n in 4..=6 {
        store
            .update_one(
                &ns,
                doc! { "_id": 1 },
                doc! { "$push": { "history": { "$each": [n], "$slice": -3 } } },
                crate::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
    }
    assert_eq!(
        get(store.as_ref(), &ns, 1).await,
        Some(doc! { "_id": 1, "history": [4, 5, 6] })
    );
}

/// In a filter, a numeric segment names an array's element, compared
/// whole at the end of the path (`{"a.0": 5}` does not match `{a: [[5]]}`),
/// and also the field of that name of each document element (`{"m.0": "x"}`
/// matches `{m: [{"0": "x"}]}`), as MongoDB's matcher reads it.
pub async fn numeric_segments_in_filters<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "a": [[5]] },
            doc! { "_id": 2, "a": [5] },
            doc! { "_id": 3, "m": [{ "0": "x" }] },
            doc! { "_id": 4, "m": ["x"] },
            doc! { "_id": 5, "m": [["x"]] },
        ],
    )
    .await;
    let s = store.as_ref();
    for (filter, expected, what) in [
        (doc! { "a.0": 5 }, &[2][..], "an element, whole"),
        (doc! { "a.0": [5] }, &[1], "an array element, whole"),
        (
            doc! { "a.0": { "$type": "int" } },
            &[2],
            "$type of an element",
        ),
        (doc! { "m.0": "x" }, &[3, 4], "a document element's field"),
        (doc! { "m.0.0": "x" }, &[3, 5], "through the element"),
    ] {
        assert_eq!(ids(s, &ns, filter).await, int_ids(expected), "{what}");
    }
}

/// In `$expr`, `$arrayElemAt` picks an array's element and a variable's
/// path (`$$v.0`) a document's field, and `$let`, `$cond` and `$isArray`
/// choose between them: what a before-image of a path through an array is
/// compared with. `$arrayElemAt` past the end
/// is missing, and on a string it fails (code 28689).
pub async fn expressions_reach_array_elements<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "items": [{ "tags": ["a"] }] },
            doc! { "_id": 2, "items": { "0": { "tags": ["a"] } } },
            doc! { "_id": 3, "items": [[{ "tags": ["a"] }]] },
            doc! { "_id": 4, "items": [{ "tags": [["a"]] }] },
            doc! { "_id": 5, "items": "s" },
        ],
    )
    .await;
    let s = store.as_ref();
    let tags = doc! { "$literal": ["a"] };
    // (A field path, `"$items.0.tags"`, reads the field `0` of each element
    // on MongoDB and the element on SecantusDB: `store_semantics.rs` in
    // tandem-mongodb, `a_field_path_through_an_array_differs_between_servers`.)
    // Element 0 of an array, the field `0` of a document.
    let element = doc! { "$let": {
        "vars": { "v": "$items" },
        "in": { "$cond": [
            { "$isArray": "$$v" },
            { "$arrayElemAt": ["$$v", 0] },
            "$$v.0",
        ] },
    } };
    let nav = doc! { "$let": { "vars": { "v": element }, "in": "$$v.tags" } };
    assert_eq!(
        ids(s, &ns, doc! { "$expr": { "$eq": [nav, &tags] } }).await,
        int_ids(&[1, 2]),
        "$let, $cond, $isArray, $arrayElemAt"
    );
    let past_end = doc! { "$expr": { "$eq": [{ "$arrayElemAt": ["$items", 3] }, "$nothing"] } };
    assert_eq!(
        ids(s, &ns, doc! { "_id": 1, "$and": [past_end] }).await,
        int_ids(&[1]),
        "past the end: missing"
    );
    let e = s
        .find(
            &ns,
            doc! { "_id": 5, "$expr": { "$eq": [{ "$arrayElemAt": ["$items", 0] }, 1] } },
            FindOptions::default(),
        )
        .await
        .expect_err("$arrayElemAt of a string");
    assert_eq!(e.code, Some(28689), "{e:?}");
}

/// `$isNumber` (MongoDB 4.4) is true of an int, a long, a double and a
/// decimal, false of anything else, null and a missing field included;
/// `$type` names each type:
/// what a credit's room condition reads the pending sum through, so that a
/// document of sums kept there counts as zero instead of failing the
/// statement (`$subtract` of a document fails, code 16556 on MongoDB).
pub async fn is_number_tells_numbers_apart<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![
            doc! { "_id": 1, "v": 1_i32 },
            doc! { "_id": 2, "v": 2_i64 },
            doc! { "_id": 3, "v": 2.5_f64 },
            doc! { "_id": 4, "v": Bson::Decimal128("7".parse().expect("a decimal")) },
            doc! { "_id": 5, "v": "1" },
            doc! { "_id": 6, "v": { "b": 0_i64 } },
            doc! { "_id": 7, "v": [1_i32] },
            doc! { "_id": 8, "v": Bson::Null },
            doc! { "_id": 9 },
        ],
    )
    .await;
    let s = store.as_ref();
    assert_eq!(
        ids(s, &ns, doc! { "$expr": { "$isNumber": "$v" } }).await,
        int_ids(&[1, 2, 3, 4]),
        "$isNumber"
    );
    let counted = doc! { "$cond": [{ "$isNumber": "$v" }, "$v", 0_i64] };
    assert_eq!(
        ids(
            s,
            &ns,
            doc! { "$expr": { "$lte": [{ "$subtract": [10_i64, counted] }, 8_i64] } }
        )
        .await,
        int_ids(&[2, 3, 4]),
        "$subtract of what $cond keeps of a number, 0 for anything else"
    );
    // `$type` (MongoDB 3.4) names the type, "missing" for no value: what
    // an integer credit's room condition reads to pass over a double or a
    // decimal, which no integer overflows.
    for (name, want) in [
        ("int", &[1][..]),
        ("long", &[2]),
        ("double", &[3]),
        ("decimal", &[4]),
        ("string", &[5]),
        ("object", &[6]),
        ("array", &[7]),
        ("null", &[8]),
        ("missing", &[9]),
    ] {
        assert_eq!(
            ids(
                s,
                &ns,
                doc! { "$expr": { "$eq": [{ "$type": "$v" }, name] } }
            )
            .await,
            int_ids(want),
            "$type {name}"
        );
    }
}

/// Dotted paths reach into subdocuments in filters and updates: `$set`
/// creates the subdocuments on the way, `$inc` creates a missing field,
/// `$unset` removes a nested field and leaves its parent; a `$set` through
/// a scalar fails with [`StoreErrorKind::TypeMismatch`] (code 28).
pub async fn dotted_paths<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let s = store.as_ref();
    seed(
        s,
        &ns,
        vec![
            doc! { "_id": 1, "a": { "b": 1, "c": "x" } },
            doc! { "_id": 2, "a": { "b": 2 } },
            doc! { "_id": 3, "a": 5 },
            doc! { "_id": 4, "a": [ { "b": 1 }, { "b": 3 } ] },
        ],
    )
    .await;
    assert_eq!(ids(s, &ns, doc! { "a.b": 1 }).await, int_ids(&[1, 4]));
    assert_eq!(
        ids(s, &ns, doc! { "a.b": { "$gte": 2 } }).await,
        int_ids(&[2, 4])
    );
    assert_eq!(
        ids(s, &ns, doc! { "a.b": { "$exists": false } }).await,
        int_ids(&[3])
    );
    assert_eq!(ids(s, &ns, doc! { "a.c": "x" }).await, int_ids(&[1]));
    assert_eq!(ids(s, &ns, doc! { "a.1.b": 3 }).await, int_ids(&[4]));
    assert_eq!(
        ids(s, &ns, doc! { "a": { "b": 2 } }).await,
        int_ids(&[2]),
        "equality with a whole subdocument"
    );
    assert_eq!(
        ids(s, &ns, doc! { "a": { "c": "x", "b": 1 } }).await,
        Vec::<Bson>::new(),
        "subdocuments are equal with their fields in order only"
    );

    store
        .update_one(
            &ns,
            doc! { "_id": 2 },
            doc! { "$set": { "a.d.e": true }, "$inc": { "a.n": 3, "z.n": 1 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        get(s, &ns, 2).await,
        Some(doc! {
            "_id": 2, "a": { "b": 2, "d": { "e": true }, "n": 3 }, "z": { "n": 1 }
        })
    );
    let out = store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$unset": { "a.c": "" } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, outcome(1, 1, false));
    assert_eq!(
        get(s, &ns, 1).await,
        Some(doc! { "_id": 1, "a": { "b": 1 } })
    );
    store
        .update_one(
            &ns,
            doc! { "_id": 4, "a.0.b": 1 },
            doc! { "$set": { "a.0.b": 10 } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        get(s, &ns, 4).await,
        Some(doc! { "_id": 4, "a": [ { "b": 10 }, { "b": 3 } ] })
    );
    // Through a scalar, $set cannot create a field.
    let err = fails(
        store
            .update_one(
                &ns,
                doc! { "_id": 3 },
                doc! { "$set": { "a.b": 1 } },
                crate::store::UpdateOptions::default(),
            )
            .await,
        StoreErrorKind::TypeMismatch,
        "$set through a scalar",
    );
    assert_eq!(err.code, Some(28), "{err}");
    assert_eq!(get(s, &ns, 3).await, Some(doc! { "_id": 3, "a": 5 }));
}

/// The comparison and logical operators of the protocol's filters: ranges
/// combined on one field, `$in`, `$nin`, `$exists`, `$not` of an operator
/// document, top-level `$and` and `$or`, and `$ne`/`$nin` matching missing
/// fields.
pub async fn comparison_and_logical_operators<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    let s = store.as_ref();
    seed(
        s,
        &ns,
        vec![
            doc! { "_id": 1, "n": 10, "state": "pending" },
            doc! { "_id": 2, "n": 20, "state": "applied" },
            doc! { "_id": 3, "n": 30, "state": "done" },
            doc! { "_id": 4, "state": "done" },
            doc! { "_id": 5, "n": Bson::Null },
        ],
    )
    .await;
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$gt": 10, "$lte": 30 } }).await,
        int_ids(&[2, 3])
    );
    // A shared debit's apply keeps its field's type: `$type` with a list of
    // aliases, and an `$or` of `$type` with a bound.
    seed(
        s,
        &ns,
        vec![
            doc! { "_id": 11, "m": 5_i64 },
            doc! { "_id": 12, "m": 2.5 },
            doc! { "_id": 13, "m": i32::MIN + 5 },
            doc! { "_id": 14, "m": 7_i32 },
            doc! { "_id": 15, "m": "7" },
        ],
    )
    .await;
    assert_eq!(
        ids(
            s,
            &ns,
            doc! { "m": { "$type": ["long", "double", "decimal"] } }
        )
        .await,
        int_ids(&[11, 12]),
        "$type with a list"
    );
    assert_eq!(
        ids(
            s,
            &ns,
            doc! { "_id": { "$gte": 11 }, "$or": [
                { "m": { "$type": ["long", "double", "decimal"] } },
                { "m": { "$type": "int", "$gte": i32::MIN + 10 } },
            ] }
        )
        .await,
        int_ids(&[11, 12, 14]),
        "$or of $type with a bound"
    );
    for id in 11..=15 {
        s.delete_one(&ns, doc! { "_id": id }).await.unwrap();
    }
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$gte": 10, "$lt": 30 } }).await,
        int_ids(&[1, 2])
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$not": { "$gt": 10 } } }).await,
        int_ids(&[1, 4, 5]),
        "$not matches missing and null too"
    );
    assert_eq!(
        ids(s, &ns, doc! { "state": { "$in": ["pending", "applied"] } }).await,
        int_ids(&[1, 2])
    );
    assert_eq!(
        ids(s, &ns, doc! { "state": { "$nin": ["pending", "applied"] } }).await,
        int_ids(&[3, 4, 5]),
        "$nin matches a missing field"
    );
    assert_eq!(
        ids(s, &ns, doc! { "state": { "$ne": "done" } }).await,
        int_ids(&[1, 2, 5]),
        "$ne matches a missing field"
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$exists": true } }).await,
        int_ids(&[1, 2, 3, 5]),
        "a null field exists"
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$exists": false } }).await,
        int_ids(&[4])
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": Bson::Null }).await,
        int_ids(&[4, 5]),
        "null equality matches missing fields"
    );
    assert_eq!(
        ids(
            s,
            &ns,
            doc! { "$or": [ { "_id": 1 }, { "_id": { "$gte": 3 } } ], "_id": { "$nin": [3] } }
        )
        .await,
        int_ids(&[1, 4, 5])
    );
    assert_eq!(
        ids(
            s,
            &ns,
            doc! { "$and": [ { "_id": { "$in": [1, 2, 3] } }, { "_id": { "$lt": 3, "$gt": 1 } } ] }
        )
        .await,
        int_ids(&[2])
    );
    assert_eq!(
        ids(
            s,
            &ns,
            doc! { "$and": [ { "state": "done" }, { "$or": [ { "n": 30 }, { "n": { "$exists": false } } ] } ] }
        )
        .await,
        int_ids(&[3, 4])
    );
    // Strings and numbers are compared within their own type only.
    assert_eq!(
        ids(s, &ns, doc! { "state": { "$gt": 5 } }).await,
        Vec::<Bson>::new()
    );
    assert_eq!(
        ids(s, &ns, doc! { "state": { "$gte": "done" } }).await,
        int_ids(&[1, 3, 4])
    );
}

/// `$set`, `$unset` and `$setOnInsert` report modified only when the
/// document changed: `$unset` of a missing field and `$set` of the same
/// value match without modifying.
pub async fn unset_and_set_outcomes<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = docs(db);
    seed(
        store.as_ref(),
        &ns,
        vec![doc! { "_id": 1, "a": 1, "b": { "c": [1, 2] } }],
    )
    .await;
    let update = |u: Document| {
        let store = store.clone();
        let ns = ns.clone();
        async move {
            store
                .update_one(
                    &ns,
                    doc! { "_id": 1 },
                    u.clone(),
                    crate::store::UpdateOptions::default(),
                )
                .await
                .unwrap_or_else(|e| panic!("{u}: {e}"))
        }
    };
    assert_eq!(
        update(doc! { "$unset": { "missing": "" } }).await,
        outcome(1, 0, false)
    );
    assert_eq!(
        update(doc! { "$set": { "b": { "c": [1, 2] } } }).await,
        outcome(1, 0, false)
    );
    assert_eq!(
        update(doc! { "$setOnInsert": { "a": 5 } }).await,
        outcome(1, 0, false),
        "$setOnInsert on a match"
    );
    assert_eq!(
        update(doc! { "$set": { "a": 1_i64 } }).await,
        outcome(1, 1, false),
        "the same number as another type is a change"
    );
    assert_eq!(
        update(doc! { "$unset": { "a": "" } }).await,
        outcome(1, 1, false)
    );
    assert_eq!(
        get(store.as_ref(), &ns, 1).await,
        Some(doc! { "_id": 1, "b": { "c": [1, 2] } })
    );
}

/// NaN equals NaN but lies in no range: `$lt` and `$gt` never match when
/// either side is NaN, `$lte` and `$gte` only NaN against NaN (MongoDB's
/// `ComparisonMatchExpression::matchesSingleElement`, "Special case handling
/// for NaN"). A `$pull` with a range condition therefore keeps a NaN.
pub async fn nan_is_in_no_range<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let s = store.as_ref();
    let ns = docs(db);
    seed(
        s,
        &ns,
        vec![
            doc! { "_id": 1, "n": f64::NAN },
            doc! { "_id": 2, "n": 5 },
            doc! { "_id": 3, "a": [f64::NAN, 1, 7] },
        ],
    )
    .await;
    assert_eq!(
        ids(s, &ns, doc! { "n": f64::NAN }).await,
        int_ids(&[1]),
        "n == NaN"
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$lt": 10 } }).await,
        int_ids(&[2]),
        "n < 10"
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$lte": 10 } }).await,
        int_ids(&[2]),
        "n <= 10"
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$lt": f64::INFINITY } }).await,
        int_ids(&[2]),
        "n < inf"
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$gt": f64::NAN } }).await,
        int_ids(&[]),
        "n > NaN"
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$gte": f64::NAN } }).await,
        int_ids(&[1]),
        "n >= NaN"
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$lte": f64::NAN } }).await,
        int_ids(&[1]),
        "n <= NaN"
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$not": { "$lt": 10 } } }).await,
        int_ids(&[1, 3]),
        "not n < 10"
    );
    store
        .update_one(
            &ns,
            doc! { "_id": 3 },
            doc! { "$pull": { "a": { "$lt": 5 } } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    let a = get(s, &ns, 3)
        .await
        .unwrap()
        .get_array("a")
        .unwrap()
        .clone();
    assert_eq!(a.len(), 2, "$pull {{$lt: 5}} keeps NaN and 7: {a:?}");
    assert!(matches!(a[0], Bson::Double(f) if f.is_nan()), "{a:?}");
    assert_eq!(a[1], Bson::Int32(7));
}

/// An update path's segment that is a number with a leading zero (`tags.01`)
/// is an array index to MongoDB's updates (`getChild` in
/// `update_object_node.cpp` parses it as a base-10 integer) and a field name
/// to its queries: a store reads it as the index, or refuses it
/// (`BadRequest`, as the embedded store does); never another outcome. As
/// the first segment it is a field name (`007`) on every store.
pub async fn update_paths_with_leading_zero_segments<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let s = store.as_ref();
    let ns = docs(db);
    seed(s, &ns, vec![doc! { "_id": 1, "tags": ["x", "y", "z"] }]).await;
    let result = store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$set": { "tags.01": "Y" } },
            crate::store::UpdateOptions::default(),
        )
        .await;
    match result {
        Ok(_) => assert_eq!(
            get(s, &ns, 1).await,
            Some(doc! { "_id": 1, "tags": ["x", "Y", "z"] })
        ),
        Err(e) => {
            assert_eq!(e.kind, StoreErrorKind::BadRequest, "{e}");
            assert_eq!(
                get(s, &ns, 1).await,
                Some(doc! { "_id": 1, "tags": ["x", "y", "z"] })
            );
        }
    }
    // The first segment names a field of the document (never an array's
    // element): `007` is a field everywhere.
    store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$set": { "007": "bond" } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .expect("$set 007");
    let d = get(s, &ns, 1).await.expect("the document");
    assert_eq!(d.get_str("007"), Ok("bond"), "{d}");
}

/// MinKey and MaxKey as a range's bound compare with every type: every
/// value is `$lt` MaxKey and `$gt` MinKey (MongoDB's
/// `ComparisonMatchExpression::matchesSingleElement`).
pub async fn min_and_max_key_bound_every_value<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let s = store.as_ref();
    let ns = docs(db);
    seed(
        s,
        &ns,
        vec![
            doc! { "_id": 1, "v": 5 },
            doc! { "_id": 2, "v": "s" },
            doc! { "_id": 3, "v": Bson::Null },
        ],
    )
    .await;
    assert_eq!(
        ids(s, &ns, doc! { "v": { "$lt": Bson::MaxKey } }).await,
        int_ids(&[1, 2, 3])
    );
    assert_eq!(
        ids(s, &ns, doc! { "v": { "$gte": Bson::MinKey } }).await,
        int_ids(&[1, 2, 3])
    );
    assert_eq!(
        ids(s, &ns, doc! { "v": { "$gt": Bson::MaxKey } }).await,
        int_ids(&[])
    );
}

/// Decimal128 values compare numerically with each other and with the
/// other numeric types, in every operator.
pub async fn decimals_compare_as_numbers<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let s = store.as_ref();
    let ns = docs(db);
    let dec = |t: &str| Bson::Decimal128(t.parse().expect("a decimal"));
    seed(
        s,
        &ns,
        vec![
            doc! { "_id": 1, "d": dec("1.0") },
            doc! { "_id": 2, "d": 1 },
            doc! { "_id": 3, "d": dec("2") },
        ],
    )
    .await;
    assert_eq!(
        ids(s, &ns, doc! { "d": 1 }).await,
        int_ids(&[1, 2]),
        "d == 1"
    );
    assert_eq!(
        ids(s, &ns, doc! { "d": { "$ne": 1 } }).await,
        int_ids(&[3]),
        "d != 1"
    );
    assert_eq!(
        ids(s, &ns, doc! { "d": { "$gte": dec("1") } }).await,
        int_ids(&[1, 2, 3])
    );
    assert_eq!(
        ids(s, &ns, doc! { "d": { "$lt": 1.5 } }).await,
        int_ids(&[1, 2]),
        "d < 1.5"
    );
}

/// `{"a.b": null}` through an array holding no document (empty, or of
/// scalars) does not match on MongoDB up to 8.x, nor on the embedded store,
/// which follows it (SERVER-36681 changed it in 9.0: there it matches).
pub async fn dotted_null_through_arrays_without_documents<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let s = store.as_ref();
    let ns = docs(db);
    seed(
        s,
        &ns,
        vec![
            doc! { "_id": 1, "a": [1, 2] },
            doc! { "_id": 2, "a": [] },
            doc! { "_id": 3, "a": [{ "b": 1 }] },
            doc! { "_id": 4, "a": [{ "c": 1 }] },
            doc! { "_id": 5, "a": 5 },
            doc! { "_id": 6 },
        ],
    )
    .await;
    assert_eq!(
        ids(s, &ns, doc! { "a.b": Bson::Null }).await,
        int_ids(&[4, 5, 6])
    );
    assert_eq!(
        ids(s, &ns, doc! { "a.b": { "$ne": Bson::Null } }).await,
        int_ids(&[1, 2, 3])
    );
}

/// `$not` of `$type` (one name or a list) matches exactly the documents the
/// `$type` does not: a missing field, and a field of none of the types (an
/// array holding a value of one counts as of that type, an array is of
/// type `"array"`); `$not` of a range is false on an array with an element
/// in the range. A field both present and null (`{$eq: null, $exists:
/// true}`) is not a missing one. (A shared change's conditions rely on
/// them: the parents of a deferred credit hold documents or nothing, no
/// credit is pending on a parent or below it, a float credit finds no
/// integer; a before-image of null requires the null.)
pub async fn negated_types_and_present_nulls<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let s = store.as_ref();
    let ns = docs(db);
    seed(
        s,
        &ns,
        vec![
            doc! { "_id": 1, "p": { "x": 1 }, "c": 5, "n": 1 },
            doc! { "_id": 2, "p": [{ "x": 1 }], "c": { "a": 1 }, "n": 2_i64 },
            doc! { "_id": 3, "p": "s", "c": "5", "n": 2.5 },
            doc! { "_id": 4, "p": 5, "c": [1, "a"], "n": "x" },
            doc! { "_id": 5 },
            doc! { "_id": 6, "p": Bson::Null, "c": 5.5, "n": Bson::Null },
            doc! { "_id": 7, "p": [], "c": [1, 10], "n": [Bson::Null] },
        ],
    )
    .await;
    let not_documents: Vec<Bson> = crate::query::TYPE_NAMES
        .iter()
        .filter(|t| **t != "object")
        .map(|t| Bson::from(*t))
        .collect();
    assert_eq!(
        ids(s, &ns, doc! { "p": { "$not": { "$type": not_documents } } }).await,
        int_ids(&[1, 5]),
        "$not of every type but a document: documents and missing fields"
    );
    assert_eq!(
        ids(s, &ns, doc! { "c": { "$not": { "$type": "number" } } }).await,
        int_ids(&[2, 3, 5]),
        "$not of $type number: no number, nor an array holding one"
    );
    assert_eq!(
        ids(s, &ns, doc! { "c": { "$not": { "$type": "object" } } }).await,
        int_ids(&[1, 3, 4, 5, 6, 7]),
        "$not of $type object"
    );
    assert_eq!(
        ids(
            s,
            &ns,
            doc! { "n": { "$not": { "$type": ["int", "long"] } } }
        )
        .await,
        int_ids(&[3, 4, 5, 6, 7]),
        "$not of a list of types"
    );
    assert_eq!(
        ids(s, &ns, doc! { "c": { "$not": { "$gt": 5 } } }).await,
        int_ids(&[1, 2, 3, 4, 5]),
        "$not of a range: an array with an element in it does not match"
    );
    assert_eq!(
        ids(s, &ns, doc! { "n": { "$eq": Bson::Null, "$exists": true } }).await,
        int_ids(&[6, 7]),
        "a present null (or an array holding one), not a missing field"
    );
    assert_eq!(
        ids(
            s,
            &ns,
            doc! { "n": { "$eq": Bson::Null, "$exists": true }, "n.0": { "$exists": false } }
        )
        .await,
        int_ids(&[6]),
        "null itself"
    );
}

/// An upsert that must not match an existing document (`state: {$in: []}`
/// matches nothing) collides with its `_id` through `findAndModify` too:
/// [`StoreErrorKind::DuplicateKey`] (code 11000), the document untouched,
/// `$currentDate` included. An upsert through `findAndModify` that matches
/// returns the document as it is, `$setOnInsert` ignored. (A transaction's
/// record is created so, and a store's identity read so.)
pub async fn find_one_and_update_upserts_collide_on_the_id<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let s = store.as_ref();
    let ns = docs(db);
    let taken = doc! { "_id": "t1", "state": "done", "created": DateTime::from_millis(1_000) };
    seed(s, &ns, vec![taken.clone()]).await;
    let create = || {
        (
            doc! { "_id": "t1", "state": { "$in": [] } },
            doc! {
                "$setOnInsert": { "state": "pending", "owner": "b" },
                "$currentDate": { "created": true, "lastModified": true },
            },
        )
    };
    let (filter, update) = create();
    let out = s
        .update_one(&ns, filter, update, crate::store::UpdateOptions::default())
        .await
        .unwrap();
    assert_eq!(
        out,
        UpdateOutcome::default(),
        "$in of nothing matches nothing"
    );
    let (filter, update) = create();
    let err = fails(
        s.find_one_and_update(
            &ns,
            filter,
            update,
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                .with_upsert(true)
                .with_fields(&["created", "state"]),
        )
        .await,
        StoreErrorKind::DuplicateKey,
        "findAndModify upserting an _id that is taken",
    );
    assert_eq!(err.code, Some(11000), "{err}");
    assert!(!err.kind.outcome_unknown());
    assert_eq!(get(s, &ns, "t1").await, Some(taken), "the record untouched");
    assert_eq!(s.count(&ns, doc! {}).await.unwrap(), 1);

    let identity = || {
        (
            doc! { "_id": "identity" },
            doc! { "$setOnInsert": { "uid": "first" } },
        )
    };
    for _ in 0..2 {
        let (filter, update) = identity();
        let found = s
            .find_one_and_update(
                &ns,
                filter,
                update,
                crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                    .with_upsert(true),
            )
            .await
            .unwrap();
        assert_eq!(found, Some(doc! { "_id": "identity", "uid": "first" }));
    }
    let found = s
        .find_one_and_update(
            &ns,
            doc! { "_id": "identity" },
            doc! { "$setOnInsert": { "uid": "second" } },
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                .with_upsert(true),
        )
        .await
        .unwrap();
    assert_eq!(
        found,
        Some(doc! { "_id": "identity", "uid": "first" }),
        "a match keeps what was inserted"
    );
}

/// [`Store::clock_estimate`] follows the store's clock: never ahead of a
/// reading of [`Store::now`] taken after it, nor far behind one taken
/// before it. (A record's create deadline is fixed from it: an estimate
/// ahead of the store would let a record written late count as on time.)
pub async fn clock_estimate_follows_the_store_clock<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let _ = db;
    for _ in 0..3 {
        let before = store.now().await.expect("the store's clock");
        let estimate = store.clock_estimate().await.expect("the estimate");
        let after = store.now().await.expect("the store's clock");
        // The server's readings are a millisecond apart at best.
        let slack = 1_000;
        assert!(
            estimate.timestamp_millis() <= after.timestamp_millis() + slack,
            "the estimate {estimate} is ahead of the store's {after}"
        );
        assert!(
            estimate.timestamp_millis() >= before.timestamp_millis() - slack,
            "the estimate {estimate} is far behind the store's {before}"
        );
    }
}

/// A store with native transactions ([`Store::native`]) makes every change
/// of one or none: a refusal of any change (a guard that fails, an insert
/// of an `_id` taken, an increment of a string) is
/// [`NativeFailure::Aborted`](crate::NativeFailure::Aborted) with the typed
/// refusal the two-phase protocol gives, and leaves every document as it
/// was, the changes before it in the transaction included; a transaction
/// nobody refuses lands whole, inserts and deletes included. A store
/// without native transactions keeps this case by having none.
pub async fn native_transactions_are_all_or_nothing<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    use crate::{DocumentChange, NativeFailure, RetryPolicy, StepError};
    let store = factory.fresh().await;
    let Some(native) = store.native() else {
        return;
    };
    let ns = docs(db);
    let seeded = vec![
        doc! { "_id": "A", "balance": 10_i64 },
        doc! { "_id": "B", "balance": 0_i64 },
        doc! { "_id": "C", "n": "text" },
    ];
    seed(store.as_ref(), &ns, seeded.clone()).await;
    let debit = |amount: i64| {
        DocumentChange::update(ns.clone(), "A")
            .inc("balance", -amount)
            .require_gte("balance", amount)
    };
    let credit = |amount: i64| DocumentChange::update(ns.clone(), "B").inc("balance", amount);
    let all = |store: std::sync::Arc<dyn Store>| {
        let ns = ns.clone();
        async move {
            let mut found = Vec::new();
            for id in ["A", "B", "C", "D"] {
                found.push(get(store.as_ref(), &ns, id).await);
            }
            found
        }
    };
    let before = all(store.clone()).await;
    let refused: [(&str, Vec<DocumentChange>); 3] = [
        ("a guard that fails", vec![credit(100), debit(100)]),
        (
            "an insert of an _id taken",
            vec![
                debit(3),
                credit(3),
                DocumentChange::insert(ns.clone(), "C", doc! { "n": 1_i64 }),
            ],
        ),
        (
            "an increment of a string",
            vec![
                debit(3),
                credit(3),
                DocumentChange::update(ns.clone(), "C").inc("n", 1_i64),
            ],
        ),
    ];
    for (why, changes) in refused {
        let answer = native.run_native(&changes, RetryPolicy::default()).await;
        let expected = match why {
            "a guard that fails" => {
                matches!(
                    answer,
                    Err(NativeFailure::Aborted(StepError::GuardFailed { .. }))
                )
            }
            "an insert of an _id taken" => {
                matches!(
                    answer,
                    Err(NativeFailure::Aborted(StepError::AlreadyExists { .. }))
                )
            }
            _ => matches!(
                answer,
                Err(NativeFailure::Aborted(StepError::TypeMismatch { .. }))
            ),
        };
        assert!(expected, "{why}: {answer:?}");
        assert_eq!(all(store.clone()).await, before, "{why}: nothing written");
    }
    let whole = vec![
        debit(4),
        credit(4),
        DocumentChange::delete(ns.clone(), "C"),
        DocumentChange::insert(ns.clone(), "D", doc! { "x": 1_i64 }),
    ];
    let answer = native.run_native(&whole, RetryPolicy::default()).await;
    assert!(answer.is_ok(), "a transaction nobody refuses: {answer:?}");
    let after = all(store.clone()).await;
    let field = |d: &Option<Document>, f: &str| d.as_ref().and_then(|d| d.get(f).cloned());
    assert_eq!(
        field(&after[0], "balance"),
        Some(Bson::Int64(6)),
        "A: {after:?}"
    );
    assert_eq!(
        field(&after[1], "balance"),
        Some(Bson::Int64(4)),
        "B: {after:?}"
    );
    assert_eq!(after[2], None, "C deleted: {after:?}");
    assert_eq!(
        field(&after[3], "x"),
        Some(Bson::Int64(1)),
        "D inserted: {after:?}"
    );
}
