//! Regression scenarios for the ways an adversarial review broke tandem's
//! promise, each run on every store (the embedded one in `cargo test`, the
//! test server in the test command).
//!
//! Each scenario names the hole it closes. Before deadline fencing (tandem
//! 0.1's protocol fenced late steps with per-document tombstones) each of them
//! failed; they pass because late steps are now fenced by the store's clock
//! and nothing is kept on documents once a transaction is finished.
//!
//! The file is long because it holds one concern only: independent
//! scenarios, each a few dozen lines read on its own, over one set of helpers.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};

use super::{FaultStore, StoreFactory};
use crate::change::{DocumentChange, DEFAULT_MARKER};
use crate::config::{CommitPoint, PendingPolicy, RecoveryConfig, Strategy};
use crate::coordinator::{Coordinator, Transaction};
use crate::error::{ChangeError, StepError, TxError};
use crate::record::TxState;
use crate::store::{Namespace, Store, StoreErrorKind};
use crate::RecoveryWorker;

fn accounts(db: &str) -> Namespace {
    Namespace::new(db, "accounts")
}

/// A coordinator on `store` with the factory's lease and no clock margin
/// (one store, one clock).
/// The scenarios' coordinators promise no idempotency window of their own
/// (`Duration::ZERO`): each scenario's collector sets the window a keyed
/// record keeps its stub for.
fn coordinator(store: impl Store, db: &str, lease: Duration) -> Coordinator {
    Coordinator::builder(store)
        .database(db)
        .lease(lease)
        .clock_margin(Duration::ZERO)
        .idempotency_window(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .build()
}

fn recovery(
    store: Arc<dyn Store>,
    db: &str,
    lease: Duration,
    pending: PendingPolicy,
) -> RecoveryWorker {
    recovery_with(
        store,
        db,
        lease,
        RecoveryConfig {
            pending,
            ..RecoveryConfig::default()
        },
    )
}

/// A recovery worker on `store` with `config` (the factory's lease, no margin).
fn recovery_with(
    store: Arc<dyn Store>,
    db: &str,
    lease: Duration,
    config: RecoveryConfig,
) -> RecoveryWorker {
    Coordinator::builder_shared(store)
        .database(db)
        .lease(lease)
        .clock_margin(Duration::ZERO)
        .idempotency_window(Duration::ZERO)
        .build()
        .recovery(config)
}

/// A garbage collector on `store` that keeps stubs of caller-chosen ids for `window`.
fn collector(store: Arc<dyn Store>, db: &str, lease: Duration, window: Duration) -> RecoveryWorker {
    recovery_with(
        store,
        db,
        lease,
        RecoveryConfig {
            idempotency_window: window,
            ..RecoveryConfig::default()
        },
    )
}

/// Starts `tx` on a coordinator that stops right before its store operation
/// number `at` (1-based), and returns once it has stopped there: the sender
/// that lets it go on, and the task running it.
async fn stalled(
    store: &Arc<dyn Store>,
    db: &str,
    lease: Duration,
    at: u64,
    tx: Transaction,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<crate::Receipt, TxError>>,
) {
    let faulty = FaultStore::new(store.clone());
    let worker = coordinator(faulty.clone(), db, lease);
    // Counted from the transaction's first operation: the lease a keyed
    // transaction registers first is written before.
    worker
        .register_lease()
        .await
        .expect("registering the lease");
    let pause = faulty.pause_at(faulty.ops() + at);
    let run = tokio::spawn(async move { worker.run(tx).await });
    pause
        .reached
        .await
        .unwrap_or_else(|_| panic!("the worker reaches its store operation {at}"));
    (pause.release, run)
}

async fn seed(store: &dyn Store, ns: &Namespace, doc: Document) {
    store.insert_one(ns, doc).await.expect("seeding a document");
}

async fn get(store: &dyn Store, ns: &Namespace, id: &str) -> Option<Document> {
    store
        .find_one(ns, doc! { "_id": id })
        .await
        .expect("reading a document")
}

async fn balance(store: &dyn Store, db: &str, id: &str) -> i64 {
    get(store, &accounts(db), id)
        .await
        .and_then(|d| d.get_i64("balance").ok())
        .expect("an account with an i64 balance")
}

/// Whether `doc` carries anything of a transaction: a marker or a lock.
fn held(doc: &Document) -> bool {
    let marked = doc
        .get_array(DEFAULT_MARKER)
        .map(|a| !a.is_empty())
        .unwrap_or(false);
    let locked = doc
        .get_document("_tandem")
        .map(|t| t.get("lock").is_some_and(|l| *l != Bson::Null))
        .unwrap_or(false);
    marked || locked
}

async fn state_of(store: &dyn Store, db: &str, id: &str) -> Option<TxState> {
    store
        .find_one(&Namespace::new(db, "transactions"), doc! { "_id": id })
        .await
        .expect("reading a record")
        .and_then(|r| r.get_str("state").ok().and_then(|s| s.parse().ok()))
}

/// Issue: *a delete removes its own fence.* A worker is paused before its
/// apply of `{delete X, debit A}`; recovery rolls the transaction forward and
/// commits it (X is deleted); X is created again; the paused worker's delete
/// then reaches the store. With tombstones, which the delete had removed with
/// the document, it landed on the new X and left it locked by a `done`
/// transaction forever. Now it is past its deadline and changes nothing.
pub async fn late_delete_after_recreation<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "X", "balance": 0_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    let lease = factory.lease();
    // 1: the record; 2: the first apply.
    let tx = Transaction::with_id("late-delete")
        .change(DocumentChange::delete(ns.clone(), "X"))
        .change(
            DocumentChange::update(ns.clone(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        );
    let (release, run) = stalled(&store, db, lease, 2, tx).await;

    factory.pass(store.as_ref(), lease).await;
    let report = recovery(store.clone(), db, lease, PendingPolicy::RollForward)
        .run_once()
        .await
        .expect("recovery pass");
    assert_eq!(report.committed, 1, "{report:?}");
    assert!(get(store.as_ref(), &ns, "X").await.is_none(), "X deleted");
    seed(store.as_ref(), &ns, doc! { "_id": "X", "balance": 7_i64 }).await;

    release.send(()).expect("the worker waits");
    let result = run.await.expect("worker task");
    assert!(
        matches!(result, Err(TxError::Superseded { .. })),
        "the late worker learns it was superseded: {result:?}"
    );
    let x = get(store.as_ref(), &ns, "X")
        .await
        .expect("X created again");
    assert!(!held(&x), "the new X is left alone: {x}");
    assert_eq!(x.get_i64("balance").ok(), Some(7));
    assert_eq!(balance(store.as_ref(), db, "A").await, 90, "debited once");
    assert_eq!(
        state_of(store.as_ref(), db, "late-delete").await,
        Some(TxState::Done)
    );
}

/// Issue: *an insert applied twice.* A worker is paused before its apply of
/// `{insert X, debit A}`; recovery rolls forward and commits (X inserted);
/// another transaction deletes X; the paused worker's insert then reaches the
/// store. A plain insert landed again (the deleted order came back); now an
/// insert fills a placeholder with a deadline-fenced update, and changes nothing.
pub async fn late_insert_after_deletion<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    let lease = factory.lease();
    // 1: the placeholder; 2: the record; 3: the first apply.
    let tx = Transaction::with_id("late-insert")
        .change(DocumentChange::insert(
            ns.clone(),
            "X",
            doc! { "balance": 5_i64 },
        ))
        .change(
            DocumentChange::update(ns.clone(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        );
    let (release, run) = stalled(&store, db, lease, 3, tx).await;

    factory.pass(store.as_ref(), lease).await;
    let report = recovery(store.clone(), db, lease, PendingPolicy::RollForward)
        .run_once()
        .await
        .expect("recovery pass");
    assert_eq!(report.committed, 1, "{report:?}");
    let x = get(store.as_ref(), &ns, "X").await.expect("X inserted");
    assert_eq!(x.get_i64("balance").ok(), Some(5));
    let deleting = coordinator(store.clone(), db, lease)
        .run(Transaction::new().change(DocumentChange::delete(ns.clone(), "X")))
        .await;
    assert!(deleting.is_ok(), "{deleting:?}");
    assert!(get(store.as_ref(), &ns, "X").await.is_none());

    release.send(()).expect("the worker waits");
    let result = run.await.expect("worker task");
    assert!(
        matches!(result, Err(TxError::Superseded { .. })),
        "the late worker learns it was superseded: {result:?}"
    );
    assert!(
        get(store.as_ref(), &ns, "X").await.is_none(),
        "the deleted X stays deleted, without even a placeholder"
    );
    assert_eq!(balance(store.as_ref(), db, "A").await, 90, "debited once");
}

/// Issue: *tombstones grow without bound.* A hot account that every transfer
/// credits must stay the same size however many transactions touched it.
/// Returns its size in bytes after the last transfer.
pub async fn hot_document_stays_bounded<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
    transfers: usize,
) -> usize {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "hot", "balance": 0_i64 }).await;
    seed(
        store.as_ref(),
        &ns,
        doc! { "_id": "payer", "balance": i64::MAX / 2 },
    )
    .await;
    let coordinator = coordinator(store.clone(), db, factory.lease());
    let size = |d: Document| bson::to_vec(&d).expect("encoding").len();
    let mut first = None;
    for i in 0..transfers {
        coordinator
            .run(
                Transaction::new()
                    .change(DocumentChange::update(ns.clone(), "payer").inc("balance", -1_i64))
                    .change(DocumentChange::update(ns.clone(), "hot").inc("balance", 1_i64)),
            )
            .await
            .unwrap_or_else(|e| panic!("transfer {i}: {e}"));
        let hot = get(store.as_ref(), &ns, "hot").await.expect("hot account");
        let bytes = size(hot);
        match first {
            None => first = Some(bytes),
            Some(f) => assert_eq!(
                bytes,
                f,
                "after {} transfers the hot account is {bytes} bytes, after one it was {f}",
                i + 1
            ),
        }
    }
    assert_eq!(balance(store.as_ref(), db, "hot").await, transfers as i64);
    first.unwrap_or(0)
}

