//! Fixtures shared by the core's integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use bson::{doc, Document};
use tandem::{DocumentChange, ManualClock, MemoryStore, Namespace, Store};

pub fn accounts() -> Namespace {
    Namespace::new("bank", "accounts")
}

pub fn records() -> Namespace {
    Namespace::new("tandem", "transactions")
}

/// A collection of counters, for tests of credits to nested paths.
pub fn stats() -> Namespace {
    Namespace::new("app", "stats")
}

/// The lease of [`two_phase`]'s coordinator: short, for a manual clock to pass.
pub const LEASE: std::time::Duration = std::time::Duration::from_secs(1);

/// A two-phase coordinator on `store` answering at `done`, with lease
/// [`LEASE`] and no clock margin.
pub fn two_phase(store: Arc<dyn Store>) -> tandem::Coordinator {
    tandem::Coordinator::builder_shared(store)
        .lease(LEASE)
        .clock_margin(std::time::Duration::ZERO)
        .commit_point(tandem::CommitPoint::Done)
        .build()
}

/// A memory store on a manual clock, seeded with accounts `names`, each holding `balance`.
pub async fn bank(
    names: &[&str],
    balance: i64,
) -> (MemoryStore, Arc<ManualClock>, Vec<(Namespace, Document)>) {
    let clock = Arc::new(ManualClock::default());
    let store = MemoryStore::with_clock(clock.clone());
    let mut seeded = Vec::new();
    for name in names {
        let d = doc! { "_id": *name, "balance": balance, "pendingTransactions": [] };
        store.insert_one(&accounts(), d.clone()).await.unwrap();
        seeded.push((accounts(), d));
    }
    (store, clock, seeded)
}

/// A debit of 30 from `account`, guarded by `balance >= 30`, and `change`.
pub fn debit_and(account: &str, change: DocumentChange) -> tandem::Transaction {
    tandem::Transaction::new()
        .change(
            DocumentChange::update(accounts(), account)
                .inc("balance", -30_i64)
                .require_gte("balance", 30_i64),
        )
        .change(change)
}

pub fn transfer(from: &str, to: &str, amount: i64) -> tandem::Transaction {
    moves(tandem::Transaction::new(), from, to, amount)
}

/// A coordinator for the idempotency-window tests: `lease`, no clock
/// margin, the window `window`, answering at `done` and committing at the
/// move to `applied`.
pub fn keyed_coordinator(
    store: impl Store,
    lease: std::time::Duration,
    window: std::time::Duration,
) -> tandem::Coordinator {
    tandem::Coordinator::builder(store)
        .lease(lease)
        .clock_margin(std::time::Duration::ZERO)
        .idempotency_window(window)
        .commit_point(tandem::CommitPoint::Done)
        .early_commit(false)
        .build()
}

/// A collector (recovery worker) with [`LEASE`], no clock margin and the
/// idempotency window `window`.
pub fn window_collector(
    store: Arc<dyn Store>,
    window: std::time::Duration,
) -> tandem::RecoveryWorker {
    tandem::Coordinator::builder_shared(store)
        .lease(LEASE)
        .clock_margin(std::time::Duration::ZERO)
        .build()
        .recovery(tandem::RecoveryConfig {
            idempotency_window: window,
            ..tandem::RecoveryConfig::default()
        })
}

/// A payment of `amount` from A to B under the idempotency key `key`,
/// guarded by A's `balance >= amount`.
pub fn keyed_payment(key: &str, amount: i64) -> tandem::Transaction {
    moves(tandem::Transaction::with_id(key), "A", "B", amount)
}

fn moves(tx: tandem::Transaction, from: &str, to: &str, amount: i64) -> tandem::Transaction {
    tx.change(
        DocumentChange::update(accounts(), from)
            .inc("balance", -amount)
            .require_gte("balance", amount),
    )
    .change(DocumentChange::update(accounts(), to).inc("balance", amount))
}

pub async fn get(store: &MemoryStore, ns: &Namespace, id: &str) -> Option<Document> {
    store.find_one(ns, doc! { "_id": id }).await.unwrap()
}

pub async fn balance(store: &MemoryStore, id: &str) -> i64 {
    get(store, &accounts(), id)
        .await
        .unwrap()
        .get_i64("balance")
        .unwrap()
}

/// A recovery worker on `store` with lease `lease`, no clock margin, that
/// rolls stuck `pending` transactions forward.
pub fn rolling_forward(
    store: Arc<dyn Store>,
    lease: std::time::Duration,
) -> tandem::RecoveryWorker {
    tandem::Coordinator::builder_shared(store)
        .lease(lease)
        .clock_margin(std::time::Duration::ZERO)
        .build()
        .recovery(tandem::RecoveryConfig {
            pending: tandem::PendingPolicy::RollForward,
            ..tandem::RecoveryConfig::default()
        })
}

/// The credit sums `_tandem.credit` of a document (empty if it has none).
pub fn credit_sums(d: &Document) -> Document {
    d.get_document("_tandem")
        .ok()
        .and_then(|m| m.get_document("credit").ok())
        .cloned()
        .unwrap_or_default()
}

/// A memory store with account `A` (10) and counters `X`, whose credits of
/// `paths` were each undone (paid for by `A`, which cannot pay), leaving
/// each its zero sum at `_tandem.credit.<path>`; and the store's clock.
pub async fn undone_credits_at(paths: &[&str]) -> (MemoryStore, Arc<ManualClock>) {
    let (store, clock, _) = bank(&["A"], 10).await;
    store
        .insert_one(&stats(), doc! { "_id": "X", "n": 1_i64 })
        .await
        .unwrap();
    let coordinator = two_phase(Arc::new(store.clone()));
    for path in paths {
        let refused = coordinator
            .run(
                tandem::Transaction::new()
                    .change(DocumentChange::update(stats(), "X").inc(*path, 5_i64))
                    .change(
                        DocumentChange::update(accounts(), "A")
                            .inc("balance", -1_000_i64)
                            .require_gte("balance", 1_000_i64),
                    ),
            )
            .await;
        assert!(
            matches!(refused, Err(tandem::TxError::Canceled { undone: true, .. })),
            "{refused:?}"
        );
    }
    let x = get(&store, &stats(), "X").await.unwrap();
    for path in paths {
        assert_eq!(
            credit_sums(&x).get(*path),
            Some(&bson::Bson::Int64(0)),
            "the undone credit's zero sum: {x}"
        );
    }
    (store, clock)
}

/// A record left `pending` with nothing applied: its owner crashed after writing it.
pub async fn stuck_transfer(store: &MemoryStore) -> tandem::TxId {
    let faulty = tandem::testing::FaultStore::new(Arc::new(store.clone())).crash_after(1);
    let dead = tandem::Coordinator::builder(faulty).build();
    match dead.run(transfer("A", "B", 100)).await.unwrap_err() {
        tandem::TxError::Interrupted {
            id,
            state: Some(tandem::TxState::Pending),
            ..
        } => id,
        other => panic!("{other:?}"),
    }
}
