#![cfg(feature = "test-util")]
//! A guard on tandem's own fields: the marker array (`pendingTransactions`,
//! or the change's own marker name) and `_tandem`. Field changes of them are
//! refused (`ReservedField`); guards were not, and read tandem's
//! bookkeeping as if it were the application's data: what a guard found
//! there depended on which transactions touched the document before and
//! how (a two-phase one leaves an empty marker array and zero counters, a
//! native one nothing), so two documents whose own fields were equal
//! answered the same guard differently. Such a guard is refused as
//! malformed (`ChangeError::ReservedField`), with either strategy, before
//! anything is written.

mod common;

use std::sync::Arc;

use bson::doc;
use common::{accounts, balance, bank, records};
use tandem::{
    ChangeError, CommitPoint, Coordinator, DocumentChange, Store, Strategy, Transaction, TxError,
};

#[tokio::test]
async fn a_guard_on_tandems_own_fields_is_refused() {
    type Guarded = (&'static str, fn(DocumentChange) -> DocumentChange);
    let guards: Vec<Guarded> = vec![
        ("pendingTransactions", |c| {
            c.require_missing("pendingTransactions")
        }),
        ("pendingTransactions.0", |c| {
            c.require_missing("pendingTransactions.0")
        }),
        ("_tandem", |c| c.require_missing("_tandem")),
        ("_tandem.pending", |c| c.require_lte("_tandem.pending", 0)),
        ("_tandem.credit.balance", |c| {
            c.require_missing("_tandem.credit.balance")
        }),
        ("ledger", |c| c.marker("ledger").require_missing("ledger")),
    ];
    for (path, guard) in guards {
        for strategy in [Strategy::TwoPhase, Strategy::Native] {
            // A was touched by a two-phase transfer before (its marker array
            // and counters are left, empty), C never was: their own fields
            // are equal.
            let (store, _clock, _) = bank(&["A", "B"], 100).await;
            store
                .insert_one(&accounts(), doc! { "_id": "C", "balance": 100_i64 })
                .await
                .unwrap();
            let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
                .commit_point(CommitPoint::Done)
                .build();
            coordinator
                .run(common::transfer("A", "B", 10).strategy(Strategy::TwoPhase))
                .await
                .unwrap();
            coordinator
                .run(common::transfer("B", "A", 10).strategy(Strategy::TwoPhase))
                .await
                .unwrap();
            let records_before = store.documents(&records()).len();
            for id in ["A", "C"] {
                let debit = guard(
                    DocumentChange::update(accounts(), id)
                        .inc("balance", -30_i64)
                        .require_gte("balance", 30_i64),
                );
                let answer = coordinator
                    .run(Transaction::new().change(debit).strategy(strategy))
                    .await;
                assert!(
                    matches!(
                        answer,
                        Err(TxError::Invalid(ChangeError::ReservedField { path: ref p })) if p == path
                    ),
                    "{strategy:?}, guard on {path}, document {id}: {answer:?}"
                );
                assert_eq!(balance(&store, id).await, 100, "{strategy:?}, {path}, {id}");
            }
            assert_eq!(
                store.documents(&records()).len(),
                records_before,
                "{strategy:?}, {path}: no record"
            );
        }
    }
}

/// A guard on `_id` reads the document's own id, and stays allowed.
#[tokio::test]
async fn a_guard_on_the_id_still_holds() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let (store, _clock, _) = bank(&["A"], 100).await;
        let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
            .commit_point(CommitPoint::Done)
            .build();
        coordinator
            .run(
                Transaction::new()
                    .change(
                        DocumentChange::update(accounts(), "A")
                            .inc("balance", -30_i64)
                            .require_eq("_id", "A"),
                    )
                    .strategy(strategy),
            )
            .await
            .unwrap();
        assert_eq!(balance(&store, "A").await, 70, "{strategy:?}");
    }
}
