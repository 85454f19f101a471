//! An apply that landed but was answered with a write concern error: the
//! coordinator's answer and what recovery then finishes agree with the
//! balances: code 64 (a `wtimeout`, transient) is repeated and found
//! landed; code 100 (outcome unknown, not repeated) cancels, and the undo
//! waits for the deadline.
//!
//! Failpoints are global to the server: this test must not run beside
//! another that arms or clears them (the suite runs test binaries one
//! after another).

mod common;

use std::time::Duration;

use bson::{doc, Document};
use tandem::config::RecoveryConfig;
use tandem::store::{Namespace, Store};
use tandem::{CommitPoint, Coordinator, DocumentChange, RetryPolicy, Transaction, TxError};
use tandem_mongodb::MongoStore;

#[tokio::test]
async fn an_apply_answered_with_a_write_concern_error_is_never_half_done() {
    let Some(uri) = common::mongodb_uri() else {
        return;
    };
    let admin = mongodb::Client::with_uri_str(&uri).await.unwrap();
    for code in [64_i32, 100] {
        let app_name = common::unique_name("apply_wce");
        let db = app_name.clone();
        let store = MongoStore::builder()
            .app_name(app_name.clone())
            .server_selection_timeout(Duration::from_secs(10))
            .connect(&common::with_options(&uri, "heartbeatFrequencyMS=500"))
            .await
            .unwrap();
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
            .retry(RetryPolicy {
                max_attempts: 4,
                base_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(50),
                budget: Duration::from_secs(5),
            })
            .build();
        // The first `update` after the record's create (a `findAndModify`):
        // the apply.
        let data = doc! {
            "failCommands": ["update"],
            "writeConcernError": { "code": code, "errmsg": "not acknowledged as asked" },
            "appName": app_name.as_str(),
        };
        common::fail_command(&admin, 1, data).await;
        let started = store.now().await.unwrap();
        let answer = coordinator
            .run(
                Transaction::new().change(
                    DocumentChange::update(accounts.clone(), "A")
                        .inc("balance", -1_i64)
                        .require_gte("balance", 1_i64),
                ),
            )
            .await;
        common::fail_command_off(&admin).await;
        // Past every deadline, recovery finishes what was left.
        let until = started.timestamp_millis() + 3 * i64::try_from(lease.as_millis()).unwrap();
        common::wait_for_server_time(&store, until).await;
        let report = coordinator
            .recovery(RecoveryConfig::default())
            .run_once()
            .await
            .unwrap();
        let account: Document = store
            .find_one(&accounts, doc! { "_id": "A" })
            .await
            .unwrap()
            .expect("A");
        store.client().database(&db).drop().await.unwrap();
        coordinator.shutdown().await;
        let balance = account.get_i64("balance").unwrap();
        let markers = account
            .get_array("pendingTransactions")
            .map(|m| m.len())
            .unwrap_or(0);
        assert_eq!(markers, 0, "WCE {code}: {account} ({report:?}, {answer:?})");
        match &answer {
            Ok(_) => assert_eq!(balance, 9, "WCE {code}: {answer:?} {report:?}"),
            Err(TxError::Canceled { .. }) => {
                assert_eq!(balance, 10, "WCE {code}: {answer:?} {report:?}")
            }
            Err(_) => assert!(balance == 9 || balance == 10),
        }
        println!("WCE {code}: {answer:?} -> balance {balance}, {report:?}");
    }
}
