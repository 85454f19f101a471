//! Decimal128 amounts against the protocol's edges: mixed types on one
//! shared field with transactions pending concurrently, exclusive decimal
//! increments and their before-images, extreme decimals as amounts and as
//! balances. After every transaction finished, each field must equal a
//! serial execution of the committed ones, and nothing of a canceled one
//! may remain.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use tandem::testing::{audit, FaultStore, Pause};
use tandem::{
    CommitPoint, Coordinator, DocumentChange, MemoryStore, Namespace, Store, Strategy, Transaction,
    TxError,
};
use tokio::task::JoinHandle;

fn ns() -> Namespace {
    Namespace::new("bank", "accounts")
}

fn records() -> Namespace {
    Namespace::new("bank", "transactions")
}

fn dec(text: &str) -> Bson {
    Bson::Decimal128(text.parse().expect("a decimal literal"))
}

fn neg(text: &str) -> Bson {
    dec(&format!("-{text}"))
}

async fn seed(store: &MemoryStore, d: Document) {
    store.insert_one(&ns(), d).await.unwrap();
}

async fn read(store: &MemoryStore, id: &str) -> Document {
    store
        .find_one(&ns(), doc! { "_id": id })
        .await
        .unwrap()
        .unwrap()
}

async fn balance(store: &MemoryStore, id: &str) -> Option<Bson> {
    read(store, id).await.get("balance").cloned()
}

fn coordinator(store: impl Store + 'static) -> Coordinator {
    Coordinator::builder(store)
        .database("bank")
        .commit_point(CommitPoint::Done)
        .build()
}

/// Runs `tx` through a [`FaultStore`] paused at its `n`th operation; returns
/// once the pause is reached.
async fn held(
    store: &MemoryStore,
    n: u64,
    tx: Transaction,
) -> (Pause, JoinHandle<Result<tandem::Receipt, TxError>>) {
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let mut pause = faulty.pause_at(n);
    let c = coordinator(faulty);
    let run = tokio::spawn(async move { c.run(tx).await });
    (&mut pause.reached).await.unwrap();
    (pause, run)
}

/// A transaction whose `change` applies and which is then canceled: its
/// second change names a document that does not exist. Held at 3, it is
/// applied and not yet undone.
fn doomed(change: DocumentChange) -> Transaction {
    Transaction::new()
        .change(change)
        .change(DocumentChange::update(ns(), "no-such-doc").inc("balance", 1_i64))
}

async fn assert_clean(store: &MemoryStore, seeded: &[(Namespace, Document)]) {
    let audit = audit(store, &records(), seeded).await.expect("audit");
    audit.assert_clean();
}

/// An integer debit pending while a decimal credit lands (the field becomes
/// a decimal), then canceled: its undo adds the integer back to the
/// decimal, exactly. Serially, only the credit: 100 + 0.25.
#[tokio::test]
async fn an_integer_debit_pending_under_a_decimal_credit_is_undone_exactly() {
    let store = MemoryStore::new();
    let a = doc! { "_id": "A", "balance": 100_i64 };
    seed(&store, a.clone()).await;
    let (pause1, run1) = held(
        &store,
        3,
        doomed(
            DocumentChange::update(ns(), "A")
                .inc("balance", -30_i64)
                .require_gte("balance", 30_i64),
        ),
    )
    .await;
    assert_eq!(balance(&store, "A").await, Some(Bson::Int64(70)));
    let t2 = coordinator(store.clone())
        .run(
            Transaction::new()
                .change(DocumentChange::update(ns(), "A").inc("balance", dec("0.25"))),
        )
        .await;
    assert!(t2.is_ok(), "{t2:?}");
    pause1.release.send(()).unwrap();
    let answer1 = run1.await.unwrap();
    assert!(
        matches!(answer1, Err(TxError::Canceled { undone: true, .. })),
        "{answer1:?}"
    );
    assert_eq!(balance(&store, "A").await, Some(dec("100.25")));
    assert_clean(&store, &[(ns(), a)]).await;
}

