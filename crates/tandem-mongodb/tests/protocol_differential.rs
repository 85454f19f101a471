//! Differential test of the protocol's own statements: generated
//! transactions (updates with increments, sets, unsets, pushes and pulls on
//! plain, nested and numbered paths, of documents and arrays, with guards;
//! inserts; deletes), run
//! one after another under either strategy by a coordinator on a
//! `MemoryStore` and by one on the server `MONGODB_URI` names, from the same
//! documents. After every transaction the two must agree: the same answer
//! (committed, or refused for the same kind of reason, undone alike) and
//! the same documents, byte for byte, tandem's own bookkeeping
//! (`_tandem`, the marker arrays) included.
//!
//! `differential.rs` compares the stores on generated operators; this test
//! compares them on the filters and updates tandem builds (the deadline's
//! `$expr`, the room and overflow conditions, the shape and type guards,
//! the credit sums, the before-images of undos), which is what the safety
//! tests and the model check, run on the embedded store, stand on.
//!
//! The run is bounded and reproducible: [`CASES`] cases from the fixed seed
//! [`SEED`] (set `TANDEM_PROTOCOL_DIFFERENTIAL_SEED` and
//! `TANDEM_PROTOCOL_DIFFERENTIAL_CASES` to explore further). A difference
//! fails the test with the case that shows it, shrunk.
//!
//! Some steps interleave two transactions: the first (two-phase, of one
//! change, whose store operations are sequential) held
//! before one of its store operations, chosen by the case, while the second
//! runs whole, under either strategy; so conflicts, pending credits beside
//! other changes, and the shapes and sums they leave are compared too.
//!
//! Left out: crashes, lost answers and recovery (the crash-point,
//! lost-answer and conformance suites run those on both stores); an answer's message,
//! which quotes each store's own error text (its kind is compared). On
//! SecantusDB, which appends the fields an update creates in the order the
//! update lists them where MongoDB and the embedded store append them in
//! path order (`store_semantics.rs`, `new_fields_order_differs_between_servers`),
//! documents are compared with their fields sorted at every depth, and a
//! refusal for one of two fields an update could not change may name
//! either (`first_failing_field_differs_between_servers`); on any other
//! server, exactly.

mod common;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};
use common::{env_or, mongodb_uri, runtime, secantus_version, unique_name};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use tandem::store::{FindOptions, Namespace, Store};
use tandem::testing::{FaultStore, Pause};
use tandem::{
    CommitPoint, Coordinator, DocumentChange, MemoryStore, Receipt, Strategy as Run, Transaction,
    TxError,
};
use tandem_mongodb::MongoStore;

/// Cases per run: each a few transactions, every one several statements
/// on SecantusDB.
const CASES: u32 = 256;

/// The run's seed (`TANDEM_PROTOCOL_DIFFERENTIAL_SEED` overrides it).
const SEED: u64 = 0x2F0C_D1FF_2026_1127;

/// The documents' ids.
const IDS: [&str; 3] = ["X", "Y", "Z"];

// Generators.

fn number() -> BoxedStrategy<Bson> {
    prop_oneof![
        4 => (-3_i32..5).prop_map(Bson::Int32),
        4 => (-3_i64..5).prop_map(Bson::Int64),
        2 => (-4_i32..6).prop_map(|h| Bson::Double(f64::from(h) / 2.0)),
        1 => prop::sample::select(vec![
            Bson::Int32(i32::MAX),
            Bson::Int64(i64::MAX - 1),
            Bson::Int64(i64::MIN + 1),
        ]),
    ]
    .boxed()
}

fn scalar() -> BoxedStrategy<Bson> {
    prop_oneof![
        4 => number(),
        2 => prop::sample::select(vec!["a", "b"]).prop_map(Bson::from),
        1 => Just(Bson::Null),
    ]
    .boxed()
}

