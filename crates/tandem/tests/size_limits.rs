//! Size limits: a record's notes, and the room a document keeps for what a
//! transaction's clear or undo adds (a credit that creates its field, a
//! before-image larger than what replaced it), near the 16 MiB a document
//! may hold. Whatever the sizes, a transaction is all or nothing: refused
//! at its apply, or finished.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Document};
use tandem::testing::{FaultStore, MemoryFactory, StoreFactory};
use tandem::{
    CommitPoint, Coordinator, DocumentChange, Namespace, PendingPolicy, RecoveryConfig,
    RecoveryWorker, StepError, Store, Strategy, Transaction, TxError, TxRecord, TxState,
};

const DB: &str = "shop";
const LEASE: Duration = Duration::from_secs(30);

fn orders() -> Namespace {
    Namespace::new(DB, "orders")
}

fn records() -> Namespace {
    Namespace::new(DB, "transactions")
}

fn coordinator(store: impl Store) -> Coordinator {
    Coordinator::builder(store)
        .database(DB)
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .max_participants(128)
        .build()
}

fn recovery(store: Arc<dyn Store>, pending: PendingPolicy) -> RecoveryWorker {
    Coordinator::builder_shared(store)
        .database(DB)
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .max_participants(128)
        .build()
        .recovery(RecoveryConfig {
            pending,
            ..RecoveryConfig::default()
        })
}

async fn record(store: &dyn Store, id: &str) -> Option<TxRecord> {
    store
        .find_one(&records(), doc! { "_id": id })
        .await
        .expect("read")
        .map(|d| TxRecord::from_document(d).expect("record"))
}

async fn get(store: &dyn Store, id: &str) -> Document {
    store
        .find_one(&orders(), doc! { "_id": id })
        .await
        .expect("read")
        .expect("document")
}

const CONFLICTING: usize = 40;

/// Order `i`'s `_id`: long, as an application's composite keys can be.
fn order(i: usize) -> String {
    format!("o-{i}-{}", "k".repeat(4000))
}

/// The bytes the participant entries of record `id` take.
async fn entries_len(store: &dyn Store, id: &str) -> usize {
    let raw = store
        .find_one(&records(), doc! { "_id": id })
        .await
        .unwrap()
        .unwrap();
    raw.get_array("participants")
        .unwrap()
        .iter()
        .map(|e| {
            let mut bytes = Vec::new();
            e.as_document().unwrap().to_writer(&mut bytes).unwrap();
            bytes.len()
        })
        .sum()
}

/// Seeds `big` (a `blob` of `blob` bytes), `o-0..o-39` and `A`, and returns
/// the transaction: `blob` set (its before-image, `blob` bytes, goes into
/// the record), every order set `Paid`, and a debit of `A` whose guard fails.
async fn seed_big(store: &dyn Store, blob: usize) -> Transaction {
    let o = orders();
    store
        .insert_one(&o, doc! { "_id": "big", "blob": "b".repeat(blob) })
        .await
        .unwrap();
    let mut tx = Transaction::with_id("fat")
        .change(DocumentChange::update(o.clone(), "big").set("blob", "small"));
    for i in 0..CONFLICTING {
        let id = order(i);
        store
            .insert_one(&o, doc! { "_id": &id, "state": "UnPaid" })
            .await
            .unwrap();
        tx = tx.change(
            DocumentChange::update(o.clone(), id)
                .set("state", "Paid")
                .require_eq("state", "UnPaid"),
        );
    }
    store
        .insert_one(&o, doc! { "_id": "A", "balance": 0_i64 })
        .await
        .unwrap();
    tx.change(
        DocumentChange::update(o.clone(), "A")
            .inc("balance", -10_i64)
            .require_gte("balance", 10_i64),
    )
}

/// How many store operations the coordinator makes up to and including
/// the request that applies every order (found with a small blob: the
/// count does not depend on the sizes).
async fn ops_through_the_applies(factory: &MemoryFactory) -> (u64, usize) {
    for n in 1..200 {
        let store = factory.fresh().await;
        let tx = seed_big(store.as_ref(), 10).await;
        let faulty = FaultStore::new(store.clone()).crash_after(n);
        let _ = coordinator(faulty).run(tx).await;
        let o = get(store.as_ref(), &order(CONFLICTING - 1)).await;
        let pending = record(store.as_ref(), "fat").await.map(|r| r.state);
        if o.get_str("state").ok() == Some("Paid") && pending == Some(TxState::Pending) {
            return (n, entries_len(store.as_ref(), "fat").await - 10);
        }
    }
    panic!("the applies never landed");
}

