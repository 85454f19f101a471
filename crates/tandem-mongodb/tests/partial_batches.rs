//! A request of several single-document updates (`update_each`: one
//! `update` command, `ordered: false`) that the server answers `ok: 1` with
//! a write error for some statements: the others landed.

mod common;

use std::time::Duration;

use bson::doc;
use tandem::store::{Namespace, Store};
use tandem::{CommitPoint, Coordinator, DocumentChange, Transaction, TxError};
use tandem_mongodb::MongoStore;

/// One `update` carries both applies (`ordered: false`); the server applies
/// the debit and refuses the credit (a string balance), answering `ok: 1`
/// with a write error for the credit alone. The refusal is the credit's:
/// the debit, which landed in the same request, is undone before the
/// answer, and no marker is left.
#[tokio::test]
async fn a_batched_apply_refused_in_part_is_undone_whole() {
    let Some(uri) = common::mongodb_uri() else {
        return;
    };
    let db = common::unique_name("partial");
    let store = MongoStore::builder()
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&uri)
        .await
        .unwrap();
    let accounts = Namespace::new(&db, "accounts");
    store
        .insert_one(&accounts, doc! { "_id": "A", "balance": 10_i64 })
        .await
        .unwrap();
    store
        .insert_one(&accounts, doc! { "_id": "B", "balance": "ten" })
        .await
        .unwrap();
    let coordinator = Coordinator::builder(store.clone())
        .database(&db)
        .commit_point(CommitPoint::Done)
        .build();
    let before = store.metrics();
    let answer = coordinator
        .run(
            Transaction::new()
                .change(
                    DocumentChange::update(accounts.clone(), "A")
                        .inc("balance", -5_i64)
                        .require_gte("balance", 5_i64),
                )
                .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 5_i64)),
        )
        .await;
    let after = store.metrics();
    let a = store
        .find_one(&accounts, doc! { "_id": "A" })
        .await
        .unwrap()
        .expect("A");
    store.client().database(&db).drop().await.unwrap();
    coordinator.shutdown().await;
    assert!(
        after.update_each > before.update_each,
        "one request for both applies"
    );
    assert!(
        matches!(answer, Err(TxError::Canceled { undone: true, .. })),
        "{answer:?}"
    );
    assert_eq!(a.get_i64("balance").unwrap(), 10, "{a}");
    let markers = a
        .get_array("pendingTransactions")
        .map(|m| m.len())
        .unwrap_or(0);
    assert_eq!(markers, 0, "{a}");
}
