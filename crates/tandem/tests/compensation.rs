//! A canceled transaction leaves every document as if it never ran (but
//! for the marker array and `_tandem` bookkeeping), down to the BSON types
//! of its values; a commit does what was declared and no more.
//!
//! Adding an increment back does not always restore a field: an `$inc`
//! creates a missing field, and widens the type (an `Int32` under an
//! `Int64` amount or past its range, an integer under a double). A change
//! that holds its document alone restores its increments from the
//! before-image; a debit on a document others share, whose undo must add
//! the amount back, is refused where it would change the field's type.
//! Before, each of these cancels left the wider type (or a zero), and a
//! pull of a document removed every element holding its fields.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};
use serde::{Deserialize, Serialize};
use tandem::testing::FaultStore;
use tandem::{
    participant, Coordinator, DocumentChange, ManualClock, MemoryStore, Namespace, PendingPolicy,
    RecoveryConfig, RetryPolicy, StepError, Store, Strategy, Transaction, TxError,
};

fn ns() -> Namespace {
    Namespace::new("bank", "accounts")
}

/// The document without what tandem documents it leaves behind.
fn user_fields(mut d: Document) -> Document {
    d.remove("pendingTransactions");
    d.remove("_tandem");
    d
}

async fn seed(store: &MemoryStore, d: Document) {
    store.insert_one(&ns(), d).await.unwrap();
}

async fn read(store: &MemoryStore, id: &str) -> Option<Document> {
    store.find_one(&ns(), doc! { "_id": id }).await.unwrap()
}

/// Runs `change` together with a change of a document that does not exist,
/// so the transaction is canceled after `change` was applied.
async fn run_and_cancel(store: &MemoryStore, change: DocumentChange) {
    let result = Coordinator::new(store.clone())
        .run(
            Transaction::new()
                .change(change)
                .change(DocumentChange::update(ns(), "no-such-doc").inc("balance", 1_i64)),
        )
        .await;
    assert!(
        matches!(&result, Err(TxError::Canceled { undone: true, .. })),
        "{result:?}"
    );
}

/// Asserts that canceling `change` on `before` leaves `before` exactly,
/// with the BSON types of its values.
async fn assert_cancel_restores(before: Document, change: DocumentChange) {
    let store = MemoryStore::new();
    let id = before.get_str("_id").unwrap().to_owned();
    seed(&store, before.clone()).await;
    run_and_cancel(&store, change).await;
    assert_unchanged(&store, &id, &before).await;
}

async fn assert_unchanged(store: &MemoryStore, id: &str, before: &Document) {
    let after = user_fields(read(store, id).await.expect("document kept"));
    // Bson's PartialEq tells Int32(5) from Int64(5); compare the bytes too.
    assert_eq!(
        bson::to_vec(&after).unwrap(),
        bson::to_vec(&user_fields(before.clone())).unwrap(),
        "\nbefore: {before:?}\nafter:  {after:?}"
    );
}

