//! `put` and `insert_now` write a document outside any transaction: what
//! they write must not carry tandem's own fields. A struct may still read
//! them, through a flattened struct that flattens a map in turn (the
//! attribute sees only the outer struct); written back, a stale
//! `_tandem.lock` would hold the document for a transaction long finished.

use std::sync::Arc;

use bson::{doc, Document};
use serde::{Deserialize, Serialize};
use tandem::testing::FaultStore;
use tandem::{
    participant, CommitPoint, Coordinator, MemoryStore, Store, StoreErrorKind, Transaction,
};

/// Fields other clients add, kept across a read and a write.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Extra {
    #[serde(flatten)]
    rest: Document,
}

#[participant(collection = "accounts")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
    #[serde(flatten)]
    extra: Extra,
}

/// A snapshot read while a transaction held the account, put back once it
/// finished: the account must stay usable.
#[tokio::test]
async fn a_put_does_not_write_back_tandems_own_fields() {
    let store = MemoryStore::new();
    let c = Coordinator::builder(store.clone())
        .database("bank")
        .commit_point(CommitPoint::Done)
        .build();
    let a = Account {
        id: "a".into(),
        balance: 100,
        extra: Extra::default(),
    };
    Account::insert_now(&c, &a).await.unwrap();

    // T1: 1 the record's create, 2 the apply, 3 the commit (paused).
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let pause = faulty.pause_at(5);
    let t1 = Coordinator::builder(faulty)
        .database("bank")
        .commit_point(CommitPoint::Done)
        .build();
    let run = tokio::spawn(async move {
        t1.run(Transaction::new().change(Account::change("a").set_balance(90)))
            .await
    });
    pause.reached.await.unwrap();
    let snapshot = Account::get(&c, "a").await.unwrap().unwrap();
    pause.release.send(()).unwrap();
    run.await.unwrap().unwrap();
    c.drain().await;
    assert!(!Account::in_flight(&c, "a").await.unwrap());

    // Reset the account from the snapshot, outside any transaction.
    let put = Account::put(&c, &snapshot).await;
    let stored = store
        .find_one(&c.namespace_of::<Account>(), doc! { "_id": "a" })
        .await
        .unwrap()
        .unwrap();
    let still_held = Account::in_flight(&c, "a").await.unwrap();
    let next = c
        .run(Transaction::new().change(Account::change("a").inc_balance(5)))
        .await;
    match put {
        // Refused: nothing written.
        Err(e) => {
            assert_eq!(e.kind, StoreErrorKind::BadRequest, "{e}");
            assert_eq!(stored.get_i64("balance").unwrap(), 90);
        }
        // Written: without tandem's own fields.
        Ok(()) => assert!(!stored.contains_key("_tandem"), "{stored:?}"),
    }
    assert!(!still_held, "{stored:?}");
    assert!(next.is_ok(), "{next:?}");
}

/// `insert_now` of a document carrying tandem's own fields must not leave
/// the new account held by a transaction that never ran.
#[tokio::test]
async fn insert_now_does_not_write_tandems_own_fields() {
    let store = MemoryStore::new();
    let c = Coordinator::builder(store.clone())
        .database("bank")
        .commit_point(CommitPoint::Done)
        .build();
    let a = Account {
        id: "a".into(),
        balance: 100,
        extra: Extra {
            rest: doc! { "_tandem": { "lock": "t-1#0123456789ab", "pending": 1 } },
        },
    };
    // The insert of a transaction refuses it.
    let in_tx = c.run(Transaction::new().change(a.insert())).await;
    assert!(in_tx.is_err(), "{in_tx:?}");
    let now = Account::insert_now(&c, &a).await;
    let stored = store
        .find_one(&c.namespace_of::<Account>(), doc! { "_id": "a" })
        .await
        .unwrap();
    let held = Account::in_flight(&c, "a").await.unwrap();
    let next = c
        .run(Transaction::new().change(Account::change("a").inc_balance(5)))
        .await;
    match now {
        Err(e) => {
            assert_eq!(e.kind, StoreErrorKind::BadRequest, "{e}");
            assert_eq!(stored, None);
        }
        Ok(()) => {
            let stored = stored.unwrap();
            assert!(!stored.contains_key("_tandem"), "{stored:?}");
            assert!(!held, "{stored:?}");
            assert!(next.is_ok(), "{next:?}");
        }
    }
}