/// The record's size limit leaves 64 KiB for everything but the
/// participant entries, but the history keeps 32 lines of up to 4 KiB of
/// text each. A transaction whose entries are close to the limit and whose
/// undo meets outside writes on many participants has its move to
/// `canceled`, which notes each conflict, refused as too large: the
/// recovery pass fails, and the next one, finding the markers gone, ends it
/// `canceled` without a single note of the overwritten fields.
#[tokio::test]
async fn conflict_notes_of_a_large_record_fit_in_it() {
    let factory = MemoryFactory::new();
    let (n, others) = ops_through_the_applies(&factory).await;
    let store = factory.fresh().await;
    // Entries close to (but within) what the coordinator admits.
    let blob = 16 * 1024 * 1024 - 64 * 1024 - others - 1024;
    let tx = seed_big(store.as_ref(), blob).await;
    let faulty = FaultStore::new(store.clone()).crash_after(n);
    let result = coordinator(faulty).run(tx).await;
    assert!(
        matches!(result, Err(TxError::Interrupted { .. })),
        "{result:?}"
    );
    let r = record(store.as_ref(), "fat").await.expect("record written");
    assert_eq!(r.state, TxState::Pending);
    // Application code ships every order meanwhile, with a long note.
    for i in 0..CONFLICTING {
        store
            .update_one(
                &orders(),
                doc! { "_id": order(i) },
                doc! { "$set": { "state": format!("Shipped {}", "n".repeat(5000)) } },
                Default::default(),
            )
            .await
            .unwrap();
    }
    factory.pass(store.as_ref(), LEASE * 2).await;
    let report = recovery(store.clone(), PendingPolicy::RollBack)
        .run_once()
        .await
        .expect("pass");
    let after = record(store.as_ref(), "fat").await.expect("record");
    let first = (report.canceled, report.failed, after.state);
    // Whatever the first pass did, a later one ends it.
    factory.pass(store.as_ref(), LEASE * 20).await;
    let _ = recovery(store.clone(), PendingPolicy::RollBack)
        .run_once()
        .await;
    let end = record(store.as_ref(), "fat").await.expect("record");
    assert_eq!(end.state, TxState::Canceled, "{:?}", end.history);
    let o = get(store.as_ref(), &order(0)).await;
    assert!(o.get_str("state").unwrap().starts_with("Shipped"));
    assert_eq!(
        first,
        (1, 0, TxState::Canceled),
        "the first pass should cancel it (report {report:?})"
    );
    assert!(
        !end.conflicts().is_empty(),
        "the overwritten fields are noted: {} history lines, none a conflict",
        end.history.len()
    );
}

fn accounts() -> Namespace {
    Namespace::new(DB, "accounts")
}

async fn account(store: &dyn Store, id: &str) -> Document {
    store
        .find_one(&accounts(), doc! { "_id": id })
        .await
        .expect("read")
        .expect("account")
}

fn bson_len(d: &Document) -> usize {
    let mut bytes = Vec::new();
    d.to_writer(&mut bytes).unwrap();
    bytes.len()
}

/// A long field name, as a map keyed by user input can have.
fn field() -> String {
    format!("bonus_{}", "f".repeat(3000))
}

/// Seeds `A` (100) and `B` (a `pad` of `pad` bytes, no credited field), and
/// runs the transfer of 10 from `A` to `B`'s long-named field, which `B`
/// lacks (a deferred credit, landing at the clears). Returns the receipt's outcome.
async fn credit_a_large_document(store: Arc<dyn Store>, pad: usize) -> Result<(), TxError> {
    store
        .insert_one(&accounts(), doc! { "_id": "A", "balance": 100_i64 })
        .await
        .unwrap();
    store
        .insert_one(&accounts(), doc! { "_id": "B", "pad": "p".repeat(pad) })
        .await
        .unwrap();
    let tx = Transaction::with_id("grow")
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::update(accounts(), "B").inc(field(), 10_i64));
    coordinator(store).run(tx).await.map(|_| ())
}

