//! The sums of credits pending on a field (`_tandem.credit.<path>`) do not
//! outlive what they were kept for: a change that holds the document alone
//! drops them, on either strategy, and garbage collection drops those of
//! the documents its records credited once nothing is pending there. Kept,
//! one zero stayed for every path ever credited (`daily.<day>`), and a zero
//! kept for `stats.visits` refused every later credit of `stats` once a
//! native change had set `stats` to a number.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Document};
use common::*;
use tandem::testing::FaultStore;
use tandem::{
    CommitPoint, Coordinator, DocumentChange, MemoryStore, RecoveryConfig, Store, Strategy,
    Transaction,
};

fn credit(path: &str) -> Transaction {
    Transaction::new().change(DocumentChange::update(stats(), "X").inc(path, 1_i64))
}

async fn sums(store: &MemoryStore) -> Option<Document> {
    get(store, &stats(), "X")
        .await
        .unwrap()
        .get_document("_tandem")
        .ok()
        .and_then(|m| m.get_document("credit").ok())
        .cloned()
}

#[tokio::test]
async fn a_native_change_of_a_field_leaves_no_sum_behind_for_its_parts() {
    let store = MemoryStore::new();
    store
        .insert_one(&stats(), doc! { "_id": "X", "stats": { "visits": 1_i64 } })
        .await
        .unwrap();
    let two_phase = two_phase(Arc::new(store.clone()));
    let native = Coordinator::builder(store.clone())
        .strategy(Strategy::Native)
        .build();
    two_phase.run(credit("stats.visits")).await.unwrap();
    assert!(sums(&store).await.is_some(), "a zero kept for stats.visits");
    native
        .run(Transaction::new().change(DocumentChange::update(stats(), "X").set("stats", 5_i64)))
        .await
        .unwrap();
    assert_eq!(
        sums(&store).await,
        None,
        "dropped with the exclusive change"
    );
    two_phase.run(credit("stats")).await.unwrap();
    assert_eq!(
        get(&store, &stats(), "X").await.unwrap().get_i64("stats"),
        Ok(6)
    );
}

#[tokio::test]
async fn garbage_collection_drops_the_sums_of_paths_credited_once() {
    let (store, clock, _) = bank(&[], 0).await;
    store
        .insert_one(&stats(), doc! { "_id": "X" })
        .await
        .unwrap();
    let coordinator = two_phase(Arc::new(store.clone()));
    for day in 0..50 {
        coordinator
            .run(credit(&format!("daily.d{day}")))
            .await
            .unwrap();
    }
    let kept = sums(&store).await.expect("zeros kept while records live");
    assert_eq!(kept.get_document("daily").map(Document::len), Ok(50));

    clock.advance(LEASE * 3);
    let worker = coordinator.recovery(RecoveryConfig::default());
    assert_eq!(worker.collect_garbage(LEASE * 2).await.unwrap(), 50);
    assert_eq!(sums(&store).await, None);
    let doc = get(&store, &stats(), "X").await.unwrap();
    assert_eq!(doc.get_document("daily").map(Document::len), Ok(50));
    assert_eq!(doc.get_document("daily").unwrap().get_i64("d49"), Ok(1));
}

/// A sum of a credit still pending is not zero: garbage collection of
/// another transaction that credited the document leaves it, and the
/// pending one lands whole.
#[tokio::test]
async fn garbage_collection_keeps_a_pending_sum() {
    let (store, clock, _) = bank(&[], 0).await;
    store
        .insert_one(&stats(), doc! { "_id": "X", "n": 0_i64 })
        .await
        .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let done = two_phase(shared.clone());
    done.run(credit("n")).await.unwrap();
    clock.advance(LEASE * 3);

    // 1 the create, 2 the apply; 3, the clear, waits.
    let faulty = FaultStore::new(shared.clone());
    let pause = faulty.pause_at(3);
    let slow = two_phase(Arc::new(faulty));
    let run = tokio::spawn(async move { slow.run(credit("n")).await });
    pause.reached.await.unwrap();
    assert_eq!(
        sums(&store).await.and_then(|s| s.get_i64("n").ok()),
        Some(1),
        "the pending credit counted"
    );

    let worker = done.recovery(RecoveryConfig::default());
    assert_eq!(worker.collect_garbage(LEASE * 2).await.unwrap(), 1);
    assert_eq!(
        sums(&store).await.and_then(|s| s.get_i64("n").ok()),
        Some(1),
        "kept while pending"
    );
    pause.release.send(()).unwrap();
    run.await.unwrap().unwrap();
    let doc = get(&store, &stats(), "X").await.unwrap();
    assert_eq!(doc.get_i64("n"), Ok(2));
}

