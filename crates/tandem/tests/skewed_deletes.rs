#![cfg(feature = "test-util")]
//! A keyed transaction that debits an account in the records' store and
//! deletes a document in a second store ("ledger") whose clock is behind
//! the records store's by more than the clock margin. Its coordinator dies
//! after the debit landed, with the delete's request lost on its way (it may
//! still arrive). What must hold, whatever arrives when:
//!
//! * a process without the ledger store claims nothing, cancels nothing and
//!   collects nothing;
//! * recovery and an operator's cancel decide only once the ledger's own
//!   clock has passed the deadline plus the margin (its clock is behind, so
//!   later than the records store's says);
//! * the delete arriving late before that deadline makes the transaction
//!   committed (both applies landed): the document is deleted, the debit
//!   kept; arriving after it, it is fenced: the debit undone, the document
//!   kept as it was;
//! * a retry under the key is told `Duplicate` with the outcome, also after
//!   garbage collection.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use common::{accounts, balance, get, records};
use tandem::testing::FaultStore;
use tandem::{
    ChangeError, Coordinator, DocumentChange, ManualClock, MemoryStore, Namespace, RecoveryConfig,
    RetryPolicy, Store, Transaction, TxError, TxId, TxState,
};

const LEASE: Duration = Duration::from_secs(10);
const MARGIN: Duration = Duration::from_secs(2);
/// How far the ledger's clock is behind the records store's.
const SKEW: Duration = Duration::from_secs(5);

fn orders() -> Namespace {
    Namespace::new("shop", "orders")
}

fn pay() -> Transaction {
    Transaction::with_id("pay-1")
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -100_i64)
                .require_gte("balance", 100_i64),
        )
        .change(
            DocumentChange::delete(orders(), "X")
                .in_store("ledger")
                .require_eq("state", "open"),
        )
}

struct World {
    r: MemoryStore,
    rc: Arc<ManualClock>,
    p: MemoryStore,
    pc: Arc<ManualClock>,
    /// The ledger as the dead coordinator reached it: holds its lost delete.
    dead_p: FaultStore,
}

impl World {
    fn advance(&self, by: Duration) {
        self.rc.advance(by);
        self.pc.advance(by);
    }

    fn full(&self) -> Coordinator {
        Coordinator::builder(self.r.clone())
            .store("ledger", self.p.clone())
            .lease(LEASE)
            .clock_margin(MARGIN)
            .build()
    }

    fn without_ledger(&self) -> Coordinator {
        Coordinator::builder(self.r.clone())
            .lease(LEASE)
            .clock_margin(MARGIN)
            .build()
    }

    fn state(&self) -> TxState {
        let doc = self
            .r
            .documents(&records())
            .into_iter()
            .find(|d| d.get_str("_id") == Ok("pay-1"))
            .expect("the record");
        doc.get_str("state").unwrap().parse().unwrap()
    }

    async fn x(&self) -> Option<bson::Document> {
        get(&self.p, &orders(), "X").await
    }
}

/// The coordinator dies after its debit landed and its delete was lost on
/// the way (kept, to arrive when the test says).
async fn died_midway() -> World {
    let rc = Arc::new(ManualClock::default());
    let r = MemoryStore::with_clock(rc.clone());
    r.insert_one(
        &accounts(),
        doc! { "_id": "A", "balance": 1000_i64, "pendingTransactions": [] },
    )
    .await
    .unwrap();
    let start = tandem::Clock::now(rc.as_ref()).timestamp_millis();
    let pc = Arc::new(ManualClock::new(bson::DateTime::from_millis(
        start - SKEW.as_millis() as i64,
    )));
    let p = MemoryStore::with_clock(pc.clone());
    p.insert_one(&orders(), doc! { "_id": "X", "state": "open" })
        .await
        .unwrap();
    // Records store: after the lease (written first), 1 the create, 2 the
    // debit; then it is gone.
    let dead_r = FaultStore::new(Arc::new(r.clone()));
    // Ledger: 1 its identity, 2 the delete's apply, lost on its way.
    let dead_p = FaultStore::new(Arc::new(p.clone()))
        .lose_at(2)
        .keeping_lost()
        .crash_after(2);
    let dead = Coordinator::builder(dead_r.clone())
        .store("ledger", dead_p.clone())
        .lease(LEASE)
        .clock_margin(MARGIN)
        .retry(RetryPolicy::NONE)
        .build();
    dead.register_lease().await.unwrap();
    let _ = dead_r.clone().crash_after(dead_r.ops() + 2);
    let answer = dead.run(pay()).await;
    assert!(
        matches!(answer, Err(TxError::Interrupted { .. })),
        "{answer:?}"
    );
    let w = World {
        r,
        rc,
        p,
        pc,
        dead_p,
    };
    assert_eq!(w.dead_p.lost_writes().held(), 1, "the delete is on its way");
    assert_eq!(w.state(), TxState::Pending);
    assert_eq!(balance(&w.r, "A").await, 900, "the debit landed");
    assert!(w.x().await.unwrap().get("_tandem").is_none(), "X untouched");
    w
}