/// Issue: *garbage collection vs a stalled worker.* A worker is paused before
/// its apply; recovery rolls the transfer back; garbage collection removes
/// the record at the smallest age it allows; the worker's apply then reaches
/// the store. With tombstones removed by the collection, the debit of a
/// canceled transfer was taken, its marker orphaned. An age below the lease
/// plus the clock margin is refused.
pub async fn garbage_collection_then_late_apply<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 0_i64 }).await;
    let lease = factory.lease();
    let tx = Transaction::with_id("late-after-gc")
        .change(
            DocumentChange::update(ns.clone(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::update(ns.clone(), "B").inc("balance", 10_i64));
    let (release, run) = stalled(&store, db, lease, 2, tx).await;

    factory.pass(store.as_ref(), lease).await;
    let recovery = recovery(store.clone(), db, lease, PendingPolicy::RollBack);
    let report = recovery.run_once().await.expect("recovery pass");
    assert_eq!(report.canceled, 1, "{report:?}");

    let refused = recovery.collect_garbage(Duration::ZERO).await;
    assert!(
        matches!(&refused, Err(e) if e.kind == StoreErrorKind::BadRequest),
        "an age of zero is refused: {refused:?}"
    );
    assert_eq!(
        state_of(store.as_ref(), db, "late-after-gc").await,
        Some(TxState::Canceled)
    );
    factory.pass(store.as_ref(), lease).await;
    // No idempotency window: the record itself goes, not just its details.
    let collector = collector(store.clone(), db, lease, Duration::ZERO);
    let removed = collector.collect_garbage(lease).await.expect("collection");
    assert_eq!(removed, 1);
    assert_eq!(state_of(store.as_ref(), db, "late-after-gc").await, None);

    release.send(()).expect("the worker waits");
    let result = run.await.expect("worker task");
    assert!(
        result.is_err(),
        "the late worker does not commit: {result:?}"
    );
    let a = get(store.as_ref(), &ns, "A").await.expect("A");
    let b = get(store.as_ref(), &ns, "B").await.expect("B");
    assert!(!held(&a) && !held(&b), "no orphaned marker: {a} {b}");
    assert_eq!(
        balance(store.as_ref(), db, "A").await,
        100,
        "nothing debited"
    );
    assert_eq!(
        balance(store.as_ref(), db, "B").await,
        0,
        "nothing credited"
    );
}

/// Issue: *numeric ids.* `7_i32` and `7_i64` (and `7.0`, and the
/// `Decimal128` `7` or `7.00`) are one MongoDB document, and so are an
/// integer near 2^63 and the double of the same value; a transaction naming
/// one twice is refused before anything is written. (Where the two spellings
/// passed as two participants, the second's apply found the first's marker
/// and counted itself applied: a transaction committed with one change.)
pub async fn numeric_ids_are_one_document<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(
        store.as_ref(),
        &ns,
        doc! { "_id": 7_i64, "balance": 100_i64 },
    )
    .await;
    // Near 2^63 too, where an integral double is still exactly one integer.
    let big = 9_220_000_000_000_000_000_i64;
    seed(store.as_ref(), &ns, doc! { "_id": big, "balance": 100_i64 }).await;
    let coordinator = coordinator(store.clone(), db, factory.lease());
    let decimal = |s: &str| Bson::Decimal128(s.parse().expect("a decimal"));
    let twins = [
        (7_i64, Bson::Int32(7)),
        (7, Bson::Double(7.0)),
        (7, decimal("7")),
        (7, decimal("7.00")),
        (big, Bson::Double(big as f64)),
    ];
    // And a string with its deprecated twin type, which MongoDB compares as one.
    seed(store.as_ref(), &ns, doc! { "_id": "S", "balance": 100_i64 }).await;
    let tx = Transaction::new()
        .change(DocumentChange::update(ns.clone(), "S").inc("balance", -10_i64))
        .change(
            DocumentChange::update(ns.clone(), Bson::Symbol("S".into())).inc("balance", -10_i64),
        );
    let result = coordinator.run(tx).await;
    assert!(
        matches!(
            result,
            Err(TxError::Invalid(ChangeError::DuplicateParticipant { .. }))
        ),
        "a string and a symbol: {result:?}"
    );
    for (id, twin) in twins {
        let tx = Transaction::new()
            .change(DocumentChange::update(ns.clone(), id).inc("balance", -10_i64))
            .change(DocumentChange::update(ns.clone(), twin.clone()).inc("balance", -10_i64));
        let result = coordinator.run(tx).await;
        assert!(
            matches!(
                result,
                Err(TxError::Invalid(ChangeError::DuplicateParticipant { .. }))
            ),
            "{id} and {twin:?}: {result:?}"
        );
    }
    for id in [7, big] {
        let doc = store
            .find_one(&ns, doc! { "_id": id })
            .await
            .expect("read")
            .expect("the account");
        assert_eq!(doc.get_i64("balance").ok(), Some(100));
        assert!(!held(&doc));
    }
}

/// Issue: *same owner name and same transaction id.* A second coordinator,
/// given the same owner name, runs another transaction under the same id
/// while the first is in flight. It used to adopt the first's record and
/// apply its own changes under it; the record's creation token tells them
/// apart, and the second is told `Duplicate` having written nothing.
pub async fn same_owner_same_id<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 100_i64 }).await;
    let lease = factory.lease();
    let faulty = FaultStore::new(store.clone());
    let first = Coordinator::builder(faulty.clone())
        .database(db)
        .commit_point(CommitPoint::Done)
        .owner("shop")
        .lease(lease)
        .clock_margin(Duration::ZERO)
        .idempotency_window(Duration::ZERO)
        .build();
    first.register_lease().await.expect("registering the lease");
    let pause = faulty.pause_at(faulty.ops() + 2);
    let second = Coordinator::builder_shared(store.clone())
        .database(db)
        .owner("shop")
        .lease(lease)
        .clock_margin(Duration::ZERO)
        .idempotency_window(Duration::ZERO)
        .build();
    let debit = |id: &str| DocumentChange::update(ns.clone(), id).inc("balance", -10_i64);
    let tx1 = Transaction::with_id("order-1").change(debit("A"));
    let run = tokio::spawn(async move { first.run(tx1).await });
    pause.reached.await.expect("the first reaches its apply");

    let result = second
        .run(Transaction::with_id("order-1").change(debit("B")))
        .await;
    assert!(
        matches!(result, Err(TxError::Duplicate { .. })),
        "the second is refused: {result:?}"
    );
    let b = get(store.as_ref(), &ns, "B").await.expect("B");
    assert!(!held(&b), "nothing of the second was applied: {b}");
    assert_eq!(b.get_i64("balance").ok(), Some(100));

    pause.release.send(()).expect("the first waits");
    let receipt = run.await.expect("task").expect("the first commits");
    assert_eq!(receipt.state, TxState::Done);
    assert_eq!(balance(store.as_ref(), db, "A").await, 90);
    assert_eq!(balance(store.as_ref(), db, "B").await, 100);
}

/// Issue: *answers that claim too much.* With `CommitPoint::Done`, a store
/// that fails after the commit point used to make `run` answer `Interrupted`
/// for a committed transaction (a caller following the docs would pay again).
/// The answer is now the receipt, in state `applied`, and recovery finishes.
pub async fn committed_answer_after_failure<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 0_i64 }).await;
    let lease = factory.lease();
    // 1: the record; 2, 3: the applies; 4: `applied`; then the store is gone.
    let faulty = FaultStore::new(store.clone()).crash_after(4);
    let worker = coordinator(faulty, db, lease);
    let result = worker
        .run(
            Transaction::with_id("answered")
                .change(DocumentChange::update(ns.clone(), "A").inc("balance", -10_i64))
                .change(DocumentChange::update(ns.clone(), "B").inc("balance", 10_i64)),
        )
        .await;
    let receipt = result.expect("committed: the answer says so");
    assert_eq!(receipt.state, TxState::Applied);
    factory.pass(store.as_ref(), lease).await;
    let report = recovery(store.clone(), db, lease, PendingPolicy::RollBack)
        .run_once()
        .await
        .expect("recovery pass");
    assert_eq!(report.committed, 1, "{report:?}");
    assert_eq!(balance(store.as_ref(), db, "A").await, 90);
    assert_eq!(balance(store.as_ref(), db, "B").await, 10);
}

/// Issue: *a canceled insert burns the `_id`.* The placeholder a canceled
/// insert left (fenced by a tombstone until garbage collection, forever with
/// TTL expiry) kept any other writer from inserting that `_id`. Now nothing
/// is left: the `_id` is free the moment the transaction is canceled.
pub async fn canceled_insert_frees_the_id<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    let orders = Namespace::new(db, "orders");
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 5_i64 }).await;
    let coordinator = coordinator(store.clone(), db, factory.lease());
    for attempt in 0..2 {
        let result = coordinator
            .run(
                Transaction::new()
                    .change(DocumentChange::insert(
                        orders.clone(),
                        "o-1",
                        doc! { "amount": 10_i64 },
                    ))
                    .change(
                        DocumentChange::update(ns.clone(), "A")
                            .inc("balance", -10_i64)
                            .require_gte("balance", 10_i64),
                    ),
            )
            .await;
        assert!(
            matches!(result, Err(TxError::Canceled { .. })),
            "attempt {attempt}: {result:?}"
        );
        assert!(
            get(store.as_ref(), &orders, "o-1").await.is_none(),
            "attempt {attempt}: nothing left at o-1"
        );
    }
    store
        .insert_one(&orders, doc! { "_id": "o-1", "amount": 3_i64 })
        .await
        .expect("the _id is free for anyone");
}

/// Issue: *exclusivity was per marker field.* With two marker field names on
/// one collection, an exclusive change (a `set`) committed over a debit
/// pending under the other name, whose rollback could then change a document
/// the exclusive change had just closed. The count of pending transactions in
/// `_tandem.pending` knows no marker names: the exclusive change is refused.
pub async fn exclusive_change_sees_other_marker_fields<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(
        store.as_ref(),
        &ns,
        doc! { "_id": "A", "balance": 100_i64, "open": true },
    )
    .await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 0_i64 }).await;
    let lease = factory.lease();
    // 1: the record; 2, 3: the applies; 4: `applied`, held back.
    let mut debit = DocumentChange::update(ns.clone(), "A")
        .inc("balance", -10_i64)
        .require_gte("balance", 10_i64);
    debit.marker = "otherPending".into();
    let tx = Transaction::with_id("debit-other-marker")
        .change(debit)
        .change(DocumentChange::update(ns.clone(), "B").inc("balance", 10_i64));
    let (release, run) = stalled(&store, db, lease, 4, tx).await;

    let close = coordinator(store.clone(), db, lease)
        .run(
            Transaction::new().change(
                DocumentChange::update(ns.clone(), "A")
                    .set("open", false)
                    .require_eq("open", true),
            ),
        )
        .await;
    assert!(
        matches!(
            close,
            Err(TxError::Canceled {
                cause: crate::StepError::Conflict { .. },
                ..
            })
        ),
        "the exclusive change waits for the pending debit: {close:?}"
    );
    release.send(()).expect("the debit waits");
    let receipt = run.await.expect("task").expect("the debit commits");
    assert_eq!(receipt.state, TxState::Done);
    let a = get(store.as_ref(), &ns, "A").await.expect("A");
    assert_eq!(a.get_bool("open").ok(), Some(true));
    assert_eq!(a.get_i64("balance").ok(), Some(90));
    assert!(!held(&a), "{a}");
}