/// A value of `a`: a number, a document of `b`, an array, or empty.
fn a_value() -> BoxedStrategy<Bson> {
    prop_oneof![
        2 => number(),
        3 => number().prop_map(|b| Bson::Document(doc! { "b": b })),
        1 => Just(Bson::Document(Document::new())),
        1 => prop::collection::vec(number(), 0..3).prop_map(Bson::Array),
    ]
    .boxed()
}

/// A document: `n`, `a`, `arr`, `m`, `s` and `l`, each maybe missing.
fn document() -> BoxedStrategy<Document> {
    (
        prop::option::weighted(0.8, scalar()),
        prop::option::of(a_value()),
        prop::option::of(prop::collection::vec(
            prop::sample::select(vec!["p", "q"]).prop_map(Bson::from),
            0..3,
        )),
        prop::option::of(number()),
        prop::option::of(scalar()),
        prop::option::of(prop::collection::vec(number(), 0..3)),
    )
        .prop_map(|(n, a, arr, m1, s, l)| {
            let mut d = Document::new();
            let fields = [
                ("n", n),
                ("a", a),
                ("arr", arr.map(Bson::Array)),
                ("m", m1.map(|v| Bson::Document(doc! { "1": v }))),
                ("s", s),
                ("l", l.map(Bson::Array)),
            ];
            for (k, v) in fields {
                if let Some(v) = v {
                    d.insert(k, v);
                }
            }
            d
        })
        .boxed()
}

