//! Credits to a field and to a field under it, pending at once on one
//! document: whichever lands second finds the other's field of the wrong
//! shape, and a committed credit could never land (its record `applied`
//! for good, the debit that paid for it taken). An increment of either
//! strategy is refused, as a conflict with the pending credit, while a
//! credit is pending on a parent of its field or below it; and a credit
//! under a parent that is no document (where no `$inc` can create its
//! field) is refused at its apply, not left to fail at its clear. Each
//! test failed on the code before the fix.

mod common;

use std::sync::Arc;

use bson::{doc, Bson};
use common::*;
use tandem::testing::audit;
use tandem::testing::FaultStore;
use tandem::{
    DocumentChange, RecoveryConfig, StepError, Store, Strategy, Transaction, TxError, TxState,
};

fn credit(path: &str, by: impl Into<Bson>) -> Transaction {
    Transaction::new().change(DocumentChange::update(stats(), "X").inc(path, by.into()))
}

/// Runs a two-phase credit of `pending` held before its clear, then
/// `other` under `strategy`; returns the answer of `other`, the pending
/// one's receipt state, and the document after recovery had its turn.
async fn nested(
    pending: &str,
    other: &str,
    strategy: Strategy,
) -> (Result<tandem::Receipt, TxError>, TxState, bson::Document) {
    nested_by(pending, other, Bson::Int64(7), strategy).await
}

async fn nested_by(
    pending: &str,
    other: &str,
    by: Bson,
    strategy: Strategy,
) -> (Result<tandem::Receipt, TxError>, TxState, bson::Document) {
    let (store, clock, _) = bank(&[], 0).await;
    store
        .insert_one(&stats(), doc! { "_id": "X", "n": 1_i64 })
        .await
        .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // 1 the create, 2 the apply; 3, the clear, waits.
    let faulty = FaultStore::new(shared.clone());
    let pause = faulty.pause_at(3);
    let slow = two_phase(Arc::new(faulty));
    let first = credit(pending, 5_i64);
    let run = tokio::spawn(async move { slow.run(first).await });
    pause.reached.await.unwrap();
    let x = get(&store, &stats(), "X").await.unwrap();
    assert_eq!(
        x.get_array("pendingTransactions").map(Vec::len),
        Ok(1),
        "the credit of {pending} is applied, not cleared: {x}"
    );

    let coordinator = two_phase(shared.clone());
    let answer = coordinator.run(credit(other, by).strategy(strategy)).await;

    pause.release.send(()).unwrap();
    let receipt = run.await.unwrap().unwrap();
    clock.advance(LEASE * 3);
    let worker = coordinator.recovery(RecoveryConfig::default());
    let _ = worker.run_once().await;
    coordinator.drain().await;
    let x = get(&store, &stats(), "X").await.unwrap();
    (answer, receipt.state, x)
}

#[tokio::test]
async fn a_two_phase_credit_under_a_pending_credit_is_refused() {
    let (answer, state, x) = nested("a", "a.b", Strategy::TwoPhase).await;
    assert!(is_conflict(&answer), "{answer:?}");
    assert_eq!(state, TxState::Done);
    assert_eq!(x.get("a"), Some(&Bson::Int64(5)), "{x}");
}

#[tokio::test]
async fn a_native_credit_under_a_pending_credit_is_refused() {
    let (answer, state, x) = nested("a", "a.b", Strategy::Native).await;
    assert!(
        is_conflict(&answer),
        "the native credit of a.b must not land under the pending credit of a: {answer:?}; {x}"
    );
    assert_eq!(state, TxState::Done, "{x}");
    assert_eq!(x.get("a"), Some(&Bson::Int64(5)), "{x}");
}

#[tokio::test]
async fn a_native_credit_over_a_pending_credit_is_refused() {
    let (answer, state, x) = nested("a.b", "a", Strategy::Native).await;
    assert!(
        is_conflict(&answer),
        "the native credit of a must not land over the pending credit of a.b: {answer:?}; {x}"
    );
    assert_eq!(state, TxState::Done, "{x}");
    assert_eq!(
        x.get_document("a").ok().and_then(|a| a.get_i64("b").ok()),
        Some(5),
        "{x}"
    );
}