/// The part both endings share: past the records store's deadline plus
/// margin, the ledger's clock still before the deadline. A process without
/// the ledger does nothing; one with it waits.
async fn past_the_records_deadline(w: &World) {
    w.advance(LEASE + MARGIN + Duration::from_secs(1));
    let lacking = w.without_ledger();
    let worker = lacking.recovery(RecoveryConfig::default());
    let report = worker.run_once().await.unwrap();
    assert_eq!((report.claimed, report.failed), (0, 1), "{report:?}");
    let id = TxId::new("pay-1").unwrap();
    assert!(matches!(
        lacking.cancel(&id, "operator").await,
        Err(TxError::Invalid(ChangeError::UnknownStore { .. }))
    ));
    assert_eq!(worker.collect_garbage(LEASE + MARGIN).await.unwrap(), 0);
    assert_eq!(w.state(), TxState::Pending);

    // The full process: the ledger's clock is behind, so nothing is decided.
    let full = w.full();
    assert_eq!(
        full.cancel(&id, "operator").await.unwrap(),
        TxState::Pending
    );
    let report = full
        .recovery(RecoveryConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.committed + report.canceled, 0, "{report:?}");
    assert_eq!(w.state(), TxState::Pending);
    assert_eq!(balance(&w.r, "A").await, 900);
    assert!(w.x().await.is_some());
}

async fn recover_to_the_end(w: &World) {
    // Past the ledger's deadline plus margin, and every lease claims gave.
    for _ in 0..6 {
        w.advance(LEASE * 8 + SKEW);
        w.full()
            .recovery(RecoveryConfig::default())
            .run_once()
            .await
            .unwrap();
    }
}

/// The lost delete arrives while the ledger's clock is before the
/// deadline: both applies landed, the transaction committed.
/// A retry under the transaction's key runs nothing and is told the outcome.
async fn retry_is_told(w: &World, outcome: TxState) {
    let retry = w.full().run(pay()).await;
    assert!(
        matches!(retry, Err(TxError::Duplicate { state: Some(s), .. }) if s == outcome),
        "{retry:?}"
    );
}

#[tokio::test]
async fn a_late_delete_before_the_ledgers_deadline_commits() {
    let w = died_midway().await;
    past_the_records_deadline(&w).await;
    assert_eq!(w.dead_p.deliver_lost().await, 1);
    assert!(
        w.x().await.unwrap().get("_tandem").is_some(),
        "the delete landed: X is marked"
    );
    recover_to_the_end(&w).await;
    assert_eq!(w.state(), TxState::Done);
    assert_eq!(balance(&w.r, "A").await, 900);
    assert!(w.x().await.is_none(), "X deleted");
    let a = get(&w.r, &accounts(), "A").await.unwrap();
    assert!(a.get_array("pendingTransactions").unwrap().is_empty());

    retry_is_told(&w, TxState::Done).await;
    let worker = w.full().recovery(RecoveryConfig::default());
    assert_eq!(worker.collect_garbage(LEASE + MARGIN).await.unwrap(), 1);
    retry_is_told(&w, TxState::Done).await;
    assert_eq!(balance(&w.r, "A").await, 900);
}

/// Nothing arrives in time: the debit is undone; the delete arriving after
/// the ledger's deadline is fenced, and X stays as it was.
#[tokio::test]
async fn a_delete_arriving_after_the_ledgers_deadline_changes_nothing() {
    let w = died_midway().await;
    past_the_records_deadline(&w).await;
    recover_to_the_end(&w).await;
    assert_eq!(w.state(), TxState::Canceled);
    assert_eq!(balance(&w.r, "A").await, 1000);
    assert_eq!(w.dead_p.deliver_lost().await, 1);
    let x = w.x().await.expect("X kept");
    assert!(x.get("_tandem").is_none(), "{x}");
    assert!(x
        .get_array("pendingTransactions")
        .map_or(true, |m| m.is_empty()));

    retry_is_told(&w, TxState::Canceled).await;
    assert_eq!(balance(&w.r, "A").await, 1000);
}