/// An operator cancels a transaction while its owner's apply is on its way
/// (paused before it reaches the store). A transaction commits at its
/// applies, so the cancel cannot decide before the owner's deadline: it
/// fences the owner's record moves and answers `pending`. The owner's apply
/// lands in time, so the owner answers committed, and recovery, after the
/// deadline, finds every apply landed and commits it. (Canceled at once, as
/// the protocol did when the commit point was the move to `applied`, the
/// owner's answer would be a lie.)
pub async fn cancel_while_the_owner_applies<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 0_i64 }).await;
    let lease = factory.lease();
    // 1: the record; 2: the apply of A; 3: the apply of B, held back.
    let tx = Transaction::with_id("canceled-in-flight")
        .change(
            DocumentChange::update(ns.clone(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::update(ns.clone(), "B").inc("balance", 10_i64));
    let (release, run) = stalled(&store, db, lease, 3, tx).await;

    let operator = coordinator(store.clone(), db, lease);
    let id = crate::TxId::new("canceled-in-flight").expect("id");
    let state = operator.cancel(&id, "operator").await.expect("cancel");
    assert_eq!(
        state,
        TxState::Pending,
        "undecided while the owner may apply"
    );
    release.send(()).expect("the owner waits");
    let result = run.await.expect("task");
    assert!(
        matches!(&result, Ok(receipt) if receipt.state == TxState::Applied),
        "every apply landed: committed, finished by recovery: {result:?}"
    );
    // Both the owner's and the canceler's leases run out; recovery finishes.
    factory.pass(store.as_ref(), lease).await;
    factory.pass(store.as_ref(), lease).await;
    let report = recovery(store.clone(), db, lease, PendingPolicy::RollBack)
        .run_once()
        .await
        .expect("recovery pass");
    assert_eq!(report.failed + report.waiting, 0, "{report:?}");
    assert_eq!(
        state_of(store.as_ref(), db, "canceled-in-flight").await,
        Some(TxState::Done)
    );
    for id in ["A", "B"] {
        let d = get(store.as_ref(), &ns, id).await.expect("account");
        assert!(!held(&d), "nothing of the transfer stays in flight: {d}");
    }
    assert_eq!(balance(store.as_ref(), db, "A").await, 90);
    assert_eq!(balance(store.as_ref(), db, "B").await, 10);
}

/// Issue: *two deferred credits overflow together.* Each credit used to be
/// checked against the ceiling alone: two pending credits near `i64::MAX`
/// both passed, and the second to land at commit overflowed, leaving a
/// committed transaction stuck `applied` with its credit never landed. The
/// credits pending on a field are summed (`_tandem.credit.<path>`), and a
/// credit that would not fit with them is refused at apply, as is a native
/// credit that would leave them no room.
pub async fn credits_near_the_limit_are_counted_together<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    let start = i64::MAX - 150;
    seed(store.as_ref(), &ns, doc! { "_id": "H", "balance": start }).await;
    seed(
        store.as_ref(),
        &ns,
        doc! { "_id": "P", "balance": 1000_i64 },
    )
    .await;
    seed(
        store.as_ref(),
        &ns,
        doc! { "_id": "Q", "balance": 1000_i64 },
    )
    .await;
    let lease = factory.lease();
    let faulty = FaultStore::new(store.clone());
    // 1: the record; 2, 3: the applies; 4: `applied`, held back.
    let pause = faulty.pause_at(4);
    let worker = coordinator(faulty, db, lease);
    let credit = |from: &str| {
        Transaction::new()
            .change(
                DocumentChange::update(ns.clone(), from)
                    .inc("balance", -100_i64)
                    .require_gte("balance", 100_i64),
            )
            .change(DocumentChange::update(ns.clone(), "H").inc("balance", 100_i64))
    };
    let first = credit("P");
    let run = tokio::spawn(async move { worker.run(first).await });
    pause.reached.await.expect("the first credit is pending");

    let other = coordinator(store.clone(), db, lease);
    let second = other.run(credit("Q")).await;
    assert!(
        matches!(
            second,
            Err(TxError::Canceled {
                cause: crate::StepError::Overflow { .. },
                ..
            })
        ),
        "the second credit does not fit with the first: {second:?}"
    );
    if store.native().is_some() {
        let native = other
            .run(credit("Q").strategy(crate::Strategy::Native))
            .await;
        assert!(
            matches!(native, Err(TxError::Canceled { .. })),
            "a native credit leaves room for the pending one: {native:?}"
        );
    }
    pause.release.send(()).expect("the first waits");
    let receipt = run.await.expect("task").expect("the first credit commits");
    assert_eq!(receipt.state, TxState::Done);
    assert_eq!(balance(store.as_ref(), db, "H").await, start + 100);
    assert_eq!(balance(store.as_ref(), db, "Q").await, 1000);
    let h = get(store.as_ref(), &ns, "H").await.expect("H");
    assert!(!held(&h), "{h}");
    assert_eq!(
        h.get_document("_tandem")
            .and_then(|t| t.get_document("credit"))
            .and_then(|c| c.get_i64("balance"))
            .ok(),
        Some(0),
        "nothing pending any more: {h}"
    );
}

/// Issue: *rollback clobbers writes made outside tandem.* A transaction sets an
/// order `Paid` and dies; before recovery undoes it, plain application code
/// (not tandem) ships the order. Restoring the before-image (`UnPaid`) used to
/// overwrite that write. Now the undo leaves the field as that writer set it,
/// removes everything else of the transaction, ends it `canceled`, and notes
/// the conflict in the record's history.
pub async fn undo_keeps_writes_made_outside_tandem<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let (store, orders) = order_applied_then_dead(
        factory,
        db,
        "shipped-meanwhile",
        doc! { "_id": "o-1", "state": "UnPaid", "note": "keep" },
        |orders| {
            DocumentChange::update(orders, "o-1")
                .set("state", "Paid")
                .set("note", "paid")
                .require_eq("state", "UnPaid")
        },
    )
    .await;
    let paid = get(store.as_ref(), &orders, "o-1").await.expect("order");
    assert_eq!(paid.get_str("state").ok(), Some("Paid"), "{paid}");
    // Application code writes the order without tandem.
    let record = written_over_then_rolled_back(
        factory,
        &store,
        db,
        "shipped-meanwhile",
        doc! { "$set": { "state": "Shipped" } },
    )
    .await;
    let order = get(store.as_ref(), &orders, "o-1").await.expect("order");
    assert_eq!(
        order.get_str("state").ok(),
        Some("Shipped"),
        "the outside write stays: {order}"
    );
    assert_eq!(
        order.get_str("note").ok(),
        Some("keep"),
        "the rest is undone: {order}"
    );
    assert!(!held(&order), "{order}");
    assert_eq!(record.state, TxState::Canceled);
    let conflicts = record.conflicts();
    assert_eq!(conflicts.len(), 1, "{:?}", record.history);
    assert!(
        conflicts[0].contains("state (found \"Shipped\")"),
        "{conflicts:?}"
    );
    let a = get(store.as_ref(), &orders, "A").await.expect("A");
    assert_eq!(a.get_i64("balance").ok(), Some(100));
}

/// An exclusive change restores its increments from the before-image; an
/// increment made outside tandem meanwhile (a page counter's `$inc`) is
/// kept: the undo then takes this transaction's increment back by adding,
/// and the rest is restored. (Restored whole, the outside increment was
/// lost.)
pub async fn undo_keeps_an_outside_increment<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let (store, orders) = order_applied_then_dead(
        factory,
        db,
        "counted-meanwhile",
        doc! { "_id": "o-1", "state": "UnPaid", "visits": 3_i32 },
        |orders| {
            DocumentChange::update(orders, "o-1")
                .set("state", "Paid")
                .inc("visits", 1_i32)
                .require_eq("state", "UnPaid")
        },
    )
    .await;
    let paid = get(store.as_ref(), &orders, "o-1").await.expect("order");
    assert_eq!(paid.get_i32("visits").ok(), Some(4), "{paid}");
    let record = written_over_then_rolled_back(
        factory,
        &store,
        db,
        "counted-meanwhile",
        doc! { "$inc": { "visits": 5_i32 } },
    )
    .await;
    let order = get(store.as_ref(), &orders, "o-1").await.expect("order");
    assert_eq!(
        order.get("visits"),
        Some(&Bson::Int32(8)),
        "the outside increment stays, this one goes: {order}"
    );
    assert_eq!(order.get_str("state").ok(), Some("UnPaid"), "{order}");
    assert!(!held(&order), "{order}");
    assert_eq!(record.state, TxState::Canceled);
    assert!(record.conflicts().is_empty(), "{:?}", record.history);
}

/// Seeds `order` and an account `A` in `orders`, then runs transaction `id`:
/// the order's change, and a debit of `A`. Its coordinator dies after the
/// order's apply (1: the order's before-image; 2: the record; 3: the
/// order's apply), so it is left in flight. Returns the store and `orders`.
async fn order_applied_then_dead<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
    id: &str,
    order: Document,
    change: impl FnOnce(Namespace) -> DocumentChange,
) -> (Arc<dyn Store>, Namespace) {
    let store = factory.fresh().await;
    let orders = Namespace::new(db, "orders");
    seed(store.as_ref(), &orders, order).await;
    // In the same collection, so that the two applies go out in order.
    seed(
        store.as_ref(),
        &orders,
        doc! { "_id": "A", "balance": 100_i64 },
    )
    .await;
    let faulty = FaultStore::new(store.clone());
    let worker = coordinator(faulty.clone(), db, factory.lease());
    // Counted from the transaction's first operation, after its lease.
    worker
        .register_lease()
        .await
        .expect("registering the lease");
    let _ = faulty.clone().crash_after(faulty.ops() + 3);
    let result = worker
        .run(
            Transaction::with_id(id)
                .change(change(orders.clone()))
                .change(
                    DocumentChange::update(orders.clone(), "A")
                        .inc("balance", -10_i64)
                        .require_gte("balance", 10_i64),
                ),
        )
        .await;
    assert!(
        matches!(result, Err(TxError::Interrupted { .. })),
        "{result:?}"
    );
    (store, orders)
}