/// A decimal debit pending while an integer credit lands, then canceled.
/// Serially, only the credit: 100.10 + 5 = 105.10 (digits and exponent).
#[tokio::test]
async fn a_decimal_debit_pending_under_an_integer_credit_is_undone_exactly() {
    let store = MemoryStore::new();
    let a = doc! { "_id": "A", "balance": dec("100.10") };
    seed(&store, a.clone()).await;
    let (pause1, run1) = held(
        &store,
        3,
        doomed(
            DocumentChange::update(ns(), "A")
                .inc("balance", neg("20.25"))
                .require_gte("balance", dec("20.25")),
        ),
    )
    .await;
    assert_eq!(balance(&store, "A").await, Some(dec("79.85")));
    let t2 = coordinator(store.clone())
        .run(Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", 5_i64)))
        .await;
    assert!(t2.is_ok(), "{t2:?}");
    pause1.release.send(()).unwrap();
    let answer1 = run1.await.unwrap();
    assert!(
        matches!(answer1, Err(TxError::Canceled { undone: true, .. })),
        "{answer1:?}"
    );
    assert_eq!(balance(&store, "A").await, Some(dec("105.10")));
    assert_clean(&store, &[(ns(), a)]).await;
}

/// A decimal credit pending on a missing field (its apply writes an
/// `Int32` zero): a double credit and a double debit are refused there
/// (neither could be undone exactly once the decimal lands, nor land on
/// it), an integer debit applies, and its cancel after the decimal landed
/// restores exactly what the decimal credit alone leaves.
#[tokio::test]
async fn a_decimal_credit_pending_on_a_missing_field_keeps_other_types_out() {
    let store = MemoryStore::new();
    let a = doc! { "_id": "A" };
    seed(&store, a.clone()).await;
    // T2: 1 the record's create, 2 A's apply, 3 the commit (paused).
    let (pause2, run2) = held(
        &store,
        3,
        Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", dec("1.5"))),
    )
    .await;
    let c = coordinator(store.clone());
    let double_credit = c
        .run(Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", 2.5_f64)))
        .await;
    assert!(
        matches!(double_credit, Err(TxError::Canceled { .. })),
        "{double_credit:?}"
    );
    let double_debit = c
        .run(Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", -2.5_f64)))
        .await;
    assert!(
        matches!(double_debit, Err(TxError::Canceled { .. })),
        "{double_debit:?}"
    );
    let (pause4, run4) = held(
        &store,
        3,
        doomed(DocumentChange::update(ns(), "A").inc("balance", -5_i32)),
    )
    .await;
    pause2.release.send(()).unwrap();
    let answer2 = run2.await.unwrap();
    assert!(answer2.is_ok(), "{answer2:?}");
    pause4.release.send(()).unwrap();
    let answer4 = run4.await.unwrap();
    assert!(
        matches!(answer4, Err(TxError::Canceled { undone: true, .. })),
        "{answer4:?}"
    );
    assert_eq!(balance(&store, "A").await, Some(dec("1.5")));
    assert_clean(&store, &[(ns(), a)]).await;
}

/// An integer credit counted in the field's pending sum and a decimal
/// credit (not counted) pending together near the 64-bit limit: both land,
/// in either order, to the exact sum.
#[tokio::test]
async fn an_integer_and_a_decimal_credit_pending_together_near_the_limit_both_land() {
    for decimal_first in [true, false] {
        let store = MemoryStore::new();
        let a = doc! { "_id": "A", "balance": i64::MAX - 100 };
        seed(&store, a.clone()).await;
        let credit = |by: Bson| {
            Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", by))
        };
        let (pause_int, run_int) = held(&store, 3, credit(Bson::Int64(50))).await;
        let (pause_dec, run_dec) = held(&store, 3, credit(dec("1E+30"))).await;
        // A third integer credit would overflow with the first, should it
        // land first: refused.
        let third = coordinator(store.clone())
            .run(credit(Bson::Int64(60)))
            .await;
        assert!(matches!(third, Err(TxError::Canceled { .. })), "{third:?}");
        let (first, second) = if decimal_first {
            ((pause_dec, run_dec), (pause_int, run_int))
        } else {
            ((pause_int, run_int), (pause_dec, run_dec))
        };
        first.0.release.send(()).unwrap();
        assert!(first.1.await.unwrap().is_ok());
        second.0.release.send(()).unwrap();
        assert!(second.1.await.unwrap().is_ok());
        assert_eq!(
            balance(&store, "A").await,
            Some(dec("1000000000009223372036854775757")),
            "decimal first: {decimal_first}"
        );
        assert_clean(&store, &[(ns(), a)]).await;
    }
}

/// An exclusive decimal increment (under an equality guard), canceled: the
/// before-image is restored byte for byte, its type too.
#[tokio::test]
async fn an_exclusive_decimal_increment_is_restored_from_its_image() {
    for (stored, guard) in [
        (dec("100.10"), dec("100.1")),
        (Bson::Int64(100), dec("100")),
        (Bson::Int32(100), dec("1E+2")),
        (dec("1E+2"), Bson::Int32(100)),
    ] {
        let store = MemoryStore::new();
        let a = doc! { "_id": "A", "balance": stored.clone() };
        seed(&store, a.clone()).await;
        let answer = coordinator(store.clone())
            .run(doomed(
                DocumentChange::update(ns(), "A")
                    .inc("balance", dec("0.05"))
                    .require_eq("balance", guard.clone()),
            ))
            .await;
        assert!(
            matches!(answer, Err(TxError::Canceled { undone: true, .. })),
            "{stored} == {guard}: {answer:?}"
        );
        let after = balance(&store, "A").await.unwrap();
        let bytes = |b: &Bson| match b {
            Bson::Decimal128(d) => d.bytes().to_vec(),
            other => format!("{other:?}").into_bytes(),
        };
        assert_eq!(
            bytes(&after),
            bytes(&stored),
            "{stored} == {guard}: {after}"
        );
        assert_clean(&store, &[(ns(), a)]).await;
    }
}

/// A NaN balance meets no lower bound: a guarded decimal debit is refused,
/// and the NaN stays as it was.
#[tokio::test]
async fn a_nan_balance_fails_a_lower_bound() {
    let store = MemoryStore::new();
    let a = doc! { "_id": "A", "balance": dec("NaN") };
    seed(&store, a.clone()).await;
    let answer = coordinator(store.clone())
        .run(
            Transaction::new().change(
                DocumentChange::update(ns(), "A")
                    .inc("balance", neg("1"))
                    .require_gte("balance", dec("1")),
            ),
        )
        .await;
    assert!(
        matches!(answer, Err(TxError::Canceled { .. })),
        "{answer:?}"
    );
    let Some(Bson::Decimal128(d)) = balance(&store, "A").await else {
        panic!("not a decimal")
    };
    assert_eq!(d.to_string(), "NaN");
}

/// A decimal debit whose sum passes the smallest decimal (an unguarded
/// debit of a negative balance) would make the field `-Infinity`, from
/// which no undo brings the balance back: the canceled transaction's
/// effect stayed. Such a debit is refused (`Overflow`), with either
/// strategy; one that stays within the range applies, and its cancel
/// restores the balance exactly.
#[tokio::test]
async fn a_decimal_debit_past_the_smallest_decimal_is_refused() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let store = MemoryStore::new();
        let a = doc! { "_id": "A", "balance": dec("-5E+6144") };
        seed(&store, a.clone()).await;
        let c = Coordinator::builder(store.clone())
            .database("bank")
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build();
        let answer = c
            .run(
                Transaction::new()
                    .change(DocumentChange::update(ns(), "A").inc("balance", neg("6E+6144"))),
            )
            .await;
        assert!(
            matches!(
                &answer,
                Err(TxError::Canceled {
                    cause: tandem::StepError::Overflow { .. },
                    ..
                })
            ),
            "{strategy:?}: {answer:?}"
        );
        assert_eq!(balance(&store, "A").await, Some(dec("-5E+6144")));
        // Within the range (to -9.999999999999999999999999999999999E+6144
        // exactly): applied, then undone.
        let answer = c
            .run(doomed(DocumentChange::update(ns(), "A").inc(
                "balance",
                neg("4999999999999999999999999999999999E+6111"),
            )))
            .await;
        assert!(
            matches!(answer, Err(TxError::Canceled { undone: true, .. })),
            "{strategy:?}: {answer:?}"
        );
        // (The audit sums as doubles, under which these are infinities.)
        let after = read(&store, "A").await;
        assert_eq!(after.get("balance"), Some(&dec("-5E+6144")));
        assert_eq!(
            after
                .get_array("pendingTransactions")
                .map(Vec::len)
                .unwrap_or(0),
            0
        );
        assert!(
            after
                .get_document("_tandem")
                .map(|t| matches!(
                    t.get("pending"),
                    None | Some(Bson::Int32(0)) | Some(Bson::Int64(0))
                ))
                .unwrap_or(true),
            "{after}"
        );
        let _ = a;
    }
}

/// The same declarations give the same kind of answer with either
/// strategy, for every mix of a stored type and a decimal or double
/// amount.
#[tokio::test]
async fn either_strategy_answers_alike_for_mixed_types() {
    let stored = [
        ("int", Bson::Int32(100)),
        ("long", Bson::Int64(100)),
        ("double", Bson::Double(100.5)),
        ("decimal", dec("100.5")),
        ("missing", Bson::Null),
    ];
    let amounts = [
        dec("1.25"),
        neg("1.25"),
        Bson::Double(1.25),
        Bson::Double(-1.25),
    ];
    for (name, value) in &stored {
        for by in &amounts {
            let mut answers = Vec::new();
            for strategy in [Strategy::TwoPhase, Strategy::Native] {
                let store = MemoryStore::new();
                let mut a = doc! { "_id": "A" };
                if *value != Bson::Null {
                    a.insert("balance", value.clone());
                }
                seed(&store, a).await;
                let answer = Coordinator::builder(store.clone())
                    .database("bank")
                    .strategy(strategy)
                    .commit_point(CommitPoint::Done)
                    .build()
                    .run(
                        Transaction::new()
                            .change(DocumentChange::update(ns(), "A").inc("balance", by.clone())),
                    )
                    .await;
                let kind = match &answer {
                    Ok(_) => "ok".to_owned(),
                    Err(TxError::Canceled { cause, .. }) => format!("{:?}", cause)
                        .split([' ', '{', '('])
                        .next()
                        .unwrap()
                        .to_owned(),
                    Err(e) => format!("{e}"),
                };
                answers.push((kind, balance(&store, "A").await));
            }
            eprintln!("{name} {value} + {by}: {answers:?}");
            assert_eq!(answers[0], answers[1], "{name} {value} + {by}");
        }
    }
}

/// An integer credit to a decimal (or double) balance above the 64-bit
/// limit cannot overflow (the sum is a decimal, and a decimal field stays
/// one under every increment), and lands, with either strategy. (Before,
/// the room check for credits compared the field with the integer limit
/// whatever its type, and refused it with `Overflow`, "would overflow a
/// 64-bit integer": amounts in the smallest unit of a currency, as
/// decimals, pass 9.2E+18.)
#[tokio::test]
async fn an_integer_credit_to_a_decimal_above_the_integer_limit_lands() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let store = MemoryStore::new();
        seed(&store, doc! { "_id": "A", "balance": dec("1E+20") }).await;
        let answer = Coordinator::builder(store.clone())
            .database("bank")
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build()
            .run(Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", 1_i64)))
            .await;
        assert!(answer.is_ok(), "{strategy:?}: {answer:?}");
        assert_eq!(
            balance(&store, "A").await,
            Some(dec("100000000000000000001")),
            "{strategy:?}"
        );
    }
    // A double above the limit takes it too; the pending sum, an integer,
    // keeps its own limit on either (credits pending there as they would
    // be counted, near the limit).
    for (balance_value, strategy) in [
        (Bson::Double(1e20), Strategy::TwoPhase),
        (Bson::Double(1e20), Strategy::Native),
    ] {
        let store = MemoryStore::new();
        seed(
            &store,
            doc! { "_id": "A", "balance": balance_value.clone() },
        )
        .await;
        let coordinator = Coordinator::builder(store.clone())
            .database("bank")
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build();
        let answer = coordinator
            .run(Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", 1_i64)))
            .await;
        assert!(answer.is_ok(), "{strategy:?}: {answer:?}");
    }
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let store = MemoryStore::new();
        seed(
            &store,
            doc! { "_id": "A", "balance": dec("1E+20"), "_tandem": { "credit": { "balance": i64::MAX - 5 } } },
        )
        .await;
        let answer = Coordinator::builder(store.clone())
            .database("bank")
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build()
            .run(
                Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", 10_i64)),
            )
            .await;
        assert!(
            matches!(
                &answer,
                Err(TxError::Canceled {
                    cause: tandem::StepError::Overflow { .. },
                    ..
                })
            ),
            "{strategy:?}: the pending sum has no room: {answer:?}"
        );
        assert_eq!(
            balance(&store, "A").await,
            Some(dec("1E+20")),
            "{strategy:?}"
        );
    }
}

