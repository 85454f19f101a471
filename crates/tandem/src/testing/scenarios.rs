//! Conformance scenarios every store must pass, on a bank of accounts.
//!
//! Each scenario takes a [`StoreFactory`] and a database name, seeds accounts
//! in `<db>.accounts`, keeps records in `<db>.transactions`, and panics with
//! the broken invariant if the store (or the protocol) misbehaves.

use std::time::Duration;

use bson::{doc, Document};

use super::{audit, FaultStore, StoreFactory};
use crate::change::DocumentChange;
use crate::config::{CommitPoint, PendingPolicy, RecoveryConfig};
use crate::coordinator::{Coordinator, Transaction};
use crate::error::TxError;
use crate::record::TxState;
use crate::store::{Namespace, Store};

/// The accounts of a scenario's bank.
pub fn accounts(db: &str) -> Namespace {
    Namespace::new(db, "accounts")
}

/// A transfer of `amount` from `from` to `to`, guarded so `from` cannot go negative.
pub fn transfer(db: &str, from: &str, to: &str, amount: i64) -> Transaction {
    Transaction::new()
        .change(
            DocumentChange::update(accounts(db), from)
                .inc("balance", -amount)
                .require_gte("balance", amount),
        )
        .change(DocumentChange::update(accounts(db), to).inc("balance", amount))
}

/// Seeds `names` with `balance` each; returns the seeded documents for [`audit`].
pub async fn seed_bank(
    store: &dyn Store,
    db: &str,
    names: &[&str],
    balance: i64,
) -> Vec<(Namespace, Document)> {
    let mut seeded = Vec::new();
    for name in names {
        let d = doc! { "_id": *name, "balance": balance, "pendingTransactions": [] };
        store
            .insert_one(&accounts(db), d.clone())
            .await
            .expect("seeding an account");
        seeded.push((accounts(db), d));
    }
    seeded
}

async fn balance(store: &dyn Store, db: &str, name: &str) -> i64 {
    store
        .find_one(&accounts(db), doc! { "_id": name })
        .await
        .expect("reading an account")
        .and_then(|d| d.get_i64("balance").ok())
        .expect("an account with an i64 balance")
}

/// The store operations of one transfer run to `done` by a coordinator: create
/// the record (`pending`), apply A, apply B, `applied`, clear A, clear B, `done`.
pub const STALLED_WORKER_OPERATIONS: u64 = 7;

