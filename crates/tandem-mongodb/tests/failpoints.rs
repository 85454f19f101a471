//! Transient errors, provoked with the server's `failCommand` failpoint: the
//! store sends each command once and says what failed; the coordinator
//! repeats as its [`RetryPolicy`] allows.
//!
//! Failpoints are global to the server, so every case runs in order inside one
//! test, and each failpoint only hits commands from this test's own
//! application name (`appName` in the failpoint data).

mod common;

use common::with_options;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures::FutureExt;
use tandem::store::{FindOptions, Namespace, ReturnDocument, Store, StoreErrorKind};
use tandem::{
    CommitPoint, Coordinator, DocumentChange, RetryPolicy, Strategy, Transaction, TxError, TxState,
};
use tandem_mongodb::MongoStore;

struct Fixture {
    /// Configures failpoints; has no application name, so failpoints never hit it.
    admin: mongodb::Client,
    /// The store under test, with its own application name. Its client has the
    /// driver's own retries off, so every fault reaches the store.
    store: MongoStore,
    /// A store with the same application name whose client keeps the driver's
    /// retryable reads and writes (the default).
    driver_retrying: MongoStore,
    app_name: String,
    db: String,
    /// The test server's URI with `heartbeatFrequencyMS=500` (see the note above `impl Fixture`).
    uri: String,
}

// `heartbeatFrequencyMS=500`: a failpoint's state-change error (e.g. 91) makes
// the driver mark the server unknown until its monitor's next `hello`; with
// the streaming protocol that answer comes only after `heartbeatFrequencyMS`
// (10 s by default), since a failpoint does not change the server's topology
// version. A short heartbeat keeps those waits short.
impl Fixture {
    fn ns(&self) -> Namespace {
        Namespace::new(self.db.clone(), "docs")
    }

    /// Arms `failCommand` for this fixture's application name.
    async fn fail(&self, mode: bson::Bson, mut data: Document) {
        data.insert("appName", self.app_name.clone());
        self.admin
            .database("admin")
            .run_command(doc! {
                "configureFailPoint": "failCommand",
                "mode": mode,
                "data": data,
            })
            .await
            .expect("configureFailPoint");
    }

    async fn fail_times(&self, times: i32, data: Document) {
        self.fail(doc! { "times": times }.into(), data).await;
    }

    async fn off(&self) {
        self.admin
            .database("admin")
            .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
            .await
            .expect("turn the failpoint off");
    }

    /// The counter. A read is sent again after a transient failure: a
    /// failpoint's `writeConcernError` of code 91 ("shutdown in progress")
    /// makes the driver clear its connection pool, which fails the reads
    /// in flight at that moment too.
    async fn n(&self) -> i64 {
        let mut attempts = 0;
        let doc = loop {
            match self
                .store
                .find_one(&self.ns(), doc! { "_id": "counter" })
                .await
            {
                Ok(doc) => break doc.expect("counter document"),
                Err(e) if e.kind == StoreErrorKind::Transient && attempts < 20 => attempts += 1,
                Err(e) => panic!("read the counter: {e:?}"),
            }
        };
        match doc.get("n") {
            Some(bson::Bson::Int32(n)) => i64::from(*n),
            Some(bson::Bson::Int64(n)) => *n,
            other => panic!("n is {other:?}"),
        }
    }

    async fn inc(&self) -> Result<(), tandem::store::StoreError> {
        Self::inc_with(&self.store, &self.ns()).await
    }

    async fn inc_with(store: &MongoStore, ns: &Namespace) -> Result<(), tandem::store::StoreError> {
        store
            .update_one(
                ns,
                doc! { "_id": "counter" },
                doc! { "$inc": { "n": 1 } },
                tandem::store::UpdateOptions::default(),
            )
            .await
            .map(|_| ())
    }
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 6,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(200),
        budget: Duration::from_secs(20),
    }
}