/// A credit to a field the document lacks is deferred to the
/// commit's clear, which then creates the field. The apply checks that the
/// document can hold the marker and the pending sum, not the field the
/// clear will add. A document close to the 16 MiB limit takes the apply;
/// the transaction commits (the debit of `A` has landed, the caller is told
/// committed), and every clear of `B` is then refused as too large: the
/// credit never lands, `A` has paid 10 that `B` never gets, and the record
/// stays `applied`, claimed by recovery for ever.
#[tokio::test]
async fn a_committed_credit_always_fits_its_document() {
    let factory = MemoryFactory::new();
    // How large `B` is after the apply, with a small pad.
    let probe = factory.fresh().await;
    let small = 100;
    credit_a_large_document(probe.clone(), small)
        .await
        .expect("a small B takes the credit");
    let b = account(probe.as_ref(), "B").await;
    let settled = bson_len(&b);
    // After the apply, `B` carried its marker where the settled `B` has the
    // credited field: the apply left it this much smaller than settled.
    let field_entry = 1 + field().len() + 1 + 8;
    let pad = small + (16 * 1024 * 1024 - settled) + field_entry / 2;
    let store = factory.fresh().await;
    let answer = credit_a_large_document(store.clone(), pad).await;
    // Whatever the answer, recovery has every chance to finish.
    for _ in 0..5 {
        factory.pass(store.as_ref(), LEASE * 10).await;
        let _ = recovery(store.clone(), PendingPolicy::RollBack)
            .run_once()
            .await;
    }
    let a = account(store.as_ref(), "A")
        .await
        .get_i64("balance")
        .unwrap();
    let b = account(store.as_ref(), "B").await;
    let credited = b.get_i64(field()).ok();
    let state = record(store.as_ref(), "grow").await.map(|r| r.state);
    assert!(
        (a == 100 && credited.is_none() && answer.is_err())
            || (a == 90 && credited == Some(10) && state == Some(TxState::Done)),
        "all or nothing: A = {a}, B's credit = {credited:?}, record {state:?}, answer {answer:?}"
    );
}

/// An undo restores a before-image into a document that also
/// keeps tandem's bookkeeping after it (an empty marker array, a pending
/// count of zero), so the document it leaves is larger than the one the
/// transaction found. A document within those few bytes of the 16 MiB
/// limit takes the apply (a `set` that shrinks it), but every undo is
/// refused as too large: the transaction is decided canceled and stays
/// `canceling` for ever, its `set` in place, the document locked.
#[tokio::test]
async fn an_undo_always_fits_the_document_it_restores() {
    let factory = MemoryFactory::new();
    let store = factory.fresh().await;
    let o = orders();
    // A document exactly at the limit, with a note of 300 bytes.
    let note = "n".repeat(300);
    let skeleton = doc! { "_id": "big", "blob": "", "note": &note };
    let blob = 16 * 1024 * 1024 - bson_len(&skeleton);
    let big = doc! { "_id": "big", "blob": "b".repeat(blob), "note": &note };
    assert_eq!(bson_len(&big), 16 * 1024 * 1024);
    store.insert_one(&o, big).await.unwrap();
    store
        .insert_one(&o, doc! { "_id": "A", "balance": 0_i64 })
        .await
        .unwrap();
    let tx = Transaction::with_id("shrink")
        .change(DocumentChange::update(o.clone(), "big").set("note", "short"))
        .change(
            DocumentChange::update(o.clone(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        );
    let answer = coordinator(store.clone()).run(tx).await;
    for _ in 0..5 {
        factory.pass(store.as_ref(), LEASE * 10).await;
        let _ = recovery(store.clone(), PendingPolicy::RollBack)
            .run_once()
            .await;
    }
    let state = record(store.as_ref(), "shrink").await.map(|r| r.state);
    let doc = get(store.as_ref(), "big").await;
    let restored = doc.get_str("note").ok().map(str::to_owned);
    assert!(
        restored.as_deref() == Some(note.as_str()) && state == Some(TxState::Canceled),
        "nothing applied: note {restored:?}, record {state:?}, tandem fields {:?}, answer {answer:?}",
        doc.get("_tandem")
    );
}

/// A long field name of its own for transaction `n`.
fn field_n(n: usize) -> String {
    format!("bonus{n}_{}", "f".repeat(3000))
}

fn transfer_to(id: &str, n: usize) -> Transaction {
    Transaction::with_id(id)
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::update(accounts(), "B").inc(field_n(n), 10_i64))
}

/// Seeds `A` (100) and `B` (a `pad` of `pad` bytes).
async fn seed_b(store: &dyn Store, pad: usize) {
    store
        .insert_one(&accounts(), doc! { "_id": "A", "balance": 100_i64 })
        .await
        .unwrap();
    store
        .insert_one(&accounts(), doc! { "_id": "B", "pad": "p".repeat(pad) })
        .await
        .unwrap();
}

/// The operation after which the first transfer's applies have landed
/// (its record `pending`, `B` marked), and `B`'s size then, with a pad of
/// `pad` bytes.
async fn applied_t1(factory: &MemoryFactory, pad: usize) -> (u64, usize) {
    for n in 1..50 {
        let store = factory.fresh().await;
        seed_b(store.as_ref(), pad).await;
        let faulty = FaultStore::new(store.clone()).crash_after(n);
        let _ = coordinator(faulty).run(transfer_to("t1", 1)).await;
        let b = account(store.as_ref(), "B").await;
        let state = record(store.as_ref(), "t1").await.map(|r| r.state);
        if b.get_array("pendingTransactions")
            .is_ok_and(|m| !m.is_empty())
            && state == Some(TxState::Pending)
        {
            return (n, bson_len(&b));
        }
    }
    panic!("the first transfer's applies never landed");
}

/// A transfer whose credit is pending on `B` has reserved room there for
/// the field its clear creates. A second transfer that would fit in `B`
/// only by taking that room is refused at its apply (a `Conflict` with
/// the first, over when the first finishes; nothing of it applied),
/// two-phase or native; the first then finishes, its
/// credit landed. (Without the reservation the second applied and its
/// credit landed, and the first's clear was refused for good: its credit
/// never landed, though `A` had paid.)
#[tokio::test]
async fn a_pending_credit_keeps_its_room_against_later_transactions() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let factory = MemoryFactory::new();
        let small = 100;
        let (n, size) = applied_t1(&factory, small).await;
        // `B` with the first transfer applied: 4,500 bytes under the limit,
        // room enough for the second credit's apply and clear, and not
        // for the first's clear after them.
        let pad = small + (16 * 1024 * 1024 - size) - 4_500;
        let store = factory.fresh().await;
        seed_b(store.as_ref(), pad).await;
        let faulty = FaultStore::new(store.clone()).crash_after(n);
        // Crashed with its applies landed (answered committed or interrupted).
        let _ = coordinator(faulty).run(transfer_to("t1", 1)).await;
        let b = account(store.as_ref(), "B").await;
        assert!(
            b.get_array("pendingTransactions")
                .is_ok_and(|m| m.len() == 1),
            "{:?}",
            b.get("_tandem")
        );
        assert!(16 * 1024 * 1024 - bson_len(&b) <= 4_600, "{}", bson_len(&b));
        let second = Coordinator::builder_shared(store.clone())
            .database(DB)
            .lease(LEASE)
            .clock_margin(Duration::ZERO)
            .commit_point(CommitPoint::Done)
            .strategy(strategy)
            .build()
            .run(transfer_to("t2", 2))
            .await;
        assert!(
            matches!(
                &second,
                Err(TxError::Canceled {
                    cause: StepError::Conflict { .. },
                    undone: true,
                    ..
                })
            ),
            "{strategy:?}: {second:?}"
        );
        factory.pass(store.as_ref(), LEASE * 2).await;
        recovery(store.clone(), PendingPolicy::RollForward)
            .run_once()
            .await
            .expect("pass");
        let a = account(store.as_ref(), "A")
            .await
            .get_i64("balance")
            .unwrap();
        let b = account(store.as_ref(), "B").await;
        let state = record(store.as_ref(), "t1").await.map(|r| r.state);
        assert_eq!(
            (
                a,
                b.get_i64(field_n(1)).ok(),
                b.get_i64(field_n(2)).ok(),
                state
            ),
            (90, Some(10), None, Some(TxState::Done)),
            "{strategy:?}"
        );
        let tandem = b.get_document("_tandem").expect("bookkeeping");
        assert_eq!(tandem.get_i64("room").ok(), Some(0), "{tandem:?}");
        assert!(bson_len(&b) <= 16 * 1024 * 1024);
    }
}

