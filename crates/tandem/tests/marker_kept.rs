#![cfg(feature = "test-util")]
//! A marker name that is a field of the application's holding something
//! other than an array (`DocumentChange::marker("owner")` where `owner` is
//! a string). The two-phase apply cannot push its marker there: it answered
//! a `TypeMismatch` naming the change's own field (`n`), not the marker, and
//! now names the marker; nothing is written. The native strategy writes no
//! marker and does not read the field: it commits (a condition on the
//! marker field in every native filter cost a sixth of a native transfer on
//! the embedded store, for a field it never writes).

mod common;

use std::sync::Arc;

use bson::doc;
use common::{balance, bank, debit_and, get, records};
use tandem::{
    change::DEFAULT_MARKER, CommitPoint, Coordinator, DocumentChange, Namespace, StepError, Store,
    Strategy, Transaction, TxError,
};

/// A debit of 30 from account `A`, and `change`, with `strategy`.
fn debit_a_and(change: DocumentChange, strategy: Strategy) -> Transaction {
    debit_and("A", change).strategy(strategy)
}

/// Asserts that `answer` is a cancel, every apply undone, for a
/// `TypeMismatch` at the marker field `marker` whose message holds each of
/// `words`.
fn refused_at_marker(
    answer: &Result<tandem::Receipt, TxError>,
    marker: &str,
    words: &[&str],
    case: &str,
) {
    match answer {
        Err(TxError::Canceled {
            cause: StepError::TypeMismatch { path, message, .. },
            undone: true,
            ..
        }) => {
            assert_eq!(path, marker, "{case}: {message}");
            for word in words {
                assert!(message.contains(word), "{case}: {message}");
            }
        }
        other => panic!("{case}: {other:?}"),
    }
}

fn things() -> Namespace {
    Namespace::new("app", "things")
}

#[tokio::test]
async fn a_marker_field_holding_a_string_is_named_by_a_two_phase_refusal() {
    for shared in [true, false] {
        for strategy in [Strategy::TwoPhase, Strategy::Native] {
            let (store, _clock, _) = bank(&["A"], 100).await;
            store
                .insert_one(&things(), doc! { "_id": "X", "owner": "alice", "n": 1 })
                .await
                .unwrap();
            let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
                .commit_point(CommitPoint::Done)
                .build();
            let change = DocumentChange::update(things(), "X").marker("owner");
            let change = if shared {
                change.inc("n", 1)
            } else {
                change.set("n", 2)
            };
            let answer = coordinator.run(debit_a_and(change, strategy)).await;
            let case = format!("{strategy:?}, shared {shared}");
            if strategy == Strategy::Native {
                assert!(answer.is_ok(), "{case}: {answer:?}");
                assert_eq!(balance(&store, "A").await, 70, "{case}");
                let x = get(&store, &things(), "X").await.unwrap();
                assert_eq!(x.get_str("owner").unwrap(), "alice", "{case}");
                assert_eq!(x.get_i32("n").unwrap(), 2, "{case}");
                continue;
            }
            refused_at_marker(&answer, "owner", &["marker field owner"], &case);
            assert_eq!(balance(&store, "A").await, 100, "{case}");
            let x = get(&store, &things(), "X").await.unwrap();
            assert_eq!(x.get_str("owner").unwrap(), "alice", "{case}");
            assert_eq!(x.get_i32("n").unwrap(), 1, "{case}");
            for record in store.documents(&records()) {
                assert_eq!(record.get_str("state").unwrap(), "canceled", "{case}");
            }
        }
    }
}

/// A marker name that is a field of the application's holding an array of
/// its own (`tags: ["alice", "bob"]`). An exclusive two-phase change
/// answered `Conflict` naming `alice` as the transaction holding the
/// document (a wait for it never ended), and a shared one pushed its marker
/// into the application's array (where the application's next write of the
/// array could take it away, and the commit's clear, which needs it, then
/// landed nothing). Both are refused now: `TypeMismatch` naming the marker
/// field, which holds data that is not tandem's, and nothing written. A
/// native exclusive change reads the field (nothing may be pending there)
/// and is refused alike (it too named `alice`); a native shared change
/// neither writes nor reads it, and commits.
#[tokio::test]
async fn a_marker_field_holding_an_application_array_is_refused() {
    for exclusive in [true, false] {
        for strategy in [Strategy::TwoPhase, Strategy::Native] {
            let (store, _clock, _) = bank(&["A"], 100).await;
            store
                .insert_one(
                    &things(),
                    doc! { "_id": "X", "tags": ["alice", "bob"], "n": 1 },
                )
                .await
                .unwrap();
            let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
                .commit_point(CommitPoint::Done)
                .conflict(tandem::ConflictPolicy::Wait {
                    timeout: std::time::Duration::from_millis(300),
                })
                .build();
            let change = DocumentChange::update(things(), "X").marker("tags");
            let change = if exclusive {
                change.set("n", 2)
            } else {
                change.inc("n", 1)
            };
            let answer = coordinator.run(debit_a_and(change, strategy)).await;
            let case = format!("{strategy:?}, exclusive {exclusive}");
            let x = get(&store, &things(), "X").await.unwrap();
            assert_eq!(
                x.get_array("tags").unwrap(),
                &vec![bson::Bson::from("alice"), bson::Bson::from("bob")],
                "{case}: {x}"
            );
            if strategy == Strategy::Native && !exclusive {
                assert!(answer.is_ok(), "{case}: {answer:?}");
                assert_eq!(balance(&store, "A").await, 70, "{case}");
                assert_eq!(x.get_i32("n").unwrap(), 2, "{case}");
                continue;
            }
            refused_at_marker(&answer, "tags", &["not tandem's", "alice"], &case);
            assert_eq!(balance(&store, "A").await, 100, "{case}");
            assert_eq!(x.get_i32("n").unwrap(), 1, "{case}");
            assert!(
                x.get_document("_tandem")
                    .map(|m| m.get("lock").is_none()
                        && !matches!(
                            m.get("pending"),
                            Some(bson::Bson::Int32(1..) | bson::Bson::Int64(1..))
                        ))
                    .unwrap_or(true),
                "{case}: {x}"
            );
            for record in store.documents(&records()) {
                assert_eq!(record.get_str("state").unwrap(), "canceled", "{case}");
            }
        }
    }
}

