//! A store name must mean the same database in every process that shares
//! the records. The record keeps, for each document change in a named
//! store, the identity of that store (`storeUid`, a random value kept in the
//! store's `tandem_store` collection); a process whose store under that
//! name is another database does not drive the record. Before, it claimed
//! it, found no marker in its own "ledger", and rolled back a transaction
//! its coordinator had answered committed: the credit on the default store
//! undone, the debit in the real ledger kept, with its marker for good.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use common::*;
use tandem::testing::FaultStore;
use tandem::{
    Coordinator, DocumentChange, ManualClock, MemoryStore, RecoveryConfig, Store, Transaction,
    TxError, TxState,
};

const LEASE: Duration = Duration::from_secs(10);

/// A ledger store on its own clock, holding account Z with 1000.
async fn ledger(clock: &Arc<ManualClock>) -> MemoryStore {
    let store = MemoryStore::with_clock(clock.clone());
    store
        .insert_one(
            &accounts(),
            doc! { "_id": "Z", "balance": 1000_i64, "pendingTransactions": [] },
        )
        .await
        .unwrap();
    store
}

/// 100 from Z in the store "ledger" to A in the default store.
fn ledger_to_a() -> Transaction {
    Transaction::new()
        .change(
            DocumentChange::update(accounts(), "Z")
                .in_store("ledger")
                .inc("balance", -100_i64)
                .require_gte("balance", 100_i64),
        )
        .change(DocumentChange::update(accounts(), "A").inc("balance", 100_i64))
}

/// Whether Z holds no marker and nothing pending.
async fn z_is_clean(store: &MemoryStore) -> bool {
    let z = get(store, &accounts(), "Z").await.unwrap();
    let markers = z.get_array("pendingTransactions").map_or(0, |a| a.len());
    let pending = z
        .get_document("_tandem")
        .ok()
        .and_then(|t| t.get("pending"))
        .map_or(0, |p| {
            p.as_i64().or(p.as_i32().map(i64::from)).unwrap_or(-1)
        });
    markers == 0 && pending == 0
}

/// Runs the transfer with a records store that crashes after two
/// operations (the record's create, then the apply on A): committed at its
/// applies, the record left `pending` for recovery.
async fn committed_and_left(
    records_store: &MemoryStore,
    ledger: &MemoryStore,
) -> Result<tandem::Receipt, TxError> {
    let app = Coordinator::builder(FaultStore::new(Arc::new(records_store.clone())).crash_after(2))
        .store("ledger", ledger.clone())
        .lease(LEASE)
        .build();
    let answer = app.run(ledger_to_a()).await;
    app.drain().await;
    answer
}

fn record_state(store: &MemoryStore) -> Vec<TxState> {
    store
        .documents(&records())
        .iter()
        .map(|d| d.get_str("state").unwrap().parse().unwrap())
        .collect()
}

/// The reproduction: another application shares the records collection
/// but registered "ledger" as another database. Its recovery leaves the
/// record alone (before, it rolled back the committed transfer); a worker
/// whose "ledger" is the real one then finishes it.
#[tokio::test]
async fn a_store_name_meaning_another_cluster_in_another_application() {
    let (r, rc, _) = bank(&["A", "B"], 1000).await;
    let qc = Arc::new(ManualClock::default());
    let q = ledger(&qc).await;
    let other = ledger(&qc).await;
    let answer = committed_and_left(&r, &q).await;
    assert!(answer.is_ok(), "committed: {answer:?}");
    assert_eq!(record_state(&r), [TxState::Pending]);

    let app2 = Coordinator::builder(r.clone())
        .store("ledger", other.clone())
        .lease(LEASE)
        .build()
        .recovery(RecoveryConfig::default());
    for _ in 0..4 {
        rc.advance(Duration::from_secs(600));
        qc.advance(Duration::from_secs(600));
        let report = app2.run_once().await.unwrap();
        assert_eq!((report.claimed, report.failed), (0, 1), "{report:?}");
    }
    // The committed transfer stands: the debit made, the credit still held
    // (a credit lands when its marker is cleared), nothing rolled back.
    assert_eq!(record_state(&r), [TxState::Pending], "not claimed");
    assert_eq!(
        (balance(&r, "A").await, balance(&q, "Z").await),
        (1000, 900)
    );
    let a = get(&r, &accounts(), "A").await.unwrap();
    assert_eq!(
        a.get_document("_tandem")
            .and_then(|t| t.get_document("credit"))
            .and_then(|c| c.get_i64("balance")),
        Ok(100),
        "{a:?}"
    );
    assert_eq!(balance(&other, "Z").await, 1000);

    // An operator's cancel from that application is refused as well.
    let id = r.documents(&records())[0]
        .get_str("_id")
        .unwrap()
        .to_owned();
    let canceled = app2.cancel(&tandem::TxId::new(id).unwrap(), "test").await;
    assert!(
        matches!(
            canceled,
            Err(TxError::Invalid(tandem::ChangeError::ForeignStore { .. }))
        ),
        "{canceled:?}"
    );
    assert_eq!(record_state(&r), [TxState::Pending]);

    // A worker with the real "ledger" finishes it.
    let right = Coordinator::builder(r.clone())
        .store("ledger", q.clone())
        .lease(LEASE)
        .build()
        .recovery(RecoveryConfig::default());
    rc.advance(Duration::from_secs(600));
    qc.advance(Duration::from_secs(600));
    for _ in 0..4 {
        right.run_once().await.unwrap();
        rc.advance(Duration::from_secs(600));
        qc.advance(Duration::from_secs(600));
    }
    assert_eq!(record_state(&r), [TxState::Done]);
    assert_eq!(
        (balance(&r, "A").await, balance(&q, "Z").await),
        (1100, 900)
    );
    assert!(
        z_is_clean(&q).await,
        "{:?}",
        get(&q, &accounts(), "Z").await
    );
}

