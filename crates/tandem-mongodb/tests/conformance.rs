//! The conformance suite of the embedded store, run against a MongoDB server:
//! crash points, the stalled worker, random interleavings, protocol runs under
//! `failCommand` faults, and the native strategy. Every case ends with the
//! invariants checked by `tandem::testing::audit`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bson::{doc, Document};
use common::{mongodb_uri, runtime, unique_name};
use proptest::prelude::*;
use tandem::testing::scenarios::{self, Interleaving, PlannedTransfer, BANK};
use tandem::testing::{audit, CrashHarness, StoreFactory};
use tandem::{
    CommitPoint, Coordinator, DocumentChange, Namespace, PendingPolicy, RecoveryConfig, StepError,
    Store, Strategy as TxStrategy, Transaction, TxError, TxState,
};
use tandem_mongodb::MongoStore;

/// A fresh database for each run of a scenario: drops the scenario's database first.
struct MongoFactory {
    store: Arc<dyn Store>,
    client: mongodb::Client,
    db: String,
}

#[async_trait]
impl StoreFactory for MongoFactory {
    async fn fresh(&self) -> Arc<dyn Store> {
        self.client
            .database(&self.db)
            .drop()
            .await
            .expect("drop the scenario database");
        self.store.clone()
    }
}

/// `uri` with `heartbeatFrequencyMS=500`, so that after an injected state-change
/// error the driver rediscovers the server quickly.
fn fast_uri(uri: &str) -> String {
    with_option(uri, "heartbeatFrequencyMS=500")
}

/// `uri` with one more query option.
fn with_option(uri: &str, option: &str) -> String {
    let sep = if uri.contains('?') {
        "&"
    } else if uri.ends_with('/') {
        "?"
    } else {
        "/?"
    };
    format!("{uri}{sep}{option}")
}

async fn store(app_name: &str) -> Option<MongoStore> {
    let uri = mongodb_uri()?;
    Some(
        MongoStore::builder()
            .server_selection_timeout(Duration::from_secs(10))
            .app_name(app_name)
            .connect(&fast_uri(&uri))
            .await
            .expect("connect to the test server"),
    )
}

async fn factory(prefix: &str) -> Option<MongoFactory> {
    let store = store(prefix).await?;
    Some(MongoFactory {
        client: store.client().clone(),
        store: Arc::new(store),
        db: unique_name(prefix),
    })
}

async fn done(f: MongoFactory) {
    f.client.database(&f.db).drop().await.expect("drop");
}

#[tokio::test]
async fn crash_points_on_mongodb() {
    let Some(f) = factory("crash").await else {
        return;
    };
    let db = f.db.clone();
    let accounts = Namespace::new(&db, "accounts");
    let orders = Namespace::new(&db, "orders");
    let carts = Namespace::new(&db, "carts");
    let documents = vec![
        (
            accounts.clone(),
            doc! { "_id": "A", "balance": 1000_i64, "pendingTransactions": [] },
        ),
        (
            accounts.clone(),
            doc! { "_id": "B", "balance": 1000_i64, "pendingTransactions": [] },
        ),
        (orders.clone(), doc! { "_id": "o-1", "state": "UnPaid" }),
        (carts.clone(), doc! { "_id": "cart-1", "items": ["x"] }),
    ];
    let tx = |n: usize, amount: i64| {
        let all = [
            DocumentChange::update(accounts.clone(), "A")
                .inc("balance", -amount)
                .require_gte("balance", amount),
            DocumentChange::update(orders.clone(), "o-1")
                .set("state", "Paid")
                .require_eq("state", "UnPaid"),
            DocumentChange::update(accounts.clone(), "B").inc("balance", amount),
            DocumentChange::insert(
                Namespace::new(&db, "receipts"),
                "r-1",
                doc! { "order": "o-1" },
            ),
            DocumentChange::delete(carts.clone(), "cart-1"),
        ];
        all.into_iter()
            .take(n)
            .fold(Transaction::new(), Transaction::change)
    };
    let mut total = 0;
    for (commit_point, pending) in [
        (CommitPoint::Done, PendingPolicy::RollBack),
        (CommitPoint::Applied, PendingPolicy::RollForward),
    ] {
        for n in 1..=5 {
            for amount in [100_i64, 5000] {
                let harness = CrashHarness {
                    commit_point,
                    pending,
                    database: db.clone(),
                };
                let report = harness
                    .run_on(&f, &documents, || tx(n, amount), |_, _| async {})
                    .await;
                assert_eq!(
                    report.outcomes.contains_key("done"),
                    amount <= 1000,
                    "{report:?}"
                );
                total += report.crash_points;
            }
        }
    }
    println!("crash points covered on MongoDB: {total}");
    assert!(total > 100);
    done(f).await;
}

#[tokio::test]
async fn stalled_worker_on_mongodb() {
    let Some(f) = factory("stalled").await else {
        return;
    };
    let covered = scenarios::stalled_worker(&f, &f.db.clone()).await;
    println!("stalled-worker scenarios on MongoDB: {covered}");
    assert_eq!(covered, 14, "7 operations x 2 pending policies");
    done(f).await;
}

