//! [`CrashHarness`]: a crash after every single store operation, then recovery and audit.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bson::Document;

use super::{audit, FaultStore, MemoryFactory, StoreFactory};
use crate::config::{CommitPoint, PendingPolicy, RecoveryConfig};
use crate::coordinator::{Coordinator, Receipt, Transaction};
use crate::error::TxError;
use crate::store::{Namespace, Store};

/// What a [`CrashHarness`] run covered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// How many crash points were exercised (one per store operation of the transaction).
    pub crash_points: usize,
    /// How often the transaction ended in each state after recovery (`removed`: record removed).
    pub outcomes: BTreeMap<String, usize>,
}

/// Stops a transaction after every single store operation in turn, recovers, and audits.
///
/// For crash point `k`, a fresh store is seeded with the documents; a
/// coordinator whose store crashes after `k` operations runs the transaction
/// with the factory's [lease](StoreFactory::lease); if the crash left a
/// transaction in flight, its lease is let pass on the store's clock
/// ([`StoreFactory::pass`]); then a recovery worker on the intact store
/// finishes it, and [`audit`] must be clean and the answer must hold (a
/// committed answer ends `done`, a canceled one `canceled`). It stops at the
/// first `k` the transaction survives.
///
/// ```
/// # async fn demo() {
/// use tandem::testing::CrashHarness;
/// use tandem::{DocumentChange, Namespace, Transaction};
///
/// let accounts = Namespace::new("bank", "accounts");
/// let documents = vec![
///     (accounts.clone(), bson::doc! { "_id": "A", "balance": 10_i64 }),
///     (accounts.clone(), bson::doc! { "_id": "B", "balance": 10_i64 }),
/// ];
/// let report = CrashHarness::default()
///     .run(&documents, || {
///         Transaction::new()
///             .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -5_i64))
///             .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 5_i64))
///     }, |_, _| async {})
///     .await;
/// assert!(report.crash_points >= 6);
/// # }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo());
/// ```
#[derive(Clone, Debug)]
pub struct CrashHarness {
    /// Where `run` returns (crashes in background finishing are covered either way).
    pub commit_point: CommitPoint,
    /// What recovery does with `pending`.
    pub pending: PendingPolicy,
    /// The database of the records.
    pub database: String,
}

impl Default for CrashHarness {
    fn default() -> Self {
        CrashHarness {
            commit_point: CommitPoint::Done,
            pending: PendingPolicy::RollBack,
            database: "tandem".into(),
        }
    }
}

impl CrashHarness {
    /// Runs the crash points on fresh embedded stores.
    pub async fn run<T, C, CF>(
        &self,
        documents: &[(Namespace, Document)],
        make_tx: T,
        check: C,
    ) -> CrashReport
    where
        T: Fn() -> Transaction,
        C: Fn(Arc<dyn Store>, Result<Receipt, TxError>) -> CF,
        CF: Future<Output = ()>,
    {
        self.run_on(&MemoryFactory::new(), documents, make_tx, check)
            .await
    }

    /// Runs the crash points of the transaction `make_tx` builds, over `documents`,
    /// on stores from `factory`. `check` may assert more about each final state.
    pub async fn run_on<F, T, C, CF>(
        &self,
        factory: &F,
        documents: &[(Namespace, Document)],
        make_tx: T,
        check: C,
    ) -> CrashReport
    where
        F: StoreFactory + ?Sized,
        T: Fn() -> Transaction,
        C: Fn(Arc<dyn Store>, Result<Receipt, TxError>) -> CF,
        CF: Future<Output = ()>,
    {
        let mut report = CrashReport::default();
        let records = Namespace::new(&self.database, "transactions");
        for k in 0.. {
            let store = factory.fresh().await;
            for (ns, doc) in documents {
                store
                    .insert_one(ns, doc.clone())
                    .await
                    .expect("seeding documents");
            }
            let faulty = FaultStore::new(store.clone()).crash_after(k);
            let lease = factory.lease();
            let coordinator = Coordinator::builder(faulty.clone())
                .database(&self.database)
                .commit_point(self.commit_point)
                .lease(lease)
                .clock_margin(Duration::ZERO)
                .build();
            let result = coordinator.run(make_tx()).await;
            coordinator.drain().await;
            let survived = faulty.ops() <= k;

            let in_flight = store
                .count(
                    &records,
                    bson::doc! { "state": { "$nin": ["done", "canceled"] } },
                )
                .await
                .expect("counting records in flight");
            if in_flight > 0 {
                // The crashed worker's lease runs out, by the store's clock.
                factory.pass(store.as_ref(), lease).await;
            }
            let healthy = Coordinator::builder_shared(store.clone())
                .database(&self.database)
                .lease(lease)
                .clock_margin(Duration::ZERO)
                .build();
            let worker = healthy.recovery(RecoveryConfig {
                pending: self.pending,
                ..RecoveryConfig::default()
            });
            let pass = worker.run_once().await.expect("recovery pass");
            assert_eq!(pass.failed, 0, "crash point {k}: recovery failed: {pass:?}");
            let audit = audit(store.as_ref(), &records, documents)
                .await
                .expect("audit");
            if !audit.violations.is_empty() {
                panic!(
                    "crash point {k}: {} violation(s) after recovery:\n{}",
                    audit.violations.len(),
                    audit.violations.join("\n")
                );
            }
            let outcome = audit
                .records
                .first()
                .map(|r| r.state.to_string())
                .unwrap_or_else(|| "removed".into());
            // The answer holds: committed means done after recovery, canceled means canceled.
            match &result {
                Ok(receipt) => assert_eq!(
                    outcome, "done",
                    "crash point {k}: answered committed ({:?}), ended {outcome}",
                    receipt.state
                ),
                Err(TxError::Canceled { .. }) => assert!(
                    outcome == "canceled" || outcome == "removed",
                    "crash point {k}: answered canceled, ended {outcome}"
                ),
                Err(_) => {}
            }
            *report.outcomes.entry(outcome).or_default() += 1;
            check(store, result).await;
            if survived {
                break;
            }
            report.crash_points += 1;
        }
        report
    }
}