/// Runs `change` alone on `before` and returns its refusal, after checking
/// that the document was left exactly as it was.
async fn refused(before: Document, change: DocumentChange) -> StepError {
    let store = MemoryStore::new();
    let id = before.get_str("_id").unwrap().to_owned();
    seed(&store, before.clone()).await;
    let result = Coordinator::new(store.clone())
        .run(Transaction::new().change(change))
        .await;
    assert_unchanged(&store, &id, &before).await;
    match result {
        Err(TxError::Canceled {
            cause,
            undone: true,
            ..
        }) => cause,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Runs `change` alone on `before` and returns the document committed.
async fn committed(before: Document, change: DocumentChange) -> Document {
    let store = MemoryStore::new();
    let id = before.get_str("_id").unwrap().to_owned();
    seed(&store, before).await;
    Coordinator::new(store.clone())
        .run(Transaction::new().change(change))
        .await
        .unwrap();
    user_fields(read(&store, &id).await.unwrap())
}

/// An `i64` balance stored as an Int32 (written by another client, by an
/// earlier version of the struct with `i32`, or by the shell's `NumberInt`):
/// a debit's Int64 amount would widen the field at apply, and adding the
/// amount back would keep it widened. Refused, naming the types.
#[tokio::test]
async fn a_shared_debit_that_would_widen_an_int32_is_refused() {
    let cause = refused(
        doc! { "_id": "A", "balance": 500_i32 },
        DocumentChange::update(ns(), "A")
            .inc("balance", -100_i64)
            .require_gte("balance", 100_i64),
    )
    .await;
    match cause {
        StepError::TypeMismatch { path, message, .. } => {
            assert_eq!(path, "balance");
            assert!(message.contains("stored int 500"), "{message}");
            assert!(message.contains("long"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// The same through `#[participant]`: an `i64` field (serde reads an Int32
/// into it without complaint).
#[participant(collection = "accounts", db = "bank")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
    balance: i64,
    price: f64,
    level: i32,
    status: String,
}

#[tokio::test]
async fn a_typed_debit_that_would_widen_an_int32_is_refused() {
    let cause = refused(
        doc! { "_id": "A", "balance": 500_i32, "price": 10.0, "level": 1_i32, "status": "open" },
        Account::change("A")
            .inc_balance(-100)
            .require_balance_gte(100)
            .into(),
    )
    .await;
    assert!(matches!(cause, StepError::TypeMismatch { .. }), "{cause:?}");
}

/// An `f64` field stored as an integer (`{price: 10}` written by any client
/// that does not write 10.0): a debit of a double amount holds its document
/// alone, so the cancel restores the integer from the before-image (it was
/// refused while such debits shared their document), and a commit does what
/// was declared.
#[tokio::test]
async fn a_float_debit_of_an_integer_field_is_restored_on_cancel() {
    let before =
        doc! { "_id": "A", "balance": 500_i64, "price": 10_i32, "level": 1_i32, "status": "open" };
    assert_cancel_restores(before.clone(), Account::change("A").inc_price(-0.5).into()).await;
    let after = committed(before, Account::change("A").inc_price(-0.5).into()).await;
    assert_eq!(after.get("price"), Some(&Bson::Double(9.5)));
}

/// A canceled debit of a double restores it exactly: adding the amount
/// back gave `7.4399999999999995` for `7.44 - 3.1`, after which a debit of
/// the whole balance was refused though nothing had been taken (found by an
/// adversarial review). A double amount now holds the document alone, and
/// the cancel restores the before-image.
#[tokio::test]
async fn a_canceled_float_debit_restores_the_double_exactly() {
    let store = MemoryStore::new();
    seed(&store, doc! { "_id": "A", "balance": 7.44 }).await;
    let debit = |amount: f64| {
        DocumentChange::update(ns(), "A")
            .inc("balance", -amount)
            .require_gte("balance", amount)
    };
    run_and_cancel(&store, debit(3.1)).await;
    assert_unchanged(&store, "A", &doc! { "_id": "A", "balance": 7.44 }).await;
    Coordinator::new(store.clone())
        .run(Transaction::new().change(debit(7.44)))
        .await
        .expect("nothing was taken: the whole balance can be debited");
}

/// An integer debit of a double on a shared document is refused: its
/// cancel adds the amount back, which on a double can round (`0.1 - 3 + 3`
/// is not `0.1`).
#[tokio::test]
async fn an_integer_debit_of_a_double_is_refused() {
    let cause = refused(
        doc! { "_id": "A", "x": 0.1 },
        DocumentChange::update(ns(), "A")
            .inc("x", -3_i64)
            .require_gte("x", -10_i64),
    )
    .await;
    match cause {
        StepError::TypeMismatch { path, message, .. } => {
            assert_eq!(path, "x");
            assert!(message.contains("stored double 0.1"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// A shared debit of an `i32` field near `i32::MIN`: the store would make
/// the result 64-bit. Refused as an overflow.
#[tokio::test]
async fn a_shared_debit_past_the_int32_range_is_refused() {
    let cause = refused(
        doc! { "_id": "A", "balance": 0_i64, "price": 1.0, "level": i32::MIN + 5, "status": "open" },
        Account::change("A").inc_level(-10).into(),
    )
    .await;
    assert!(matches!(cause, StepError::Overflow { .. }), "{cause:?}");
}

/// An unguarded debit of a missing field: its `$inc` would create the
/// field, which adding the amount back would leave at zero.
#[tokio::test]
async fn a_shared_debit_of_a_missing_field_is_refused() {
    let cause = refused(
        doc! { "_id": "A", "status": "open" },
        DocumentChange::update(ns(), "A").inc("balance", -1_i64),
    )
    .await;
    assert!(
        matches!(&cause, StepError::TypeMismatch { path, .. } if path == "balance"),
        "{cause:?}"
    );
}

/// Debits that keep their field's type still commit: an Int32 amount on an
/// Int32 field in range, an Int64 amount on an Int64 field, a double on a
/// double (which holds its document alone).
#[tokio::test]
async fn shared_debits_that_keep_the_type_commit() {
    let after = committed(
        doc! { "_id": "A", "n": 10_i32 },
        DocumentChange::update(ns(), "A").inc("n", -3_i32),
    )
    .await;
    assert_eq!(after.get("n"), Some(&Bson::Int32(7)));
    let after = committed(
        doc! { "_id": "A", "n": i32::MIN + 5 },
        DocumentChange::update(ns(), "A").inc("n", -5_i32),
    )
    .await;
    assert_eq!(after.get("n"), Some(&Bson::Int32(i32::MIN)));
    let after = committed(
        doc! { "_id": "A", "n": 10_i64 },
        DocumentChange::update(ns(), "A").inc("n", -3_i64),
    )
    .await;
    assert_eq!(after.get("n"), Some(&Bson::Int64(7)));
    let after = committed(
        doc! { "_id": "A", "x": 2.5 },
        DocumentChange::update(ns(), "A").inc("x", -0.5),
    )
    .await;
    assert_eq!(after.get("x"), Some(&Bson::Double(2.0)));
}

/// An exclusive increment of an `i32` field at `i32::MAX` (exclusive because
/// the change also sets a field): the store makes the sum 64-bit; the
/// cancel restores the Int32 from the before-image.
#[tokio::test]
async fn a_canceled_exclusive_increment_past_the_int32_range_is_restored() {
    assert_cancel_restores(
        doc! { "_id": "A", "balance": 0_i64, "price": 1.0, "level": i32::MAX, "status": "open" },
        Account::change("A")
            .inc_level(1)
            .set_status("closed".to_owned())
            .into(),
    )
    .await;
}

/// An exclusive increment that widens: an Int64 amount on an Int32, a
/// double on an integer; both restored.
#[tokio::test]
async fn a_canceled_exclusive_increment_that_widens_is_restored() {
    assert_cancel_restores(
        doc! { "_id": "A", "n": 5_i32, "m": 7_i64, "status": "open" },
        DocumentChange::update(ns(), "A")
            .inc("n", 1_i64)
            .inc("m", 0.5)
            .set("status", "closed"),
    )
    .await;
}

/// `pull(path, value)` removes the elements equal to `value`. A document
/// given to `$pull` as it is would be a condition on the elements: a pull
/// of `{sku: "a"}` took `{sku: "a", qty: 2}` too.
#[tokio::test]
async fn a_pull_of_a_document_removes_the_equal_elements_only() {
    let store = MemoryStore::new();
    seed(
        &store,
        doc! { "_id": "C", "items": [ { "sku": "a" }, { "sku": "a", "qty": 2_i64 }, { "sku": "b" } ] },
    )
    .await;
    Coordinator::new(store.clone())
        .run(
            Transaction::new()
                .change(DocumentChange::update(ns(), "C").pull("items", doc! { "sku": "a" })),
        )
        .await
        .unwrap();
    let after = read(&store, "C").await.unwrap();
    assert_eq!(
        after.get_array("items").unwrap(),
        &vec![
            Bson::Document(doc! { "sku": "a", "qty": 2_i64 }),
            Bson::Document(doc! { "sku": "b" }),
        ],
        "only the element equal to {{sku: \"a\"}} should go: {after}"
    );
}

/// The typed form: a `Vec` of an embedded struct with an optional field
/// skipped when `None` (a common serde idiom). `pull_lines(Line { sku: "a",
/// note: None })` removes the line without a note only.
#[participant(embedded)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Line {
    sku: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    note: Option<String>,
}

#[participant(collection = "accounts", db = "bank")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Cart {
    #[serde(rename = "_id")]
    id: String,
    lines: Vec<Line>,
}

#[tokio::test]
async fn a_typed_pull_removes_the_equal_elements_only() {
    let store = MemoryStore::new();
    seed(
        &store,
        doc! { "_id": "K",
        "lines": [ { "sku": "a" }, { "sku": "a", "note": "gift wrap" } ] },
    )
    .await;
    Coordinator::new(store.clone())
        .run(
            Transaction::new().change(Cart::change("K").pull_lines(Line {
                sku: "a".into(),
                note: None,
            })),
        )
        .await
        .unwrap();
    let after = read(&store, "K").await.unwrap();
    assert_eq!(
        after.get_array("lines").unwrap(),
        &vec![Bson::Document(doc! { "sku": "a", "note": "gift wrap" })],
        "{after}"
    );
}

/// An equality guard on a path with an index, which a query also reads
/// through an element's field named "0": the guard's value stands for the
/// before-image, but the field the update changes held something else.
#[tokio::test]
async fn an_equality_guard_through_an_array_element_is_no_before_image() {
    assert_cancel_restores(
        doc! { "_id": "A", "a": [ { "b": "y" }, { "0": { "b": "x" } } ] },
        DocumentChange::update(ns(), "A")
            .set("a.0.b", "z")
            .require_eq("a.0.b", "x"),
    )
    .await;
}

/// An equality guard on a path through an array of documents (`a.b ==
/// "x"` on `a: [{b: "x"}]`): a query reads the path through the array, an
/// update does not (`$unset` of `a.b` changes nothing). The guard stood for
/// the before-image; the undo then expected `a.b` missing, which the query
/// again read through the array as present, so it took the field for
/// written over, and its own guarded step never matched: the cancel never
/// finished, and the document stayed held for good, recovery included.
/// Only a guard on a top-level field stands for the image now: below one,
/// the image is read. The transaction is canceled with everything undone
/// (or refused at its apply), and the document is left as it was.
#[tokio::test]
async fn an_unset_pinned_by_a_guard_through_an_array_cancels() {
    let clock = Arc::new(ManualClock::default());
    let store = MemoryStore::with_clock(clock.clone());
    let before = doc! { "_id": "X", "a": [ { "b": "x" } ] };
    seed(&store, before.clone()).await;
    let coordinator = Coordinator::builder(store.clone())
        .lease(Duration::from_secs(30))
        .clock_margin(Duration::ZERO)
        .build();
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        coordinator.run(
            Transaction::new()
                .change(
                    DocumentChange::update(ns(), "X")
                        .unset("a.b")
                        .require_eq("a.b", "x"),
                )
                .change(DocumentChange::update(ns(), "no-such-doc").inc("balance", 1_i64)),
        ),
    )
    .await
    .expect("the run answers");
    // Recovery, long after, rolls back whatever is left.
    clock.advance(Duration::from_secs(600));
    let report = coordinator
        .recovery(RecoveryConfig {
            pending: PendingPolicy::RollBack,
            ..RecoveryConfig::default()
        })
        .run_once()
        .await;
    let after = read(&store, "X").await.unwrap();
    assert!(
        matches!(&result, Err(TxError::Canceled { undone: true, .. })),
        "{result:?}\nrecovery: {report:?}\nX: {after:?}"
    );
    assert_eq!(user_fields(after.clone()), before, "{after:?}");
    assert!(
        after
            .get_array("pendingTransactions")
            .map_or(true, |m| m.is_empty()),
        "X still marked: {after:?}"
    );
    assert!(
        after
            .get_document("_tandem")
            .map_or(true, |t| t.get("lock").is_none()),
        "X still held: {after:?}"
    );
}

/// A canceled `unset` of a field inside a sub-document restores the
/// sub-document as it was, field order included. The undo put the field
/// back with a `$set`, which appends it; documents compare in field order,
/// so an equality guard on the parent that held before the canceled
/// transaction refused after it, for good. The image is now taken at the
/// parent, as it is at the array for an `unset` of an array's element.
#[tokio::test]
async fn canceled_unset_of_a_nested_field_keeps_the_field_order() {
    let store = MemoryStore::new();
    let before = doc! { "_id": "X", "addr": { "zip": "1000", "city": "Brussels" } };
    seed(&store, before.clone()).await;
    run_and_cancel(&store, DocumentChange::update(ns(), "X").unset("addr.zip")).await;
    assert_unchanged(&store, "X", &before).await;
    // The same change guarded on the parent's value, which held before.
    Coordinator::new(store.clone())
        .run(
            Transaction::new().change(
                DocumentChange::update(ns(), "X")
                    .set("status", "moved")
                    .require_eq("addr", doc! { "zip": "1000", "city": "Brussels" }),
            ),
        )
        .await
        .expect("a guard that held before the canceled transaction holds after it");

    // A field of an array's element: the element is restored whole.
    assert_cancel_restores(
        doc! { "_id": "Y", "items": [ { "sku": "a", "qty": 1_i64 }, { "sku": "b" } ] },
        DocumentChange::update(ns(), "Y").unset("items.0.sku"),
    )
    .await;
}

/// A canceled `unset` of a top-level field puts the field back, value and
/// type as they were, but last among the document's fields: the undo's
/// `$set` appends it, and the document's field order is not restored (a
/// known limit, in the Reliability chapter).
#[tokio::test]
async fn a_canceled_top_level_unset_puts_the_field_back_last() {
    let store = MemoryStore::new();
    seed(
        &store,
        doc! { "_id": "X", "zip": "1000", "city": "Brussels" },
    )
    .await;
    run_and_cancel(&store, DocumentChange::update(ns(), "X").unset("zip")).await;
    let after = user_fields(read(&store, "X").await.unwrap());
    assert_eq!(
        after,
        doc! { "_id": "X", "city": "Brussels", "zip": "1000" }
    );
    assert_eq!(
        after.keys().map(String::as_str).collect::<Vec<_>>(),
        ["_id", "city", "zip"]
    );
}

/// An increment of a missing field (a counter's first use) inside an
/// exclusive change: the apply creates the field; the cancel must take it
/// away again, not leave a zero.
#[tokio::test]
async fn a_canceled_exclusive_increment_of_a_missing_field_takes_it_away() {
    assert_cancel_restores(
        doc! { "_id": "A", "status": "open" },
        DocumentChange::update(ns(), "A")
            .inc("visits", 1_i64)
            .set("status", "closed"),
    )
    .await;
}

/// Runs `change` with a debit of "A"; the coordinator dies after the image
/// read, the record and `change`'s apply (operations 1 to 3).
async fn applied_then_dead(
    seed_doc: Document,
    change: DocumentChange,
) -> (MemoryStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::default());
    let store = MemoryStore::with_clock(clock.clone());
    seed(&store, seed_doc).await;
    seed(&store, doc! { "_id": "A", "balance": 100_i64 }).await;
    let dying = FaultStore::new(Arc::new(store.clone())).crash_after(3);
    let answer = Coordinator::builder(dying)
        .lease(Duration::from_secs(30))
        .clock_margin(Duration::ZERO)
        .retry(RetryPolicy::NONE)
        .build()
        .run(
            Transaction::with_id("t1").change(change).change(
                DocumentChange::update(ns(), "A")
                    .inc("balance", -10_i64)
                    .require_gte("balance", 10_i64),
            ),
        )
        .await;
    assert!(
        matches!(answer, Err(TxError::Interrupted { .. })),
        "{answer:?}"
    );
    (store, clock)
}

/// An outside write, then recovery rolls the transaction back.
async fn written_over_then_rolled_back(store: &MemoryStore, clock: &ManualClock, write: Document) {
    store
        .update_one(
            &ns(),
            doc! { "_id": "X" },
            write,
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    clock.advance(Duration::from_secs(120));
    let report = Coordinator::builder(store.clone())
        .lease(Duration::from_secs(30))
        .clock_margin(Duration::ZERO)
        .build()
        .recovery(RecoveryConfig {
            pending: PendingPolicy::RollBack,
            ..RecoveryConfig::default()
        })
        .run_once()
        .await
        .unwrap();
    assert_eq!((report.canceled, report.failed), (1, 0), "{report:?}");
}

/// One image (`x`, missing) stands for both a `set` of `x.c` and an
/// increment of `x.b`. Written outside at `x.c`, the image cannot be
/// restored whole; the increment under it must still go (it stayed, with
/// the record `canceled`).
#[tokio::test]
async fn an_increment_under_an_image_written_over_is_still_undone() {
    let (store, clock) = applied_then_dead(
        doc! { "_id": "X", "name": "x" },
        DocumentChange::update(ns(), "X")
            .set("x.c", 1_i32)
            .inc("x.b", 5_i64),
    )
    .await;
    written_over_then_rolled_back(&store, &clock, doc! { "$set": { "x.c": 2_i32 } }).await;
    let x = user_fields(read(&store, "X").await.unwrap());
    assert_eq!(x, doc! { "_id": "X", "name": "x", "x": { "c": 2_i32 } });
}

/// The same through an array: one image (`tags`) for a `set` past its end
/// and an increment of an element.
#[tokio::test]
async fn an_increment_under_an_array_image_written_over_is_still_undone() {
    let (store, clock) = applied_then_dead(
        doc! { "_id": "X", "tags": [10_i64] },
        DocumentChange::update(ns(), "X")
            .set("tags.3", "new")
            .inc("tags.0", 5_i64),
    )
    .await;
    written_over_then_rolled_back(&store, &clock, doc! { "$set": { "tags.3": "outside" } }).await;
    let x = read(&store, "X").await.unwrap();
    assert_eq!(
        x.get_array("tags").ok().and_then(|t| t.first()),
        Some(&Bson::Int64(10)),
        "{x}"
    );
}

/// Two `set`s under one image (`x`, missing), one written outside: the
/// other is still undone.
#[tokio::test]
async fn a_set_under_an_image_written_over_is_still_undone() {
    let (store, clock) = applied_then_dead(
        doc! { "_id": "X", "name": "x" },
        DocumentChange::update(ns(), "X")
            .set("x.c", 1_i32)
            .set("x.d", 1_i32),
    )
    .await;
    written_over_then_rolled_back(&store, &clock, doc! { "$set": { "x.c": 2_i32 } }).await;
    let x = user_fields(read(&store, "X").await.unwrap());
    assert_eq!(x, doc! { "_id": "X", "name": "x", "x": { "c": 2_i32 } });
}

/// The plan says how an exclusive increment is undone.
#[test]
fn the_plan_restores_an_exclusive_increment_from_the_image() {
    let plan = Coordinator::new(MemoryStore::new()).explain(
        &Transaction::new().change(
            DocumentChange::update(ns(), "X")
                .set("status", "open")
                .inc("n", 5_i64),
        ),
    );
    let p = &plan.participants[0];
    assert_eq!(p.holds, "exclusively");
    assert!(!p.undo.iter().any(|u| u == "add -5 to n"), "{:?}", p.undo);
    assert!(
        p.undo
            .iter()
            .any(|u| u.contains("n") && u.contains("before-image")),
        "{:?}",
        p.undo
    );
}

/// Both strategies refuse a debit that would change its field's type, so
/// that one declaration gets one answer whichever runs it.
#[tokio::test]
async fn both_strategies_refuse_a_debit_that_would_change_the_type() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let store = MemoryStore::new();
        seed(&store, doc! { "_id": "A", "balance": 500_i32 }).await;
        let answer = Coordinator::builder(store.clone())
            .strategy(strategy)
            .build()
            .run(
                Transaction::new().change(
                    DocumentChange::update(ns(), "A")
                        .inc("balance", -100_i64)
                        .require_gte("balance", 100_i64),
                ),
            )
            .await;
        assert!(
            matches!(
                &answer,
                Err(TxError::Canceled {
                    cause: StepError::TypeMismatch { .. },
                    ..
                })
            ),
            "{strategy:?}: {answer:?}"
        );
        assert_eq!(
            read(&store, "A").await.unwrap().get("balance"),
            Some(&Bson::Int32(500))
        );
    }
}

/// A credit of a double amount to an integer field others share makes it a
/// double, under which an integer debit pending on the field is undone by
/// adding a whole amount to a double, which can round. T1's debit of A
/// (36203, an `Int64`) by 31473 is applied and T1 is held before its
/// cancel; T2 credits A by 24.27 and commits; T1's cancel then left
/// `36227.270000000004`, not the `36227.27` of T2 alone. T2 is now refused
/// at its apply, and T1's cancel restores A exactly.
#[tokio::test]
async fn an_integer_debit_undone_after_a_concurrent_double_credit_is_exact() {
    use tandem::CommitPoint;

    let store = MemoryStore::new();
    seed(&store, doc! { "_id": "A", "balance": 36203_i64 }).await;

    // 1 the record's create, 2 A's debit, 3 the move to `canceling` (paused).
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let pause = faulty.pause_at(3);
    let t1 = Coordinator::builder(faulty).build();
    let run = tokio::spawn(async move {
        t1.run(
            Transaction::new()
                .change(
                    DocumentChange::update(ns(), "A")
                        .inc("balance", -31473_i64)
                        .require_gte("balance", 31473_i64),
                )
                .change(DocumentChange::update(ns(), "no-such-doc").inc("balance", 1_i64)),
        )
        .await
    });
    pause.reached.await.unwrap();
    let debited = read(&store, "A").await.unwrap();
    assert_eq!(debited.get_i64("balance"), Ok(4730), "{debited:?}");

    let t2 = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .build()
        .run(Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", 24.27_f64)))
        .await;
    match &t2 {
        Err(TxError::Canceled {
            cause: StepError::TypeMismatch { path, message, .. },
            undone: true,
            ..
        }) => {
            assert_eq!(path, "balance");
            assert!(message.contains("stored long 4730"), "{message}");
        }
        other => panic!("the double credit of an integer applied: {other:?}"),
    }

    pause.release.send(()).unwrap();
    let answer = run.await.unwrap();
    assert!(
        matches!(answer, Err(TxError::Canceled { undone: true, .. })),
        "{answer:?}"
    );
    assert_unchanged(&store, "A", &doc! { "_id": "A", "balance": 36203_i64 }).await;
}

/// Both strategies refuse a shared credit of a double amount to an integer
/// field, alike; a double, a decimal or a missing field takes it. A change
/// that holds its document alone takes it on an integer too: its cancel
/// restores the field from the before-image.
#[tokio::test]
async fn both_strategies_refuse_a_shared_double_credit_of_an_integer() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let run = |before: Document, change: DocumentChange| async move {
            let store = MemoryStore::new();
            seed(&store, before).await;
            let answer = Coordinator::builder(store.clone())
                .strategy(strategy)
                .commit_point(tandem::CommitPoint::Done)
                .build()
                .run(Transaction::new().change(change))
                .await;
            (answer, user_fields(read(&store, "A").await.unwrap()))
        };
        for n in [Bson::Int32(5), Bson::Int64(5)] {
            let (answer, after) = run(
                doc! { "_id": "A", "n": n.clone() },
                DocumentChange::update(ns(), "A").inc("n", 0.5),
            )
            .await;
            assert!(
                matches!(
                    &answer,
                    Err(TxError::Canceled {
                        cause: StepError::TypeMismatch { path, .. },
                        ..
                    }) if path == "n"
                ),
                "{strategy:?}: {answer:?}"
            );
            assert_eq!(after.get("n"), Some(&n), "{strategy:?}");
        }
        let (answer, after) = run(
            doc! { "_id": "A", "n": 2.5 },
            DocumentChange::update(ns(), "A").inc("n", 0.5),
        )
        .await;
        assert!(answer.is_ok(), "{strategy:?}: {answer:?}");
        assert_eq!(after.get("n"), Some(&Bson::Double(3.0)), "{strategy:?}");
        let (answer, after) = run(
            doc! { "_id": "A" },
            DocumentChange::update(ns(), "A").inc("n", 0.5),
        )
        .await;
        assert!(answer.is_ok(), "{strategy:?}: {answer:?}");
        assert_eq!(after.get("n"), Some(&Bson::Double(0.5)), "{strategy:?}");
        // Exclusive: the change also sets a field.
        let (answer, after) = run(
            doc! { "_id": "A", "n": 5_i64 },
            DocumentChange::update(ns(), "A")
                .inc("n", 0.5)
                .set("status", "open"),
        )
        .await;
        assert!(answer.is_ok(), "{strategy:?}: {answer:?}");
        assert_eq!(after.get("n"), Some(&Bson::Double(5.5)), "{strategy:?}");
    }
}

/// A canceled exclusive credit of a double to an integer field restores
/// the integer from the before-image.
#[tokio::test]
async fn a_canceled_exclusive_double_credit_of_an_integer_is_restored() {
    assert_cancel_restores(
        doc! { "_id": "A", "n": 5_i64, "status": "a" },
        DocumentChange::update(ns(), "A")
            .inc("n", 0.5)
            .set("status", "b"),
    )
    .await;
}

/// An exclusive increment's field removed outside tandem before the undo:
/// left removed (adding back would bring it back as `-5`), the record
/// canceled.
#[tokio::test]
async fn an_increment_removed_outside_stays_removed() {
    let (store, clock) = applied_then_dead(
        doc! { "_id": "X", "n": 10_i64, "status": "a" },
        DocumentChange::update(ns(), "X")
            .set("status", "b")
            .inc("n", 5_i64),
    )
    .await;
    written_over_then_rolled_back(&store, &clock, doc! { "$unset": { "n": "" } }).await;
    let x = user_fields(read(&store, "X").await.unwrap());
    assert_eq!(x, doc! { "_id": "X", "status": "a" });
}

/// The same field set to a string outside tandem: left as found (adding
/// back failed at the store, on every pass), the record canceled.
#[tokio::test]
async fn an_increment_set_to_a_string_outside_stays_so() {
    let (store, clock) = applied_then_dead(
        doc! { "_id": "X", "n": 10_i64, "status": "a" },
        DocumentChange::update(ns(), "X")
            .set("status", "b")
            .inc("n", 5_i64),
    )
    .await;
    written_over_then_rolled_back(&store, &clock, doc! { "$set": { "n": "reset" } }).await;
    let x = user_fields(read(&store, "X").await.unwrap());
    assert_eq!(x, doc! { "_id": "X", "n": "reset", "status": "a" });
}

/// The undo around an outside write, with the answer to each of recovery's
/// requests lost in turn (the write landed): a second pass finishes it, and
/// the document is the same at every point: the outside write kept, this
/// transaction's fields and increment gone. (The retry must not take the
/// first attempt's writes for outside ones.)
#[tokio::test]
async fn an_undo_around_an_outside_write_survives_a_lost_answer() {
    for k in 1..30 {
        let (store, clock) = applied_then_dead(
            doc! { "_id": "X", "name": "x" },
            DocumentChange::update(ns(), "X")
                .set("x.c", 1_i32)
                .set("x.d", 1_i32)
                .inc("x.n", 5_i32),
        )
        .await;
        store
            .update_one(
                &ns(),
                doc! { "_id": "X" },
                doc! { "$set": { "x.c": 2_i32 } },
                tandem::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
        clock.advance(Duration::from_secs(120));
        let recovery = |store: Arc<dyn Store>| {
            Coordinator::builder_shared(store)
                .lease(Duration::from_secs(30))
                .clock_margin(Duration::ZERO)
                .build()
                .recovery(RecoveryConfig {
                    pending: PendingPolicy::RollBack,
                    ..RecoveryConfig::default()
                })
        };
        let lossy = FaultStore::new(Arc::new(store.clone())).lose_answer_at(k);
        let _ = recovery(Arc::new(lossy)).run_once().await;
        clock.advance(Duration::from_secs(120));
        let report = recovery(Arc::new(store.clone())).run_once().await.unwrap();
        assert_eq!(report.failed, 0, "k={k}: {report:?}");
        let x = user_fields(read(&store, "X").await.unwrap());
        assert_eq!(
            x,
            doc! { "_id": "X", "name": "x", "x": { "c": 2_i32 } },
            "k={k}"
        );
        let record = store
            .find_one(
                &Namespace::new("tandem", "transactions"),
                doc! { "_id": "t1" },
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.get_str("state"), Ok("canceled"), "k={k}: {record}");
    }
}