/// Worker 1 is paused before each of its store operations in turn; worker 2
/// (recovery) takes over and finishes; worker 1 resumes. Nothing may apply
/// twice, and worker 1 must learn it was superseded. Returns the scenarios run.
pub async fn stalled_worker<F: StoreFactory + ?Sized>(factory: &F, db: &str) -> usize {
    let mut covered = 0;
    for policy in [PendingPolicy::RollForward, PendingPolicy::RollBack] {
        // create (pending), apply A, apply B, applied, clear A, clear B, done.
        for pause_at in 1..=STALLED_WORKER_OPERATIONS {
            let store = factory.fresh().await;
            let seeded = seed_bank(store.as_ref(), db, &["A", "B"], 1000).await;
            let faulty = FaultStore::new(store.clone());
            let pause = faulty.pause_at(pause_at);
            let lease = factory.lease();
            let worker1 = Coordinator::builder(faulty.clone())
                .database(db)
                .commit_point(CommitPoint::Done)
                .lease(lease)
                .clock_margin(Duration::ZERO)
                .build();
            let tx = transfer(db, "A", "B", 100);
            let mut run1 = tokio::spawn(async move { worker1.run(tx).await });
            tokio::select! {
                reached = pause.reached => reached.expect("worker 1 reaches its pause"),
                finished = &mut run1 => panic!(
                    "worker 1 finished ({finished:?}) before its store operation {pause_at}"
                ),
            }

            // Worker 1 stays silent past its lease, by the store's clock.
            factory.pass(store.as_ref(), lease).await;
            let worker2 = Coordinator::builder_shared(store.clone())
                .database(db)
                .lease(lease)
                .clock_margin(Duration::ZERO)
                .build()
                .recovery(RecoveryConfig {
                    pending: policy,
                    ..RecoveryConfig::default()
                });
            let report = worker2.run_once().await.expect("recovery pass");
            assert_eq!(report.failed, 0, "paused at {pause_at}: {report:?}");

            pause.release.send(()).expect("worker 1 waits");
            let result1 = run1.await.expect("worker 1 task");
            // Whatever worker 1 left in flight after it resumed runs out too.
            factory.pass(store.as_ref(), lease).await;
            // Worker 1 learns it was superseded, unless it had committed
            // before its pause: then its answer is the receipt (`applied`),
            // and the transaction must end `done`.
            let answered_committed = match &result1 {
                Ok(receipt) => {
                    // Before its record, nothing had happened: it ran undisturbed.
                    let expected = if pause_at == 1 {
                        TxState::Done
                    } else {
                        TxState::Applied
                    };
                    assert_eq!(receipt.state, expected, "paused at {pause_at}");
                    true
                }
                Err(TxError::Superseded { .. }) => false,
                // Stalled between fixing its create deadline and writing the
                // record: the record it writes is inert.
                Err(TxError::Canceled {
                    cause: crate::StepError::Expired { .. },
                    ..
                }) if pause_at == 1 => false,
                Err(e) if pause_at == 1 => {
                    assert!(matches!(e, TxError::Duplicate { .. }), "paused at 1: {e:?}");
                    false
                }
                Err(e) => panic!("paused at {pause_at}: worker 1 returned {e:?}"),
            };
            let final_pass = worker2.run_once().await.expect("recovery pass");
            assert_eq!(final_pass.failed, 0);

            let records = Namespace::new(db, "transactions");
            let audit = audit(store.as_ref(), &records, &seeded)
                .await
                .expect("audit");
            audit.assert_clean();
            let a = balance(store.as_ref(), db, "A").await;
            let b = balance(store.as_ref(), db, "B").await;
            let committed = audit.count(TxState::Done) == 1;
            assert!(
                committed || !answered_committed,
                "paused at {pause_at}: answered committed, ended {:?}",
                audit.records
            );
            let expected = if committed { (900, 1100) } else { (1000, 1000) };
            assert_eq!((a, b), expected, "paused at {pause_at} ({policy:?})");
            covered += 1;
        }
    }
    covered
}

/// One transfer of an [`Interleaving`].
#[derive(Clone, Debug)]
pub struct PlannedTransfer {
    /// Index of the paying account.
    pub from: usize,
    /// Index of the receiving account.
    pub to: usize,
    /// The amount.
    pub amount: i64,
    /// Crash the coordinator after this many store operations.
    pub crash_after: Option<u64>,
    /// Where the coordinator returns.
    pub commit_point: CommitPoint,
    /// A zero lease, so recovery workers may take the transaction over while it runs.
    pub expired_lease: bool,
}

/// Several coordinators and recovery workers racing on one bank.
#[derive(Clone, Debug)]
pub struct Interleaving {
    /// The transfers, each run by its own coordinator at once.
    pub transfers: Vec<PlannedTransfer>,
    /// Picks the interleaving (scheduler yields before each store operation).
    pub seed: u64,
    /// Recovery workers racing the coordinators.
    pub recoveries: usize,
    /// Whether recovery rolls `pending` forward.
    pub forward: bool,
}

/// The account names of [`interleaving`]: four accounts of 100 each.
pub const BANK: [&str; 4] = ["A", "B", "C", "D"];

