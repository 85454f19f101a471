//! A client built elsewhere keeps the driver's retryable writes
//! (`MongoStore::new`): the driver sends a write again on its own after a
//! network error, and the store sees one answer. The server de-duplicates
//! a retryable write by its session and transaction number, so the first
//! copy, still on its way when the second one was answered, does nothing.

mod common;

use std::time::Duration;

use bson::doc;
use tandem::store::{Namespace, Store};
use tandem::testing::LosingProxy;
use tandem::{CommitPoint, Coordinator, DocumentChange, Transaction};
use tandem_mongodb::MongoStore;

/// The apply's first copy is held (its connection closed at once); the
/// driver sends it again, which lands and is answered; the coordinator,
/// which heard of no failure, clears the marker at once; then the first
/// copy reaches the server. The debit is made once.
#[tokio::test]
async fn an_apply_the_driver_sent_again_lands_once() {
    let Some(uri) = common::mongodb_uri() else {
        return;
    };
    let Some(host) = common::single_host(&uri) else {
        println!("skipped: the proxy needs a single-host MONGODB_URI");
        return;
    };
    let proxy = LosingProxy::start(host).await.expect("start the proxy");
    let db = common::unique_name("driver_retry");
    let accounts = Namespace::new(&db, "accounts");
    let records = MongoStore::builder()
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&uri)
        .await
        .expect("connect");
    let client = mongodb::Client::with_uri_str(format!(
        "mongodb://127.0.0.1:{}/?directConnection=true&retryWrites=true&heartbeatFrequencyMS=500&serverSelectionTimeoutMS=10000",
        proxy.port()
    ))
    .await
    .expect("a client through the proxy");
    let via_proxy = MongoStore::new(client);
    records
        .insert_one(&accounts, doc! { "_id": "A", "balance": 10_i64 })
        .await
        .unwrap();
    let coordinator = Coordinator::builder(records.clone())
        .store("held", via_proxy)
        .database(&db)
        .lease(Duration::from_secs(3))
        .clock_margin(Duration::from_millis(200))
        .commit_point(CommitPoint::Done)
        .build();
    coordinator
        .run(Transaction::new().change(
            DocumentChange::insert(Namespace::new(&db, "warm_up"), "w", doc! {}).in_store("held"),
        ))
        .await
        .expect("the warm-up commits");
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
        .await;
    proxy.all_delivered().await;
    let account = records
        .find_one(&accounts, doc! { "_id": "A" })
        .await
        .unwrap()
        .expect("the account");
    records.client().database(&db).drop().await.unwrap();
    coordinator.shutdown().await;
    assert_eq!(proxy.counts().0, 1, "the apply was held: {receipt:?}");
    assert_eq!(
        account.get_i64("balance").unwrap(),
        9,
        "debited exactly once ({receipt:?}): {account}"
    );
}