/// A double credit keeps no sum (it cannot overflow): at its apply it adds
/// `0.0`, which creates `a.x` and with it `a` as a document, under which the
/// pending credit of `a`, committed, can never land.
#[tokio::test]
async fn a_two_phase_double_credit_under_a_pending_credit_is_refused() {
    let (answer, state, x) = nested_by("a", "a.x", Bson::Double(1.5), Strategy::TwoPhase).await;
    assert!(
        is_conflict(&answer),
        "the credit of a.x must not apply under the pending credit of a: {answer:?}; {x}"
    );
    assert_eq!(state, TxState::Done, "{x}");
    assert_eq!(x.get("a"), Some(&Bson::Int64(5)), "{x}");
}

/// A credit to a path with a numeric segment keeps no sum either, and adds
/// zero at its apply, creating `a` as `{"0": 0}`.
#[tokio::test]
async fn a_two_phase_credit_of_a_numbered_field_under_a_pending_credit_is_refused() {
    let (answer, state, x) = nested_by("a", "a.0", Bson::Int64(7), Strategy::TwoPhase).await;
    assert!(
        is_conflict(&answer),
        "the credit of a.0 must not apply under the pending credit of a: {answer:?}; {x}"
    );
    assert_eq!(state, TxState::Done, "{x}");
    assert_eq!(x.get("a"), Some(&Bson::Int64(5)), "{x}");
}

/// A native double credit keeps no sum and is checked for no room: `a`
/// becomes `1.5` over the pending credit of `a.b`, which, committed, can
/// never land.
#[tokio::test]
async fn a_native_double_credit_over_a_pending_credit_is_refused() {
    let (answer, state, x) = nested_by("a.b", "a", Bson::Double(1.5), Strategy::Native).await;
    assert!(
        is_conflict(&answer),
        "the native credit of a must not land over the pending credit of a.b: {answer:?}; {x}"
    );
    assert_eq!(state, TxState::Done, "{x}");
    assert_eq!(
        x.get_document("a").ok().and_then(|a| a.get_i64("b").ok()),
        Some(5),
        "{x}"
    );
}

/// A refusal as a conflict with the transaction whose credit is pending
/// (so `ConflictPolicy::Wait` waits it out), nothing applied.
fn is_conflict(answer: &Result<tandem::Receipt, TxError>) -> bool {
    matches!(
        answer,
        Err(TxError::Canceled {
            cause: StepError::Conflict { .. },
            undone: true,
            ..
        })
    )
}

/// A credit of `a.b` where `a` is a number, a string, an array, null or a
/// boolean: no `$inc` can create `b` there. The apply only checked `a.b`
/// itself (missing, so admitted), the transaction committed, and its clear
/// was refused for good: the record stayed `applied` with its marker on
/// the document. Now refused at the apply, by either strategy, with
/// nothing left behind. The same increment in a change that holds the
/// document alone (it also unsets a field) is refused alike: natively, on
/// an array, it was answered as a conflict with a concurrent write (its
/// room condition compares `a.b`, an array there, above every number, so
/// the filter matched nothing and nothing explained it), while the
/// two-phase apply said `TypeMismatch`.
#[tokio::test]
async fn a_credit_under_a_field_that_is_no_document_is_refused() {
    for parent in [
        Bson::Int64(5),
        Bson::String("s".into()),
        Bson::Array(vec![Bson::Int64(1)]),
        Bson::Array(Vec::new()),
        Bson::Null,
        Bson::Boolean(true),
    ] {
        for (strategy, alone) in [
            (Strategy::TwoPhase, false),
            (Strategy::Native, false),
            (Strategy::TwoPhase, true),
            (Strategy::Native, true),
        ] {
            let (store, _clock, _) = bank(&[], 0).await;
            let seeded = doc! { "_id": "X", "a": parent.clone(), "s": 1_i64 };
            store.insert_one(&stats(), seeded.clone()).await.unwrap();
            let coordinator = two_phase(Arc::new(store.clone()));
            let change = DocumentChange::update(stats(), "X").inc("a.b", 7_i64);
            refused_as_type_mismatch(
                &coordinator,
                change,
                alone,
                strategy,
                &format!("a = {parent}"),
            )
            .await;
            let x = get(&store, &stats(), "X").await.unwrap();
            assert_eq!(x.get("a"), Some(&parent), "{strategy:?}: {x}");
            let report = audit(&store, &records(), &[(stats(), seeded)])
                .await
                .unwrap();
            report.assert_clean();
        }
    }
}