#[tokio::test]
async fn transient_errors_are_reported_once_and_repeated_by_the_coordinator() {
    let Some(uri) = common::mongodb_uri() else {
        return;
    };
    let app_name = common::unique_name("fp");
    let admin = mongodb::Client::with_uri_str(&uri).await.unwrap();
    let uri = with_options(&uri, "heartbeatFrequencyMS=500");
    let store = MongoStore::builder()
        .app_name(app_name.clone())
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&with_options(&uri, "retryWrites=false&retryReads=false"))
        .await
        .unwrap();
    let driver_retrying = MongoStore::builder()
        .app_name(app_name.clone())
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&with_options(&uri, "retryWrites=true"))
        .await
        .unwrap();
    let fx = Fixture {
        admin,
        store,
        driver_retrying,
        db: app_name.clone(),
        app_name,
        uri,
    };
    fx.off().await;

    let cases: Vec<(&str, CaseFn)> = vec![
        ("failpoints_are_scoped_by_app_name", |fx| {
            Box::pin(scoped_by_app_name(fx))
        }),
        (
            "close_connection_on_update_is_transient_and_sent_once",
            |fx| Box::pin(close_connection_on_update(fx)),
        ),
        ("shutdown_in_progress_without_label_is_transient", |fx| {
            Box::pin(shutdown_without_label(fx))
        }),
        (
            "shutdown_in_progress_with_label_is_repeated_by_the_driver",
            |fx| Box::pin(shutdown_with_label(fx)),
        ),
        ("transient_codes_on_every_command_are_transient", |fx| {
            Box::pin(every_command(fx))
        }),
        (
            "write_concern_error_is_transient_though_the_write_landed",
            |fx| Box::pin(write_concern_error(fx)),
        ),
        ("a_write_concern_error_is_never_a_definite_refusal", |fx| {
            Box::pin(write_concern_error_with_any_code(fx))
        }),
        ("non_retryable_code_keeps_its_kind", |fx| {
            Box::pin(non_retryable(fx))
        }),
        ("the_coordinator_repeats_what_failed_transiently", |fx| {
            Box::pin(coordinator_repeats(fx))
        }),
        ("the_coordinator_gives_up_as_its_policy_says", |fx| {
            Box::pin(exhausted(fx))
        }),
        ("a_native_commit_in_doubt_is_never_run_again", |fx| {
            Box::pin(native_commit_in_doubt(fx))
        }),
        ("connect_turns_the_driver_retryable_reads_off", |fx| {
            Box::pin(no_retryable_reads(fx))
        }),
        ("a_failure_inside_an_update_reply_is_counted", |fx| {
            Box::pin(failure_in_an_update_reply(fx))
        }),
    ];

    let mut failed = Vec::new();
    for (name, case) in cases {
        fx.store
            .update_one(
                &fx.ns(),
                doc! { "_id": "counter" },
                doc! { "$set": { "n": 0_i64 } },
                tandem::store::UpdateOptions::upsert(),
            )
            .await
            .unwrap();
        let started = Instant::now();
        let outcome = AssertUnwindSafe(case(&fx)).catch_unwind().await;
        // Whatever happened, leave no failpoint armed.
        fx.off().await;
        match outcome {
            Ok(()) => println!("case {name}: ok ({:?})", started.elapsed()),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("case {name}: FAILED: {msg}");
                failed.push(name);
            }
        }
    }
    fx.store.client().database(&fx.db).drop().await.unwrap();
    assert!(failed.is_empty(), "failed cases: {failed:?}");
}

type CaseFn = for<'a> fn(&'a Fixture) -> std::pin::Pin<Box<dyn Future<Output = ()> + 'a>>;

async fn scoped_by_app_name(fx: &Fixture) {
    // A failpoint for another application does not hit this store.
    fx.admin
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": "alwaysOn",
            "data": { "failCommands": ["update"], "errorCode": 2, "appName": "someone-else" },
        })
        .await
        .unwrap();
    let before = fx.store.metrics();
    fx.inc().await.unwrap();
    assert_eq!(fx.n().await, 1);
    assert_eq!(fx.store.metrics().failures, before.failures);
    // And a failpoint for this application does not hit another client.
    fx.off().await;
    fx.fail(
        "alwaysOn".into(),
        doc! { "failCommands": ["find"], "errorCode": 2 },
    )
    .await;
    let other = MongoStore::connect(&fx.uri).await.unwrap();
    assert!(other
        .find_one(&fx.ns(), doc! { "_id": "counter" })
        .await
        .unwrap()
        .is_some());
}

