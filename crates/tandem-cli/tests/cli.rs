//! The `tandem` command against a MongoDB server holding stuck transactions.
//!
//! Needs `MONGODB_URI` (the project's test script starts a server and sets it).

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use tandem::testing::FaultStore;
use tandem::{
    CommitPoint, Coordinator, DocumentChange, Namespace, Store, Transaction, TxError, TxId, TxState,
};
use tandem_mongodb::MongoStore;

fn uri() -> Option<String> {
    tandem::testing::server::mongodb_uri()
}

/// Runs the CLI with the test's timing: a lease of one second and no clock margin
/// (one server, one clock).
fn tandem(uri: &str, db: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["--uri", uri, "--db", db, "--connect-timeout", "5s"])
        .args(["--lease", "1s", "--clock-margin", "0s"])
        .args(args)
        .output()
        .expect("running tandem")
}

/// Returns once the server's clock reads `time` or later (a lease runs by the
/// server's clock, which a test can only wait for).
async fn until_server_time(store: &Arc<dyn Store>, time: bson::DateTime) {
    let give_up = std::time::Instant::now() + Duration::from_secs(120);
    while store.now().await.unwrap() < time {
        assert!(
            std::time::Instant::now() < give_up,
            "the server's clock stands still"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// When `id`'s current lease ends, by the server's clock.
async fn deadline(store: &Arc<dyn Store>, db: &str, id: &TxId) -> bson::DateTime {
    let doc = store
        .find_one(
            &Namespace::new(db, "transactions"),
            doc! { "_id": id.as_str() },
        )
        .await
        .unwrap()
        .unwrap();
    tandem::TxRecord::from_document(doc).unwrap().deadline()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn transfer(db: &str, from: &str, to: &str, amount: i64) -> Transaction {
    let accounts = Namespace::new(db, "accounts");
    Transaction::new()
        .change(
            DocumentChange::update(accounts.clone(), from)
                .inc("balance", -amount)
                .require_gte("balance", amount),
        )
        .change(DocumentChange::update(accounts, to).inc("balance", amount))
}

/// Runs a transfer whose coordinator dies after `ops` store operations; returns its id.
async fn stuck(
    store: &Arc<dyn Store>,
    db: &str,
    ops: u64,
    lease: Duration,
    tx: Transaction,
) -> TxId {
    let faulty = FaultStore::new(store.clone()).crash_after(ops);
    let coordinator = Coordinator::builder(faulty)
        .database(db)
        .lease(lease)
        .commit_point(CommitPoint::Done)
        .build();
    match coordinator.run(tx).await {
        Err(TxError::Interrupted { id, .. }) => id,
        // Committed before the crash: the answer says so, and cleanup is left to recovery.
        Ok(receipt) if receipt.state == TxState::Applied => receipt.id,
        other => panic!("expected a transaction left in flight, got {other:?}"),
    }
}

async fn balance(store: &Arc<dyn Store>, db: &str, id: &str) -> i64 {
    store
        .find_one(&Namespace::new(db, "accounts"), doc! { "_id": id })
        .await
        .unwrap()
        .unwrap()
        .get_i64("balance")
        .unwrap()
}

#[tokio::test]
async fn the_cli_inspects_recovers_and_cancels_stuck_transactions() {
    let Some(uri) = uri() else { return };
    let db = format!("tandem_cli_{}", bson::oid::ObjectId::new().to_hex());
    let mongo = MongoStore::connect(&uri).await.unwrap();
    let client = mongo.client().clone();
    let store: Arc<dyn Store> = Arc::new(mongo);
    let accounts = Namespace::new(&db, "accounts");
    for name in ["A", "B", "C", "D"] {
        store
            .insert_one(
                &accounts,
                doc! { "_id": name, "balance": 1000_i64, "pendingTransactions": [] },
            )
            .await
            .unwrap();
    }
    // Four stuck transactions: pending with nothing applied, pending with
    // both applies landed (committed at them, its record not moved on),
    // applied (committed, markers left), and a pending one with nothing
    // applied whose lease still runs.
    let short = Duration::from_secs(1);
    let nothing = stuck(&store, &db, 2, short, transfer(&db, "A", "B", 10)).await;
    let unmoved = stuck(&store, &db, 3, short, transfer(&db, "A", "B", 20)).await;
    let applied = stuck(&store, &db, 5, short, transfer(&db, "C", "D", 30)).await;
    // (Only the first transaction reads the server's clock: the reading
    // serves the next ones, so this one's first operation is its create.)
    let leased = stuck(
        &store,
        &db,
        1,
        Duration::from_secs(10),
        transfer(&db, "C", "D", 40),
    )
    .await;
    let expired = deadline(&store, &db, &applied).await;

    let out = tandem(&uri, &db, &["status"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("pending    3"), "{text}");
    assert!(text.contains("applied    1"), "{text}");
    assert!(
        text.contains(&format!("oldest in flight: {nothing}")),
        "{text}"
    );

    let out = tandem(&uri, &db, &["list", "--state", "pending", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [nothing.as_str(), unmoved.as_str(), leased.as_str()]);

    let out = tandem(&uri, &db, &["list"]);
    assert!(
        stdout(&out).contains("4 transaction(s)"),
        "{}",
        stdout(&out)
    );

    let out = tandem(&uri, &db, &["show", unmoved.as_str()]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("state:         pending"), "{text}");
    assert!(
        text.contains(&format!("{db}.accounts/A (document)")),
        "{text}"
    );
    assert!(
        text.contains("history:") && text.contains("create"),
        "{text}"
    );
    // Each participant's document, read and judged against the record.
    let judged: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("document: "))
        .collect();
    assert_eq!(judged.len(), 2, "{text}");
    for j in &judged {
        assert!(
            ["applied (marked); committed if every participant is"].contains(j),
            "{text}"
        );
    }

    // The plan of a recorded transaction, and its state diagram.
    let out = tandem(&uri, &db, &["explain", unmoved.as_str()]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("guard:     balance >= 20"), "{text}");
    assert!(text.contains("apply:     add -20 to balance"), "{text}");
    assert!(text.contains("at commit: add 20 to balance"), "{text}");
    let out = tandem(&uri, &db, &["explain", unmoved.as_str(), "--mermaid"]);
    assert!(
        stdout(&out).contains("pending --> applied"),
        "{}",
        stdout(&out)
    );
    let out = tandem(&uri, &db, &["explain", "no-such-transaction"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");

    // Live counts: printed twice, then it stops by itself.
    let out = tandem(&uri, &db, &["status", "--watch", "100ms", "--times", "2"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out).matches("pending    3").count(),
        2,
        "{}",
        stdout(&out)
    );

    // Global flags after the subcommand.
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["status", "--uri", &uri, "--db", &db, "--lease", "1s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("pending    3"), "{}", stdout(&out));

    // The wrong database: no records collection there, and the message names
    // the databases that have one.
    let out = tandem(&uri, &format!("{db}_elsewhere"), &["status"]);
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("does not exist") && stderr.contains(&db),
        "{stderr}"
    );

    // The three short leases have run out; the fourth lease still runs.
    until_server_time(&store, expired).await;
    let out = tandem(&uri, &db, &["recover"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("recovered 3: committed 2, canceled 1"),
        "{text}"
    );
    assert!(
        text.contains("1 transaction(s) still inside their owners' lease"),
        "{text}"
    );
    assert_eq!(
        balance(&store, &db, "A").await,
        980,
        "the A->B transfer whose applies landed committed, the other rolled back"
    );
    assert_eq!(balance(&store, &db, "B").await, 1020);
    assert_eq!(balance(&store, &db, "C").await, 970, "C->D committed");

    // The leased one commits at its applies, and those may still land until
    // its deadline: a cancel before then cannot decide (exit code 1), and
    // only fences the owner's record moves.
    let out = tandem(
        &uri,
        &db,
        &["cancel", leased.as_str(), "--reason", "customer asked"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("undecided"),
        "{out:?}"
    );
    // Claimed by the cancel and still in flight, but not stuck: an
    // operator's cancel is no attempt of recovery, and backs nothing off.
    let out = tandem(&uri, &db, &["list", "--stuck", "1", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["_id"].as_str().unwrap())
        .collect();
    assert!(ids.is_empty(), "{ids:?}");
    let out = tandem(&uri, &db, &["list", "--state", "pending", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["_id"].as_str() == Some(leased.as_str())),
        "{listed}"
    );
    // After the deadline, nothing of it applied: canceled at once, the reason kept.
    let owner_deadline = deadline(&store, &db, &leased).await;
    until_server_time(&store, owner_deadline).await;
    let out = tandem(
        &uri,
        &db,
        &["cancel", leased.as_str(), "--reason", "customer asked"],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("canceled"), "{}", stdout(&out));
    let shown = stdout(&tandem(&uri, &db, &["show", leased.as_str()]));
    assert!(shown.contains("cancel: customer asked"), "{shown}");
    assert_eq!(balance(&store, &db, "C").await, 970);
    assert_eq!(balance(&store, &db, "D").await, 1030);

    let out = tandem(&uri, &db, &["cancel", applied.as_str()]);
    assert_eq!(out.status.code(), Some(5), "past the commit point: {out:?}");
    let out = tandem(&uri, &db, &["show", "no-such-transaction"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");

    let out = tandem(&uri, &db, &["gc", "--older-than", "0s"]);
    assert_eq!(out.status.code(), Some(2), "below the lease: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("below the lease plus the clock margin"),
        "{out:?}"
    );
    let finished = store.now().await.unwrap().timestamp_millis() + 1000;
    until_server_time(&store, bson::DateTime::from_millis(finished)).await;
    let out = tandem(&uri, &db, &["gc", "--older-than", "1s"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).contains("removed 4 finished transaction records"),
        "{}",
        stdout(&out)
    );
    let out = tandem(&uri, &db, &["status"]);
    assert!(stdout(&out).contains("done       0"), "{}", stdout(&out));

    client.database(&db).drop().await.unwrap();
}

/// A transfer whose credit lives in a named store (`CoordinatorBuilder::store`):
/// without `--store`, the command can neither drive it nor read that
/// document, and says so; with it, `show` reads the document, `recover`
/// rolls the transfer back, and `gc` drops the credit's zero sum there.
#[tokio::test]
async fn named_stores_are_reached_with_store() {
    let Some(uri) = uri() else { return };
    let db = format!("tandem_cli_{}", bson::oid::ObjectId::new().to_hex());
    let ledger_db = format!("{db}_ledger");
    let mongo = MongoStore::connect(&uri).await.unwrap();
    let client = mongo.client().clone();
    let store: Arc<dyn Store> = Arc::new(mongo);
    let ledger: Arc<dyn Store> = Arc::new(MongoStore::connect(&uri).await.unwrap());
    let accounts = Namespace::new(&db, "accounts");
    let entries = Namespace::new(&ledger_db, "accounts");
    store
        .insert_one(&accounts, doc! { "_id": "A", "balance": 1000_i64 })
        .await
        .unwrap();
    ledger
        .insert_one(&entries, doc! { "_id": "L", "balance": 0_i64 })
        .await
        .unwrap();
    // The coordinator dies once both applies have landed, before its record
    // moves on: ops 1 the create, 2 the debit on the default store (the
    // credit goes to the ledger, which does not count), 3 the move to
    // `applied`, which fails.
    let faulty = FaultStore::new(store.clone()).crash_after(2);
    let coordinator = Coordinator::builder(faulty)
        .store_shared("ledger", ledger.clone())
        .database(&db)
        .lease(Duration::from_secs(1))
        .early_commit(false)
        .build();
    let id = match coordinator
        .run(
            Transaction::new()
                .change(
                    DocumentChange::update(accounts.clone(), "A")
                        .inc("balance", -10_i64)
                        .require_gte("balance", 10_i64),
                )
                .change(
                    DocumentChange::update(entries.clone(), "L")
                        .inc("balance", 10_i64)
                        .in_store("ledger"),
                ),
        )
        .await
    {
        Err(TxError::Interrupted { id, .. }) => id,
        other => panic!("expected a transfer left in flight, got {other:?}"),
    };
    let at = deadline(&store, &db, &id).await;
    until_server_time(&store, at).await;
    let with_ledger = format!("ledger={uri}");

    let shown = stdout(&tandem(&uri, &db, &["show", id.as_str()]));
    assert!(
        shown.contains("which this tool does not reach (give --store ledger=URI)"),
        "{shown}"
    );
    let out = tandem(&uri, &db, &["recover"]);
    assert!(!out.status.success(), "{out:?}");
    let record = store
        .find_one(
            &Namespace::new(&db, "transactions"),
            doc! { "_id": id.as_str() },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.get_str("state"), Ok("pending"), "{record}");

    let shown = stdout(&tandem(
        &uri,
        &db,
        &["--store", &with_ledger, "show", id.as_str()],
    ));
    assert!(!shown.contains("does not reach"), "{shown}");
    let out = tandem(&uri, &db, &["--store", &with_ledger, "recover"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(balance(&store, &db, "A").await, 1000);
    let l = ledger
        .find_one(&entries, doc! { "_id": "L" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(l.get_i64("balance"), Ok(0), "{l}");
    assert!(
        l.get_document("_tandem")
            .is_ok_and(|t| t.contains_key("credit")),
        "the canceled credit's zero sum, until garbage collection: {l}"
    );

    let finished = store.now().await.unwrap().timestamp_millis() + 1000;
    until_server_time(&store, bson::DateTime::from_millis(finished)).await;
    let out = tandem(
        &uri,
        &db,
        &["--store", &with_ledger, "gc", "--older-than", "1s"],
    );
    assert!(out.status.success(), "{out:?}");
    let l = ledger
        .find_one(&entries, doc! { "_id": "L" })
        .await
        .unwrap()
        .unwrap();
    assert!(
        !l.get_document("_tandem")
            .is_ok_and(|t| t.contains_key("credit")),
        "{l}"
    );

    let out = tandem(&uri, &db, &["--store", "ledger", "status"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    client.database(&db).drop().await.unwrap();
    client.database(&ledger_db).drop().await.unwrap();
}

/// `tandem cancel` of a transaction with a hand-written participant, whose
/// kind the command cannot rebuild, refuses (exit code 5) and leaves the
/// record as it was: a claim would fence its owner off for nothing.
#[tokio::test]
async fn cancel_refuses_a_participant_kind_it_cannot_rebuild() {
    let Some(uri) = uri() else { return };
    let db = format!("tandem_cli_{}", bson::oid::ObjectId::new().to_hex());
    let mongo = MongoStore::connect(&uri).await.unwrap();
    let client = mongo.client().clone();
    let records = Namespace::new(&db, "transactions");
    let past = bson::DateTime::from_millis(0);
    mongo
        .insert_one(
            &records,
            doc! {
                "_id": "foreign", "state": "pending", "owner": "elsewhere",
                "epoch": 0_i64, "leaseMillis": 1_000_i64, "attempts": 0, "history": [],
                "participants": [{ "kind": "gateway", "label": "card", "spec": {} }],
                "lastModified": past, "leaseStart": past,
            },
        )
        .await
        .unwrap();
    let out = tandem(&uri, &db, &["cancel", "foreign"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("\"gateway\""), "{said}");
    let record = mongo
        .find_one(&records, doc! { "_id": "foreign" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.get_i64("epoch"), Ok(0), "{record}");
    assert_eq!(record.get_str("state"), Ok("pending"), "{record}");
    client.database(&db).drop().await.unwrap();
}

/// A keyed transaction that ran natively keeps a record without its
/// changes: `explain` says so instead of calling it two-phase with no
/// participants, and `show` says it ran natively (the record's `native`
/// flag was dropped on reading; found by an adversarial review).
#[tokio::test]
async fn a_native_record_is_shown_and_explained_as_native() {
    let Some(uri) = uri() else { return };
    let db = format!("tandem_cli_{}", bson::oid::ObjectId::new().to_hex());
    let mongo = MongoStore::connect(&uri).await.unwrap();
    let client = mongo.client().clone();
    let store: Arc<dyn Store> = Arc::new(mongo);
    let orders = Namespace::new(&db, "orders");
    store
        .insert_one(&orders, doc! { "_id": "o-1", "state": "new" })
        .await
        .unwrap();
    let coordinator = Coordinator::builder_shared(store.clone())
        .database(&db)
        .strategy(tandem::Strategy::Native)
        .build();
    let receipt = coordinator
        .run(
            Transaction::with_id("pay-o-1")
                .change(DocumentChange::update(orders.clone(), "o-1").set("state", "paid")),
        )
        .await
        .unwrap();
    assert_eq!(receipt.strategy, tandem::Strategy::Native);
    let explained = tandem(&uri, &db, &["explain", "pay-o-1"]);
    assert_eq!(explained.status.code(), Some(0), "{explained:?}");
    let text = stdout(&explained);
    assert!(
        text.contains("ran natively") && !text.contains("two-phase"),
        "{text}"
    );
    let shown = tandem(&uri, &db, &["show", "pay-o-1"]);
    assert!(stdout(&shown).contains("native"), "{}", stdout(&shown));
    let json = tandem(&uri, &db, &["show", "pay-o-1", "--json"]);
    assert!(stdout(&json).contains("\"native\""), "{}", stdout(&json));
    client.database(&db).drop().await.unwrap();
}

/// A record whose changes are not kept says so in `explain`, instead of
/// being explained as a recorded two-phase transaction that changed
/// nothing: the stub garbage collection leaves of a keyed record (its
/// participants dropped), and the record a keyed transaction refused
/// before its own record was written takes its key with.
#[tokio::test]
async fn explain_does_not_show_an_empty_plan_for_changes_not_recorded() {
    let Some(uri) = uri() else { return };
    let db = format!("tandem_cli_{}", bson::oid::ObjectId::new().to_hex());
    let mongo = MongoStore::connect(&uri).await.unwrap();
    let client = mongo.client().clone();
    let store: Arc<dyn Store> = Arc::new(mongo);
    let orders = Namespace::new(&db, "orders");
    store
        .insert_one(&orders, doc! { "_id": "o-1", "state": "new" })
        .await
        .unwrap();
    let lease = Duration::from_millis(200);
    let coordinator = Coordinator::builder_shared(store.clone())
        .database(&db)
        .strategy(tandem::Strategy::TwoPhase)
        .commit_point(CommitPoint::Done)
        .lease(lease)
        .clock_margin(Duration::ZERO)
        .build();
    // Committed, then collected to a stub.
    let receipt = coordinator
        .run(
            Transaction::with_id("pay-o-1")
                .change(DocumentChange::update(orders.clone(), "o-1").set("state", "paid")),
        )
        .await
        .unwrap();
    assert_eq!(receipt.state, TxState::Done);
    let done = deadline(&store, &db, &TxId::new("pay-o-1").unwrap()).await;
    until_server_time(
        &store,
        bson::DateTime::from_millis(done.timestamp_millis() + 2 * lease.as_millis() as i64),
    )
    .await;
    let worker = coordinator.recovery(tandem::RecoveryConfig::default());
    assert_eq!(worker.collect_garbage(lease).await.unwrap(), 1);
    // Refused before its record: the order it marks paid does not exist.
    let refused = coordinator
        .run(
            Transaction::with_id("pay-o-2")
                .change(DocumentChange::update(orders.clone(), "o-2").set("state", "paid")),
        )
        .await;
    assert!(
        matches!(refused, Err(TxError::Canceled { .. })),
        "{refused:?}"
    );
    for (key, why) in [("pay-o-1", "stub"), ("pay-o-2", "refused")] {
        let explained = tandem(&uri, &db, &["explain", key]);
        assert_eq!(explained.status.code(), Some(0), "{explained:?}");
        let text = stdout(&explained);
        assert!(
            text.contains("not recorded") && text.contains(why) && !text.contains("two-phase:"),
            "{key}: {text}"
        );
    }
    client.database(&db).drop().await.unwrap();
}

#[tokio::test]
async fn connection_problems_exit_with_code_3_and_hide_the_password() {
    if uri().is_none() {
        return;
    }
    let out = tandem("not-a-uri", "x", &["status"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // A closed loopback port: nothing listens on port 1.
    let secret = "s3cr3t-Pa55";
    let closed = format!("mongodb://admin:{secret}@127.0.0.1:1/?serverSelectionTimeoutMS=300");
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["--uri", &closed, "--connect-timeout", "300ms", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains(secret), "the password leaked: {stderr}");
    assert!(!stderr.is_empty());
}
