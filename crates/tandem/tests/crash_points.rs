//! Stops the coordinator after every single store operation, then recovers and audits.

mod common;

use bson::doc;
use common::accounts;
use tandem::testing::CrashHarness;
use tandem::{CommitPoint, DocumentChange, Namespace, PendingPolicy, Transaction, TxState};

fn orders() -> Namespace {
    Namespace::new("shop", "orders")
}

/// Documents for up to five participants: accounts, an order, a cart.
fn documents() -> Vec<(Namespace, bson::Document)> {
    vec![
        (
            accounts(),
            doc! { "_id": "A", "balance": 1000_i64, "pendingTransactions": [] },
        ),
        (
            accounts(),
            doc! { "_id": "B", "balance": 1000_i64, "pendingTransactions": [] },
        ),
        (
            accounts(),
            doc! { "_id": "C", "balance": 1000_i64, "pendingTransactions": [] },
        ),
        (
            orders(),
            doc! { "_id": "o-1", "state": "UnPaid", "total": 100_i64 },
        ),
        (
            Namespace::new("shop", "carts"),
            doc! { "_id": "cart-1", "items": ["x"] },
        ),
    ]
}

/// A transaction of `n` participants (1 to 5) mixing increments, a guarded set, an insert and a delete.
fn transaction(n: usize, amount: i64) -> Transaction {
    let all = vec![
        DocumentChange::update(accounts(), "A")
            .inc("balance", -amount)
            .require_gte("balance", amount),
        DocumentChange::update(orders(), "o-1")
            .set("state", "Paid")
            .require_eq("state", "UnPaid"),
        DocumentChange::update(accounts(), "B").inc("balance", amount),
        DocumentChange::insert(
            Namespace::new("shop", "receipts"),
            "r-1",
            doc! { "order": "o-1" },
        ),
        DocumentChange::delete(Namespace::new("shop", "carts"), "cart-1"),
    ];
    all.into_iter()
        .take(n)
        .fold(Transaction::new(), Transaction::change)
}

#[tokio::test]
async fn every_crash_point_recovers_cleanly() {
    let mut total = 0;
    for commit_point in [CommitPoint::Done, CommitPoint::Applied] {
        for pending in [PendingPolicy::RollBack, PendingPolicy::RollForward] {
            for n in 1..=5 {
                for amount in [100_i64, 5000] {
                    let harness = CrashHarness {
                        commit_point,
                        pending,
                        ..CrashHarness::default()
                    };
                    let report = harness
                        .run(&documents(), || transaction(n, amount), |_, _| async {})
                        .await;
                    // Every run commits or cancels; an impossible amount never commits.
                    if amount > 1000 {
                        assert!(!report.outcomes.contains_key("done"), "{report:?}");
                    } else {
                        assert!(report.outcomes.contains_key("done"), "{report:?}");
                    }
                    assert!(report.crash_points >= 4, "{n} participants: {report:?}");
                    total += report.crash_points;
                }
            }
        }
    }
    println!("crash points covered: {total}");
    assert!(total > 200, "covered {total}");
}

#[tokio::test]
async fn a_crash_before_the_commit_point_never_half_applies_a_payment() {
    let harness = CrashHarness::default();
    let report = harness
        .run(
            &documents(),
            || transaction(2, 100),
            |store, result| async move {
                let order = store
                    .find_one(&orders(), doc! { "_id": "o-1" })
                    .await
                    .unwrap()
                    .unwrap();
                let a = store
                    .find_one(&accounts(), doc! { "_id": "A" })
                    .await
                    .unwrap()
                    .unwrap();
                let paid = order.get_str("state").unwrap() == "Paid";
                let debited = a.get_i64("balance").unwrap() == 900;
                assert_eq!(
                    paid, debited,
                    "order paid = {paid}, balance debited = {debited}"
                );
                if result.is_ok() {
                    assert!(paid, "a successful run is committed");
                }
            },
        )
        .await;
    println!(
        "payment crash points: {} {:?}",
        report.crash_points, report.outcomes
    );
    assert_eq!(
        report.outcomes.values().sum::<usize>(),
        report.crash_points + 1
    );
    assert!(report.outcomes.contains_key(TxState::Canceled.as_str()));
}
