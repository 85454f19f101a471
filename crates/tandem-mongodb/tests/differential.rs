//! Differential test of the embedded store against a server: generated
//! documents, filters and updates (the operator subset tandem uses, see
//! `tandem::store`) are applied to a `MemoryStore` and to the server
//! `MONGODB_URI` names, each case in a fresh collection, and after every
//! operation the two must agree: the same result (outcome, returned
//! document, found documents, count), the same error kind when both fail,
//! and the same documents, compared byte for byte (field order and number
//! types included).
//!
//! The run is bounded and reproducible: [`CASES`] cases from the fixed seed
//! [`SEED`] (set `TANDEM_DIFFERENTIAL_SEED` and `TANDEM_DIFFERENTIAL_CASES`
//! to explore further). A difference fails the test with the case that
//! shows it, shrunk.
//!
//! What is generated, and what is left out and why:
//!
//! * Documents have `_id`s 0, 1, 2 … inserted in that order, and fields
//!   `a` (a scalar), `b` (a number), `arr` (an array of strings, sometimes a
//!   string), `sub` (a subdocument with `x` and `y` in either order,
//!   sometimes a number). Numbers are i32, i64 and doubles, small ones and
//!   the edges (`i32::MAX`, `i64::MAX`, `i64::MIN`, 2^63 as a double); no
//!   NaN or -0.0, whose bytes differ where their values compare equal.
//! * Filters: plain equality (scalars, arrays, subdocuments), `$eq`, `$ne`,
//!   `$gt`, `$gte`, `$lt`, `$lte`, `$in`, `$nin`, `$exists`, `$not` of an
//!   operator document, top-level `$and` and `$or`, on top-level fields,
//!   dotted paths and array elements (`arr.0`).
//! * Updates: `$set`, `$unset`, `$inc`, `$push`, `$pull`, `$setOnInsert`, on
//!   top-level and dotted paths; upserts.
//! * Writes (`update_one`, `find_one_and_update`, `delete_one`) always carry
//!   an `_id` equality next to the generated conditions, as every write of
//!   the protocol does: which document a write without one takes is the
//!   first in the store's natural order, which MongoDB does not specify (the
//!   embedded store takes the smallest `_id`). For the same reason an upsert
//!   always names its `_id`: a generated ObjectId would differ.

mod common;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bson::{doc, Bson, Document};
use common::{env_or, mongodb_uri, runtime, secantus_version, unique_name};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use tandem::store::{
    FindOptions, Namespace, ReturnDocument, Store, StoreError, StoreErrorKind, UpdateOutcome,
};
use tandem::MemoryStore;
use tandem_mongodb::MongoStore;

/// Cases per run: enough to meet every operator in many combinations, few
/// enough to run in seconds against SecantusDB.
const CASES: u32 = 128;

/// The run's seed (`TANDEM_DIFFERENTIAL_SEED` overrides it).
const SEED: u64 = 0x7A4D_2024_0D1F;

// Generators.

fn number() -> BoxedStrategy<Bson> {
    prop_oneof![
        4 => (-3_i32..4).prop_map(Bson::Int32),
        3 => (-3_i64..4).prop_map(Bson::Int64),
        3 => (-6_i32..8).prop_map(|h| Bson::Double(f64::from(h) / 2.0)),
        1 => prop::sample::select(vec![
            Bson::Int32(i32::MAX),
            Bson::Int32(i32::MIN),
            Bson::Int64(i64::MAX),
            Bson::Int64(i64::MIN),
            Bson::Double(9_223_372_036_854_775_808.0),
        ]),
    ]
    .boxed()
}

fn string() -> BoxedStrategy<Bson> {
    prop::sample::select(vec!["a", "b", "ab", "B", ""])
        .prop_map(Bson::from)
        .boxed()
}

fn strings() -> BoxedStrategy<Bson> {
    prop::collection::vec(string(), 0..3)
        .prop_map(Bson::Array)
        .boxed()
}

fn scalar() -> BoxedStrategy<Bson> {
    prop_oneof![
        4 => number(),
        3 => string(),
        1 => Just(Bson::Null),
        1 => any::<bool>().prop_map(Bson::Boolean),
    ]
    .boxed()
}