/// Runs an [`Interleaving`], then recovery to quiescence, then checks: every
/// record terminal, no marker or lock, balances equal to the committed
/// transfers exactly once, none negative, and the total conserved.
pub async fn interleaving<F: StoreFactory + ?Sized>(factory: &F, db: &str, plan: &Interleaving) {
    let store = factory.fresh().await;
    let seeded = seed_bank(store.as_ref(), db, &BANK, 100).await;
    let policy = if plan.forward {
        PendingPolicy::RollForward
    } else {
        PendingPolicy::RollBack
    };
    let mut tasks = Vec::new();
    for (i, p) in plan.transfers.iter().cloned().enumerate() {
        let mut faulty = FaultStore::new(store.clone()).with_yields(plan.seed ^ i as u64);
        if let Some(k) = p.crash_after {
            faulty = faulty.crash_after(k);
        }
        let lease = if p.expired_lease || p.crash_after.is_some() {
            factory.lease()
        } else {
            Duration::from_secs(3600)
        };
        let coordinator = Coordinator::builder(faulty)
            .database(db)
            .commit_point(p.commit_point)
            .lease(lease)
            .clock_margin(Duration::ZERO)
            .build();
        let tx = transfer(db, BANK[p.from], BANK[p.to], p.amount);
        tasks.push(tokio::spawn(async move {
            let _ = coordinator.run(tx).await;
            coordinator.drain().await;
        }));
    }
    for r in 0..plan.recoveries {
        let faulty =
            FaultStore::new(store.clone()).with_yields(plan.seed.rotate_left(7) ^ r as u64);
        let worker = Coordinator::builder(faulty)
            .database(db)
            .lease(factory.lease())
            .clock_margin(Duration::ZERO)
            .build()
            .recovery(RecoveryConfig {
                pending: policy,
                ..RecoveryConfig::default()
            });
        let delay = plan.seed % 5;
        tasks.push(tokio::spawn(async move {
            for _ in 0..delay {
                tokio::task::yield_now().await;
            }
            let _ = worker.run_once().await;
        }));
    }
    // The short leases run out while the coordinators and recovery race.
    let lease = factory.lease();
    factory.pass(store.as_ref(), lease).await;
    for t in tasks {
        t.await.expect("scenario task");
    }
    // And whatever the race left in flight runs out before the last pass.
    factory.pass(store.as_ref(), lease).await;
    let worker = Coordinator::builder_shared(store.clone())
        .database(db)
        .lease(lease)
        .clock_margin(Duration::ZERO)
        .build()
        .recovery(RecoveryConfig {
            pending: policy,
            ..RecoveryConfig::default()
        });
    let report = worker.run_once().await.expect("recovery pass");
    assert_eq!(report.failed, 0, "{report:?}");

    let records = Namespace::new(db, "transactions");
    let audit = audit(store.as_ref(), &records, &seeded)
        .await
        .expect("audit");
    audit.assert_clean();
    let mut total = 0;
    for name in BANK {
        let b = balance(store.as_ref(), db, name).await;
        assert!(b >= 0, "{name} went negative: {b}");
        total += b;
    }
    assert_eq!(total, 100 * BANK.len() as i64, "money is conserved");
}

/// Transfers committed at the same time (returning at `applied`) are finished
/// together by the coordinator's background finisher. The run is crashed after
/// each store operation in turn, the finishing included; recovery then ends
/// every transaction, and each transfer must have moved its money exactly
/// when its record says `done`. Returns the crash points covered (plus the
/// run without a crash).
pub async fn finished_together<F: StoreFactory + ?Sized>(factory: &F, db: &str) -> usize {
    const TRANSFERS: usize = 8;
    let names: Vec<String> = (0..TRANSFERS)
        .flat_map(|i| [format!("from-{i}"), format!("to-{i}")])
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let records = Namespace::new(db, "transactions");
    let mut total_ops = None;
    let mut crash_after = 0;
    let mut covered = 0;
    loop {
        let store = factory.fresh().await;
        let seeded = seed_bank(store.as_ref(), db, &names, 1000).await;
        let faulty = FaultStore::new(store.clone());
        let faulty = match total_ops {
            Some(_) => faulty.crash_after(crash_after),
            None => faulty,
        };
        let lease = factory.lease();
        let coordinator = Coordinator::builder(faulty.clone())
            .database(db)
            .commit_point(CommitPoint::Applied)
            .lease(lease)
            .clock_margin(Duration::ZERO)
            .build();
        let runs = (0..TRANSFERS).map(|i| {
            let tx = Transaction::with_id(format!("together-{i}")).change(
                DocumentChange::update(accounts(db), format!("from-{i}"))
                    .inc("balance", -10_i64)
                    .require_gte("balance", 10_i64),
            );
            let tx = tx.change(
                DocumentChange::update(accounts(db), format!("to-{i}")).inc("balance", 10_i64),
            );
            let coordinator = coordinator.clone();
            async move { coordinator.run(tx).await }
        });
        let results = futures::future::join_all(runs).await;
        coordinator.drain().await;
        if total_ops.is_none() {
            for r in &results {
                assert!(r.is_ok(), "without a crash every transfer commits: {r:?}");
            }
            let audit = audit(store.as_ref(), &records, &seeded)
                .await
                .expect("audit");
            audit.assert_clean();
            assert_eq!(audit.count(TxState::Done), TRANSFERS);
            total_ops = Some(faulty.ops());
        } else {
            // Recovery takes over what the crash left once its lease has run out.
            factory.pass(store.as_ref(), lease).await;
            let recovery = Coordinator::builder_shared(store.clone())
                .database(db)
                .lease(lease)
                .clock_margin(Duration::ZERO)
                .build()
                .recovery(RecoveryConfig::default());
            let report = recovery.run_once().await.expect("recovery pass");
            assert_eq!(report.failed, 0, "crash after {crash_after}: {report:?}");
            let audit = audit(store.as_ref(), &records, &seeded)
                .await
                .expect("audit");
            audit.assert_clean();
            for (i, result) in results.iter().enumerate() {
                let committed = audit
                    .records
                    .iter()
                    .any(|r| r.id.as_str() == format!("together-{i}") && r.state == TxState::Done);
                if let Ok(receipt) = result {
                    assert!(committed, "crash after {crash_after}: transfer {i} returned {receipt:?} but did not end done");
                }
                let from = balance(store.as_ref(), db, &format!("from-{i}")).await;
                let to = balance(store.as_ref(), db, &format!("to-{i}")).await;
                let expected = if committed { (990, 1010) } else { (1000, 1000) };
                assert_eq!(
                    (from, to),
                    expected,
                    "crash after {crash_after}: transfer {i}"
                );
            }
            crash_after += 1;
        }
        covered += 1;
        if total_ops.is_some_and(|total| crash_after > total) {
            return covered;
        }
    }
}