#[tokio::test]
async fn transfers_finished_together_on_mongodb() {
    let Some(f) = factory("together").await else {
        return;
    };
    let covered = scenarios::finished_together(&f, &f.db.clone()).await;
    println!("finished-together runs on MongoDB: {covered}");
    assert!(covered > 8 * 4, "only {covered} runs");
    done(f).await;
}

#[tokio::test]
async fn decimal_transfers_on_mongodb() {
    let Some(f) = factory("decimal").await else {
        return;
    };
    let covered = scenarios::decimal_transfers(&f, &f.db.clone()).await;
    println!("decimal transfer runs on MongoDB: {covered}");
    assert!(covered >= 7, "only {covered} runs");
    done(f).await;
}

fn planned() -> impl Strategy<Value = Interleaving> {
    let transfer = (
        0..BANK.len(),
        0..BANK.len(),
        1_i64..150,
        prop::option::weighted(0.4, 0_u64..10),
        any::<bool>(),
        prop::bool::weighted(0.3),
    )
        .prop_filter("distinct accounts", |(f, t, ..)| f != t)
        .prop_map(
            |(from, to, amount, crash_after, applied, expired_lease)| PlannedTransfer {
                from,
                to,
                amount,
                crash_after,
                commit_point: if applied {
                    CommitPoint::Applied
                } else {
                    CommitPoint::Done
                },
                expired_lease,
            },
        );
    (
        prop::collection::vec(transfer, 1..6),
        any::<u64>(),
        0_usize..3,
        any::<bool>(),
    )
        .prop_map(|(transfers, seed, recoveries, forward)| Interleaving {
            transfers,
            seed,
            recoveries,
            forward,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn interleavings_on_mongodb(plan in planned()) {
        runtime().block_on(async {
            static F: tokio::sync::OnceCell<Option<MongoFactory>> = tokio::sync::OnceCell::const_new();
            let f = F.get_or_init(|| factory("interleave")).await;
            if let Some(f) = f {
                scenarios::interleaving(f, &f.db.clone(), &plan).await;
            }
        });
    }
}

/// Arms `failCommand` once for `app_name` on `commands`, with `extra` data.
async fn fail_once(admin: &mongodb::Client, app_name: &str, commands: &[&str], extra: Document) {
    fail_times(admin, app_name, commands, extra, 1).await;
}

/// Arms `failCommand` `times` times for `app_name` on `commands`, with `extra` data.
async fn fail_times(
    admin: &mongodb::Client,
    app_name: &str,
    commands: &[&str],
    extra: Document,
    times: i32,
) {
    let mut data = doc! { "failCommands": commands, "appName": app_name };
    data.extend(extra);
    common::fail_command(admin, times, data).await;
}

async fn failpoint_off(admin: &mongodb::Client) {
    common::fail_command_off(admin).await;
}

/// A transaction that sends every command kind of the protocol: insert (a
/// receipt), update (balances), findAndModify (recovery's claim), find, and
/// delete (a cart at commit).
fn shopping(db: &str) -> Transaction {
    let accounts = Namespace::new(db, "accounts");
    Transaction::new()
        .change(
            DocumentChange::update(accounts.clone(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::update(accounts, "B").inc("balance", 10_i64))
        .change(DocumentChange::insert(
            Namespace::new(db, "receipts"),
            "r-1",
            doc! { "amount": 10 },
        ))
        .change(DocumentChange::delete(
            Namespace::new(db, "carts"),
            "cart-1",
        ))
}

fn shopping_documents(db: &str) -> Vec<(Namespace, Document)> {
    let accounts = Namespace::new(db, "accounts");
    vec![
        (accounts.clone(), doc! { "_id": "A", "balance": 100_i64 }),
        (accounts, doc! { "_id": "B", "balance": 100_i64 }),
        (
            Namespace::new(db, "carts"),
            doc! { "_id": "cart-1", "items": ["x"] },
        ),
    ]
}

/// Every command kind × every fault: the run may commit, cancel or be left to
/// recovery, and after recovery the invariants hold.
#[tokio::test]
async fn protocol_runs_under_faults_end_with_the_invariants_holding() {
    // Faults the coordinator's retries absorb.
    faults_case(tandem::RetryPolicy::default(), 1).await;
}

/// With the coordinator's retries off and a fault that lasts, steps really
/// fail: transactions are canceled or left to recovery.
#[tokio::test]
async fn protocol_runs_under_lasting_faults_end_with_the_invariants_holding() {
    faults_case(tandem::RetryPolicy::NONE, 10).await;
}

async fn faults_case(retry: tandem::RetryPolicy, times: i32) {
    let app = unique_name("faults");
    let Some(uri) = mongodb_uri() else { return };
    let store = MongoStore::builder()
        .server_selection_timeout(Duration::from_secs(10))
        .app_name(&app)
        // The driver's own single retry off, so every fault reaches the coordinator.
        .connect(&fast_uri(&with_option(
            &uri,
            "retryWrites=false&retryReads=false",
        )))
        .await
        .expect("connect");
    let admin = store.client().clone();
    let store: Arc<dyn Store> = Arc::new(store);
    let faults: Vec<(String, Document)> = {
        let mut v = vec![(
            "closeConnection".to_owned(),
            doc! { "closeConnection": true },
        )];
        for code in [91, 11600, 10107, 112] {
            v.push((format!("code {code}"), doc! { "errorCode": code }));
            v.push((
                format!("code {code} labelled"),
                doc! { "errorCode": code, "errorLabels": ["RetryableWriteError"] },
            ));
        }
        v.push((
            "writeConcernError".to_owned(),
            doc! { "writeConcernError": { "code": 91, "errmsg": "injected" } },
        ));
        v
    };
    let mut cases = 0;
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for command in ["insert", "update", "findAndModify", "find", "delete"] {
        for (name, fault) in &faults {
            let db = unique_name("fault");
            let documents = shopping_documents(&db);
            for (ns, d) in &documents {
                store.insert_one(ns, d.clone()).await.unwrap();
            }
            let lease = Duration::from_millis(500);
            let coordinator = Coordinator::builder(store.clone())
                .database(&db)
                .commit_point(CommitPoint::Done)
                .lease(lease)
                .clock_margin(Duration::ZERO)
                .retry(retry)
                .build();
            fail_times(&admin, &app, &[command], fault.clone(), times).await;
            let result = coordinator.run(shopping(&db)).await;
            // The claim of recovery is a findAndModify: faults reach it as well.
            let pass = coordinator
                .recovery(RecoveryConfig::default())
                .run_once()
                .await;
            failpoint_off(&admin).await;
            // What the faults left in flight waits for its lease, by the server's clock
            // (twice: the first recovery pass may have claimed it and started a new one).
            let records = Namespace::new(&db, "transactions");
            let in_flight = doc! { "state": { "$nin": ["done", "canceled"] } };
            if store.count(&records, in_flight.clone()).await.unwrap() > 0 {
                let factory = MongoFactory {
                    store: store.clone(),
                    client: admin.clone(),
                    db: db.clone(),
                };
                factory.pass(store.as_ref(), lease * 2).await;
            }
            let mut pass2 = coordinator
                .recovery(RecoveryConfig::default())
                .run_once()
                .await
                .unwrap();
            // A fault that hit recovery's own steps leaves the record for the next pass.
            for _ in 0..3 {
                if pass2.claimed == 0 {
                    break;
                }
                pass2 = coordinator
                    .recovery(RecoveryConfig::default())
                    .run_once()
                    .await
                    .unwrap();
            }
            assert_eq!(pass2.failed, 0, "{command} / {name}: {pass:?} {pass2:?}");
            let audit = audit(
                store.as_ref(),
                &Namespace::new(&db, "transactions"),
                &documents,
            )
            .await
            .unwrap();
            assert!(
                audit.violations.is_empty(),
                "{command} / {name}: {result:?}: {:?}",
                audit.violations
            );
            let state = audit
                .records
                .first()
                .map(|r| r.state.to_string())
                .unwrap_or_else(|| "removed".into());
            *outcomes.entry(state).or_default() += 1;
            admin.database(&db).drop().await.unwrap();
            cases += 1;
        }
    }
    println!(
        "fault cases on MongoDB (at most {} attempts, fault {times}x): {cases}, outcomes {outcomes:?}",
        retry.max_attempts
    );
    assert_eq!(cases, 5 * faults.len());
}

async fn native_fixture(prefix: &str) -> Option<(Arc<dyn Store>, mongodb::Client, String, String)> {
    let app = unique_name(prefix);
    let store = store(&app).await?;
    let client = store.client().clone();
    let db = unique_name(prefix);
    let store: Arc<dyn Store> = Arc::new(store);
    for (ns, d) in shopping_documents(&db) {
        store.insert_one(&ns, d).await.unwrap();
    }
    Some((store, client, db, app))
}

async fn balance(store: &dyn Store, db: &str, id: &str) -> i64 {
    store
        .find_one(&Namespace::new(db, "accounts"), doc! { "_id": id })
        .await
        .unwrap()
        .unwrap()
        .get_i64("balance")
        .unwrap()
}

/// A refusal names its participant (place, namespace, `_id`) on the server
/// too, whichever strategy ran it.
#[tokio::test]
async fn a_refusal_names_its_participant() {
    let Some((store, client, db, _)) = native_fixture("refusal").await else {
        return;
    };
    let accounts = Namespace::new(&db, "accounts");
    for strategy in [TxStrategy::TwoPhase, TxStrategy::Native] {
        let coordinator = Coordinator::builder(store.clone())
            .database(&db)
            .strategy(strategy)
            .build();
        let err = coordinator
            .run(
                Transaction::new()
                    .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 1_000_i64))
                    .change(
                        DocumentChange::update(accounts.clone(), "A")
                            .inc("balance", -1_000_i64)
                            .require_gte("balance", 1_000_i64),
                    ),
            )
            .await
            .unwrap_err();
        let by = err
            .participant()
            .expect("the refusal names its participant");
        assert_eq!(by.index, 1, "{strategy:?}: {err:?}");
        assert_eq!(by.namespace.as_ref(), Some(&accounts), "{strategy:?}");
        assert_eq!(by.id, Some(bson::Bson::String("A".into())), "{strategy:?}");
    }
    client.database(&db).drop().await.unwrap();
}

/// [`native_fixture`] with a unique index on the accounts' `email` and an
/// account `C` holding `c@example.com`; returns the accounts' namespace last.
async fn unique_email_fixture(
    prefix: &str,
) -> Option<(Arc<dyn Store>, mongodb::Client, String, Namespace)> {
    let (store, client, db, _) = native_fixture(prefix).await?;
    let accounts = Namespace::new(&db, "accounts");
    client
        .database(&db)
        .run_command(doc! {
            "createIndexes": "accounts",
            "indexes": [{ "key": { "email": 1 }, "name": "email_1", "unique": true, "sparse": true }],
        })
        .await
        .unwrap();
    store
        .insert_one(
            &accounts,
            doc! { "_id": "C", "balance": 0_i64, "email": "c@example.com" },
        )
        .await
        .unwrap();
    Some((store, client, db, accounts))
}

/// A change the server refuses with an error of its own (here a unique
/// index's duplicate key, on the second change) is named as the one that
/// refused, whichever strategy ran it: natively, every failure of the
/// transaction's body was laid at the first change's door.
#[tokio::test]
async fn a_store_refusal_names_the_change_it_refused() {
    let Some((store, client, db, accounts)) = unique_email_fixture("uniq").await else {
        return;
    };
    for strategy in [TxStrategy::TwoPhase, TxStrategy::Native] {
        for keyed in [false, true] {
            let coordinator = Coordinator::builder(store.clone())
                .database(&db)
                .commit_point(CommitPoint::Done)
                .strategy(strategy)
                .build();
            let tx = if keyed {
                Transaction::with_id(unique_name("uniq-key"))
            } else {
                Transaction::new()
            };
            let err = coordinator
                .run(
                    tx.change(
                        DocumentChange::update(accounts.clone(), "A")
                            .inc("balance", -10_i64)
                            .require_gte("balance", 10_i64),
                    )
                    .change(
                        DocumentChange::update(accounts.clone(), "B").set("email", "c@example.com"),
                    ),
                )
                .await
                .unwrap_err();
            let ctx = format!("{strategy:?} keyed={keyed}: {err:?}");
            match &err {
                TxError::Canceled {
                    cause: StepError::Store { participant, .. },
                    ..
                } => assert_eq!(participant, &format!("{db}.accounts/B"), "{ctx}"),
                other => panic!("a store refusal cancels: {other:?} ({ctx})"),
            }
            let by = err
                .participant()
                .expect("the refusal names its participant");
            assert_eq!(by.index, 1, "{ctx}");
            assert_eq!(by.id, Some(bson::Bson::String("B".into())), "{ctx}");
            assert_eq!(balance(store.as_ref(), &db, "A").await, 100, "{ctx}");
        }
    }
    client.database(&db).drop().await.unwrap();
}

/// An insert refused by a unique index other than `_id`'s is the store's
/// refusal under either strategy, answered at once: natively it was read
/// as a concurrent write on the `_id` (nothing holds it), a `Conflict` that
/// `ConflictPolicy::Wait` waited out to its timeout before answering it.
#[tokio::test]
async fn an_insert_refused_by_a_unique_index_is_the_stores_refusal() {
    let Some((store, client, db, accounts)) = unique_email_fixture("uniqins").await else {
        return;
    };
    let timeout = Duration::from_secs(3);
    for strategy in [TxStrategy::TwoPhase, TxStrategy::Native] {
        let coordinator = Coordinator::builder(store.clone())
            .database(&db)
            .commit_point(CommitPoint::Done)
            .conflict(tandem::ConflictPolicy::Wait { timeout })
            .strategy(strategy)
            .build();
        let started = std::time::Instant::now();
        let err = coordinator
            .run(
                Transaction::new()
                    .change(
                        DocumentChange::update(accounts.clone(), "A")
                            .inc("balance", -10_i64)
                            .require_gte("balance", 10_i64),
                    )
                    .change(DocumentChange::insert(
                        accounts.clone(),
                        "D",
                        doc! { "balance": 10_i64, "email": "c@example.com" },
                    )),
            )
            .await
            .unwrap_err();
        let took = started.elapsed();
        let ctx = format!("{strategy:?}: {err:?} after {took:?}");
        match &err {
            TxError::Canceled {
                cause:
                    StepError::Store {
                        participant,
                        source,
                    },
                ..
            } => {
                assert_eq!(participant, &format!("{db}.accounts/D"), "{ctx}");
                assert_eq!(source.kind, tandem::StoreErrorKind::DuplicateKey, "{ctx}");
            }
            other => panic!("the unique index refuses the insert: {other:?} ({ctx})"),
        }
        assert_eq!(err.participant().map(|p| p.index), Some(1), "{ctx}");
        assert!(took < timeout, "not waited for: {ctx}");
        assert_eq!(balance(store.as_ref(), &db, "A").await, 100, "{ctx}");
        coordinator.drain().await;
    }
    client.database(&db).drop().await.unwrap();
}

/// `Strategy::Auto` on one server that has transactions runs natively.
#[tokio::test]
async fn auto_runs_natively_on_one_server() {
    let Some((store, client, db, _)) = native_fixture("auto").await else {
        return;
    };
    let accounts = Namespace::new(&db, "accounts");
    let coordinator = Coordinator::builder(store.clone())
        .database(&db)
        .strategy(TxStrategy::Auto)
        .build();
    let receipt = coordinator
        .run(
            Transaction::new()
                .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -1_i64))
                .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 1_i64)),
        )
        .await
        .unwrap();
    assert_eq!(receipt.strategy, TxStrategy::Native);
    assert_eq!(receipt.state, TxState::Done);
    assert_eq!(balance(store.as_ref(), &db, "A").await, 99);
    assert_eq!(
        store
            .count(&Namespace::new(&db, "transactions"), doc! {})
            .await
            .unwrap(),
        0,
        "no record: it ran natively"
    );
    client.database(&db).drop().await.unwrap();
}