/// A record written before store identities (no `storeUid`) is driven as
/// before, by whichever store the name means here.
#[tokio::test]
async fn an_entry_without_an_identity_is_still_driven() {
    let (r, rc, _) = bank(&["A", "B"], 1000).await;
    let qc = Arc::new(ManualClock::default());
    let q = ledger(&qc).await;
    let answer = committed_and_left(&r, &q).await;
    assert!(answer.is_ok(), "committed: {answer:?}");
    // As an older version wrote it.
    let mut record = r.documents(&records()).remove(0);
    let mut participants = record.get_array("participants").unwrap().clone();
    let mut had = 0;
    for p in &mut participants {
        let p = p.as_document_mut().unwrap();
        had += usize::from(p.remove("storeUid").is_some());
    }
    assert_eq!(
        had, 1,
        "the ledger participant recorded its store's identity"
    );
    record.insert("participants", participants);
    let id = record.get_str("_id").unwrap().to_owned();
    r.replace_one(&records(), doc! { "_id": &id }, record)
        .await
        .unwrap();

    let worker = Coordinator::builder(r.clone())
        .store("ledger", q.clone())
        .lease(LEASE)
        .build()
        .recovery(RecoveryConfig::default());
    for _ in 0..4 {
        rc.advance(Duration::from_secs(600));
        qc.advance(Duration::from_secs(600));
        worker.run_once().await.unwrap();
    }
    assert_eq!(record_state(&r), [TxState::Done]);
    assert_eq!(
        (balance(&r, "A").await, balance(&q, "Z").await),
        (1100, 900)
    );
    assert!(z_is_clean(&q).await);
}