/// One field operation of an update.
#[derive(Clone, Debug)]
enum FieldOp {
    Inc(&'static str, Bson),
    Set(&'static str, Bson),
    Unset(&'static str),
    Push(Bson),
    Pull(Bson),
}

/// An amount to increment by: never zero (refused as invalid).
fn amount() -> BoxedStrategy<Bson> {
    number()
        .prop_filter("a non-zero amount", |b| {
            !matches!(b, Bson::Int32(0) | Bson::Int64(0))
                && !matches!(b, Bson::Double(d) if *d == 0.0)
        })
        .boxed()
}

fn field_op() -> BoxedStrategy<FieldOp> {
    let inc_path = prop::sample::select(vec!["n", "a", "a.b", "a.b.c", "m.1", "l.1", "z"]);
    let set_path = prop::sample::select(vec!["n", "a", "a.b", "s", "z", "l.0"]);
    let unset_path = prop::sample::select(vec!["n", "a", "a.b", "s", "l.0"]);
    let item = prop::sample::select(vec!["p", "q"]).prop_map(Bson::from);
    prop_oneof![
        5 => (inc_path, amount()).prop_map(|(p, by)| FieldOp::Inc(p, by)),
        2 => (set_path, prop_oneof![3 => scalar(), 1 => a_value()]).prop_map(|(p, v)| FieldOp::Set(p, v)),
        1 => unset_path.prop_map(FieldOp::Unset),
        1 => item.clone().prop_map(FieldOp::Push),
        1 => item.prop_map(FieldOp::Pull),
    ]
    .boxed()
}

/// A guard on a field.
#[derive(Clone, Debug)]
enum Guard {
    Gte(&'static str, Bson),
    Lt(&'static str, Bson),
    Eq(&'static str, Bson),
    Ne(&'static str, Bson),
    Exists(&'static str),
    Missing(&'static str),
}

fn guard() -> BoxedStrategy<Guard> {
    let path = prop::sample::select(vec!["n", "a", "a.b", "s", "l.1"]);
    prop_oneof![
        3 => (path.clone(), number()).prop_map(|(p, v)| Guard::Gte(p, v)),
        1 => (path.clone(), number()).prop_map(|(p, v)| Guard::Lt(p, v)),
        2 => (path.clone(), scalar()).prop_map(|(p, v)| Guard::Eq(p, v)),
        1 => (path.clone(), scalar()).prop_map(|(p, v)| Guard::Ne(p, v)),
        1 => path.clone().prop_map(Guard::Exists),
        1 => path.prop_map(Guard::Missing),
    ]
    .boxed()
}

/// One participant's change.
#[derive(Clone, Debug)]
enum Change {
    Update(Vec<FieldOp>, Vec<Guard>),
    Insert(Document),
    Delete,
}

fn change() -> BoxedStrategy<Change> {
    prop_oneof![
        8 => (
            prop::collection::vec(field_op(), 1..3),
            prop::collection::vec(guard(), 0..2),
        )
            .prop_map(|(ops, guards)| Change::Update(ops, guards)),
        1 => document().prop_map(Change::Insert),
        1 => Just(Change::Delete),
    ]
    .boxed()
}

/// A transaction: changes of distinct documents, and its strategy.
#[derive(Clone, Debug)]
struct Tx {
    native: bool,
    changes: Vec<(usize, Change)>,
}

fn transaction() -> BoxedStrategy<Tx> {
    (
        prop::bool::weighted(0.3),
        prop::sample::subsequence(vec![0_usize, 1, 2], 1..=3),
        prop::collection::vec(change(), 3),
    )
        .prop_map(|(native, ids, changes)| Tx {
            native,
            changes: ids.into_iter().zip(changes).collect(),
        })
        .boxed()
}

/// One step of a case: a transaction run alone, or two interleaved.
#[derive(Clone, Debug)]
enum Step {
    /// Run whole, then drained.
    Alone(Tx),
    /// `first` (two-phase, one change) held before its `pause`-th store operation,
    /// `second` run whole meanwhile, then `first` let go.
    Interleaved { first: Tx, second: Tx, pause: u64 },
}

fn step() -> BoxedStrategy<Step> {
    prop_oneof![
        3 => transaction().prop_map(Step::Alone),
        2 => (transaction(), transaction(), 1_u64..9).prop_map(|(first, second, pause)| {
            Step::Interleaved {
                // One change: the operations of several run concurrently,
                // and their count at the pause would depend on the store's
                // timing.
                first: Tx {
                    native: false,
                    changes: first.changes[..1].to_vec(),
                },
                second,
                pause,
            }
        }),
    ]
    .boxed()
}

/// The documents to start from (each id maybe missing), and the steps.
fn case() -> BoxedStrategy<(Vec<Option<Document>>, Vec<Step>)> {
    (
        prop::collection::vec(prop::option::weighted(0.85, document()), 3),
        prop::collection::vec(step(), 1..7),
    )
        .boxed()
}

// Running a case.

fn build(ns: &Namespace, tx: &Tx) -> Transaction {
    let mut t = Transaction::new().strategy(if tx.native {
        Run::Native
    } else {
        Run::TwoPhase
    });
    for (i, change) in &tx.changes {
        let id = IDS[*i];
        let c = match change {
            Change::Update(ops, guards) => {
                let mut c = DocumentChange::update(ns.clone(), id);
                // Each field changed once (overlapping paths are refused
                // before anything runs, alike).
                let mut paths: Vec<&str> = Vec::new();
                for op in ops {
                    let path = match op {
                        FieldOp::Inc(p, _) | FieldOp::Set(p, _) | FieldOp::Unset(p) => p,
                        FieldOp::Push(_) | FieldOp::Pull(_) => "arr",
                    };
                    let related = |q: &&str| {
                        q == &path
                            || path.starts_with(&format!("{q}."))
                            || q.starts_with(&format!("{path}."))
                    };
                    if paths.iter().any(related) {
                        continue;
                    }
                    paths.push(path);
                    c = match op {
                        FieldOp::Inc(p, by) => c.inc(*p, by.clone()),
                        FieldOp::Set(p, v) => c.set(*p, v.clone()),
                        FieldOp::Unset(p) => c.unset(*p),
                        FieldOp::Push(v) => c.push("arr", v.clone()),
                        FieldOp::Pull(v) => c.pull("arr", v.clone()),
                    };
                }
                for g in guards {
                    c = match g {
                        Guard::Gte(p, v) => c.require_gte(*p, v.clone()),
                        Guard::Lt(p, v) => c.require_lt(*p, v.clone()),
                        Guard::Eq(p, v) => c.require_eq(*p, v.clone()),
                        Guard::Ne(p, v) => c.require_ne(*p, v.clone()),
                        Guard::Exists(p) => c.require_exists(*p),
                        Guard::Missing(p) => c.require_missing(*p),
                    };
                }
                c
            }
            Change::Insert(d) => DocumentChange::insert(ns.clone(), id, d.clone()),
            Change::Delete => DocumentChange::delete(ns.clone(), id),
        };
        t = t.change(c);
    }
    t
}

/// The name of an enum value's variant, from its `Debug` form.
fn variant(debug: String) -> String {
    debug
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// What an answer says, without the messages and ids that differ by store.
fn answer(result: &Result<Receipt, TxError>) -> String {
    match result {
        Ok(receipt) => format!("committed {:?}", receipt.state),
        Err(TxError::Canceled {
            cause,
            undone,
            participant,
            ..
        }) => format!(
            "canceled {} at {:?}, undone: {undone}",
            variant(format!("{cause:?}")),
            participant.as_ref().map(|p| p.index)
        ),
        Err(TxError::Invalid(e)) => format!("invalid {}", variant(format!("{e:?}"))),
        Err(other) => format!("{other:?}"),
    }
}

/// `d` with its fields sorted by name at every depth.
fn sorted(d: &Document) -> Document {
    let mut fields: Vec<(&String, &Bson)> = d.iter().collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    fields
        .into_iter()
        .map(|(k, v)| (k.clone(), sorted_value(v)))
        .collect()
}

fn sorted_value(v: &Bson) -> Bson {
    match v {
        Bson::Document(d) => Bson::Document(sorted(d)),
        Bson::Array(a) => Bson::Array(a.iter().map(sorted_value).collect()),
        other => other.clone(),
    }
}

/// The collection's documents by `_id`, as BSON bytes (with the fields
/// sorted, if `sort`).
/// Whether `m` and `s` are the same refusal but for which of two fields
/// that failed in one update the store reported: SecantusDB reports the
/// first the update lists, MongoDB and the embedded store the first in path
/// order (`store_semantics.rs`, `first_failing_field_differs_between_servers`).
fn failing_field_order(m: &str, s: &str) -> bool {
    let store_failures = ["canceled TypeMismatch ", "canceled Overflow "];
    let rest = |a: &str| {
        store_failures
            .iter()
            .find_map(|p| a.strip_prefix(p))
            .map(str::to_owned)
    };
    matches!((rest(m), rest(s)), (Some(a), Some(b)) if a == b)
}

async fn contents(store: &dyn Store, ns: &Namespace, sort: bool) -> Vec<Vec<u8>> {
    store
        .find(
            ns,
            doc! {},
            FindOptions {
                sort: Some(doc! { "_id": 1 }),
                limit: None,
            },
        )
        .await
        .expect("reading the collection")
        .iter()
        .map(|d| {
            let d = if sort { sorted(d) } else { d.clone() };
            bson::to_vec(&d).expect("encoding")
        })
        .collect()
}

fn show(docs: &[Vec<u8>]) -> String {
    docs.iter()
        .map(|b| {
            bson::from_slice::<Document>(b)
                .map(|d| d.to_string())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("\n    ")
}

fn coordinator(store: Arc<dyn Store>, db: &str) -> Coordinator {
    Coordinator::builder_shared(store)
        .database(db)
        .commit_point(CommitPoint::Done)
        .build()
}

/// Runs `step` on `store`; the answers, in order.
async fn run_step(store: &Arc<dyn Store>, db: &str, ns: &Namespace, step: &Step) -> Vec<String> {
    let plain = coordinator(store.clone(), db);
    match step {
        Step::Alone(tx) => {
            let a = answer(&plain.run(build(ns, tx)).await);
            plain.drain().await;
            vec![a]
        }
        Step::Interleaved {
            first,
            second,
            pause,
        } => {
            let faulty = FaultStore::new(store.clone());
            let Pause { reached, release } = faulty.pause_at(*pause);
            let slow = coordinator(Arc::new(faulty), db);
            let tx = build(ns, first);
            let mut held = tokio::spawn(async move {
                let a = answer(&slow.run(tx).await);
                slow.drain().await;
                a
            });
            // Held at its pause, or done before it reached it.
            let done = tokio::select! {
                _ = reached => None,
                a = &mut held => Some(a.expect("the first transaction's task")),
            };
            let b = answer(&plain.run(build(ns, second)).await);
            plain.drain().await;
            // (A send fails once the first is done: nothing waits.)
            let _ = release.send(());
            let a = match done {
                Some(a) => a,
                None => held.await.expect("the first transaction's task"),
            };
            vec![a, b]
        }
    }
}

/// Runs one case on a new embedded store and in a new collection on the
/// server; the first difference is the error.
async fn run_case(
    server: &MongoStore,
    secantus: bool,
    db: &str,
    seeded: &[Option<Document>],
    steps: &[Step],
) -> Result<(), TestCaseError> {
    static COLLECTION: AtomicU32 = AtomicU32::new(0);
    let ns = Namespace::new(
        db,
        format!("c{}", COLLECTION.fetch_add(1, Ordering::Relaxed)),
    );
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let remote: Arc<dyn Store> = Arc::new(server.clone());
    for (id, d) in IDS.iter().zip(seeded) {
        let Some(d) = d else { continue };
        let mut d = d.clone();
        d.insert("_id", *id);
        for store in [&memory, &remote] {
            store.insert_one(&ns, d.clone()).await.expect("seeding");
        }
    }
    let mut result = Ok(());
    for (i, step) in steps.iter().enumerate() {
        let m = run_step(&memory, db, &ns, step).await;
        if std::env::var_os("TANDEM_PROTOCOL_DIFFERENTIAL_SHOW").is_some() {
            eprintln!("answers: {m:?}");
        }
        let s = run_step(&remote, db, &ns, step).await;
        let (dm, ds) = (
            contents(memory.as_ref(), &ns, secantus).await,
            contents(remote.as_ref(), &ns, secantus).await,
        );
        let agree = m.len() == s.len()
            && m.iter()
                .zip(&s)
                .all(|(m, s)| m == s || secantus && failing_field_order(m, s));
        if !agree || dm != ds {
            result = Err(TestCaseError::fail(format!(
                "step {i} {step:?}\n  embedded: {m:?}\n    {}\n  server:   {s:?}\n    {}",
                show(&dm),
                show(&ds)
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
fn the_protocol_runs_alike_on_both_stores() {
    let Some(uri) = mongodb_uri() else {
        return;
    };
    let rt = runtime();
    let server = rt
        .block_on(
            MongoStore::builder()
                .server_selection_timeout(Duration::from_secs(10))
                .app_name("protocol-differential")
                .connect(&uri),
        )
        .expect("connect to the test server");
    let secantus = rt.block_on(secantus_version(&server)).is_some();
    let db = unique_name("protocol_diff");
    let seed = env_or("TANDEM_PROTOCOL_DIFFERENTIAL_SEED", SEED);
    let cases = env_or("TANDEM_PROTOCOL_DIFFERENTIAL_CASES", CASES);
    println!("protocol differential: {cases} cases from seed {seed:#x}");
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 128,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&case(), |(seeded, steps)| {
        rt.block_on(run_case(&server, secantus, &db, &seeded, &steps))
    });
    rt.block_on(server.client().database(&db).drop().into_future())
        .expect("drop the test database");
    if let Err(e) = result {
        panic!("the protocol ran differently on the embedded store and the server: {e}");
    }
}