/// A native transaction under a caller-chosen id writes its record in the
/// same server transaction: a retry under the id is told `Duplicate` and
/// changes nothing, as for two-phase.
#[tokio::test]
async fn a_keyed_native_transaction_is_refused_as_duplicate_on_retry() {
    let Some((store, client, db, _)) = native_fixture("nkeyed").await else {
        return;
    };
    let accounts = Namespace::new(&db, "accounts");
    let coordinator = Coordinator::builder(store.clone())
        .database(&db)
        .strategy(TxStrategy::Native)
        .build();
    let pay = || {
        Transaction::with_id("order-7")
            .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -1_i64))
            .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 1_i64))
    };
    let receipt = coordinator.run(pay()).await.unwrap();
    assert_eq!(receipt.strategy, TxStrategy::Native);
    let again = coordinator.run(pay()).await;
    assert!(
        matches!(
            &again,
            Err(TxError::Duplicate {
                state: Some(TxState::Done),
                ..
            })
        ),
        "{again:?}"
    );
    assert_eq!(balance(store.as_ref(), &db, "A").await, 99, "paid once");
    let record = coordinator
        .record(&tandem::TxId::new("order-7").unwrap())
        .await
        .unwrap()
        .expect("the record, written in the native transaction");
    assert!(record.keyed && record.state == TxState::Done);
    client.database(&db).drop().await.unwrap();
}