/// A store's identity is read once per process: the second transaction
/// sends the ledger store no more requests than a transaction needs, and a
/// transaction on the default store alone sends none.
#[tokio::test]
async fn the_identity_is_read_once_per_process() {
    let (r, _, _) = bank(&["A", "B"], 1000).await;
    let qc = Arc::new(ManualClock::default());
    let q = ledger(&qc).await;
    let counted = FaultStore::new(Arc::new(q.clone()));
    let app = Coordinator::builder(r.clone())
        .store("ledger", counted.clone())
        .lease(LEASE)
        .build();
    app.run(transfer("A", "B", 1)).await.unwrap();
    app.drain().await;
    assert_eq!(counted.ops(), 0, "a transfer on the default store alone");

    let mut sent = Vec::new();
    for _ in 0..3 {
        let before = counted.ops();
        app.run(ledger_to_a()).await.unwrap();
        app.drain().await;
        sent.push(counted.ops() - before);
    }
    assert_eq!(
        sent[0],
        sent[1] + 1,
        "one request for the identity: {sent:?}"
    );
    assert_eq!(sent[1], sent[2], "{sent:?}");
    let identity = q
        .documents(&tandem::Namespace::new("tandem", "tandem_store"))
        .clone();
    assert_eq!(identity.len(), 1, "{identity:?}");
    let uid = identity[0].get_str("uid").unwrap();
    let recorded: Vec<Option<String>> = r
        .documents(&records())
        .iter()
        .flat_map(|d| d.get_array("participants").unwrap().clone())
        .map(|p| {
            p.as_document()
                .unwrap()
                .get_str("storeUid")
                .ok()
                .map(str::to_owned)
        })
        .collect();
    let in_ledger = recorded
        .iter()
        .filter(|u| u.as_deref() == Some(uid))
        .count();
    assert_eq!(
        (in_ledger, recorded.iter().flatten().count()),
        (3, 3),
        "{recorded:?}"
    );

    // Its recovery workers share what it read.
    let before = counted.ops();
    app.recovery(RecoveryConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(counted.ops(), before);
}

/// Two processes whose "ledger" is one database read one identity: the
/// first writes it, the second finds it.
#[tokio::test]
async fn one_database_has_one_identity_in_every_process() {
    let (r, rc, _) = bank(&["A", "B"], 1000).await;
    let qc = Arc::new(ManualClock::default());
    let q = ledger(&qc).await;
    let warm = Coordinator::builder(r.clone())
        .store("ledger", q.clone())
        .lease(LEASE)
        .build();
    warm.run(ledger_to_a()).await.unwrap();
    warm.drain().await;
    // Another process, with the same "ledger", recovers a record of the first.
    let answer = committed_and_left(&r, &q).await;
    assert!(answer.is_ok(), "{answer:?}");
    let worker = Coordinator::builder(r.clone())
        .store("ledger", q.clone())
        .lease(LEASE)
        .build()
        .recovery(RecoveryConfig::default());
    for _ in 0..4 {
        rc.advance(Duration::from_secs(600));
        qc.advance(Duration::from_secs(600));
        worker.run_once().await.unwrap();
    }
    assert!(record_state(&r).iter().all(|s| *s == TxState::Done));
    assert_eq!(
        (balance(&r, "A").await, balance(&q, "Z").await),
        (1200, 800)
    );
}

/// A ledger whose identity cannot be read refuses the transaction before
/// anything of it is written.
#[tokio::test]
async fn an_unreadable_identity_refuses_the_transaction() {
    let (r, _, _) = bank(&["A", "B"], 1000).await;
    let qc = Arc::new(ManualClock::default());
    let q = ledger(&qc).await;
    let app = Coordinator::builder(r.clone())
        .store(
            "ledger",
            FaultStore::new(Arc::new(q.clone())).crash_after(0),
        )
        .lease(LEASE)
        .build();
    let answer = app.run(ledger_to_a()).await;
    assert!(
        matches!(
            &answer,
            Err(TxError::Canceled { cause: tandem::StepError::Store { .. }, participant: Some(p), .. }) if p.index == 0
        ),
        "{answer:?}"
    );
    assert!(r.documents(&records()).is_empty());
    assert_eq!(balance(&r, "A").await, 1000);
}

/// Under a caller-chosen id, a ledger whose identity cannot be read is a
/// store failure before anything was written, as a native transaction's
/// store failing before its commit: the answer is `Interrupted` with no
/// record, and the key stays free, so a retry once the ledger answers runs
/// it. It was `Canceled`, which the guide reads as a refusal that takes
/// its key (a caller tells its customer "declined"), while a retry under
/// the key ran and paid.
#[tokio::test]
async fn a_keyed_transaction_meeting_an_unreadable_identity_is_interrupted() {
    let (r, _, _) = bank(&["A", "B"], 1000).await;
    let qc = Arc::new(ManualClock::default());
    let q = ledger(&qc).await;
    let keyed = || {
        Transaction::with_id("pay-z")
            .change(
                DocumentChange::update(accounts(), "Z")
                    .in_store("ledger")
                    .inc("balance", -100_i64)
                    .require_gte("balance", 100_i64),
            )
            .change(DocumentChange::update(accounts(), "A").inc("balance", 100_i64))
    };
    let failing = Coordinator::builder(r.clone())
        .store(
            "ledger",
            FaultStore::new(Arc::new(q.clone())).crash_after(0),
        )
        .lease(LEASE)
        .build();
    let answer = failing.run(keyed()).await;
    assert!(
        matches!(&answer, Err(TxError::Interrupted { state: None, .. })),
        "{answer:?}"
    );
    assert!(r.documents(&records()).is_empty());
    let app = Coordinator::builder(r.clone())
        .store("ledger", q.clone())
        .lease(LEASE)
        .commit_point(tandem::CommitPoint::Done)
        .build();
    let retry = app.run(keyed()).await;
    assert!(
        matches!(&retry, Ok(receipt) if receipt.state == TxState::Done),
        "{retry:?}"
    );
    assert_eq!(
        (balance(&r, "A").await, balance(&q, "Z").await),
        (1100, 900)
    );
}

/// Garbage collection in a process whose "ledger" is another database
/// leaves that database's documents alone.
#[tokio::test]
async fn garbage_collection_does_not_tidy_another_database() {
    let (r, rc, _) = bank(&["A", "B"], 1000).await;
    let qc = Arc::new(ManualClock::default());
    let q = ledger(&qc).await;
    let other = ledger(&qc).await;
    let app = Coordinator::builder(r.clone())
        .store("ledger", q.clone())
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .build();
    app.run(ledger_to_a()).await.unwrap();
    app.drain().await;
    // A credit sum left on the other database's Z, as if a transaction
    // there were still to be tidied.
    other
        .update_one(
            &accounts(),
            doc! { "_id": "Z" },
            doc! { "$set": { "_tandem": { "pending": 0, "credit": { "balance": 0_i64 } } } },
            Default::default(),
        )
        .await
        .unwrap();
    rc.advance(Duration::from_secs(600));
    qc.advance(Duration::from_secs(600));
    let wrong = Coordinator::builder(r.clone())
        .store("ledger", other.clone())
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .build()
        .recovery(RecoveryConfig::default());
    wrong.collect_garbage(LEASE * 2).await.unwrap();
    let z = get(&other, &accounts(), "Z").await.unwrap();
    assert!(
        z.get_document("_tandem")
            .is_ok_and(|t| t.get_document("credit").is_ok()),
        "{z:?}"
    );
}