/// A Decimal128 value from its text (`"100.10"`), as MongoDB's
/// `NumberDecimal` would store it: digits and exponent as written.
fn decimal(text: &str) -> bson::Bson {
    bson::Bson::Decimal128(text.parse().expect("a decimal literal"))
}

/// The `balance` of account `name`, whatever its type.
async fn balance_value(store: &dyn Store, db: &str, name: &str) -> Option<bson::Bson> {
    store
        .find_one(&accounts(db), doc! { "_id": name })
        .await
        .expect("reading an account")
        .and_then(|d| d.get("balance").cloned())
}

/// Transfers of Decimal128 amounts, the type MongoDB recommends for money,
/// between Decimal128 balances.
///
/// A transfer of 20.25 from 100.10 to 5.05 (returning at `done`) is crashed
/// after each store operation in turn, the finishing included; recovery then
/// ends it, and each balance must hold exactly (digits and exponent, compared
/// as bytes) 79.85 and 25.30 if its record is `done`, or what it held before
/// otherwise. Then, without a crash and with either strategy: a debit past
/// the balance is canceled with nothing changed; a decimal credit to an
/// integer balance makes it a decimal; a decimal credit to a double balance
/// and a decimal debit of an integer balance are refused as type
/// mismatches (an undo of a debit pending there could not restore the field
/// exactly), with nothing changed. Returns the crash points covered (plus
/// the run without a crash).
pub async fn decimal_transfers<F: StoreFactory + ?Sized>(factory: &F, db: &str) -> usize {
    let records = Namespace::new(db, "transactions");
    let seed = |name: &str, balance: bson::Bson| {
        (
            accounts(db),
            doc! { "_id": name, "balance": balance, "pendingTransactions": [] },
        )
    };
    let transfer = |from: &str, to: &str, amount: &str| {
        let mut debit = decimal(amount);
        if let bson::Bson::Decimal128(d) = &debit {
            debit = bson::Bson::Decimal128(crate::document::negate_decimal(d));
        }
        Transaction::new()
            .change(
                DocumentChange::update(accounts(db), from)
                    .inc("balance", debit)
                    .require_gte("balance", decimal(amount)),
            )
            .change(DocumentChange::update(accounts(db), to).inc("balance", decimal(amount)))
    };
    let mut total_ops = None;
    let mut crash_after = 0;
    let mut covered = 0;
    loop {
        let store = factory.fresh().await;
        let seeded = vec![seed("A", decimal("100.10")), seed("B", decimal("5.05"))];
        for (ns, d) in &seeded {
            store.insert_one(ns, d.clone()).await.expect("seeding");
        }
        let faulty = FaultStore::new(store.clone());
        let faulty = match total_ops {
            Some(_) => faulty.crash_after(crash_after),
            None => faulty,
        };
        let lease = factory.lease();
        let coordinator = Coordinator::builder(faulty.clone())
            .database(db)
            .commit_point(CommitPoint::Done)
            .lease(lease)
            .clock_margin(Duration::ZERO)
            .build();
        let result = coordinator.run(transfer("A", "B", "20.25")).await;
        coordinator.drain().await;
        if total_ops.is_none() {
            assert!(
                result.is_ok(),
                "without a crash the transfer commits: {result:?}"
            );
            total_ops = Some(faulty.ops());
        } else {
            factory.pass(store.as_ref(), lease).await;
            let recovery = Coordinator::builder_shared(store.clone())
                .database(db)
                .lease(lease)
                .clock_margin(Duration::ZERO)
                .build()
                .recovery(RecoveryConfig::default());
            let report = recovery.run_once().await.expect("recovery pass");
            assert_eq!(report.failed, 0, "crash after {crash_after}: {report:?}");
        }
        let audit = audit(store.as_ref(), &records, &seeded)
            .await
            .expect("audit");
        audit.assert_clean();
        let done = audit.count(TxState::Done) == 1;
        let (a, b) = if done {
            (decimal("79.85"), decimal("25.30"))
        } else {
            (decimal("100.10"), decimal("5.05"))
        };
        assert_eq!(
            (
                balance_value(store.as_ref(), db, "A").await,
                balance_value(store.as_ref(), db, "B").await
            ),
            (Some(a), Some(b)),
            "crash after {crash_after} (of {total_ops:?}); the record done: {done}; answered {result:?}"
        );
        if result.is_ok() {
            assert!(
                done,
                "crash after {crash_after}: answered committed, not done: {audit:?}"
            );
        }
        covered += 1;
        crash_after += 1;
        if crash_after > total_ops.unwrap_or(0) {
            break;
        }
    }
    for strategy in [crate::Strategy::TwoPhase, crate::Strategy::Native] {
        let store = factory.fresh().await;
        let seeded = vec![
            seed("A", decimal("100.10")),
            seed("I", bson::Bson::Int64(7)),
            seed("F", bson::Bson::Double(1.5)),
        ];
        for (ns, d) in &seeded {
            store.insert_one(ns, d.clone()).await.expect("seeding");
        }
        let coordinator = Coordinator::builder_shared(store.clone())
            .database(db)
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build();
        let unchanged = || async {
            (
                balance_value(store.as_ref(), db, "A").await,
                balance_value(store.as_ref(), db, "I").await,
                balance_value(store.as_ref(), db, "F").await,
            )
        };
        let before = unchanged().await;
        // Each refused, nothing written: more than the balance (the guard
        // fails); a decimal credit to a double; a decimal debit of an integer.
        type Refusal = (
            &'static str,
            &'static str,
            &'static str,
            fn(&crate::StepError) -> bool,
        );
        let refusals: [Refusal; 3] = [
            ("A", "I", "100.11", |c| {
                matches!(c, crate::StepError::GuardFailed { .. })
            }),
            ("A", "F", "1.25", |c| {
                matches!(c, crate::StepError::TypeMismatch { .. })
            }),
            ("I", "A", "1.5", |c| {
                matches!(c, crate::StepError::TypeMismatch { .. })
            }),
        ];
        for (from, to, amount, expected) in refusals {
            let answer = coordinator.run(transfer(from, to, amount)).await;
            assert!(
                matches!(&answer, Err(TxError::Canceled { cause, .. }) if expected(cause)),
                "{strategy:?}, {from} -> {to} {amount}: {answer:?}"
            );
            assert_eq!(
                unchanged().await,
                before,
                "{strategy:?}: a refused transfer changed nothing"
            );
        }
        // A decimal credit to an integer makes it a decimal, exactly.
        let answer = coordinator.run(transfer("A", "I", "0.10")).await;
        assert!(answer.is_ok(), "{strategy:?}: {answer:?}");
        assert_eq!(
            (
                balance_value(store.as_ref(), db, "A").await,
                balance_value(store.as_ref(), db, "I").await
            ),
            (Some(decimal("100.00")), Some(decimal("7.10"))),
            "{strategy:?}"
        );
        if strategy == crate::Strategy::TwoPhase {
            // (A native transaction keeps no record to audit against.)
            let audit = audit(store.as_ref(), &records, &seeded)
                .await
                .expect("audit");
            audit.assert_clean();
        }
    }
    covered
}