/// A keyed native transaction that is refused aborts, record and all; the
/// coordinator then takes the key with a `canceled` record, so a retry
/// after the refusal is told `Duplicate` and pays nothing, as for
/// two-phase (before, the key stayed free and the retry paid).
#[tokio::test]
async fn a_refused_keyed_native_transaction_keeps_its_key() {
    let Some((store, client, db, _)) = native_fixture("nrefkey").await else {
        return;
    };
    let accounts = Namespace::new(&db, "accounts");
    let coordinator = Coordinator::builder(store.clone())
        .database(&db)
        .strategy(TxStrategy::Native)
        .build();
    let pay = || {
        Transaction::with_id("order-8")
            .change(
                DocumentChange::update(accounts.clone(), "A")
                    .inc("balance", -150_i64)
                    .require_gte("balance", 150_i64),
            )
            .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 150_i64))
    };
    let refused = coordinator.run(pay()).await;
    assert!(
        matches!(
            &refused,
            Err(TxError::Canceled {
                cause: tandem::StepError::GuardFailed { .. },
                ..
            })
        ),
        "{refused:?}"
    );
    store
        .update_one(
            &accounts,
            doc! { "_id": "A" },
            doc! { "$inc": { "balance": 1000_i64 } },
            Default::default(),
        )
        .await
        .unwrap();
    let again = coordinator.run(pay()).await;
    assert!(
        matches!(
            &again,
            Err(TxError::Duplicate {
                state: Some(TxState::Canceled),
                ..
            })
        ),
        "{again:?}"
    );
    assert_eq!(
        balance(store.as_ref(), &db, "A").await,
        1100,
        "nothing paid"
    );
    let record = coordinator
        .record(&tandem::TxId::new("order-8").unwrap())
        .await
        .unwrap()
        .expect("the refusal's record");
    assert!(record.keyed && record.state == TxState::Canceled);
    client.database(&db).drop().await.unwrap();
}

