//! A request whose answer is lost while the request itself is still on its way.
//!
//! Between the coordinator and the server sits a TCP proxy (`tandem::testing::LosingProxy`) that can hold one
//! request: it closes the client's connection at once (the client sees a
//! network error, an unknown outcome) and delivers the request to the server
//! later. That is what a slow network or a failover does to a request in
//! flight, and it is the case the protocol's apply deadline and the
//! coordinator's doubt exist for.
//!
//! An apply that is repeated after such an error may succeed while its first
//! copy is still on its way. If the marker were then removed at once, the
//! first copy would find no marker and apply the change a second time. A store
//! that repeated the request on its own (as `MongoStore` once did) hid the
//! first copy from the coordinator, which then cleared at once: the debit
//! below landed twice.

mod common;

use std::time::Duration;

use bson::doc;
use tandem::config::RecoveryConfig;
use tandem::store::{Namespace, Store};
use tandem::testing::LosingProxy;
use tandem::{CommitPoint, Coordinator, DocumentChange, Transaction, TxState};
use tandem_mongodb::MongoStore;

#[tokio::test]
async fn an_apply_whose_answer_was_lost_lands_at_most_once() {
    let Some(uri) = common::mongodb_uri() else {
        return;
    };
    let Some(host) = common::single_host(&uri) else {
        println!("skipped: the proxy needs a single-host MONGODB_URI");
        return;
    };
    let proxy = LosingProxy::start(host).await.expect("start the proxy");
    let db = common::unique_name("lost");
    let collection = format!("held_{}", std::process::id());
    let accounts = Namespace::new(&db, &collection);
    // Records go straight to the server; the account goes through the proxy.
    let records = MongoStore::builder()
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&uri)
        .await
        .expect("connect");
    let via_proxy = MongoStore::builder()
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&format!(
            "mongodb://127.0.0.1:{}/?directConnection=true&retryWrites=false&heartbeatFrequencyMS=500",
            proxy.port()
        ))
        .await
        .expect("connect through the proxy");
    records
        .insert_one(&accounts, doc! { "_id": "A", "balance": 10_i64 })
        .await
        .unwrap();
    let lease = Duration::from_secs(3);
    let coordinator = Coordinator::builder(records.clone())
        .store("held", via_proxy)
        .database(&db)
        .lease(lease)
        .clock_margin(Duration::from_millis(200))
        .commit_point(CommitPoint::Done)
        .build();

    // A first transaction on the store reads its identity (an upsert, once
    // per process), so that the write held below is the apply.
    coordinator
        .run(Transaction::new().change(
            DocumentChange::insert(Namespace::new(&db, "warm_up"), "w", doc! {}).in_store("held"),
        ))
        .await
        .expect("the warm-up commits");
    let started = records.now().await.unwrap();
    // Only the account's store goes through the proxy: its next write (the
    // apply) is held for a second.
    proxy.arm(1, Duration::from_secs(1));
    let receipt = coordinator
        .run(
            Transaction::new().change(
                DocumentChange::update(accounts.clone(), "A")
                    .in_store("held")
                    .inc("balance", -1_i64)
                    .require_gte("balance", 1_i64),
            ),
        )
        .await
        .expect("the debit commits");
    // The apply was repeated after its answer was lost, so its first copy may
    // still land until the deadline: the marker stays until then, and the
    // coordinator leaves the clearing to recovery.
    assert_eq!(receipt.state, TxState::Applied);
    assert_eq!(proxy.counts().0, 1, "the apply was held");

    // Once the held copy has reached the server, it has done all it can.
    proxy.all_delivered().await;
    let balance = |account: &bson::Document| account.get_i64("balance").unwrap();
    let account = records
        .find_one(&accounts, doc! { "_id": "A" })
        .await
        .unwrap()
        .expect("the account");
    assert_eq!(balance(&account), 9, "debited exactly once: {account}");

    // Past the deadline (by the server's clock), recovery finishes the debit.
    let deadline = started.timestamp_millis() + 2 * i64::try_from(lease.as_millis()).unwrap();
    common::wait_for_server_time(&records, deadline).await;
    let report = coordinator
        .recovery(RecoveryConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.committed, 1, "{report:?}");
    let account = records
        .find_one(&accounts, doc! { "_id": "A" })
        .await
        .unwrap()
        .expect("the account");
    assert_eq!(balance(&account), 9, "debited exactly once: {account}");
    assert_eq!(
        account.get_array("pendingTransactions").unwrap().len(),
        0,
        "no marker left: {account}"
    );
    records.client().database(&db).drop().await.unwrap();
    coordinator.shutdown().await;
}