/// Writes the order outside tandem (`write`), lets the lease pass, rolls
/// transaction `id` back with one recovery pass, and returns its record.
async fn written_over_then_rolled_back<F: StoreFactory + ?Sized>(
    factory: &F,
    store: &Arc<dyn Store>,
    db: &str,
    id: &str,
    write: Document,
) -> crate::TxRecord {
    store
        .update_one(
            &Namespace::new(db, "orders"),
            doc! { "_id": "o-1" },
            write,
            crate::store::UpdateOptions::default(),
        )
        .await
        .expect("a plain write");
    let lease = factory.lease();
    factory.pass(store.as_ref(), lease).await;
    let report = recovery(store.clone(), db, lease, PendingPolicy::RollBack)
        .run_once()
        .await
        .expect("recovery pass");
    assert_eq!((report.canceled, report.failed), (1, 0), "{report:?}");
    store
        .find_one(&Namespace::new(db, "transactions"), doc! { "_id": id })
        .await
        .expect("read")
        .map(|d| crate::TxRecord::from_document(d).expect("record"))
        .expect("the record")
}

/// Issue: *idempotency keys expire with their records.* A payment run with a
/// caller-chosen id commits; garbage collection removes its record at the
/// smallest age it allows; the caller retries with the same id. It used to
/// run again (paying twice, or told `Canceled` by a guard the first payment
/// had used up). Now the record becomes a stub holding its id and outcome for
/// the idempotency window, and the retry is told `Duplicate` with `done`.
/// Returns nothing; after the window the stub goes too.
pub async fn idempotency_key_outlives_garbage_collection<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 0_i64 }).await;
    let lease = factory.lease();
    let coordinator = coordinator(store.clone(), db, lease);
    let pay = || {
        Transaction::with_id("pay-7")
            .change(
                DocumentChange::update(ns.clone(), "A")
                    .inc("balance", -60_i64)
                    .require_gte("balance", 60_i64),
            )
            .change(DocumentChange::update(ns.clone(), "B").inc("balance", 60_i64))
    };
    coordinator.run(pay()).await.expect("the payment commits");
    // A transaction with a generated id, collected without a stub.
    coordinator
        .run(
            Transaction::new()
                .change(DocumentChange::update(ns.clone(), "B").inc("balance", 1_i64)),
        )
        .await
        .expect("a second transaction");
    let window = lease * 3;
    let collector = collector(store.clone(), db, lease, window);
    factory.pass(store.as_ref(), lease).await;
    assert_eq!(
        collector.collect_garbage(lease).await.expect("collection"),
        2
    );
    let records = Namespace::new(db, "transactions");
    let left = store
        .find(&records, doc! {}, crate::store::FindOptions::default())
        .await
        .expect("records");
    assert_eq!(
        left.len(),
        1,
        "only the keyed one stays, as a stub: {left:?}"
    );
    let stub = crate::TxRecord::from_document(left[0].clone()).expect("a stub reads as a record");
    assert_eq!((stub.id.as_str(), stub.state), ("pay-7", TxState::Done));
    assert!(stub.participants.is_empty() && stub.stub_until.is_some());

    let retry = coordinator.run(pay()).await;
    assert!(
        matches!(
            retry,
            Err(TxError::Duplicate {
                state: Some(TxState::Done),
                ..
            })
        ),
        "the retry is told the first run's outcome: {retry:?}"
    );
    assert_eq!(balance(store.as_ref(), db, "A").await, 40, "paid once");
    assert_eq!(balance(store.as_ref(), db, "B").await, 61);

    factory.pass(store.as_ref(), window).await;
    assert_eq!(
        collector.collect_garbage(lease).await.expect("collection"),
        1
    );
    assert_eq!(
        state_of(store.as_ref(), db, "pay-7").await,
        None,
        "the window has passed"
    );
}

/// Issue: *residue of a rolled-back credit.* A credit to a missing field used
/// to create the field as `0` when applied (a type check), which the undo left
/// behind, and which an `exists` guard of another transaction counted while
/// the credit was pending. Now the type is checked by the filter, and the
/// field appears only when the credit lands.
pub async fn a_pending_credit_creates_no_field<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 5_i64 }).await;
    let lease = factory.lease();
    // 1: the record; 2, 3: the applies; 4: `applied`, held back.
    let tx = Transaction::with_id("bonus")
        .change(
            DocumentChange::update(ns.clone(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::update(ns.clone(), "B").inc("bonus", 10_i64));
    let (release, run) = stalled(&store, db, lease, 4, tx).await;
    let b = get(store.as_ref(), &ns, "B").await.expect("B");
    assert!(held(&b), "the credit is applied: {b}");
    assert!(b.get("bonus").is_none(), "no field before the commit: {b}");
    let guarded = coordinator(store.clone(), db, lease)
        .run(
            Transaction::new().change(
                DocumentChange::update(ns.clone(), "B")
                    .inc("balance", 1_i64)
                    .require_exists("bonus"),
            ),
        )
        .await;
    assert!(
        matches!(
            guarded,
            Err(TxError::Canceled {
                cause: crate::StepError::GuardFailed { .. },
                ..
            })
        ),
        "an exists guard does not count the pending credit: {guarded:?}"
    );
    // The worker dies here, after its applies: the transfer committed at
    // them, and recovery finishes it (rolling back only what never applied
    // everywhere), landing the credit at the clear.
    std::mem::forget(release);
    run.abort();
    let _ = run.await;
    factory.pass(store.as_ref(), lease).await;
    let report = recovery(store.clone(), db, lease, PendingPolicy::RollBack)
        .run_once()
        .await
        .expect("recovery pass");
    assert_eq!(report.committed, 1, "{report:?}");
    let b = get(store.as_ref(), &ns, "B").await.expect("B");
    assert!(!held(&b), "{b}");
    assert_eq!(b.get_i64("bonus").ok(), Some(10), "the credit landed: {b}");
    assert_eq!(balance(store.as_ref(), db, "A").await, 90);
}

/// Model finding: *a create that arrives after its record was collected.*
/// The request that writes a transaction's record is delivered twice (a
/// retry after a lost answer got through first and the network delivered the
/// original late): the transaction commits, its record is collected, then
/// the late copy writes the record again, `pending` at epoch 0. Before
/// records carried a create deadline, recovery rolled it forward and paid a
/// second time. Now the late record is inert: recovery cancels it without
/// touching a document.
pub async fn late_create_after_collection<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 0_i64 }).await;
    let lease = factory.lease();
    let faulty = FaultStore::new(store.clone()).keeping_upserts();
    let coordinator = coordinator(faulty.clone(), db, lease);
    let receipt = coordinator
        .run(
            Transaction::new()
                .change(
                    DocumentChange::update(ns.clone(), "A")
                        .inc("balance", -10_i64)
                        .require_gte("balance", 10_i64),
                )
                .change(DocumentChange::update(ns.clone(), "B").inc("balance", 10_i64)),
        )
        .await
        .expect("the transfer commits");
    assert_eq!(receipt.state, TxState::Done);
    let records = Namespace::new(db, "transactions");
    let create = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == records)
        .expect("the record was written by an upsert");

    factory.pass(store.as_ref(), lease).await;
    let collector = recovery(store.clone(), db, lease, PendingPolicy::RollForward);
    assert_eq!(
        collector.collect_garbage(lease).await.expect("collection"),
        1
    );
    assert_eq!(
        state_of(store.as_ref(), db, receipt.id.as_str()).await,
        None
    );

    let again = faulty
        .deliver_again(&create)
        .await
        .expect("the late copy is written");
    let again =
        crate::TxRecord::from_document(again.expect("the record as written")).expect("a record");
    assert!(
        again.is_inert(),
        "written after its create deadline: {again:?}"
    );

    factory.pass(store.as_ref(), lease).await;
    let report = collector.run_once().await.expect("recovery pass");
    assert_eq!(
        state_of(store.as_ref(), db, receipt.id.as_str()).await,
        Some(TxState::Canceled),
        "{report:?}"
    );
    assert_eq!(balance(store.as_ref(), db, "A").await, 90, "debited once");
    assert_eq!(balance(store.as_ref(), db, "B").await, 10, "credited once");
    let a = get(store.as_ref(), &accounts(db), "A").await.expect("A");
    let b = get(store.as_ref(), &accounts(db), "B").await.expect("B");
    assert!(!held(&a) && !held(&b), "nothing left on documents: {a} {b}");
}

