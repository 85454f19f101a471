#![cfg(feature = "test-util")]
//! A value nested deeper than MongoDB's manual supports (100 levels, each
//! document or array one): the embedded store committed a `set` or an
//! insert of one, while a MongoDB server refuses one past 180 levels (by
//! default) at the apply, after the record and the other participants'
//! applies were written; and the record, which keeps the
//! value seven levels below its own top, could not be written for values
//! that fit in the document. Such a value is refused as malformed
//! (`ChangeError::TooDeep`), with either strategy, before anything is
//! written.

mod common;

use std::sync::Arc;

use bson::{doc, Bson};
use common::{accounts, balance, bank, debit_and, get, records};
use tandem::{
    change::MAX_VALUE_DEPTH, ChangeError, CommitPoint, Coordinator, DocumentChange, StepError,
    Store, Strategy, Transaction, TxError,
};

/// A value nesting `levels` documents.
fn nested(levels: usize) -> Bson {
    let mut v = Bson::Int32(1);
    for _ in 0..levels {
        v = Bson::Document(doc! { "x": v });
    }
    v
}

#[tokio::test]
async fn a_value_nested_too_deep_is_refused() {
    type Case = (&'static str, usize, fn(Bson) -> DocumentChange);
    let cases: Vec<Case> = vec![
        ("deep", 150, |v| {
            DocumentChange::update(accounts(), "A").set("deep", v)
        }),
        ("a.b.deep", MAX_VALUE_DEPTH - 2, |v| {
            DocumentChange::update(accounts(), "A").set("a.b.deep", v)
        }),
        ("log", MAX_VALUE_DEPTH - 1, |v| {
            DocumentChange::update(accounts(), "A").push("log", v)
        }),
        ("deep", MAX_VALUE_DEPTH, |v| {
            DocumentChange::insert(accounts(), "Z", doc! { "deep": v })
        }),
        ("deep", MAX_VALUE_DEPTH, |v| {
            DocumentChange::update(accounts(), "A")
                .set("note", "x")
                .require_ne("deep", v)
        }),
    ];
    for (path, levels, change) in cases {
        for strategy in [Strategy::TwoPhase, Strategy::Native] {
            let (store, _clock, _) = bank(&["A", "B"], 100).await;
            let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
                .commit_point(CommitPoint::Done)
                .build();
            let tx = debit_and("B", change(nested(levels))).strategy(strategy);
            let answer = coordinator.run(tx).await;
            assert!(
                matches!(
                    answer,
                    Err(TxError::Invalid(ChangeError::TooDeep { path: ref p, limit, .. }))
                        if p == path && limit == MAX_VALUE_DEPTH
                ),
                "{strategy:?}, {path} nesting {levels}: {answer:?}"
            );
            assert_eq!(balance(&store, "B").await, 100, "{strategy:?}, {path}");
            let a = get(&store, &accounts(), "A").await.unwrap();
            assert!(!a.contains_key("deep") && !a.contains_key("a") && !a.contains_key("log"));
            assert!(get(&store, &accounts(), "Z").await.is_none());
            assert!(store.documents(&records()).is_empty(), "{strategy:?}");
        }
    }
}

/// A value at the limit is accepted, and commits: a `set`, a `push`, a
/// guard's value and an inserted field (the transaction record, which keeps
/// each, can hold them too).
#[tokio::test]
async fn a_value_at_the_limit_commits() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let (store, _clock, _) = bank(&["A"], 100).await;
        let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
            .commit_point(CommitPoint::Done)
            .build();
        let at_limit = nested(MAX_VALUE_DEPTH - 1);
        coordinator
            .run(
                Transaction::new()
                    .change(
                        DocumentChange::update(accounts(), "A")
                            .set("deep", at_limit.clone())
                            .push("log", nested(MAX_VALUE_DEPTH - 2))
                            .require_ne("other", at_limit.clone()),
                    )
                    .change(DocumentChange::insert(
                        accounts(),
                        "Z",
                        doc! { "deep": at_limit.clone() },
                    ))
                    .strategy(strategy),
            )
            .await
            .unwrap();
        let a = get(&store, &accounts(), "A").await.unwrap();
        assert_eq!(a.get("deep"), Some(&at_limit));
        let z = get(&store, &accounts(), "Z").await.unwrap();
        assert_eq!(z.get("deep"), Some(&at_limit));
    }
}

/// A field that holds a value nested deeper than the transaction record
/// can keep as a before-image (written outside tandem: MongoDB's manual
/// supports 100 levels, the record keeps a before-image six levels below
/// its top): the two-phase strategy refuses to change it
/// (`StepError::TooDeep`) before anything is written, where the record
/// went past what MongoDB supports and the embedded store committed. One level
/// less commits; the native strategy, which keeps no before-image,
/// commits either way.
#[tokio::test]
async fn a_before_image_too_deep_for_the_record_is_refused() {
    // The record, its participants, the entry, the image, its fields, a
    // field: six levels above the value's own.
    let fits = MAX_VALUE_DEPTH + 7 - 6;
    for (levels, strategy, commits) in [
        (fits + 1, Strategy::TwoPhase, false),
        (fits, Strategy::TwoPhase, true),
        (fits + 1, Strategy::Native, true),
    ] {
        let (store, _clock, _) = bank(&["A", "B"], 100).await;
        store
            .insert_one(&accounts(), doc! { "_id": "Z", "deep": nested(levels) })
            .await
            .unwrap();
        let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
            .commit_point(CommitPoint::Done)
            .build();
        let tx = debit_and("B", DocumentChange::update(accounts(), "Z").set("deep", 1))
            .strategy(strategy);
        let answer = coordinator.run(tx).await;
        let z = get(&store, &accounts(), "Z").await.unwrap();
        if commits {
            assert!(answer.is_ok(), "{strategy:?}, {levels}: {answer:?}");
            assert_eq!(z.get("deep"), Some(&Bson::Int32(1)));
            assert_eq!(balance(&store, "B").await, 70);
            continue;
        }
        let limit = MAX_VALUE_DEPTH + 7;
        assert!(
            matches!(
                answer,
                Err(TxError::Canceled {
                    cause: StepError::TooDeep { ref participant, depth, limit: l },
                    undone: true,
                    ..
                }) if participant.contains('Z') && depth == limit + 1 && l == limit
            ),
            "{levels}: {answer:?}"
        );
        assert_eq!(z.get("deep"), Some(&nested(levels)));
        assert_eq!(balance(&store, "B").await, 100);
        assert!(store.documents(&records()).is_empty());
    }
}