/// `{x: <number>, y: <string>}`, either field missing, in either order.
fn subdocument() -> BoxedStrategy<Bson> {
    (
        prop::option::of(number()),
        prop::option::of(string()),
        any::<bool>(),
    )
        .prop_map(|(x, y, y_first)| {
            let mut d = Document::new();
            let x = x.map(|v| ("x", v));
            let y = y.map(|v| ("y", v));
            let (first, second) = if y_first { (y, x) } else { (x, y) };
            for (k, v) in first.into_iter().chain(second) {
                d.insert(k, v);
            }
            Bson::Document(d)
        })
        .boxed()
}

/// Any value a field may hold or be compared with.
fn value() -> BoxedStrategy<Bson> {
    prop_oneof![
        6 => scalar(),
        2 => strings(),
        2 => subdocument(),
    ]
    .boxed()
}

/// A document with `_id` `id`; every field may be missing.
fn document(id: i32) -> BoxedStrategy<Document> {
    (
        prop::option::of(scalar()),
        prop::option::of(number()),
        prop::option::of(prop_oneof![4 => strings(), 1 => string()]),
        prop::option::of(prop_oneof![4 => subdocument(), 1 => number()]),
    )
        .prop_map(move |(a, b, arr, sub)| {
            let mut d = doc! { "_id": id };
            for (k, v) in [("a", a), ("b", b), ("arr", arr), ("sub", sub)] {
                if let Some(v) = v {
                    d.insert(k, v);
                }
            }
            d
        })
        .boxed()
}

/// One to three documents with `_id`s 0, 1, 2.
fn documents() -> BoxedStrategy<Vec<Document>> {
    (1_i32..=3)
        .prop_flat_map(|n| (0..n).map(document).collect::<Vec<_>>())
        .boxed()
}

fn filter_path() -> BoxedStrategy<&'static str> {
    prop::sample::select(vec![
        "a", "a", "b", "b", "arr", "arr", "arr.0", "arr.1", "sub", "sub.x", "sub.y", "missing",
    ])
    .boxed()
}