/// A command of a native transaction's body failing outright (here a
/// document validation failure, no retry label) aborts it before any
/// commit: answered `Canceled`, nothing applied (before: `Interrupted`,
/// "not known", with no record to read).
#[tokio::test]
async fn a_native_body_failure_is_answered_canceled() {
    let Some((store, client, db, app)) = native_fixture("nbody").await else {
        return;
    };
    let coordinator = Coordinator::builder(store.clone())
        .database(&db)
        .strategy(TxStrategy::Native)
        .build();
    fail_once(&client, &app, &["update"], doc! { "errorCode": 121 }).await;
    let result = coordinator.run(shopping(&db)).await;
    failpoint_off(&client).await;
    assert!(
        matches!(
            &result,
            Err(TxError::Canceled {
                cause: tandem::StepError::Store { .. },
                undone: true,
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(
        balance(store.as_ref(), &db, "A").await,
        100,
        "nothing applied"
    );
    assert_eq!(
        balance(store.as_ref(), &db, "B").await,
        100,
        "nothing applied"
    );
    client.database(&db).drop().await.unwrap();
}

#[tokio::test]
async fn native_and_two_phase_agree_on_outcomes_and_errors() {
    let Some((store, client, db, _)) = native_fixture("native").await else {
        return;
    };
    let accounts = Namespace::new(&db, "accounts");
    for strategy in [TxStrategy::Native, TxStrategy::TwoPhase] {
        let coordinator = Coordinator::builder(store.clone())
            .database(&db)
            .commit_point(CommitPoint::Done)
            .strategy(strategy)
            .build();
        // A guard failure after a credit: nothing changes, the same typed error.
        let tx = Transaction::new()
            .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 500_i64))
            .change(
                DocumentChange::update(accounts.clone(), "A")
                    .inc("balance", -500_i64)
                    .require_gte("balance", 500_i64),
            );
        match coordinator.run(tx).await {
            Err(TxError::Canceled {
                cause: StepError::GuardFailed { participant, guard },
                ..
            }) => {
                assert_eq!(participant, format!("{db}.accounts/A"));
                assert_eq!(guard, "balance >= 500 (found 100)");
            }
            other => panic!("{strategy:?}: {other:?}"),
        }
        assert_eq!(
            (
                balance(store.as_ref(), &db, "A").await,
                balance(store.as_ref(), &db, "B").await
            ),
            (100, 100)
        );
        // A missing document.
        let tx = Transaction::new()
            .change(DocumentChange::update(accounts.clone(), "nobody").inc("balance", 1_i64));
        assert!(
            matches!(
                coordinator.run(tx).await,
                Err(TxError::Canceled {
                    cause: StepError::NotFound { .. },
                    ..
                })
            ),
            "{strategy:?}"
        );
        // An insert of an existing document.
        let tx = Transaction::new()
            .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -1_i64))
            .change(DocumentChange::insert(
                accounts.clone(),
                "B",
                doc! { "balance": 0_i64 },
            ));
        assert!(
            matches!(
                coordinator.run(tx).await,
                Err(TxError::Canceled {
                    cause: StepError::AlreadyExists { .. },
                    ..
                })
            ),
            "{strategy:?}"
        );
        assert_eq!(
            balance(store.as_ref(), &db, "A").await,
            100,
            "{strategy:?}: all or nothing"
        );
    }
    // A committed native transfer, with its insert and delete.
    let coordinator = Coordinator::builder(store.clone())
        .database(&db)
        .strategy(TxStrategy::Native)
        .build();
    let receipt = coordinator.run(shopping(&db)).await.unwrap();
    assert_eq!(receipt.state, TxState::Done);
    assert_eq!(
        (
            balance(store.as_ref(), &db, "A").await,
            balance(store.as_ref(), &db, "B").await
        ),
        (90, 110)
    );
    assert!(store
        .find_one(&Namespace::new(&db, "carts"), doc! { "_id": "cart-1" })
        .await
        .unwrap()
        .is_none());
    assert!(store
        .find_one(&Namespace::new(&db, "receipts"), doc! { "_id": "r-1" })
        .await
        .unwrap()
        .is_some());
    // A balance stored as a string is a type mismatch in both strategies.
    store
        .update_one(
            &accounts,
            doc! { "_id": "A" },
            doc! { "$set": { "balance": "90" } },
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    for strategy in [TxStrategy::Native, TxStrategy::TwoPhase] {
        let tx = Transaction::new()
            .strategy(strategy)
            .change(DocumentChange::update(accounts.clone(), "A").inc("balance", 1_i64))
            .change(DocumentChange::update(accounts.clone(), "B").inc("balance", -1_i64));
        let err = Coordinator::builder(store.clone())
            .database(&db)
            .commit_point(CommitPoint::Done)
            .build()
            .run(tx)
            .await;
        assert!(
            matches!(
                err,
                Err(TxError::Canceled {
                    cause: StepError::TypeMismatch { .. },
                    ..
                })
            ),
            "{strategy:?}: {err:?}"
        );
        assert_eq!(balance(store.as_ref(), &db, "B").await, 110);
    }
    client.database(&db).drop().await.unwrap();
}

/// Native faults: each case must end committed exactly once, or not at all — never partly.
#[tokio::test]
async fn native_transactions_retry_transient_faults_without_partial_effects() {
    let cases: Vec<(&str, &[&str], Document, bool)> = vec![
        (
            "TransientTransactionError on insert",
            &["insert"],
            doc! { "errorCode": 112, "errorLabels": ["TransientTransactionError"] },
            true,
        ),
        (
            "TransientTransactionError on update",
            &["update"],
            doc! { "errorCode": 112, "errorLabels": ["TransientTransactionError"] },
            true,
        ),
        (
            "UnknownTransactionCommitResult on commit",
            &["commitTransaction"],
            doc! { "errorCode": 91, "errorLabels": ["UnknownTransactionCommitResult"] },
            true,
        ),
        (
            "closeConnection on commit",
            &["commitTransaction"],
            doc! { "closeConnection": true },
            true,
        ),
        (
            "MaxTimeMSExpired on commit is not retried",
            &["commitTransaction"],
            doc! { "errorCode": 50, "errorLabels": ["UnknownTransactionCommitResult"] },
            false,
        ),
    ];
    for (name, commands, fault, commits) in cases {
        let Some((store, client, db, app)) = native_fixture("nfault").await else {
            return;
        };
        println!("native fault case: {name}");
        let started = std::time::Instant::now();
        let coordinator = Coordinator::builder(store.clone())
            .database(&db)
            .strategy(TxStrategy::Native)
            .build();
        fail_once(&client, &app, commands, fault).await;
        let result = coordinator.run(shopping(&db)).await;
        failpoint_off(&client).await;
        println!(
            "  {:?} in {:?}",
            result.as_ref().map(|r| r.state),
            started.elapsed()
        );
        let (a, b) = (
            balance(store.as_ref(), &db, "A").await,
            balance(store.as_ref(), &db, "B").await,
        );
        let receipt = store
            .find_one(&Namespace::new(&db, "receipts"), doc! { "_id": "r-1" })
            .await
            .unwrap();
        let cart = store
            .find_one(&Namespace::new(&db, "carts"), doc! { "_id": "cart-1" })
            .await
            .unwrap();
        let applied = (a, b) == (90, 110) && receipt.is_some() && cart.is_none();
        let untouched = (a, b) == (100, 100) && receipt.is_none() && cart.is_some();
        assert!(
            applied || untouched,
            "{name}: partial state A={a} B={b} receipt={receipt:?} cart={cart:?}"
        );
        if commits {
            assert!(result.is_ok() && applied, "{name}: {result:?}");
            client.database(&db).drop().await.unwrap();
        } else {
            assert!(
                matches!(result, Err(TxError::Interrupted { state: None, .. })),
                "{name}: a MaxTimeMSExpired commit is reported as an unknown outcome, not retried: {result:?}"
            );
            client.database(&db).drop().await.unwrap();
        }
    }
}

/// The cost of one two-document transfer on MongoDB, counted by the store: the
/// commands and write statements sent, and the sequential round trips before
/// the caller's answer (it commits at its applies: two).
#[tokio::test]
async fn a_transfer_costs_two_sequential_round_trips_and_seven_write_statements() {
    let Some(store) = store(&unique_name("cost")).await else {
        return;
    };
    let client = store.client().clone();
    let db = unique_name("cost");
    let accounts = Namespace::new(&db, "accounts");
    for id in ["A", "B"] {
        store
            .insert_one(&accounts, doc! { "_id": id, "balance": 100_i64 })
            .await
            .unwrap();
    }
    let store = Arc::new(store);
    let coordinator = Coordinator::builder(store.clone()).database(&db).build();
    let transfer = || {
        Transaction::new()
            .change(
                DocumentChange::update(accounts.clone(), "A")
                    .inc("balance", -1_i64)
                    .require_gte("balance", 1_i64),
            )
            .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 1_i64))
    };
    // The first transaction also reads the server's clock (`hello`), for its
    // record's create deadline; the reading then serves for ten seconds.
    let before = store.metrics().total;
    coordinator.run(transfer()).await.unwrap();
    coordinator.drain().await;
    let first = store.metrics();
    assert_eq!(first.total - before, 6, "{first:?}");
    assert_eq!(first.hello, 1, "{first:?}");
    let before = store.metrics();
    let receipt = coordinator.run(transfer()).await.unwrap();
    let answered = store.metrics();
    coordinator.drain().await;
    let m = store.metrics();
    let commands = m.total - before.total;
    let statements = m.write_statements - before.write_statements;
    println!(
        "one transfer: {commands} commands, {statements} write statements, {} sequential round trips to the answer",
        receipt.round_trips
    );
    // To the answer: create (pending), both applies in one `update`.
    assert_eq!(receipt.round_trips, 2);
    assert_eq!(answered.total - before.total, 2, "{answered:?}");
    assert_eq!(
        answered.write_statements - before.write_statements,
        3,
        "{answered:?}"
    );
    // Then, in the background: applied, both clears in one `update`, done.
    assert_eq!(commands, 5, "{m:?}");
    assert_eq!(statements, 7, "{m:?}");
    assert_eq!(m.update_each, 4, "{m:?}");
    assert_eq!(m.hello, 1, "no second clock reading: {m:?}");
    // Both accounts changed, and nothing is left on them.
    for (id, balance) in [("A", 98_i64), ("B", 102)] {
        let d = store
            .find_one(&accounts, doc! { "_id": id })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.get_i64("balance").unwrap(), balance);
        assert!(d.get_array("pendingTransactions").unwrap().is_empty());
    }
    client.database(&db).drop().await.unwrap();
}

