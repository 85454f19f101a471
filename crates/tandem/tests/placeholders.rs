//! Placeholders of inserts (`_tandem.ghost`): an insert reserves its `_id`
//! with an upsert, which cannot be fenced by time, so a reservation that
//! reaches the store after its transaction ended leaves a placeholder no
//! transaction fills. It carries the store's time of the reservation and
//! expires: typed reads stop counting it as in flight, `put` replaces it,
//! `Coordinator::collect_placeholders` (and on MongoDB a TTL index) removes it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use common::*;
use serde::{Deserialize, Serialize};
use tandem::testing::FaultStore;
use tandem::{
    participant, Coordinator, DocumentChange, Namespace, RecoveryConfig, RetryPolicy, StepError,
    Store, Strategy, Transaction, TxError,
};

#[participant(collection = "ledger")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Entry {
    #[serde(rename = "_id")]
    id: String,
    amount: i64,
}

fn ledger() -> Namespace {
    Namespace::new("bank", "ledger")
}

/// Found by an adversarial review: T1 reserves X and stalls at its fill;
/// T2, inserting X too, is refused while preparing and removes X's unfilled
/// placeholder as it gives its reservations back; T1's fill finds nothing,
/// checks the clock, and stalls again right before reserving X anew;
/// recovery rolls T1 back (nothing at X to undo); then the reservation
/// lands. Nothing will fill that placeholder. Before it carried its time it
/// stayed for good: `in_flight` said true and `put` refused X forever, and a
/// plain insert of X failed.
#[tokio::test]
async fn a_placeholder_left_by_a_late_reservation_expires() {
    let (store, clock, _) = bank(&["A"], 100).await;
    let docs = FaultStore::new(Arc::new(store.clone()));
    let lease = Duration::from_secs(10);
    let coordinator = Coordinator::builder(store.clone())
        .database("bank")
        .lease(lease)
        .retry(RetryPolicy::NONE)
        .strategy(Strategy::TwoPhase)
        .store("docs", docs.clone())
        .build();
    // T1: a ledger entry X and a debit of A; it stops at its fill (op 2 on "docs").
    let t1 = Transaction::new()
        .change(DocumentChange::insert(ledger(), "X", doc! { "amount": 5_i64 }).in_store("docs"))
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -5_i64)
                .require_gte("balance", 5_i64),
        );
    let fill = docs.pause_at(2);
    let running = coordinator.clone();
    let owner = tokio::spawn(async move { running.run(t1).await });
    fill.reached.await.unwrap();
    assert!(get(&store, &ledger(), "X").await.is_some(), "T1 reserved X");

    // T2 inserts X too and is refused while preparing (an exclusive change
    // of a missing document); giving back its reservations, it removes X's
    // placeholder (ops 3 to 5 on "docs").
    let t2 = Transaction::new()
        .change(DocumentChange::insert(ledger(), "X", doc! { "amount": 7_i64 }).in_store("docs"))
        .change(DocumentChange::update(accounts(), "Z").set("state", "x"));
    assert!(coordinator.run(t2).await.is_err());
    assert!(get(&store, &ledger(), "X").await.is_none());

    // T1's fill matches nothing (op 2), it looks (ops 6 to 8), reads the
    // clock (op 9), and stops right before reserving X again (op 10).
    let reserve = docs.pause_at(10);
    fill.release.send(()).unwrap();
    reserve.reached.await.unwrap();
    clock.advance(lease + Duration::from_secs(3));
    let worker = coordinator.recovery(RecoveryConfig::default());
    assert_eq!(worker.run_once().await.unwrap().canceled, 1);
    reserve.release.send(()).unwrap();
    assert!(owner.await.unwrap().is_err());
    coordinator.drain().await;
    assert_eq!(balance(&store, "A").await, 100);

    // What the late reservation left: a placeholder, with its time.
    let left = get(&store, &ledger(), "X")
        .await
        .expect("a placeholder at X");
    let meta = left.get_document("_tandem").unwrap();
    assert_eq!(meta.get_bool("ghost"), Ok(true), "{left}");
    assert!(meta.get_datetime("reservedAt").is_ok(), "{left}");
    let reader = Coordinator::builder(store.clone())
        .database("bank")
        .lease(lease)
        .build();
    assert!(reader.in_flight::<Entry, _>("X").await.unwrap(), "young");
    let refused = reader
        .put(&Entry {
            id: "X".into(),
            amount: 1,
        })
        .await;
    assert_eq!(refused.unwrap_err().kind, tandem::StoreErrorKind::InFlight);

    // Past the lease plus the margin, no insert would fill it any more.
    clock.advance(lease + Duration::from_secs(2));
    assert!(
        !reader.in_flight::<Entry, _>("X").await.unwrap(),
        "left behind"
    );
    assert_eq!(reader.get_settled::<Entry, _>("X").await.unwrap(), None);
    reader
        .put(&Entry {
            id: "X".into(),
            amount: 1,
        })
        .await
        .unwrap();
    assert_eq!(
        reader.get::<Entry, _>("X").await.unwrap(),
        Some(Entry {
            id: "X".into(),
            amount: 1
        })
    );
}