/// Review finding: *a stalled worker moving the inert copy of its record.*
/// The create loses its answer (its request kept) and is sent again; both
/// applies land; the coordinator, committing at the move to `applied`,
/// stalls right before that move. Recovery rolls the transaction back and
/// the record is collected; then the first create request lands, writing an
/// inert record with the live one's id, token, epoch and state. The stalled
/// move named only those and landed on the copy: the coordinator finished
/// it and answered committed, with nothing applied. Moves now name the live
/// record's `created` stamp: the coordinator answers `Superseded`, the copy
/// stays for recovery to cancel, and the balances are untouched.
pub async fn stale_move_misses_the_inert_copy<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 0_i64 }).await;
    let lease = factory.lease();
    // 1 the create (answer lost, request kept), 2 the create again, 3 and 4
    // the applies, 5 the move to `applied`.
    let faulty = FaultStore::new(store.clone()).keeping_upserts().lose_at(1);
    let pause = faulty.pause_at(5);
    let worker = Coordinator::builder(faulty.clone())
        .database(db)
        .lease(lease)
        .clock_margin(Duration::ZERO)
        .idempotency_window(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .early_commit(false)
        .build();
    let tx = Transaction::new()
        .change(
            DocumentChange::update(ns.clone(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::update(ns.clone(), "B").inc("balance", 10_i64));
    let run = tokio::spawn(async move { worker.run(tx).await });
    pause
        .reached
        .await
        .expect("the worker reaches its move to `applied`");
    assert_eq!(
        balance(store.as_ref(), db, "A").await,
        90,
        "A's debit applied"
    );

    factory.pass(store.as_ref(), lease).await;
    let rescuer = recovery(store.clone(), db, lease, PendingPolicy::RollBack);
    let report = rescuer.run_once().await.expect("recovery pass");
    assert_eq!(report.canceled, 1, "{report:?}");
    factory.pass(store.as_ref(), lease).await;
    assert_eq!(rescuer.collect_garbage(lease).await.expect("collection"), 1);
    let records = Namespace::new(db, "transactions");
    let create = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == records)
        .expect("the record was written by an upsert");
    let copy = faulty
        .deliver_again(&create)
        .await
        .expect("the late copy is written")
        .expect("the record as written");
    let copy = crate::TxRecord::from_document(copy).expect("a record");
    assert!(
        copy.is_inert(),
        "written after its create deadline: {copy:?}"
    );

    pause.release.send(()).expect("the worker waits");
    let answer = run.await.expect("the worker's task");
    assert!(
        matches!(answer, Err(TxError::Superseded { .. })),
        "answered {answer:?} for a transfer recovery rolled back"
    );
    assert_eq!(
        state_of(store.as_ref(), db, copy.id.as_str()).await,
        Some(TxState::Pending),
        "the inert copy was not moved"
    );
    factory.pass(store.as_ref(), lease).await;
    rescuer.run_once().await.expect("recovery pass");
    assert_eq!(
        state_of(store.as_ref(), db, copy.id.as_str()).await,
        Some(TxState::Canceled)
    );
    assert_eq!(
        balance(store.as_ref(), db, "A").await,
        100,
        "nothing applied"
    );
    assert_eq!(balance(store.as_ref(), db, "B").await, 0, "nothing applied");
    let a = get(store.as_ref(), &accounts(db), "A").await.expect("A");
    let b = get(store.as_ref(), &accounts(db), "B").await.expect("B");
    assert!(!held(&a) && !held(&b), "nothing left on documents: {a} {b}");
}

/// Model finding: *a transaction id used again.* A worker of a transfer
/// with a caller-chosen id stalls right before it clears its markers (the
/// deferred credit lands with the clear); recovery finishes the transfer and
/// its record is collected without a stub; a second transfer under the same
/// id applies and stalls before its own clear; then the first worker's clear
/// arrives. When markers held the bare id, it matched the second
/// transaction's marker: the first credit landed twice and the second's
/// marker was gone. Markers now carry the record's creation token
/// (`<id>#<tag>`), and the late clear matches nothing.
pub async fn reused_id_keeps_markers_apart<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 0_i64 }).await;
    let lease = factory.lease();
    let pay = |amount: i64| {
        Transaction::with_id("reused")
            .change(
                DocumentChange::update(ns.clone(), "A")
                    .inc("balance", -amount)
                    .require_gte("balance", amount),
            )
            .change(DocumentChange::update(ns.clone(), "B").inc("balance", amount))
    };
    // Operations of a run: 1 create, 2 and 3 the applies, 4 `applied`, 5
    // and 6 the clears (A's, then B's, which lands the credit), 7 `done`.
    let (first_release, first_run) = stalled(&store, db, lease, 6, pay(10)).await;

    factory.pass(store.as_ref(), lease).await;
    let collector = collector(store.clone(), db, lease, Duration::ZERO);
    let report = collector.run_once().await.expect("recovery pass");
    assert_eq!(report.committed, 1, "{report:?}");
    factory.pass(store.as_ref(), lease).await;
    assert_eq!(
        collector.collect_garbage(lease).await.expect("collection"),
        1
    );
    assert_eq!(balance(store.as_ref(), db, "B").await, 10);

    let (second_release, second_run) = stalled(&store, db, lease, 6, pay(5)).await;

    first_release.send(()).expect("the first worker waits");
    let _ = first_run.await.expect("first worker task");
    assert_eq!(
        balance(store.as_ref(), db, "B").await,
        10,
        "the first transfer's late clear credits nothing again"
    );
    let b = get(store.as_ref(), &ns, "B").await.expect("B");
    assert!(held(&b), "the second transfer's marker stays: {b}");

    second_release.send(()).expect("the second worker waits");
    let receipt = second_run
        .await
        .expect("second worker task")
        .expect("the second transfer commits");
    assert_eq!(receipt.state, TxState::Done);
    assert_eq!(balance(store.as_ref(), db, "A").await, 85);
    assert_eq!(balance(store.as_ref(), db, "B").await, 15);
    let b = get(store.as_ref(), &ns, "B").await.expect("B");
    assert!(!held(&b), "nothing left: {b}");
}

/// Review finding: *our own record taken for another transaction's.* The
/// request that writes a transaction's record loses its answer; the retry
/// meets another transaction's record under the id (a caller-chosen id whose
/// earlier use is about to be collected) and waits out the create deadline,
/// as an earlier attempt of its own may still land. It does: the other
/// record is collected and the first request arrives in time, live. Before,
/// the coordinator answered `Duplicate` ("this transaction wrote nothing")
/// without looking again, and recovery, which rolls a record that commits at
/// the move to `applied` forward, then made the transfer: answered as not
/// made, made. Now it looks again, finds its own record, and goes on with it.
pub async fn own_record_landing_while_the_id_is_taken<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "B", "balance": 0_i64 }).await;
    let lease = factory.lease();
    let pay = move |amount: i64| {
        Transaction::with_id("taken")
            .change(
                DocumentChange::update(ns.clone(), "A")
                    .inc("balance", -amount)
                    .require_gte("balance", amount),
            )
            .change(DocumentChange::update(ns.clone(), "B").inc("balance", amount))
    };
    let first = coordinator(store.clone(), db, lease)
        .run(pay(10))
        .await
        .expect("the first use of the id commits");
    assert_eq!(first.state, TxState::Done);
    factory.pass(store.as_ref(), lease).await;

    // The second use of the id: its record's create (operation 1) loses its
    // answer; the retry (2) meets the first record; the look at it (3); the
    // wait for the create deadline reads the clock (4): stopped there.
    let faulty = FaultStore::new(store.clone()).keeping_upserts();
    let second = Coordinator::builder(faulty.clone())
        .database(db)
        .lease(lease)
        .clock_margin(Duration::ZERO)
        .idempotency_window(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .early_commit(false)
        .build();
    // Counted from the transaction's first operation, after its lease.
    second
        .register_lease()
        .await
        .expect("registering the lease");
    let base = faulty.ops();
    let faulty = faulty.lose_at(base + 1);
    let pause = faulty.pause_at(base + 4);
    let run = tokio::spawn(async move { second.run(pay(5)).await });
    pause
        .reached
        .await
        .expect("the retry waits for the create deadline");

    // The first record is collected, and the lost create arrives, in time.
    let collector = collector(store.clone(), db, lease, Duration::ZERO);
    assert_eq!(
        collector.collect_garbage(lease).await.expect("collection"),
        1
    );
    let records = Namespace::new(db, "transactions");
    let create = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == records)
        .expect("the lost create was kept");
    let landed = faulty
        .deliver_again(&create)
        .await
        .expect("the lost create lands")
        .expect("the record as written");
    assert!(
        !crate::TxRecord::from_document(landed)
            .expect("a record")
            .is_inert(),
        "it arrived before its create deadline"
    );
    pause.release.send(()).expect("the coordinator waits");
    factory.pass(store.as_ref(), lease).await;
    let answer = run.await.expect("the coordinator's task");

    factory.pass(store.as_ref(), lease).await;
    let report = recovery(store.clone(), db, lease, PendingPolicy::RollForward)
        .run_once()
        .await
        .expect("recovery pass");
    let (a, b) = (
        balance(store.as_ref(), db, "A").await,
        balance(store.as_ref(), db, "B").await,
    );
    match &answer {
        Ok(receipt) => assert_eq!((a, b), (85, 15), "{receipt:?}, {report:?}"),
        // `Interrupted` claims nothing; any other refusal says nothing was made.
        Err(TxError::Interrupted { .. }) => {}
        Err(e) => assert_eq!((a, b), (90, 10), "answered {e}, yet: {report:?}"),
    }
    assert_eq!(a + b, 100, "no money made or lost: {report:?}");
    let a = get(store.as_ref(), &accounts(db), "A").await.expect("A");
    let b = get(store.as_ref(), &accounts(db), "B").await.expect("B");
    assert!(!held(&a) && !held(&b), "nothing left on documents: {a} {b}");
}