/// The safety regression scenarios (`tandem::testing::safety`) on the test server.
mod safety_on_mongodb {
    use super::*;
    use tandem::testing::safety;

    #[tokio::test]
    async fn late_delete_after_recreation() {
        let Some(f) = factory("s_delete").await else {
            return;
        };
        safety::late_delete_after_recreation(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn late_insert_after_deletion() {
        let Some(f) = factory("s_insert").await else {
            return;
        };
        safety::late_insert_after_deletion(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn hot_document_stays_bounded() {
        let Some(f) = factory("s_hot").await else {
            return;
        };
        let bytes = safety::hot_document_stays_bounded(&f, &f.db.clone(), 300).await;
        println!("hot account after 300 transfers on MongoDB: {bytes} bytes");
        done(f).await;
    }

    #[tokio::test]
    async fn garbage_collection_then_late_apply() {
        let Some(f) = factory("s_gc").await else {
            return;
        };
        safety::garbage_collection_then_late_apply(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn numeric_ids_are_one_document() {
        let Some(f) = factory("s_ids").await else {
            return;
        };
        safety::numeric_ids_are_one_document(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn same_owner_same_id() {
        let Some(f) = factory("s_owner").await else {
            return;
        };
        safety::same_owner_same_id(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn committed_answer_after_failure() {
        let Some(f) = factory("s_answer").await else {
            return;
        };
        safety::committed_answer_after_failure(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn exclusive_change_sees_other_marker_fields() {
        let Some(f) = factory("s_markers").await else {
            return;
        };
        safety::exclusive_change_sees_other_marker_fields(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn cancel_while_the_owner_applies() {
        let Some(f) = factory("s_cancel").await else {
            return;
        };
        safety::cancel_while_the_owner_applies(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn credits_near_the_limit_are_counted_together() {
        let Some(f) = factory("s_credits").await else {
            return;
        };
        safety::credits_near_the_limit_are_counted_together(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn undo_keeps_an_outside_increment() {
        let Some(f) = factory("s_outside_inc").await else {
            return;
        };
        safety::undo_keeps_an_outside_increment(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn undo_keeps_writes_made_outside_tandem() {
        let Some(f) = factory("s_outside").await else {
            return;
        };
        safety::undo_keeps_writes_made_outside_tandem(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn idempotency_key_outlives_garbage_collection() {
        let Some(f) = factory("s_key").await else {
            return;
        };
        safety::idempotency_key_outlives_garbage_collection(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn a_pending_credit_creates_no_field() {
        let Some(f) = factory("s_residue").await else {
            return;
        };
        safety::a_pending_credit_creates_no_field(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn canceled_insert_frees_the_id() {
        let Some(f) = factory("s_insert_id").await else {
            return;
        };
        safety::canceled_insert_frees_the_id(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn undo_keeps_a_reservation_it_does_not_hold() {
        let Some(f) = factory("s_keeps").await else {
            return;
        };
        safety::undo_keeps_a_reservation_it_does_not_hold(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn late_create_after_collection() {
        let Some(f) = factory("s_late_create").await else {
            return;
        };
        safety::late_create_after_collection(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn stale_move_misses_the_inert_copy() {
        let Some(f) = factory("s_stale_move").await else {
            return;
        };
        safety::stale_move_misses_the_inert_copy(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn before_images_keep_the_stored_types() {
        let Some(f) = factory("s_stored_types").await else {
            return;
        };
        safety::before_images_keep_the_stored_types(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn images_of_paths_through_arrays() {
        let Some(f) = factory("s_array_paths").await else {
            return;
        };
        safety::images_of_paths_through_arrays(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn a_canceled_change_leaves_nothing_on_the_way() {
        let Some(f) = factory("s_nothing_left").await else {
            return;
        };
        safety::a_canceled_change_leaves_nothing_on_the_way(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn credits_keep_each_others_shapes() {
        let Some(f) = factory("s_credit_shapes").await else {
            return;
        };
        safety::credits_keep_each_others_shapes(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn zero_sums_make_way() {
        let Some(f) = factory("s_zero_sums").await else {
            return;
        };
        safety::zero_sums_make_way(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn credits_at_new_paths_leave_nothing() {
        let Some(f) = factory("s_credit_paths").await else {
            return;
        };
        safety::credits_at_new_paths_leave_nothing(&f, &f.db.clone(), 20).await;
        done(f).await;
    }

    #[tokio::test]
    async fn guards_on_unusual_numbers_decide_alike() {
        let Some(f) = factory("s_unusual_numbers").await else {
            return;
        };
        safety::guards_on_unusual_numbers_decide_alike(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn typed_presence_guards_follow_option() {
        let Some(f) = factory("s_typed_presence").await else {
            return;
        };
        safety::typed_presence_guards_follow_option(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn a_native_insert_takes_over_a_placeholder() {
        let Some(f) = factory("s_native_placeholder").await else {
            return;
        };
        safety::a_native_insert_takes_over_a_placeholder(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn an_insert_meeting_a_held_delete_is_a_conflict() {
        let Some(f) = factory("s_held_delete").await else {
            return;
        };
        safety::an_insert_meeting_a_held_delete_is_a_conflict(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn own_record_landing_while_the_id_is_taken() {
        let Some(f) = factory("s_own_record").await else {
            return;
        };
        safety::own_record_landing_while_the_id_is_taken(&f, &f.db.clone()).await;
        done(f).await;
    }

    #[tokio::test]
    async fn reused_id_keeps_markers_apart() {
        let Some(f) = factory("s_reused_id").await else {
            return;
        };
        safety::reused_id_keeps_markers_apart(&f, &f.db.clone()).await;
        done(f).await;
    }
}