/// An undone change gives its reservation back: a document at the limit,
/// whose change was canceled, takes the same change again afterwards.
#[tokio::test]
async fn an_undone_change_gives_its_room_back() {
    let factory = MemoryFactory::new();
    let store = factory.fresh().await;
    let o = orders();
    store
        .insert_one(&o, doc! { "_id": "doc", "note": "n".repeat(1000) })
        .await
        .unwrap();
    store
        .insert_one(&o, doc! { "_id": "A", "balance": 0_i64 })
        .await
        .unwrap();
    let change = || DocumentChange::update(orders(), "doc").set("note", "short");
    let refused = coordinator(store.clone())
        .run(
            Transaction::with_id("first").change(change()).change(
                DocumentChange::update(orders(), "A")
                    .inc("balance", -10_i64)
                    .require_gte("balance", 10_i64),
            ),
        )
        .await;
    assert!(
        matches!(refused, Err(TxError::Canceled { undone: true, .. })),
        "{refused:?}"
    );
    let d = get(store.as_ref(), "doc").await;
    assert_eq!(d.get_str("note").unwrap().len(), 1000);
    let tandem = d.get_document("_tandem").expect("bookkeeping");
    assert_eq!(
        tandem.get_i64("room").unwrap_or(0),
        0,
        "given back: {tandem:?}"
    );
    coordinator(store.clone())
        .run(Transaction::with_id("second").change(change()))
        .await
        .expect("the room is free again");
}
