#![cfg(feature = "test-util")]
//! Namespace names MongoDB refuses: a database name with `\` or `"`, or of
//! 64 bytes or more; a collection name starting with `system.`; a namespace
//! (`db.collection`) longer than 255 bytes. `#[participant(db = "...")]`
//! refused the first two at compile time, while the builder accepted them:
//! the embedded store committed such a change, and MongoDB would refuse it
//! only at the apply, after the record and the other participants' applies
//! were written. They are refused as malformed
//! (`ChangeError::InvalidNamespace`), with either strategy, before anything
//! is written.

mod common;

use std::sync::Arc;

use common::{accounts, balance, bank, records};
use tandem::{
    ChangeError, CommitPoint, Coordinator, DocumentChange, Namespace, Strategy, Transaction,
    TxError,
};

#[tokio::test]
async fn names_mongodb_refuses_are_refused_before_anything_is_written() {
    let long_db = "d".repeat(64);
    let long_collection = "c".repeat(251);
    let cases = [
        (Namespace::new("a\\b", "orders"), "a\\b"),
        (Namespace::new("a\"b", "orders"), "a\"b"),
        (Namespace::new(long_db.as_str(), "orders"), long_db.as_str()),
        (Namespace::new("shop", "system.orders"), "system.orders"),
        (
            Namespace::new("shop", long_collection.as_str()),
            long_collection.as_str(),
        ),
    ];
    for (ns, name) in cases {
        for strategy in [Strategy::TwoPhase, Strategy::Native] {
            let (store, _clock, _) = bank(&["A"], 100).await;
            let coordinator = Coordinator::builder_shared(Arc::new(store.clone()))
                .commit_point(CommitPoint::Done)
                .build();
            let tx = Transaction::new()
                .change(
                    DocumentChange::update(accounts(), "A")
                        .inc("balance", -30_i64)
                        .require_gte("balance", 30_i64),
                )
                .change(DocumentChange::insert(
                    ns.clone(),
                    "o-1",
                    bson::doc! { "amount": 30_i64 },
                ))
                .strategy(strategy);
            let answer = coordinator.run(tx).await;
            assert!(
                matches!(
                    answer,
                    Err(TxError::Invalid(ChangeError::InvalidNamespace { name: ref n, .. })) if n == name
                ),
                "{strategy:?}, {ns:?}: {answer:?}"
            );
            assert_eq!(balance(&store, "A").await, 100, "{strategy:?}, {ns:?}");
            assert!(store.documents(&ns).is_empty(), "{strategy:?}, {ns:?}");
            assert!(store.documents(&records()).is_empty(), "{strategy:?}");
        }
    }
}

/// Names at the limits are accepted.
#[tokio::test]
async fn names_at_the_limits_are_accepted() {
    let db = "d".repeat(63);
    let collection = "c".repeat(255 - 64);
    for ns in [
        Namespace::new(db.as_str(), collection.as_str()),
        Namespace::new("shop", "systemic.orders"),
    ] {
        let change = DocumentChange::insert(ns.clone(), "o-1", bson::doc! { "amount": 1 });
        assert!(change.validate().is_ok(), "{ns:?}");
    }
}