/// Issue: *an undo changes a stored value's type.* Equality holds between
/// values of other types at any depth (`{qty: 5}` and `{qty: 5.0}`; a symbol
/// and a string of the same text), so a guard taken as the before-image, or
/// an image read and then changed by an outside write of an equal value of
/// another type, made the undo of a canceled transaction write the other
/// type. A guard holding a number at any depth is no image (it is read), a
/// string guard requires a string (a symbol is refused, typed, with either
/// strategy), and an image read requires the stored types still.
pub async fn before_images_keep_the_stored_types<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let products = Namespace::new(db, "products");
    for d in [
        doc! { "_id": "d", "spec": { "qty": 5.0_f64 } },
        doc! { "_id": "s", "state": Bson::Symbol("open".into()) },
    ] {
        seed(store.as_ref(), &products, d).await;
    }
    let missing = || DocumentChange::update(accounts(db), "missing").inc("balance", 1_i64);
    let lease = factory.lease();
    let plain = coordinator(store.clone(), db, lease);

    // A document guard holding a number: the image is read, and kept.
    let answer = plain
        .run(
            Transaction::new()
                .change(
                    DocumentChange::update(products.clone(), "d")
                        .set("spec", doc! { "qty": 6_i64 })
                        .require_eq("spec", doc! { "qty": 5_i64 }),
                )
                .change(missing()),
        )
        .await;
    assert!(
        matches!(answer, Err(TxError::Canceled { .. })),
        "{answer:?}"
    );
    plain.drain().await;
    let d = get(store.as_ref(), &products, "d").await.expect("d");
    assert_eq!(
        d.get_document("spec").ok().and_then(|s| s.get("qty")),
        Some(&Bson::Double(5.0)),
        "the undo kept the stored type: {d}"
    );

    // A string guard on a symbol: refused, typed, with either strategy.
    // (Where the server keeps symbols: SecantusDB stores a string instead,
    // `a_symbol_differs_between_servers` in tandem-mongodb's tests.)
    let s = get(store.as_ref(), &products, "s").await.expect("s");
    let symbols_kept = matches!(s.get("state"), Some(Bson::Symbol(_)));
    for strategy in [crate::Strategy::TwoPhase, crate::Strategy::Native] {
        if !symbols_kept {
            break;
        }
        let answer = plain
            .run(
                Transaction::new().strategy(strategy).change(
                    DocumentChange::update(products.clone(), "s")
                        .set("state", "closed")
                        .require_eq("state", "open"),
                ),
            )
            .await;
        assert!(
            matches!(
                &answer,
                Err(TxError::Canceled {
                    cause: crate::StepError::TypeMismatch { .. },
                    ..
                })
            ),
            "{strategy:?}: {answer:?}"
        );
    }
    plain.drain().await;
    let s = get(store.as_ref(), &products, "s").await.expect("s");
    if symbols_kept {
        assert_eq!(s.get("state"), Some(&Bson::Symbol("open".into())), "{s}");
    }

    // An image read, then an outside write of a value equal to it in a
    // query (another numeric type; an array holding it) before the apply:
    // the apply no longer matches, and the outside write stays.
    let dbref = |id: Bson| Bson::Document(doc! { "$ref": "users", "$id": id });
    let cases = [
        ("size", Bson::Double(5.0), Bson::Int64(5)),
        ("tags", bson::bson!(["x"]), bson::bson!([["x"]])),
        ("tags", bson::bson!([]), bson::bson!([[]])),
        ("m", bson::bson!({ "0": "x" }), bson::bson!([{ "0": "x" }])),
        ("owner", dbref(Bson::Int32(5)), dbref(Bson::Double(5.0))),
    ];
    for (i, (field, read, outside)) in cases.into_iter().enumerate() {
        let id = format!("r{i}");
        seed(
            store.as_ref(),
            &products,
            doc! { "_id": id.as_str(), field: read.clone() },
        )
        .await;
        let (release, run) = stalled(
            &store,
            db,
            lease,
            3, // 1: the image read; 2: the record; 3: the apply
            Transaction::new()
                .change(DocumentChange::update(products.clone(), id.as_str()).set(field, "y"))
                .change(missing()),
        )
        .await;
        store
            .update_one(
                &products,
                doc! { "_id": id.as_str() },
                doc! { "$set": { field: outside.clone() } },
                crate::store::UpdateOptions::default(),
            )
            .await
            .expect("the outside write");
        let _ = release.send(());
        let answer = run.await.expect("the worker");
        assert!(answer.is_err(), "{field} = {read}: {answer:?}");
        plain.drain().await;
        let r = get(store.as_ref(), &products, &id).await.expect("r");
        assert_eq!(
            r.get(field),
            Some(&outside),
            "{field} read as {read}: the outside write stays: {r}"
        );
    }
}

/// A before-image of a path through an array (`items.0.tags`, `n.0`) that
/// is an array: the apply compares the element the update reaches (element
/// 0 of an array, the field `0` of a document), not the field `0` of each
/// element as an aggregation field path reads it, so the change commits;
/// a canceled one is undone; and an outside write of an array holding the
/// image, landing between the image read and the apply, is not overwritten.
pub async fn images_of_paths_through_arrays<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let products = Namespace::new(db, "products");
    for d in [
        doc! { "_id": "p", "items": [{ "tags": ["a"] }], "n": [["x"]] },
        doc! { "_id": "q", "items": { "0": { "tags": ["a"] } } },
    ] {
        seed(store.as_ref(), &products, d).await;
    }
    let lease = factory.lease();
    let plain = coordinator(store.clone(), db, lease);
    let set = |id: &str, path: &str, value: Bson| {
        DocumentChange::update(products.clone(), id).set(path, value)
    };
    let missing = || DocumentChange::update(accounts(db), "missing").inc("balance", 1_i64);

    // Committed: element 0 of an array; the field `0` of a document.
    for (id, path, value) in [
        ("p", "items.0.tags", bson::bson!(["b"])),
        ("p", "n.0", bson::bson!(["y"])),
        ("q", "items.0.tags", bson::bson!(["b"])),
    ] {
        let answer = plain
            .run(Transaction::new().change(set(id, path, value.clone())))
            .await;
        assert!(answer.is_ok(), "{id} {path}: {answer:?}");
        plain.drain().await;
        let d = get(store.as_ref(), &products, id)
            .await
            .expect("the document");
        assert_eq!(
            crate::query::lookup(&d, path),
            Some(&value),
            "{id} {path}: {d}"
        );
    }

    // Canceled: undone.
    let answer = plain
        .run(
            Transaction::new()
                .change(set("p", "items.0.tags", bson::bson!(["c"])))
                .change(missing()),
        )
        .await;
    assert!(
        matches!(answer, Err(TxError::Canceled { .. })),
        "{answer:?}"
    );
    plain.drain().await;
    let p = get(store.as_ref(), &products, "p").await.expect("p");
    assert_eq!(
        crate::query::lookup(&p, "items.0.tags"),
        Some(&bson::bson!(["b"])),
        "undone: {p}"
    );

    // An outside write of an array holding the image, between the image
    // read and the apply: the apply does not match, the write stays.
    let (release, run) = stalled(
        &store,
        db,
        lease,
        3, // 1: the image read; 2: the record; 3: the apply
        Transaction::new()
            .change(set("p", "items.0.tags", bson::bson!(["d"])))
            .change(missing()),
    )
    .await;
    store
        .update_one(
            &products,
            doc! { "_id": "p" },
            doc! { "$set": { "items.0.tags": [["b"]] } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .expect("the outside write");
    let _ = release.send(());
    let answer = run.await.expect("the worker");
    assert!(answer.is_err(), "{answer:?}");
    plain.drain().await;
    let p = get(store.as_ref(), &products, "p").await.expect("p");
    assert_eq!(
        crate::query::lookup(&p, "items.0.tags"),
        Some(&bson::bson!([["b"]])),
        "the outside write stays: {p}"
    );
}

/// A canceled transaction leaves its documents as it found them, also what
/// its changes created on the way: a `set` under a missing parent (the
/// parent goes), past the end of an array (the padding goes), and an
/// `unset` of an array's element (the element comes back, where MongoDB's
/// `$unset` left a null); nobody else wrote, and no conflict is reported.
pub async fn a_canceled_change_leaves_nothing_on_the_way<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let orders = Namespace::new(db, "orders");
    let order = doc! { "_id": "o1", "state": "UnPaid", "tags": ["a", "b"] };
    seed(store.as_ref(), &orders, order.clone()).await;
    let plain = coordinator(store.clone(), db, factory.lease());
    let missing = || DocumentChange::update(accounts(db), "missing").inc("balance", 1_i64);
    for change in [
        DocumentChange::update(orders.clone(), "o1")
            .set("shipping.carrier", "UPS")
            .set("tags.4", "gift"),
        DocumentChange::update(orders.clone(), "o1").unset("tags.0"),
        // A guard that the field is missing says nothing of its parent.
        DocumentChange::update(orders.clone(), "o1")
            .set("shipping.carrier", "UPS")
            .require_missing("shipping.carrier"),
    ] {
        let answer = plain
            .run(Transaction::new().change(change).change(missing()))
            .await;
        assert!(
            matches!(answer, Err(TxError::Canceled { .. })),
            "{answer:?}"
        );
        plain.drain().await;
        let after = get(store.as_ref(), &orders, "o1").await.expect("o1");
        assert_eq!(after.get("shipping"), None, "{after}");
        assert_eq!(after.get("tags"), order.get("tags"), "{after}");
        let id = match &answer {
            Err(e) => e.id().cloned().expect("an id"),
            Ok(_) => unreachable!(),
        };
        let record = plain.record(&id).await.expect("read").expect("the record");
        assert!(record.conflicts().is_empty(), "{:?}", record.conflicts());
    }
}

/// A native insert takes over a placeholder of its `_id` (one a two-phase
/// insert reserved and did not fill), as a two-phase insert does: the
/// placeholder is no document, to reads or to inserts. Refused as
/// `AlreadyExists` before (found by an adversarial review), and only by the
/// native strategy. A document that is there is still `AlreadyExists`.
pub async fn a_native_insert_takes_over_a_placeholder<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    if store.native().is_none() {
        return;
    }
    let orders = Namespace::new(db, "orders");
    let now = store.now().await.expect("the store's clock");
    let left = bson::DateTime::from_millis(now.timestamp_millis() - 3_600_000);
    for (id, reserved) in [("old", left), ("new", now)] {
        seed(
            store.as_ref(),
            &orders,
            doc! { "_id": id, "_tandem": { "ghost": true, "reservedAt": reserved } },
        )
        .await;
    }
    seed(store.as_ref(), &orders, doc! { "_id": "there", "n": 1 }).await;
    let plain = coordinator(store.clone(), db, factory.lease());
    for id in ["old", "new"] {
        let answer = plain
            .run(
                Transaction::new()
                    .strategy(crate::Strategy::Native)
                    .change(DocumentChange::insert(orders.clone(), id, doc! { "n": 5 })),
            )
            .await;
        assert!(answer.is_ok(), "{id}: {answer:?}");
        let d = get(store.as_ref(), &orders, id).await.expect("inserted");
        assert_eq!(d, doc! { "_id": id, "n": 5 }, "{id}");
    }
    let answer =
        plain
            .run(Transaction::new().strategy(crate::Strategy::Native).change(
                DocumentChange::insert(orders.clone(), "there", doc! { "n": 5 }),
            ))
            .await;
    assert!(
        matches!(
            answer,
            Err(TxError::Canceled {
                cause: crate::StepError::AlreadyExists { .. },
                ..
            })
        ),
        "{answer:?}"
    );
    assert_eq!(
        get(store.as_ref(), &orders, "there").await,
        Some(doc! { "_id": "there", "n": 1 })
    );
}