async fn close_connection_on_update(fx: &Fixture) {
    fx.fail_times(
        1,
        doc! { "failCommands": ["update"], "closeConnection": true },
    )
    .await;
    let before = fx.store.metrics();
    let err = fx.inc().await.unwrap_err();
    let after = fx.store.metrics();
    assert_eq!(err.kind, StoreErrorKind::Transient, "{err}");
    assert_eq!(after.update_one - before.update_one, 1, "sent once");
    assert_eq!(after.failures - before.failures, 1);
    // The connection closed before the command ran.
    assert_eq!(fx.n().await, 0);

    // With the driver's retryable writes on, the driver repeats once itself,
    // exactly once by transaction number, inside the one command counted.
    fx.fail_times(
        1,
        doc! { "failCommands": ["update"], "closeConnection": true },
    )
    .await;
    let before = fx.driver_retrying.metrics();
    Fixture::inc_with(&fx.driver_retrying, &fx.ns())
        .await
        .unwrap();
    let after = fx.driver_retrying.metrics();
    assert_eq!(after.update_one - before.update_one, 1);
    assert_eq!(fx.n().await, 1);
}

async fn shutdown_without_label(fx: &Fixture) {
    // The store's client sends no transaction number (retryWrites=false), so
    // the server adds no RetryableWriteError label, and the driver does not retry.
    fx.fail_times(1, doc! { "failCommands": ["update"], "errorCode": 91 })
        .await;
    let before = fx.store.metrics();
    let err = fx.inc().await.unwrap_err();
    let after = fx.store.metrics();
    assert_eq!(err.kind, StoreErrorKind::Transient, "{err}");
    assert_eq!(err.code, Some(91));
    assert_eq!(after.update_one - before.update_one, 1);
    assert_eq!(fx.n().await, 0);
}

async fn shutdown_with_label(fx: &Fixture) {
    fx.fail_times(
        1,
        doc! {
            "failCommands": ["update"],
            "errorCode": 91,
            "errorLabels": ["RetryableWriteError"],
        },
    )
    .await;
    let before = fx.driver_retrying.metrics();
    Fixture::inc_with(&fx.driver_retrying, &fx.ns())
        .await
        .unwrap();
    let after = fx.driver_retrying.metrics();
    assert_eq!(after.update_one - before.update_one, 1);
    assert_eq!(
        after.failures, before.failures,
        "the driver's repeat succeeded"
    );
    assert_eq!(fx.n().await, 1);
}

async fn every_command(fx: &Fixture) {
    let ns = fx.ns();
    let codes = [
        11600, 10107, 112, 189, 11602, 13435, 13436, 9001, 89, 262, 6, 7,
    ];
    let transient = |what: &str, code: i32, e: tandem::store::StoreError| {
        assert_eq!(
            e.kind,
            StoreErrorKind::Transient,
            "{what} after {code}: {e}"
        );
    };
    let before = fx.store.metrics();
    for (i, code) in codes.into_iter().enumerate() {
        let id = format!("doc{i}");
        fx.fail_times(1, doc! { "failCommands": ["insert"], "errorCode": code })
            .await;
        let e = fx
            .store
            .insert_one(&ns, doc! { "_id": &id, "v": 0 })
            .await
            .unwrap_err();
        transient("insert", code, e);
        fx.store
            .insert_one(&ns, doc! { "_id": &id, "v": 0 })
            .await
            .unwrap();

        fx.fail_times(
            1,
            doc! { "failCommands": ["findAndModify"], "errorCode": code },
        )
        .await;
        let e = fx
            .store
            .find_one_and_update(
                &ns,
                doc! { "_id": &id, "v": 0 },
                doc! { "$set": { "v": 1 } },
                tandem::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
            )
            .await
            .unwrap_err();
        transient("findAndModify", code, e);

        fx.fail_times(1, doc! { "failCommands": ["find"], "errorCode": code })
            .await;
        let e = fx
            .store
            .find(&ns, doc! { "_id": &id }, FindOptions::default())
            .await
            .unwrap_err();
        transient("find", code, e);

        fx.fail_times(1, doc! { "failCommands": ["delete"], "errorCode": code })
            .await;
        let e = fx
            .store
            .delete_one(&ns, doc! { "_id": &id })
            .await
            .unwrap_err();
        transient("delete", code, e);
        // Nothing ran: the document is as inserted.
        let found = fx.store.find_one(&ns, doc! { "_id": &id }).await.unwrap();
        assert_eq!(found, Some(doc! { "_id": &id, "v": 0 }), "after {code}");
    }
    let m = fx.store.metrics();
    assert_eq!(
        m.failures - before.failures,
        4 * codes.len() as u64,
        "each failed command sent once: {m:?}"
    );
}