/// The same application array under the marker name, on a document where
/// another transaction has a change pending under the default marker field
/// (`pendingTransactions`), as on any busy document. `_tandem.pending`
/// counts the changes pending under every marker field, so "no more
/// entries than the pending count" let `tags: ["alice"]` (one entry, one
/// transaction pending elsewhere) pass for tandem's own array: the shared
/// two-phase credit pushed its marker into the application's array and was
/// answered committed, and the application's next write of its array
/// would take away the marker the credit's clear needs. It must be refused
/// as on an idle document, and nothing written.
#[tokio::test]
async fn a_marker_field_holding_an_application_array_is_refused_beside_other_markers() {
    refused_beside_a_pending_change(DEFAULT_MARKER, "tags").await;
}

/// The other way round: the application's array under the default marker
/// name (`pendingTransactions: ["alice"]`), and a change pending under a
/// marker field of another name. The default field's changes are counted
/// as those no other field's count names, so this one is refused too.
#[tokio::test]
async fn an_application_array_under_the_default_marker_is_refused_beside_other_markers() {
    refused_beside_a_pending_change("tags", DEFAULT_MARKER).await;
}

/// A shared two-phase change under the marker field `mine`, which holds an
/// application's array `["alice"]`, while another transaction's change is
/// applied, not cleared, under the marker field `held`: refused with
/// `TypeMismatch` naming `mine`, nothing written; the other then lands.
async fn refused_beside_a_pending_change(held: &str, mine: &str) {
    let (store, _clock, _) = bank(&["A"], 100).await;
    store
        .insert_one(
            &things(),
            doc! { "_id": "X", mine: ["alice"], "n": 1, held: [] },
        )
        .await
        .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // A credit of X under `held`, held before its clear (1 the create, 2
    // the apply; 3, the clear, waits).
    let faulty = tandem::testing::FaultStore::new(shared.clone());
    let pause = faulty.pause_at(3);
    let slow = Coordinator::builder_shared(Arc::new(faulty))
        .commit_point(CommitPoint::Done)
        .build();
    let other = Transaction::new().change(
        DocumentChange::update(things(), "X")
            .marker(held)
            .inc("n", 10),
    );
    let run = tokio::spawn(async move { slow.run(other).await });
    pause.reached.await.unwrap();
    let x = get(&store, &things(), "X").await.unwrap();
    assert_eq!(
        x.get_array(held).map(Vec::len),
        Ok(1),
        "the other credit is applied, not cleared: {x}"
    );

    let coordinator = Coordinator::builder_shared(shared.clone())
        .commit_point(CommitPoint::Done)
        .build();
    let change = DocumentChange::update(things(), "X")
        .marker(mine)
        .inc("n", 1);
    let answer = coordinator
        .run(debit_a_and(change, Strategy::TwoPhase))
        .await;
    let x = get(&store, &things(), "X").await.unwrap();
    assert_eq!(
        x.get_array(mine).unwrap(),
        &vec![bson::Bson::from("alice")],
        "the application's array is left as it was: {answer:?}; {x}"
    );
    refused_at_marker(&answer, mine, &["not tandem's"], &format!("{held} held"));
    assert_eq!(balance(&store, "A").await, 100);

    pause.release.send(()).unwrap();
    run.await.unwrap().unwrap();
    let x = get(&store, &things(), "X").await.unwrap();
    assert_eq!(x.get_i32("n").unwrap(), 11, "{x}");
    assert_eq!(
        x.get_array(mine).unwrap(),
        &vec![bson::Bson::from("alice")],
        "{x}"
    );
    // Every count the apply raised, its clear lowered: a change under a
    // field of another name counts itself there and in the total.
    let meta = x.get_document("_tandem").unwrap();
    assert_eq!(meta.get_i32("pending"), Ok(0), "{x}");
    if held == DEFAULT_MARKER {
        assert!(
            !meta.contains_key("marks") && !meta.contains_key("marked"),
            "{x}"
        );
    } else {
        assert_eq!(
            meta.get_document("marks").unwrap().get_i32(held),
            Ok(0),
            "{x}"
        );
        assert_eq!(meta.get_i32("marked"), Ok(0), "{x}");
    }
}