/// An operator document: one comparison, two (a range), `$in`/`$nin`,
/// `$exists`, or `$not` of one of these.
fn operators() -> BoxedStrategy<Document> {
    let comparison = (
        prop::sample::select(vec!["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]),
        value(),
    )
        .prop_map(|(op, v)| {
            let mut d = Document::new();
            d.insert(op, v);
            d
        });
    let range = (
        prop::sample::select(vec!["$gt", "$gte"]),
        number(),
        prop::sample::select(vec!["$lt", "$lte"]),
        number(),
    )
        .prop_map(|(lo, a, hi, b)| {
            let mut d = Document::new();
            d.insert(lo, a);
            d.insert(hi, b);
            d
        });
    let set = (
        prop::sample::select(vec!["$in", "$nin"]),
        prop::collection::vec(value(), 0..3),
    )
        .prop_map(|(op, vs)| {
            let mut d = Document::new();
            d.insert(op, vs);
            d
        });
    let exists = any::<bool>().prop_map(|b| doc! { "$exists": b });
    let simple = prop_oneof![
        5 => comparison,
        2 => range,
        3 => set,
        2 => exists,
    ]
    .boxed();
    prop_oneof![
        6 => simple.clone(),
        1 => simple.prop_map(|inner| doc! { "$not": inner }),
    ]
    .boxed()
}

/// One field's condition: plain equality or an operator document.
fn condition() -> BoxedStrategy<(&'static str, Bson)> {
    (
        filter_path(),
        prop_oneof![
            2 => value(),
            3 => operators().prop_map(Bson::Document),
        ],
    )
        .boxed()
}

/// A filter of zero to two field conditions, sometimes inside a top-level
/// `$and` or `$or`.
fn filter() -> BoxedStrategy<Document> {
    let fields = prop::collection::vec(condition(), 0..3).prop_map(|cs| {
        let mut d = Document::new();
        for (path, v) in cs {
            d.insert(path, v);
        }
        d
    });
    prop_oneof![
        4 => fields.clone(),
        1 => (prop::sample::select(vec!["$and", "$or"]), prop::collection::vec(fields, 1..3))
            .prop_map(|(op, parts)| {
                let mut d = Document::new();
                d.insert(op, parts.into_iter().map(Bson::Document).collect::<Vec<_>>());
                d
            }),
    ]
    .boxed()
}

/// MongoDB's order of update paths: segment by segment, names compared as
/// strings, or as numbers when both are all digits.
fn path_order(a: &str, b: &str) -> std::cmp::Ordering {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    let (mut x, mut y) = (a.split('.'), b.split('.'));
    loop {
        let order = match (x.next(), y.next()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some(p), Some(q)) if numeric(p) && numeric(q) => {
                p.len().cmp(&q.len()).then_with(|| p.cmp(q))
            }
            (Some(p), Some(q)) => p.cmp(q),
        };
        if order.is_ne() {
            return order;
        }
    }
}

/// An update: one to three `(operator, path, argument)` entries.
///
/// With `listed_in_path_order`, the entries are sorted by path and an entry
/// whose operator would then be listed out of path order is dropped: on
/// SecantusDB, which appends the new fields of an update to an existing
/// document in the order the update lists them where MongoDB (and the
/// embedded store) append them in path order (see `store_semantics.rs`,
/// `new_fields_order_differs_between_servers`), so that the field orders
/// agree and documents can still be compared byte for byte.
fn update(listed_in_path_order: bool) -> BoxedStrategy<Document> {
    let paths = || {
        prop::sample::select(vec![
            "a", "b", "c", "arr", "arr.1", "sub", "sub.x", "sub.z", "n",
        ])
    };
    let entry = prop_oneof![
        3 => (paths(), value()).prop_map(|(p, v)| ("$set", p, v)),
        1 => paths().prop_map(|p| ("$unset", p, Bson::from(""))),
        3 => (paths(), number()).prop_map(|(p, v)| ("$inc", p, v)),
        2 => (prop::sample::select(vec!["arr", "sub.list", "a"]), string())
            .prop_map(|(p, v)| ("$push", p, v)),
        2 => (prop::sample::select(vec!["arr", "a"]), string()).prop_map(|(p, v)| ("$pull", p, v)),
        1 => (paths(), value()).prop_map(|(p, v)| ("$setOnInsert", p, v)),
    ];
    prop::collection::vec(entry, 1..4)
        .prop_map(move |mut entries| {
            if listed_in_path_order {
                entries.sort_by(|a, b| path_order(a.1, b.1));
            }
            let mut u = Document::new();
            for (op, path, v) in entries {
                if !u.contains_key(op) {
                    u.insert(op, Document::new());
                } else if listed_in_path_order && u.keys().last().map(String::as_str) != Some(op) {
                    continue;
                }
                u.get_document_mut(op)
                    .expect("an operator document")
                    .insert(path, v);
            }
            u
        })
        .boxed()
}

/// One operation on the collection.
#[derive(Clone, Debug)]
enum Op {
    Update {
        id: i32,
        guard: Document,
        update: Document,
        upsert: bool,
    },
    FindAndModify {
        id: i32,
        guard: Document,
        update: Document,
        upsert: bool,
        after: bool,
    },
    Delete {
        id: i32,
        guard: Document,
    },
    Find {
        filter: Document,
    },
    Count {
        filter: Document,
    },
}

/// Whether `filter` names a path and an extension of it (`sub` and
/// `sub.x`), at the top or inside `$and`/`$or`. MongoDB (and the embedded
/// store) refuse to upsert with equalities on both (code 54); SecantusDB
/// upserts, keeping one (see `store_semantics.rs`,
/// `upsert_with_prefix_equalities_differs_between_servers`). On SecantusDB
/// such filters are not upserted with.
fn names_a_path_and_its_extension(filter: &Document) -> bool {
    fn paths<'f>(filter: &'f Document, out: &mut Vec<&'f str>) {
        for (key, value) in filter {
            match (key.as_str(), value) {
                ("$and" | "$or", Bson::Array(members)) => {
                    for member in members {
                        if let Bson::Document(member) = member {
                            paths(member, out);
                        }
                    }
                }
                (path, _) => out.push(path),
            }
        }
    }
    let mut all = Vec::new();
    paths(filter, &mut all);
    all.iter().any(|p| {
        all.iter()
            .any(|q| q.strip_prefix(p).is_some_and(|rest| rest.starts_with('.')))
    })
}