async fn write_concern_error(fx: &Fixture) {
    // The write is applied but not acknowledged as asked: the answer is an
    // error whose outcome is unknown, and the write is there.
    fx.fail_times(
        1,
        doc! {
            "failCommands": ["update"],
            "writeConcernError": { "code": 91, "errmsg": "shutdown in progress" },
        },
    )
    .await;
    let err = fx
        .store
        .update_one(
            &fx.ns(),
            doc! { "_id": "counter" },
            doc! { "$set": { "n": 42_i64 } },
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Transient, "{err}");
    assert!(err.kind.outcome_unknown());
    assert_eq!(fx.n().await, 42);
}

/// A write concern error follows a write that was applied, whatever its
/// code: one with an authorization code was taken for a definite refusal
/// (`Unauthorized`), and a caller told "unauthorized" for a write that was
/// made (found by an adversarial review).
async fn write_concern_error_with_any_code(fx: &Fixture) {
    for code in [13_i32, 18, 11, 31, 33, 8000] {
        fx.fail_times(
            1,
            doc! {
                "failCommands": ["update"],
                "writeConcernError": { "code": code, "errmsg": "not authorized to wait for write concern" },
            },
        )
        .await;
        let before = fx.n().await;
        let err = fx.inc().await.unwrap_err();
        assert!(err.kind.outcome_unknown(), "WCE {code}: {err}");
        assert_eq!(fx.n().await, before + 1, "WCE {code}: the write landed");
    }
}

async fn non_retryable(fx: &Fixture) {
    fx.fail_times(1, doc! { "failCommands": ["update"], "errorCode": 2 })
        .await;
    let before = fx.store.metrics();
    let err = fx.inc().await.unwrap_err();
    let after = fx.store.metrics();
    assert_eq!(err.kind, StoreErrorKind::BadRequest, "{err}");
    assert_eq!(err.code, Some(2));
    assert_eq!(after.update_one - before.update_one, 1, "sent once");
    assert_eq!(fx.n().await, 0);

    // Another non-transient code keeps its code too.
    fx.fail_times(
        1,
        doc! { "failCommands": ["findAndModify"], "errorCode": 14 },
    )
    .await;
    let err = fx
        .store
        .find_one_and_update(
            &fx.ns(),
            doc! { "_id": "counter" },
            doc! { "$inc": { "n": 1 } },
            tandem::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::TypeMismatch, "{err}");
    assert_eq!(err.code, Some(14));
    assert_eq!(fx.n().await, 0);
}

/// A coordinator over the fixture's store, in its own database, with `retry`.
fn coordinator(fx: &Fixture, retry: RetryPolicy) -> Coordinator {
    Coordinator::builder(fx.store.clone())
        .database(&fx.db)
        .commit_point(CommitPoint::Done)
        .lease(Duration::from_secs(2))
        .clock_margin(Duration::from_millis(100))
        .retry(retry)
        .build()
}

/// Takes one from the counter, guarded: a debit, applied at the apply step.
fn debit(fx: &Fixture) -> Transaction {
    Transaction::new().change(
        DocumentChange::update(fx.ns(), "counter")
            .inc("n", -1_i64)
            .require_gte("n", -100_i64),
    )
}

