//! A definite refusal after a retry speaks for the last attempt only.
//!
//! When an earlier attempt of the same request failed with its outcome
//! unknown (it may have landed), a refusal of the attempt that followed says
//! nothing of the earlier one. An answer built on that refusal ("canceled,
//! nothing applied") claims more than is known.
//!
//! Failpoints are global to the server: they only hit commands from this
//! test's own application name.

mod common;

use common::with_options;

use std::time::Duration;

use bson::{doc, Document};
use tandem::config::{PendingPolicy, RecoveryConfig};
use tandem::store::{Namespace, Store};
use tandem::{CommitPoint, Coordinator, DocumentChange, RetryPolicy, Transaction, TxError};
use tandem_mongodb::MongoStore;

async fn fail_once(admin: &mongodb::Client, app_name: &str, mut data: Document) {
    data.insert("appName", app_name);
    common::fail_command(admin, 1, data).await;
}

async fn off(admin: &mongodb::Client) {
    common::fail_command_off(admin).await;
}

/// The record's create (a `findAndModify` upsert) lands, but its answer is a
/// write concern error (outcome unknown); the coordinator sends it again,
/// and that second attempt is refused as too large. The record of the
/// first attempt is there, `pending`, under this transaction's token: the
/// transaction is not canceled, and recovery may roll it forward. The
/// answer was `Canceled { undone: true }` ("nothing applied, nothing will
/// be"), and a recovery that rolls pending transactions forward then moved
/// the money of the transaction answered canceled.
#[tokio::test]
async fn a_record_create_refused_after_a_lost_answer_is_not_answered_canceled() {
    let Some(uri) = common::mongodb_uri() else {
        return;
    };
    let app_name = common::unique_name("retried");
    let db = app_name.clone();
    let admin = mongodb::Client::with_uri_str(&uri).await.unwrap();
    let store = MongoStore::builder()
        .app_name(app_name.clone())
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&with_options(
            &uri,
            "heartbeatFrequencyMS=500&retryWrites=false&retryReads=false",
        ))
        .await
        .unwrap();
    off(&admin).await;
    let accounts = Namespace::new(&db, "accounts");
    store
        .insert_one(&accounts, doc! { "_id": "A", "balance": 10_i64 })
        .await
        .unwrap();
    let lease = Duration::from_secs(2);
    let coordinator = Coordinator::builder(store.clone())
        .database(&db)
        .commit_point(CommitPoint::Done)
        .lease(lease)
        .clock_margin(Duration::from_millis(100))
        // The create is sent again after 2 s: time for the watcher below.
        .retry(RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(2),
            budget: Duration::from_secs(30),
        })
        .build();
    let records = admin.database(&db).collection::<Document>("transactions");

    // The create lands; its answer says the write concern was not met.
    fail_once(
        &admin,
        &app_name,
        doc! {
            "failCommands": ["findAndModify"],
            "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" },
        },
    )
    .await;
    let watcher = async {
        // Reads until the first create has landed, then has the next one refused.
        let mut reads = 0;
        while records.find_one(doc! {}).await.unwrap().is_none() {
            reads += 1;
            assert!(reads < 10_000, "the first create never landed");
        }
        fail_once(
            &admin,
            &app_name,
            doc! { "failCommands": ["findAndModify"], "errorCode": 10334 },
        )
        .await;
    };
    let debit = Transaction::new().change(
        DocumentChange::update(accounts.clone(), "A")
            .inc("balance", -1_i64)
            .require_gte("balance", 1_i64),
    );
    let (answer, ()) = tokio::join!(coordinator.run(debit), watcher);
    off(&admin).await;
    let record = records
        .find_one(doc! {})
        .await
        .unwrap()
        .expect("the first create's record");

    // Past the record's lease (by the server's clock), recovery rolls
    // pending transactions forward.
    let deadline = record
        .get_datetime("leaseStart")
        .unwrap()
        .timestamp_millis()
        + 2 * i64::try_from(lease.as_millis()).unwrap();
    common::wait_for_server_time(&store, deadline).await;
    let report = coordinator
        .recovery(RecoveryConfig {
            pending: PendingPolicy::RollForward,
            ..RecoveryConfig::default()
        })
        .run_once()
        .await
        .unwrap();
    let balance = store
        .find_one(&accounts, doc! { "_id": "A" })
        .await
        .unwrap()
        .expect("the account")
        .get_i64("balance")
        .unwrap();
    let state = records
        .find_one(doc! {})
        .await
        .unwrap()
        .and_then(|r| r.get_str("state").ok().map(str::to_owned));
    admin.database(&db).drop().await.unwrap();
    coordinator.shutdown().await;

    match &answer {
        Err(TxError::Canceled { .. }) => assert_eq!(
            balance, 10,
            "answered canceled, yet the debit was made (record {state:?}, {report:?}): {answer:?}"
        ),
        Err(TxError::Interrupted { .. }) => {}
        other => panic!("neither canceled nor in doubt: {other:?}"),
    }
}