fn op(secantus: bool) -> BoxedStrategy<Op> {
    // Ids 0..=3: the seeded ones and one more, for upserts.
    let id = 0_i32..4;
    prop_oneof![
        5 => (id.clone(), filter(), update(secantus), prop::bool::weighted(0.3)).prop_map(
            move |(id, guard, update, upsert)| Op::Update {
                id,
                upsert: upsert && !(secantus && names_a_path_and_its_extension(&guard)),
                guard,
                update,
            }
        ),
        2 => (id.clone(), filter(), update(secantus), prop::bool::weighted(0.3), any::<bool>()).prop_map(
            move |(id, guard, update, upsert, after)| Op::FindAndModify {
                id,
                upsert: upsert && !(secantus && names_a_path_and_its_extension(&guard)),
                guard,
                update,
                after
            }
        ),
        1 => (id, filter()).prop_map(|(id, guard)| Op::Delete { id, guard }),
        4 => filter().prop_map(|filter| Op::Find { filter }),
        1 => filter().prop_map(|filter| Op::Count { filter }),
    ]
    .boxed()
}

/// A case: the documents to seed and one to three operations.
fn case(secantus: bool) -> impl Strategy<Value = (Vec<Document>, Vec<Op>)> {
    (documents(), prop::collection::vec(op(secantus), 1..4))
}

// Running.

/// What an operation returned, comparably.
#[derive(Debug)]
enum Answer {
    Outcome(UpdateOutcome),
    Returned(Option<Document>),
    Deleted(u64),
    Found(Vec<Document>),
    Count(u64),
    Failed(StoreErrorKind),
}

impl Answer {
    /// Equal, documents compared byte for byte.
    fn same(&self, other: &Answer) -> bool {
        match (self, other) {
            (Answer::Outcome(a), Answer::Outcome(b)) => a == b,
            (Answer::Returned(a), Answer::Returned(b)) => match (a, b) {
                (Some(a), Some(b)) => same_docs(std::slice::from_ref(a), std::slice::from_ref(b)),
                (None, None) => true,
                _ => false,
            },
            (Answer::Deleted(a), Answer::Deleted(b)) | (Answer::Count(a), Answer::Count(b)) => {
                a == b
            }
            (Answer::Found(a), Answer::Found(b)) => same_docs(a, b),
            (Answer::Failed(a), Answer::Failed(b)) => a == b,
            _ => false,
        }
    }
}

/// Equal as BSON bytes: same fields, in the same order, of the same types.
fn same_docs(a: &[Document], b: &[Document]) -> bool {
    let bytes = |d: &Document| bson::to_vec(d).expect("a document serializes");
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| bytes(x) == bytes(y))
}

fn with_id(id: i32, guard: &Document) -> Document {
    let mut filter = doc! { "_id": id };
    filter.extend(guard.clone());
    filter
}

fn by_id() -> FindOptions {
    FindOptions {
        sort: Some(doc! { "_id": 1 }),
        limit: None,
    }
}

async fn run_op(store: &dyn Store, ns: &Namespace, op: &Op) -> Answer {
    let answer = match op {
        Op::Update {
            id,
            guard,
            update,
            upsert,
        } => store
            .update_one(
                ns,
                with_id(*id, guard),
                update.clone(),
                tandem::store::UpdateOptions::default().with_upsert(*upsert),
            )
            .await
            .map(Answer::Outcome),
        Op::FindAndModify {
            id,
            guard,
            update,
            upsert,
            after,
        } => {
            let ret = if *after {
                ReturnDocument::After
            } else {
                ReturnDocument::Before
            };
            store
                .find_one_and_update(
                    ns,
                    with_id(*id, guard),
                    update.clone(),
                    tandem::store::FindOneAndUpdateOptions::returning(ret).with_upsert(*upsert),
                )
                .await
                .map(Answer::Returned)
        }
        Op::Delete { id, guard } => store
            .delete_one(ns, with_id(*id, guard))
            .await
            .map(Answer::Deleted),
        Op::Find { filter } => store
            .find(ns, filter.clone(), by_id())
            .await
            .map(Answer::Found),
        Op::Count { filter } => store.count(ns, filter.clone()).await.map(Answer::Count),
    };
    answer.unwrap_or_else(|e: StoreError| Answer::Failed(e.kind))
}