/// `collect_placeholders` removes the placeholders older than the lease
/// plus the margin, and nothing else: not a young placeholder, not a
/// document.
#[tokio::test]
async fn collect_placeholders_removes_only_old_placeholders() {
    let (store, clock, _) = bank(&["A"], 100).await;
    let now = store.now().await.unwrap().timestamp_millis();
    let at = |ms: i64| bson::DateTime::from_millis(now - ms);
    for (id, reserved) in [("old", at(40_000)), ("young", at(5_000))] {
        store
            .insert_one(
                &ledger(),
                doc! { "_id": id, "_tandem": { "ghost": true, "reservedAt": reserved } },
            )
            .await
            .unwrap();
    }
    store
        .insert_one(&ledger(), doc! { "_id": "entry", "amount": 3_i64 })
        .await
        .unwrap();
    let coordinator = Coordinator::builder(store.clone()).database("bank").build();
    assert_eq!(
        coordinator
            .collect_placeholders(None, &ledger())
            .await
            .unwrap(),
        1
    );
    let ids: Vec<String> = store
        .documents(&ledger())
        .iter()
        .map(|d| d.get_str("_id").unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["entry", "young"]);
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        coordinator
            .collect_placeholders(None, &ledger())
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.documents(&ledger()).len(), 1);
}

/// An insert of an `_id` a document has is refused, and the reservation
/// adds nothing to that document (its time stamp is for placeholders only).
#[tokio::test]
async fn an_insert_over_a_document_leaves_it_as_it_was() {
    let (store, _, _) = bank(&["A"], 100).await;
    store
        .insert_one(&ledger(), doc! { "_id": "X", "amount": 3_i64 })
        .await
        .unwrap();
    let before = get(&store, &ledger(), "X").await.unwrap();
    let refused = Coordinator::new(store.clone())
        .run(
            Transaction::new()
                .change(DocumentChange::insert(
                    ledger(),
                    "X",
                    doc! { "amount": 9_i64 },
                ))
                .change(DocumentChange::update(accounts(), "A").inc("balance", 1_i64)),
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(TxError::Canceled {
                cause: StepError::AlreadyExists { .. },
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(get(&store, &ledger(), "X").await, Some(before));
    assert_eq!(balance(&store, "A").await, 100);
}

/// Found by an adversarial review: a transaction refused when its record
/// could not be written (its caller-chosen id taken: `Duplicate`, "this one
/// wrote nothing") left the placeholder its insert reserved while
/// preparing, until it expired. It gives the `_id` back, as a refusal
/// before the record does.
#[tokio::test]
async fn a_duplicate_answer_gives_back_the_placeholders_it_reserved() {
    let (store, _, _) = bank(&["A"], 1000).await;
    let coordinator = Coordinator::builder(store.clone())
        .commit_point(tandem::CommitPoint::Done)
        .build();
    let pay = |amount: i64| {
        Transaction::with_id("pay-1")
            .change(
                DocumentChange::update(accounts(), "A")
                    .inc("balance", -amount)
                    .require_gte("balance", amount),
            )
            .change(DocumentChange::insert(
                ledger(),
                "entry-pay-1",
                doc! { "amount": amount },
            ))
    };
    // Refused by its guard: the insert is undone, the id stays taken.
    let first = coordinator.run(pay(5000)).await;
    assert!(matches!(first, Err(TxError::Canceled { .. })), "{first:?}");
    let again = coordinator.run(pay(5000)).await;
    assert!(matches!(again, Err(TxError::Duplicate { .. })), "{again:?}");
    assert_eq!(get(&store, &ledger(), "entry-pay-1").await, None);
}

/// A placeholder written by a version that did not stamp placeholders
/// (`{_tandem: {ghost: true}}`, no `reservedAt`: what a coordinator of that
/// version left when it crashed between reserving and writing its record)
/// expires too (found by an adversarial review: every expiry path filtered on
/// the stamp, so it blocked its `_id` for good). The first collection stamps
/// it; one a lease plus the margin later removes it, and `put` then writes.
#[tokio::test]
async fn a_placeholder_of_an_older_version_expires() {
    let (store, clock, _) = bank(&["A"], 100).await;
    store
        .insert_one(&ledger(), doc! { "_id": "X", "_tandem": { "ghost": true } })
        .await
        .unwrap();
    let lease = Duration::from_secs(10);
    let reader = Coordinator::builder(store.clone())
        .database("bank")
        .lease(lease)
        .build();
    clock.advance(Duration::from_secs(24 * 3600));
    assert_eq!(
        reader.collect_placeholders(None, &ledger()).await.unwrap(),
        0,
        "stamped now, not removed: an older coordinator may still fill it"
    );
    let stamped = get(&store, &ledger(), "X").await.expect("still there");
    assert!(
        stamped
            .get_document("_tandem")
            .unwrap()
            .get_datetime("reservedAt")
            .is_ok(),
        "{stamped}"
    );
    assert!(reader.in_flight::<Entry, _>("X").await.unwrap());
    clock.advance(lease + Duration::from_secs(10));
    assert!(!reader.in_flight::<Entry, _>("X").await.unwrap());
    assert_eq!(
        reader.collect_placeholders(None, &ledger()).await.unwrap(),
        1
    );
    reader
        .put(&Entry {
            id: "X".into(),
            amount: 1,
        })
        .await
        .expect("the _id is free");
    assert_eq!(
        get(&store, &ledger(), "X").await,
        Some(doc! { "_id": "X", "amount": 1_i64 })
    );
}