/// The documents' store fails the tidy: the record that credited them
/// stays, and the next collection tidies them and removes it.
#[tokio::test]
async fn a_failed_tidy_waits_for_the_next_collection() {
    let (store, clock, _) = bank(&[], 0).await;
    store
        .insert_one(&stats(), doc! { "_id": "X" })
        .await
        .unwrap();
    let ledger = FaultStore::new(Arc::new(store.clone()));
    let coordinator = Coordinator::builder(store.clone())
        .store("ledger", ledger.clone())
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .build();
    coordinator
        .run(
            Transaction::new().change(
                DocumentChange::update(stats(), "X")
                    .in_store("ledger")
                    .inc("daily.d1", 1_i64),
            ),
        )
        .await
        .unwrap();
    clock.advance(LEASE * 3);
    ledger.crash_now();
    let worker = coordinator.recovery(RecoveryConfig::default());
    assert_eq!(worker.collect_garbage(LEASE * 2).await.unwrap(), 0);
    assert!(sums(&store).await.is_some());
    assert_eq!(store.documents(&records()).len(), 1, "the record stays");

    let healthy = Coordinator::builder(store.clone())
        .store("ledger", store.clone())
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .build();
    let worker = healthy.recovery(RecoveryConfig::default());
    assert_eq!(worker.collect_garbage(LEASE * 2).await.unwrap(), 1);
    assert_eq!(sums(&store).await, None);
    assert!(store.documents(&records()).is_empty());
}

/// A delete pending while garbage collection runs keeps the document busy,
/// so the collection leaves its sums; the delete is then canceled, and its
/// own record credits nothing, so no later collection looks at the document
/// again. Before a delete dropped the sums at its apply, one zero stayed per
/// round, for good.
#[tokio::test]
async fn a_canceled_delete_leaves_no_sum_behind() {
    let (store, clock, _) = bank(&["Y"], 100).await;
    store
        .insert_one(&stats(), doc! { "_id": "X", "n": 0_i64 })
        .await
        .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let healthy = two_phase(shared.clone());
    let worker = healthy.recovery(RecoveryConfig::default());
    for round in 0..3 {
        healthy
            .run(credit(&format!("holds.o{round}")))
            .await
            .unwrap();
        // 1 the create, 2 and 3 the applies; then the coordinator dies,
        // before its commit point (the move to `applied`).
        let dying =
            Coordinator::builder_shared(Arc::new(FaultStore::new(shared.clone()).crash_after(3)))
                .lease(LEASE)
                .clock_margin(Duration::ZERO)
                .early_commit(false)
                .build();
        dying
            .run(
                Transaction::new()
                    .change(DocumentChange::delete(stats(), "X"))
                    .change(DocumentChange::update(accounts(), "Y").inc("balance", 1_i64)),
            )
            .await
            .unwrap_err();
        clock.advance(LEASE * 3);
        // The credit's record goes; X is busy with the delete.
        assert_eq!(worker.collect_garbage(LEASE * 2).await.unwrap(), 1);
        let report = worker.run_once().await.unwrap();
        assert_eq!(report.canceled, 1, "{report:?}");
        clock.advance(LEASE * 3);
        assert_eq!(worker.collect_garbage(LEASE * 2).await.unwrap(), 1);
    }
    assert!(store.documents(&records()).is_empty());
    let x = get(&store, &stats(), "X").await.unwrap();
    assert_eq!(sums(&store).await, None, "{x}");
    assert_eq!(x.get_i64("n"), Ok(0), "the delete was undone: {x}");
}

/// Garbage collection by a process without one of a record's stores keeps
/// the record: removing it stranded the zero credit sums it left on that
/// store's documents, since only a record leads collection to a document
/// (found by an adversarial review). A collection with the store then drops
/// both.
#[tokio::test]
async fn collection_without_a_participant_store_keeps_the_record() {
    use std::sync::Arc;
    use tandem::{ManualClock, MemoryStore, RecoveryConfig, Store};
    let (records, clock, _) = bank(&["A"], 1000).await;
    let ledger_clock = Arc::new(ManualClock::default());
    let ledger = MemoryStore::with_clock(ledger_clock.clone());
    ledger
        .insert_one(
            &accounts(),
            bson::doc! { "_id": "Z", "balance": 1000_i64, "pendingTransactions": [] },
        )
        .await
        .unwrap();
    let lease = std::time::Duration::from_secs(10);
    let app = tandem::Coordinator::builder(records.clone())
        .store("ledger", ledger.clone())
        .lease(lease)
        .build();
    app.run(
        tandem::Transaction::new()
            .change(
                tandem::DocumentChange::update(accounts(), "A")
                    .inc("balance", -100_i64)
                    .require_gte("balance", 100_i64),
            )
            .change(
                tandem::DocumentChange::update(accounts(), "Z")
                    .in_store("ledger")
                    .inc("balance", 100_i64),
            ),
    )
    .await
    .unwrap();
    app.drain().await;
    let hour = std::time::Duration::from_secs(3600);
    clock.advance(hour);
    ledger_clock.advance(hour);
    let without = tandem::Coordinator::builder(records.clone())
        .lease(lease)
        .build()
        .recovery(RecoveryConfig::default());
    let removed = without
        .collect_garbage(std::time::Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        removed, 0,
        "the record stays for a collection with the store"
    );
    let with = app.recovery(RecoveryConfig::default());
    assert_eq!(
        with.collect_garbage(std::time::Duration::from_secs(60))
            .await
            .unwrap(),
        1
    );
    let z = get(&ledger, &accounts(), "Z").await.unwrap();
    assert!(
        z.get_document("_tandem")
            .map_or(true, |t| !t.contains_key("credit")),
        "{z}"
    );
}