/// The one server difference the comparison allows (on SecantusDB only):
/// SecantusDB checks a `findAndModify`'s update, and an `updateOne`'s
/// `$inc` argument, only once a document matches, where MongoDB (and the
/// embedded store) refuse a malformed update whatever the filter matches.
/// So when nothing matched on the server and the embedded store refused
/// the update as malformed (it refuses it on an empty collection too), the
/// answers are taken as agreeing. Pinned by `store_semantics.rs`
/// (`malformed_updates_without_a_match_differ_between_servers`) and listed
/// in the guide's server differences.
async fn unvalidated_without_a_match(op: &Op, memory: &Answer, server: &Answer) -> bool {
    let refused = matches!(
        memory,
        Answer::Failed(StoreErrorKind::BadRequest | StoreErrorKind::TypeMismatch)
    );
    let no_match = matches!(server, Answer::Returned(None))
        || matches!(server, Answer::Outcome(o) if *o == UpdateOutcome::default());
    if !(refused && no_match) {
        return false;
    }
    let empty = MemoryStore::new();
    let ns = Namespace::new("differential", "empty");
    run_op(&empty, &ns, op).await.same(memory)
}

async fn contents(store: &dyn Store, ns: &Namespace) -> Vec<Document> {
    store
        .find(ns, doc! {}, by_id())
        .await
        .expect("reading the collection")
}

/// Runs one case on a new embedded store and in a new collection on the
/// server; the first difference is the error.
async fn run_case(
    server: &MongoStore,
    secantus: bool,
    db: &str,
    seeded: &[Document],
    ops: &[Op],
) -> Result<(), TestCaseError> {
    static COLLECTION: AtomicU32 = AtomicU32::new(0);
    let ns = Namespace::new(
        db,
        format!("c{}", COLLECTION.fetch_add(1, Ordering::Relaxed)),
    );
    let memory = MemoryStore::new();
    for d in seeded {
        memory
            .insert_one(&ns, d.clone())
            .await
            .expect("seed memory");
        server
            .insert_one(&ns, d.clone())
            .await
            .expect("seed server");
    }
    let mut result = Ok(());
    for (i, op) in ops.iter().enumerate() {
        let m = run_op(&memory, &ns, op).await;
        let s = run_op(server, &ns, op).await;
        let agree = m.same(&s) || (secantus && unvalidated_without_a_match(op, &m, &s).await);
        if !agree {
            result = Err(TestCaseError::fail(format!(
                "operation {i} {op:?}\n  embedded: {m:?}\n  server:   {s:?}"
            )));
            break;
        }
        let (m, s) = (contents(&memory, &ns).await, contents(server, &ns).await);
        if !same_docs(&m, &s) {
            result = Err(TestCaseError::fail(format!(
                "after operation {i} {op:?}\n  embedded: {m:?}\n  server:   {s:?}"
            )));
            break;
        }
    }
    server
        .client()
        .database(db)
        .collection::<Document>(&ns.collection)
        .drop()
        .await
        .expect("drop the case's collection");
    result
}

#[test]
fn embedded_store_agrees_with_the_server() {
    let Some(uri) = mongodb_uri() else {
        return;
    };
    let rt = runtime();
    let server = rt
        .block_on(
            MongoStore::builder()
                .server_selection_timeout(Duration::from_secs(10))
                .app_name("differential")
                .connect(&uri),
        )
        .expect("connect to the test server");
    let secantus = rt.block_on(secantus_version(&server)).is_some();
    let db = unique_name("differential");
    let seed = env_or("TANDEM_DIFFERENTIAL_SEED", SEED);
    let cases = env_or("TANDEM_DIFFERENTIAL_CASES", CASES);
    println!("differential: {cases} cases from seed {seed:#x}");
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&case(secantus), |(seeded, ops)| {
        rt.block_on(run_case(&server, secantus, &db, &seeded, &ops))
    });
    rt.block_on(server.client().database(&db).drop().into_future())
        .expect("drop the test database");
    if let Err(e) = result {
        panic!("the embedded store and the server differ: {e}");
    }
}
