//! `MongoStore::metrics` counts every command the store sends, native
//! transactions' included (`Strategy::Auto` runs every one-store
//! transaction natively).

mod common;

use bson::doc;
use common::TestDb;
use tandem::store::Store;
use tandem::{Coordinator, DocumentChange, Strategy, Transaction};

#[tokio::test]
async fn a_native_transaction_is_counted() {
    let Some(t) = TestDb::new("native_metrics").await else {
        return;
    };
    let ns = t.ns("accounts");
    for id in ["A", "B"] {
        t.store
            .insert_one(&ns, doc! { "_id": id, "balance": 10_i64 })
            .await
            .unwrap();
    }
    let coordinator = Coordinator::builder(t.store.clone())
        .database(&t.db)
        .strategy(Strategy::Native)
        .build();
    let before = t.store.metrics();
    coordinator
        .run(
            Transaction::new()
                .change(DocumentChange::update(ns.clone(), "A").inc("balance", -1_i64))
                .change(DocumentChange::update(ns.clone(), "B").inc("balance", 1_i64)),
        )
        .await
        .expect("the transfer commits");
    let after = t.store.metrics();
    // Two `update`s and a `commitTransaction` were sent, and nothing else.
    assert_eq!(after.update_one - before.update_one, 2, "{after:?}");
    assert_eq!(
        after.commit_transaction - before.commit_transaction,
        1,
        "{after:?}"
    );
    assert_eq!(after.total - before.total, 3, "{before:?} -> {after:?}");
    assert_eq!(
        after.write_statements - before.write_statements,
        2,
        "{before:?} -> {after:?}"
    );
    assert_eq!(after.failures, before.failures);
    t.drop().await;
    coordinator.shutdown().await;
}