async fn coordinator_repeats(fx: &Fixture) {
    let run = coordinator(fx, policy());
    // Two lost connections on the protocol's updates: the coordinator repeats
    // them, and the debit lands once.
    fx.fail_times(
        2,
        doc! { "failCommands": ["update"], "closeConnection": true },
    )
    .await;
    let before = fx.store.metrics();
    let receipt = run.run(debit(fx)).await.unwrap();
    let after = fx.store.metrics();
    // Done, or applied with its clearing left to recovery when a lost answer
    // was the apply's (its first copy might still land until the deadline).
    assert!(
        matches!(receipt.state, TxState::Done | TxState::Applied),
        "{receipt:?}"
    );
    assert_eq!(
        after.failures - before.failures,
        2,
        "{before:?} -> {after:?}"
    );
    assert_eq!(fx.n().await, -1);
    run.drain().await;
}
async fn exhausted(fx: &Fixture) {
    fx.fail(
        "alwaysOn".into(),
        doc! { "failCommands": ["update"], "errorCode": 112 },
    )
    .await;
    let run = coordinator(fx, policy());
    let err = run.run(debit(fx)).await.unwrap_err();
    let text = format!("{err:?}");
    assert!(
        text.contains(&format!("gave up after {} attempts", policy().max_attempts)),
        "{text}"
    );
    assert_eq!(fx.n().await, 0, "the debit never landed");

    // A short budget stops earlier than max_attempts.
    let tight = coordinator(
        fx,
        RetryPolicy {
            max_attempts: 100,
            base_delay: Duration::from_millis(50),
            max_delay: Duration::from_millis(50),
            budget: Duration::from_millis(200),
        },
    );
    let before = fx.store.metrics();
    let started = Instant::now();
    let err = tight.run(debit(fx)).await.unwrap_err();
    let after = fx.store.metrics();
    assert!(format!("{err:?}").contains("gave up after"), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(after.failures - before.failures < 100, "{after:?}");
    assert_eq!(fx.n().await, 0);
}

/// A native commit that landed but whose answer was a write concern error
/// (`UnknownTransactionCommitResult`) is in doubt for good: when the commit
/// sent again is answered `TransientTransactionError` (here by a failpoint
/// armed once the first commit is seen to have landed), the transaction is
/// not run again. It was, and its increment landed twice, answered `Ok`.
async fn native_commit_in_doubt(fx: &Fixture) {
    fx.fail_times(
        1,
        doc! {
            "failCommands": ["commitTransaction"],
            "writeConcernError": { "code": 91, "errmsg": "shutdown in progress" },
        },
    )
    .await;
    let coordinator = Coordinator::builder(fx.store.clone())
        .database(&fx.db)
        .strategy(Strategy::Native)
        // The commit is sent again after 2 s: time for the watcher below,
        // which needs one read.
        .retry(RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(2),
            budget: Duration::from_secs(30),
        })
        .build();
    let tx = Transaction::new().change(DocumentChange::update(fx.ns(), "counter").inc("n", 1_i64));
    let watcher = async {
        // Reads until the first commit has landed (each read a round trip).
        while fx.n().await != 1 {}
        fx.fail_times(
            1,
            doc! {
                "failCommands": ["commitTransaction"],
                "errorCode": 251,
                "errorLabels": ["TransientTransactionError"],
            },
        )
        .await;
    };
    let (answer, ()) = tokio::join!(coordinator.run(tx), watcher);
    assert_eq!(fx.n().await, 1, "one increment asked: {answer:?}");
    assert!(
        matches!(answer, Ok(_) | Err(TxError::Interrupted { .. })),
        "{answer:?}"
    );
}

/// `MongoStore::connect` turns the driver's retryable reads off, as its docs
/// say: a connection closed on a `find` comes back as a transient failure,
/// counted, rather than repeated unseen by the driver.
async fn no_retryable_reads(fx: &Fixture) {
    let store = MongoStore::builder()
        .app_name(fx.app_name.clone())
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&fx.uri)
        .await
        .unwrap();
    fx.fail_times(
        1,
        doc! { "failCommands": ["find"], "closeConnection": true },
    )
    .await;
    let before = store.metrics();
    let read = store.find_one(&fx.ns(), doc! { "_id": "counter" }).await;
    let after = store.metrics();
    assert_eq!(
        read.as_ref().map_err(|e| e.kind),
        Err(StoreErrorKind::Transient),
        "{read:?}"
    );
    assert_eq!(after.failures - before.failures, 1);
}

/// An `update` of several statements whose reply is `ok: 1` with a write
/// concern error fails (outcome unknown: the write landed), and the failure
/// is counted as one.
async fn failure_in_an_update_reply(fx: &Fixture) {
    fx.fail_times(
        1,
        doc! {
            "failCommands": ["update"],
            "writeConcernError": { "code": 91, "errmsg": "shutdown in progress" },
        },
    )
    .await;
    let before = fx.store.metrics();
    let result = fx
        .store
        .update_each(
            &fx.ns(),
            vec![(doc! { "_id": "counter" }, doc! { "$inc": { "n": 1_i64 } })],
        )
        .await;
    let after = fx.store.metrics();
    let err = result.expect_err("a write concern error");
    assert!(err.kind.outcome_unknown(), "{err}");
    assert_eq!(fx.n().await, 1, "landed");
    assert_eq!(after.failures - before.failures, 1, "{err}");
}