/// A canceled decimal credit of a missing field leaves the `Int32` zero
/// its apply wrote to check the field's type (a known limit, as for a
/// double credit).
#[tokio::test]
async fn a_canceled_decimal_credit_of_a_missing_field_leaves_its_zero() {
    let store = MemoryStore::new();
    seed(&store, doc! { "_id": "A" }).await;
    let answer = coordinator(store.clone())
        .run(doomed(
            DocumentChange::update(ns(), "A").inc("balance", dec("2.50")),
        ))
        .await;
    assert!(
        matches!(answer, Err(TxError::Canceled { undone: true, .. })),
        "{answer:?}"
    );
    assert_eq!(balance(&store, "A").await, Some(Bson::Int32(0)));
}

/// An exclusive decimal increment's undo keeps an outside increment made
/// since its apply, as an integer one's does: it finds the field no longer
/// the image plus its amount, and takes its amount back by difference
/// instead of restoring the image over the outside write (before, a
/// decimal's sum was not worked out, and the image was restored unchecked:
/// 100.10, the outside 1.00 lost).
#[tokio::test]
async fn an_exclusive_decimal_undo_keeps_an_outside_increment() {
    let store = MemoryStore::new();
    let a = doc! { "_id": "A", "balance": dec("100.10") };
    seed(&store, a.clone()).await;
    let (pause, run) = held(
        &store,
        4,
        doomed(
            DocumentChange::update(ns(), "A")
                .inc("balance", dec("0.05"))
                .require_eq("balance", dec("100.10")),
        ),
    )
    .await;
    assert_eq!(balance(&store, "A").await, Some(dec("100.15")), "applied");
    store
        .update_one(
            &ns(),
            doc! { "_id": "A" },
            doc! { "$inc": { "balance": dec("1.00") } },
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    pause.release.send(()).unwrap();
    let answer = run.await.unwrap();
    assert!(
        matches!(answer, Err(TxError::Canceled { undone: true, .. })),
        "{answer:?}"
    );
    assert_eq!(balance(&store, "A").await, Some(dec("101.10")));
}