/// The typed presence guards of an `Option` field test what the struct reads,
/// `Some` or `None`. Serde stores `None` as `null`, which MongoDB's `$exists`
/// counts as present: `require_approved_by_exists()` passed for a claim never
/// approved, and the payout was made, while `require_coupon_missing()` refused
/// an unused coupon (found by an adversarial review of the typed API). The
/// generated paths of `Option` fields, plain and embedded, carry the same rule
/// into the generic `require_exists` / `require_missing`.
pub async fn typed_presence_guards_follow_option<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    use crate as tandem;
    use serde::{Deserialize, Serialize};

    #[tandem::participant(embedded, crate = "crate")]
    #[derive(Serialize, Deserialize)]
    struct Address {
        city: String,
    }

    #[tandem::participant(collection = "claims", crate = "crate")]
    #[derive(Serialize, Deserialize)]
    struct Claim {
        #[serde(rename = "_id")]
        id: String,
        approved_by: Option<String>,
        coupon: Option<String>,
        #[participant(nested)]
        shipping: Option<Address>,
        paid: i64,
    }

    let store = factory.fresh().await;
    let claims = Namespace::new(db, "claims");
    let claim = Claim {
        id: "c1".into(),
        approved_by: None,
        coupon: None,
        shipping: None,
        paid: 0,
    };
    let stored = bson::to_document(&claim).expect("a document");
    assert_eq!(stored.get("approved_by"), Some(&Bson::Null), "{stored}");
    seed(store.as_ref(), &claims, stored).await;
    let plain = coordinator(store.clone(), db, factory.lease());
    let f = Claim::fields();
    let pay = |guarded: ClaimChange| async {
        let answer = plain.run(Transaction::new().change(guarded)).await;
        plain.drain().await;
        answer
    };
    let refused = |answer: &Result<_, TxError>| matches!(answer, Err(TxError::Canceled { .. }));

    // `None` is no value: guards that need one refuse, and nothing is paid.
    for guarded in [
        Claim::change("c1")
            .inc_paid(500)
            .require_approved_by_exists(),
        Claim::change("c1")
            .inc_paid(500)
            .require_exists(f.approved_by()),
        Claim::change("c1")
            .inc_paid(500)
            .require_exists(f.shipping()),
    ] {
        let answer = pay(guarded).await;
        assert!(refused(&answer), "{answer:?}");
    }
    let after = get(store.as_ref(), &claims, "c1").await.expect("c1");
    assert_eq!(after.get_i64("paid"), Ok(0), "{after}");

    // ... and guards that need none pass.
    for guarded in [
        Claim::change("c1").inc_paid(1).require_coupon_missing(),
        Claim::change("c1").inc_paid(1).require_missing(f.coupon()),
        Claim::change("c1")
            .inc_paid(1)
            .require_missing(f.shipping()),
    ] {
        let answer = pay(guarded).await;
        assert!(answer.is_ok(), "{answer:?}");
    }

    // A value present passes, and a field absent altogether is `None` too.
    let answer = pay(Claim::change("c1").set_approved_by(Some("boss".to_owned()))).await;
    assert!(answer.is_ok(), "{answer:?}");
    let answer = pay(Claim::change("c1").unset_coupon()).await;
    assert!(answer.is_ok(), "{answer:?}");
    for guarded in [
        Claim::change("c1")
            .inc_paid(10)
            .require_approved_by_exists()
            .require_coupon_missing(),
        Claim::change("c1")
            .inc_paid(10)
            .require_exists(f.approved_by())
            .require_missing(f.coupon()),
    ] {
        let answer = pay(guarded).await;
        assert!(answer.is_ok(), "{answer:?}");
    }
    let after = get(store.as_ref(), &claims, "c1").await.expect("c1");
    assert_eq!(after.get_i64("paid"), Ok(23), "{after}");
    // `unset_coupon` stores `None` as serde does.
    assert_eq!(after.get("coupon"), Some(&Bson::Null), "{after}");
    let read: Claim = bson::from_document(after).expect("the struct reads it");
    assert_eq!(read.approved_by.as_deref(), Some("boss"));
}

/// Guards on unusual numbers decide alike on every store, and a refusal is
/// named as the guard that failed. NaN lies in no range (`risk < 0.5` held
/// on the embedded store for a NaN risk, so the approval committed there and
/// was refused on MongoDB, where the refusal was even reported as a
/// concurrent write, since the explanation re-ran the guard through the
/// embedded matcher); a Decimal128 compares with other numbers by value
/// (`Decimal128("1.0") != 1` held on the embedded store). Found by a
/// differential review of the embedded store against the test server.
pub async fn guards_on_unusual_numbers_decide_alike<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let loans = Namespace::new(db, "loans");
    let one: bson::Decimal128 = "1.0".parse().expect("a decimal");
    seed(
        store.as_ref(),
        &loans,
        doc! { "_id": "L", "risk": f64::NAN, "rate": one, "state": "new" },
    )
    .await;
    let plain = coordinator(store.clone(), db, factory.lease());
    let approve = || DocumentChange::update(loans.clone(), "L").set("state", "approved");
    for guarded in [
        approve().require_lt("risk", 0.5),
        approve().require_gte("risk", 0.0),
        approve().require_ne("rate", 1_i32),
        approve().require_lt("rate", 1_i64),
    ] {
        let answer = plain.run(Transaction::new().change(guarded.clone())).await;
        assert!(
            matches!(
                &answer,
                Err(TxError::Canceled {
                    cause: crate::StepError::GuardFailed { .. },
                    ..
                })
            ),
            "{guarded:?}: {answer:?}"
        );
    }
    let after = get(store.as_ref(), &loans, "L").await.expect("L");
    assert_eq!(after.get_str("state"), Ok("new"), "{after}");
    for guarded in [
        approve().require_eq("risk", f64::NAN),
        approve()
            .require_eq("rate", 1_i32)
            .require_gte("rate", 0.5_f64),
    ] {
        let answer = plain.run(Transaction::new().change(guarded.clone())).await;
        assert!(answer.is_ok(), "{guarded:?}: {answer:?}");
    }
    plain.drain().await;
    let after = get(store.as_ref(), &loans, "L").await.expect("L");
    assert_eq!(after.get_str("state"), Ok("approved"), "{after}");
}

/// A zero credit sum in the way of a credit (what a credit that was
/// undone leaves at `_tandem.credit.<path>`) is dropped by the credit it
/// stands in the way of, under either strategy, even while another change
/// is pending on the document: it refused a credit of `a.b` after an undone
/// credit of `a` until garbage collection found the document idle, which
/// on a busy document it may never do.
pub async fn zero_sums_make_way<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "X", "n": 1_i64 }).await;
    seed(store.as_ref(), &ns, doc! { "_id": "P", "balance": 0_i64 }).await;
    let plain = coordinator(store.clone(), db, factory.lease());
    let sums = |x: &Document| {
        x.get_document("_tandem")
            .ok()
            .and_then(|m| m.get_document("credit").ok())
            .cloned()
            .unwrap_or_default()
    };
    // A credit of `a` and of `c`, each undone: the payer cannot pay.
    for path in ["a", "c"] {
        let answer = plain
            .run(
                Transaction::new()
                    .change(DocumentChange::update(ns.clone(), "X").inc(path, 5_i64))
                    .change(
                        DocumentChange::update(ns.clone(), "P")
                            .inc("balance", -5_i64)
                            .require_gte("balance", 5_i64),
                    ),
            )
            .await;
        assert!(
            matches!(answer, Err(TxError::Canceled { undone: true, .. })),
            "the credit of {path} with a payer that cannot pay: {answer:?}"
        );
    }
    plain.drain().await;
    let x = get(store.as_ref(), &ns, "X").await.expect("X");
    let zeros = sums(&x);
    for path in ["a", "c"] {
        assert!(
            matches!(zeros.get(path), Some(Bson::Int32(0) | Bson::Int64(0))),
            "the undone credit of {path} leaves its zero sum: {x}"
        );
    }
    // A debit of `n` pending on X: garbage collection cannot tidy it.
    let faulty = FaultStore::new(store.clone());
    let pause = faulty.pause_at(3);
    let slow = coordinator(faulty, db, factory.lease());
    let debit = Transaction::new().change(
        DocumentChange::update(ns.clone(), "X")
            .inc("n", -1_i64)
            .require_gte("n", 1_i64),
    );
    let held = tokio::spawn(async move { slow.run(debit).await });
    pause.reached.await.expect("the debit's clear is reached");
    for (path, strategy) in [("a.b", Strategy::TwoPhase), ("c.d", Strategy::Native)] {
        let answer = plain
            .run(
                Transaction::new()
                    .change(DocumentChange::update(ns.clone(), "X").inc(path, 7_i64))
                    .strategy(strategy),
            )
            .await;
        assert!(
            answer.is_ok(),
            "{strategy:?}: a credit of {path} beside the zero sum of its parent: {answer:?}"
        );
    }
    pause.release.send(()).expect("release the debit's clear");
    let receipt = held.await.expect("the debit's task").expect("the debit");
    assert_eq!(receipt.state, TxState::Done);
    plain.drain().await;
    let x = get(store.as_ref(), &ns, "X").await.expect("X");
    let at = |a: &str, b: &str| x.get_document(a).ok().and_then(|d| d.get_i64(b).ok());
    assert_eq!((at("a", "b"), at("c", "d")), (Some(7), Some(7)), "{x}");
    assert_eq!(x.get("n"), Some(&Bson::Int64(0)), "{x}");
    let p = get(store.as_ref(), &ns, "P").await.expect("P");
    assert_eq!(p.get("balance"), Some(&Bson::Int64(0)), "{p}");
    let left = sums(&x);
    assert!(
        !matches!(left.get("a"), Some(n) if n.as_document().is_none())
            && !matches!(left.get("c"), Some(n) if n.as_document().is_none()),
        "the zero sums of a and c were dropped: {x}"
    );
}

/// Credits at ever new paths leave no bookkeeping behind once the document
/// is changed exclusively: each counted credit kept a zero sum at
/// `_tandem.credit.<path>` for good, so a document credited at
/// `holds.<order>` for every order grew by one entry per order, even once
/// the holds were unset (found by an adversarial review: 141 bytes after one
/// order, 3,615 after 200). An exclusive apply, which no pending change can
/// share, drops the sums.
pub async fn credits_at_new_paths_leave_nothing<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
    orders: usize,
) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    seed(store.as_ref(), &ns, doc! { "_id": "hot", "balance": 0_i64 }).await;
    let coordinator = coordinator(store.clone(), db, factory.lease());
    let size = |d: Document| bson::to_vec(&d).expect("encoding").len();
    let mut first = None;
    for i in 0..orders {
        let key = format!("holds.order{i}");
        for change in [
            DocumentChange::update(ns.clone(), "hot").inc(&key, 5_i64),
            DocumentChange::update(ns.clone(), "hot").unset(&key),
        ] {
            coordinator
                .run(Transaction::new().change(change))
                .await
                .unwrap_or_else(|e| panic!("order {i}: {e}"));
            coordinator.drain().await;
        }
        let hot = get(store.as_ref(), &ns, "hot").await.expect("hot");
        let meta = hot.get_document("_tandem").cloned().unwrap_or_default();
        assert!(
            !meta.contains_key("credit"),
            "after {} orders: {hot}",
            i + 1
        );
        let bytes = size(hot.clone());
        match first {
            None => first = Some(bytes),
            Some(f) => assert_eq!(bytes, f, "after {} orders: {hot}", i + 1),
        }
    }
}