/// A credit of `a` undone leaves its zero sum, `_tandem.credit.a`: a
/// credit of `a.b` cannot be counted beside it. It was refused (a
/// `TypeMismatch` naming garbage collection) until garbage collection found
/// the document idle; now the credit of `a.b` drops the zero and commits at
/// once, with no collection in between.
#[tokio::test]
async fn a_zero_sum_left_by_an_undone_credit_makes_way() {
    let (store, _clock) = undone_credits_at(&["a"]).await;
    let coordinator = two_phase(Arc::new(store.clone()));
    let answer = coordinator.run(credit("a.b", 7_i64)).await;
    assert!(
        matches!(&answer, Ok(r) if r.state == TxState::Done),
        "{answer:?}"
    );
    let x = get(&store, &stats(), "X").await.unwrap();
    assert_eq!(
        x.get_document("a").ok().and_then(|a| a.get_i64("b").ok()),
        Some(7),
        "{x}"
    );
}

/// A credit of `a.b` leaves the document of sums `{b: 0}` at
/// `_tandem.credit.a`. An increment of `a` itself (a document there: it
/// cannot land) is refused as the type mismatch it is, by either strategy,
/// shared or holding the document alone. Holding it alone, it failed with
/// the store's error instead ("can't $subtract object from long", code
/// 16556, on MongoDB and on the embedded store alike): the room condition
/// subtracted the pending sum, a document there, from the field's limit.
/// (Found by `protocol_differential.rs`.)
#[tokio::test]
async fn an_increment_beside_a_document_of_sums_is_a_type_mismatch() {
    for (strategy, alone) in [
        (Strategy::TwoPhase, false),
        (Strategy::Native, false),
        (Strategy::TwoPhase, true),
        (Strategy::Native, true),
    ] {
        let (store, _clock, _) = bank(&[], 0).await;
        store
            .insert_one(&stats(), doc! { "_id": "X", "s": 1_i64 })
            .await
            .unwrap();
        let coordinator = two_phase(Arc::new(store.clone()));
        let credited = coordinator.run(credit("a.b", 7_i64)).await;
        assert!(credited.is_ok(), "{credited:?}");
        let before = get(&store, &stats(), "X").await.unwrap();
        assert_eq!(
            before
                .get_document("_tandem")
                .and_then(|m| m.get_document("credit"))
                .and_then(|c| c.get_document("a"))
                .map(|a| a.get("b").cloned()),
            Ok(Some(Bson::Int64(0))),
            "the credit of a.b leaves a document of sums at a: {before}"
        );
        let change = DocumentChange::update(stats(), "X").inc("a", 1_i64);
        refused_as_type_mismatch(&coordinator, change, alone, strategy, "").await;
        let after = get(&store, &stats(), "X").await.unwrap();
        assert_eq!(
            after.get_document("a").map(|a| a.get("b").cloned()),
            Ok(Some(Bson::Int64(7))),
            "{strategy:?}, alone: {alone}: {after}"
        );
    }
}

/// Runs `change` under `strategy` (holding its document alone, by an unset
/// of `s`, when `alone`), waits for its background work, and asserts that
/// it was canceled with `TypeMismatch` and undone.
async fn refused_as_type_mismatch(
    coordinator: &tandem::Coordinator,
    mut change: DocumentChange,
    alone: bool,
    strategy: Strategy,
    ctx: &str,
) {
    if alone {
        change = change.unset("s");
    }
    let answer = coordinator
        .run(Transaction::new().change(change).strategy(strategy))
        .await;
    coordinator.drain().await;
    assert!(
        matches!(
            &answer,
            Err(TxError::Canceled {
                cause: StepError::TypeMismatch { .. },
                undone: true,
                ..
            })
        ),
        "{strategy:?}, alone: {alone}, {ctx}: {answer:?}"
    );
}