/// An insert of an `_id` that a two-phase delete holds (applied, not yet
/// finished: the document is still there, locked) is a conflict under
/// every strategy, which `ConflictPolicy::Wait` waits out, not the definite
/// `AlreadyExists`: a caller told that the delete committed has no reason
/// to expect the document to exist (found by an adversarial review: the
/// fill's diagnosis looked for a placeholder before it looked for a holder).
/// Once the delete finished, the same insert commits.
pub async fn an_insert_meeting_a_held_delete_is_a_conflict<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let ledger = Namespace::new(db, "ledger");
    let mut covered = false;
    for n in 1..12 {
        let store = factory.fresh().await;
        seed(
            store.as_ref(),
            &ledger,
            doc! { "_id": "X", "amount": 1_i64 },
        )
        .await;
        let faulty = FaultStore::new(store.clone());
        let pause = faulty.pause_at(n);
        let holder = coordinator(faulty, db, factory.lease());
        let delete = Transaction::new().change(DocumentChange::delete(ledger.clone(), "X"));
        let mut held = tokio::spawn(async move { holder.run(delete).await });
        // No operation n: the delete is done (its store, and with it the
        // pause, may be dropped before its task is seen finished).
        let mut reached = pause.reached;
        tokio::select! {
            paused = &mut reached => if paused.is_err() {
                assert!(held.await.expect("the holder").is_ok());
                break;
            },
            finished = &mut held => {
                assert!(finished.expect("the holder").is_ok());
                break;
            }
        }
        let locked = get(store.as_ref(), &ledger, "X").await.is_some_and(|d| {
            d.get_document("_tandem")
                .is_ok_and(|t| t.contains_key("lock"))
        });
        if locked {
            covered = true;
            let mut strategies = vec![crate::Strategy::TwoPhase];
            if store.native().is_some() {
                strategies.push(crate::Strategy::Native);
            }
            for strategy in strategies {
                let other = coordinator(store.clone(), db, factory.lease());
                let answer = other
                    .run(
                        Transaction::new()
                            .strategy(strategy)
                            .change(DocumentChange::insert(
                                ledger.clone(),
                                "X",
                                doc! { "amount": 2_i64 },
                            )),
                    )
                    .await;
                assert!(
                    matches!(
                        &answer,
                        Err(TxError::Canceled {
                            cause: crate::StepError::Conflict { .. },
                            ..
                        })
                    ),
                    "{strategy:?}, paused before operation {n}: {answer:?}"
                );
            }
        }
        pause.release.send(()).ok();
        held.await.expect("the holder").expect("the delete commits");
        if locked {
            let other = coordinator(store.clone(), db, factory.lease());
            let answer = other
                .run(Transaction::new().change(DocumentChange::insert(
                    ledger.clone(),
                    "X",
                    doc! { "amount": 2_i64 },
                )))
                .await;
            assert!(answer.is_ok(), "after the delete finished: {answer:?}");
            let inserted = get(store.as_ref(), &ledger, "X").await;
            assert_eq!(
                inserted.as_ref().map(|d| d.get_i64("amount")),
                Some(Ok(2)),
                "{inserted:?}"
            );
        }
    }
    assert!(
        covered,
        "no operation found the document held by the delete"
    );
}

/// Credits keep each other's shapes, with either strategy: a credit of
/// `a.b` where `a` is a number is refused at its apply (no `$inc` could
/// create `b` there, and the committed credit would never land), a
/// `TypeMismatch` that leaves the document as it was; and while a credit
/// of `a` is pending on a document (applied, its clear held back), a credit
/// of `a.b` is refused as a conflict with it (landing first, it would make
/// `a` a document, under which the pending credit could never land), which
/// then commits.
pub async fn credits_keep_each_others_shapes<F: StoreFactory + ?Sized>(factory: &F, db: &str) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    let scalar = doc! { "_id": "S", "a": 5_i64 };
    seed(store.as_ref(), &ns, scalar.clone()).await;
    seed(store.as_ref(), &ns, doc! { "_id": "X", "n": 1_i64 }).await;
    let credit = |id: &str, path: &str, strategy: Strategy| {
        Transaction::new()
            .change(DocumentChange::update(ns.clone(), id).inc(path, 7_i64))
            .strategy(strategy)
    };
    let plain = coordinator(store.clone(), db, factory.lease());
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let answer = plain.run(credit("S", "a.b", strategy)).await;
        assert!(
            matches!(
                &answer,
                Err(TxError::Canceled {
                    cause: StepError::TypeMismatch { .. },
                    undone: true,
                    ..
                })
            ),
            "{strategy:?}: a credit of a.b where a is a number: {answer:?}"
        );
    }
    plain.drain().await;
    let s = get(store.as_ref(), &ns, "S").await.expect("S");
    assert_eq!(s, scalar, "nothing written");

    // The credit of `a`: the record's create, the apply; the clear waits.
    let faulty = FaultStore::new(store.clone());
    let pause = faulty.pause_at(3);
    let slow = coordinator(faulty, db, factory.lease());
    let pending = credit("X", "a", Strategy::TwoPhase);
    let held = tokio::spawn(async move { slow.run(pending).await });
    pause.reached.await.expect("the clear is reached");
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let answer = plain.run(credit("X", "a.b", strategy)).await;
        assert!(
            matches!(
                &answer,
                Err(TxError::Canceled {
                    cause: StepError::Conflict { .. },
                    undone: true,
                    ..
                })
            ),
            "{strategy:?}: a credit of a.b while one of a is pending: {answer:?}"
        );
    }
    pause.release.send(()).expect("release the clear");
    let receipt = held
        .await
        .expect("the held credit's task")
        .expect("the credit of a");
    assert_eq!(receipt.state, TxState::Done);
    let x = get(store.as_ref(), &ns, "X").await.expect("X");
    assert_eq!(x.get("a"), Some(&Bson::Int64(7)), "{x}");
}

/// Issue: *an insert's undo removed a reservation it did not hold.* T2
/// reserves `o-1` and stalls before its fill; T1, inserting `o-1` too, is
/// refused while preparing (an exclusive change of a missing document) and
/// gives its reservation back. That undo removed any unfilled placeholder
/// at `o-1`, T2's included: the `_id` was no longer reserved while T2 was
/// still running, so a plain insert of `o-1` went through and T2 was
/// canceled (`AlreadyExists`). A placeholder now names the inserts that
/// reserved it (`_tandem.reservers`); an undo takes its own name off, and
/// the placeholder goes only with the last name.
pub async fn undo_keeps_a_reservation_it_does_not_hold<F: StoreFactory + ?Sized>(
    factory: &F,
    db: &str,
) {
    let store = factory.fresh().await;
    let ns = accounts(db);
    let orders = Namespace::new(db, "orders");
    seed(store.as_ref(), &ns, doc! { "_id": "A", "balance": 100_i64 }).await;
    let lease = factory.lease();
    // T2 (1: the reservation; 2: the record) stops before its apply (3).
    let t2 = Transaction::with_id("keeps-t2")
        .change(DocumentChange::insert(
            orders.clone(),
            "o-1",
            doc! { "amount": 2_i64 },
        ))
        .change(
            DocumentChange::update(ns.clone(), "A")
                .inc("balance", -2_i64)
                .require_gte("balance", 2_i64),
        );
    let (release, run) = stalled(&store, db, lease, 3, t2).await;
    let reserved = get(store.as_ref(), &orders, "o-1")
        .await
        .expect("T2 reserved o-1");

    // T1 inserts o-1 too, and is refused while preparing.
    let t1 = Transaction::with_id("keeps-t1")
        .change(DocumentChange::insert(
            orders.clone(),
            "o-1",
            doc! { "amount": 1_i64 },
        ))
        .change(DocumentChange::update(ns.clone(), "missing").set("state", "x"));
    let refused = coordinator(store.clone(), db, lease).run(t1).await;
    assert!(
        matches!(
            refused,
            Err(TxError::Canceled {
                cause: StepError::NotFound { .. },
                ..
            })
        ),
        "T1 is refused while preparing: {refused:?}"
    );
    let left = get(store.as_ref(), &orders, "o-1").await;
    assert!(
        left.as_ref()
            .and_then(|d| d.get_document("_tandem").ok())
            .is_some_and(|m| m.get_bool("ghost") == Ok(true)),
        "T1's undo keeps T2's reservation of o-1 (reserved as {reserved}): {left:?}"
    );
    // The `_id` is still reserved: a plain insert of it collides.
    let plain = store
        .insert_one(&orders, doc! { "_id": "o-1", "amount": 9_i64 })
        .await;
    assert!(
        matches!(&plain, Err(e) if e.kind == StoreErrorKind::DuplicateKey),
        "o-1 stays reserved for T2: {plain:?}"
    );

    release.send(()).expect("T2 waits");
    let receipt = run.await.expect("T2's task");
    assert!(receipt.is_ok(), "T2 commits: {receipt:?}");
    let order = get(store.as_ref(), &orders, "o-1").await.expect("o-1");
    assert_eq!(order.get_i64("amount").ok(), Some(2), "{order}");
    assert!(!held(&order), "{order}");
    assert_eq!(balance(store.as_ref(), db, "A").await, 98);

    // Canceled alone, an insert still leaves nothing behind.
    let alone = Transaction::with_id("keeps-t3")
        .change(DocumentChange::insert(
            orders.clone(),
            "o-2",
            doc! { "amount": 3_i64 },
        ))
        .change(DocumentChange::update(ns.clone(), "missing").set("state", "x"));
    assert!(coordinator(store.clone(), db, lease)
        .run(alone)
        .await
        .is_err());
    assert!(get(store.as_ref(), &orders, "o-2").await.is_none());
}
