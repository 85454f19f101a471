//! What the `metrics` feature records, read back from a test recorder: exact
//! counts of committed, canceled, interrupted and invalid runs on both
//! strategies, conflicts, a recovery of a crashed transaction, the stuck
//! gauge, and a sample in the histograms for every run.
//!
//! The crate's dev-dependency on itself turns the feature on, so a plain
//! `cargo test` runs this file; without the feature it fails, as nothing is
//! recorded.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tandem::testing::FaultStore;
use tandem::{
    CommitPoint, Coordinator, DocumentChange, ManualClock, MemoryStore, Namespace, Receipt,
    RecoveryConfig, StepError, Store, Strategy, Transaction, TxError, TxState,
};

/// A metric and its labels, e.g. `tandem_transactions_total{outcome=committed,strategy=native}`.
fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

/// What the recorder holds, gathered over several snapshots (a snapshot
/// drains the counters and histograms; gauges are read as they stand).
#[derive(Default)]
struct Recorded {
    counters: BTreeMap<String, u64>,
    gauges: BTreeMap<String, f64>,
    histograms: BTreeMap<String, Vec<f64>>,
}

impl Recorded {
    fn take(&mut self, snapshotter: &Snapshotter) {
        for (composite, _, _, value) in snapshotter.snapshot().into_vec() {
            let k = composite.key();
            let labels: Vec<(&str, &str)> = k.labels().map(|l| (l.key(), l.value())).collect();
            let name = key(k.name(), &labels);
            match value {
                DebugValue::Counter(n) => *self.counters.entry(name).or_default() += n,
                DebugValue::Gauge(g) => {
                    self.gauges.insert(name, g.into_inner());
                }
                DebugValue::Histogram(samples) => self
                    .histograms
                    .entry(name)
                    .or_default()
                    .extend(samples.into_iter().map(|s| s.into_inner())),
            }
        }
    }
}

fn accounts() -> Namespace {
    Namespace::new("bank", "accounts")
}

fn transfer(amount: i64) -> Transaction {
    Transaction::new()
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -amount)
                .require_gte("balance", amount),
        )
        .change(DocumentChange::update(accounts(), "B").inc("balance", amount))
}

/// Freezes account A: a `set`, which holds the document exclusively until it is finished.
fn freeze() -> Transaction {
    Transaction::new().change(
        DocumentChange::update(accounts(), "A")
            .set("frozen", true)
            .require_eq("frozen", false),
    )
}

/// Freezes A and credits B.
fn freeze_and_credit() -> Transaction {
    freeze().change(DocumentChange::update(accounts(), "B").inc("balance", 1_i64))
}

fn cause(result: &Result<Receipt, TxError>) -> Option<&StepError> {
    match result {
        Err(TxError::Canceled { cause, .. }) => Some(cause),
        _ => None,
    }
}

/// The receipts of the committed runs: two-phase, then native.
struct Scenario {
    two_phase: Receipt,
    /// The run whose store failed after its applies.
    crashed: Receipt,
    native: Receipt,
}

async fn scenario(snapshotter: &Snapshotter, recorded: &mut Recorded) -> Scenario {
    let clock = Arc::new(ManualClock::default());
    let store = MemoryStore::with_clock(clock.clone());
    for (id, balance) in [("A", 100_i64), ("B", 0)] {
        store
            .insert_one(
                &accounts(),
                doc! { "_id": id, "balance": balance, "frozen": false },
            )
            .await
            .unwrap();
    }
    let coordinator = Coordinator::builder(store.clone())
        .database("bank")
        .commit_point(CommitPoint::Done)
        .build();
    let native = |tx: Transaction| tx.strategy(Strategy::Native);

    // Committed, then refused by a guard, on each strategy.
    let two_phase = coordinator.run(transfer(10)).await.unwrap();
    let refused = coordinator.run(transfer(1_000)).await;
    assert!(matches!(
        cause(&refused),
        Some(StepError::GuardFailed { .. })
    ));
    let native_receipt = coordinator.run(native(transfer(10))).await.unwrap();
    assert_eq!(native_receipt.strategy, Strategy::Native);
    let refused = coordinator.run(native(transfer(1_000))).await;
    assert!(matches!(
        cause(&refused),
        Some(StepError::GuardFailed { .. })
    ));
    // Invalid: nothing to do.
    assert!(matches!(
        coordinator.run(Transaction::new()).await,
        Err(TxError::Invalid(_))
    ));

    // A worker whose store fails for good before anything is written.
    let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(0);
    let crashed = Coordinator::builder(faulty).database("bank").build();
    let interrupted = crashed.run(freeze_and_credit()).await;
    assert!(
        matches!(interrupted, Err(TxError::Interrupted { state: None, .. })),
        "{interrupted:?}"
    );
    // One whose store fails for good once the record is written and both
    // applies landed: committed (at its applies), left `pending`, holding A.
    let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(3);
    let crashed = Coordinator::builder(faulty)
        .database("bank")
        .commit_point(CommitPoint::Done)
        .build();
    let committed = crashed.run(freeze_and_credit()).await;
    assert!(
        matches!(&committed, Ok(r) if r.state == TxState::Applied),
        "{committed:?}"
    );

    // A is held: a conflict, on each strategy.
    let held = coordinator.run(freeze()).await;
    assert!(
        matches!(cause(&held), Some(StepError::Conflict { .. })),
        "{held:?}"
    );
    let held = coordinator.run(native(freeze())).await;
    assert!(
        matches!(cause(&held), Some(StepError::Conflict { .. })),
        "{held:?}"
    );

    // Recovery, once the crashed worker's lease and the clock margin have passed.
    let recovery = coordinator.recovery(RecoveryConfig::default());
    clock.advance(Duration::from_secs(60));
    let report = recovery.run_once().await.unwrap();
    assert_eq!((report.claimed, report.committed), (1, 1), "{report:?}");
    recorded.take(snapshotter);
    assert_eq!(
        recorded.gauges.get("tandem_stuck_transactions{}"),
        Some(&1.0),
        "{:?}",
        recorded.gauges
    );
    let report = recovery.run_once().await.unwrap();
    assert_eq!(report.claimed, 0);

    Scenario {
        two_phase,
        crashed: committed.expect("committed at its applies"),
        native: native_receipt,
    }
}

#[test]
fn runs_and_recovery_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut recorded = Recorded::default();
    let receipts = metrics::with_local_recorder(&recorder, || {
        runtime.block_on(scenario(&snapshotter, &mut recorded))
    });
    recorded.take(&snapshotter);

    let runs = |strategy, outcome| {
        key(
            "tandem_transactions_total",
            &[("strategy", strategy), ("outcome", outcome)],
        )
    };
    let canceled = |strategy, cause| {
        key(
            "tandem_canceled_total",
            &[("strategy", strategy), ("cause", cause)],
        )
    };
    let expected: BTreeMap<String, u64> = [
        (runs("two_phase", "committed"), 2),
        (runs("two_phase", "canceled"), 2),
        (runs("two_phase", "interrupted"), 1),
        (runs("two_phase", "invalid"), 1),
        (runs("native", "committed"), 1),
        (runs("native", "canceled"), 2),
        (canceled("two_phase", "guard_failed"), 1),
        (canceled("two_phase", "conflict"), 1),
        (canceled("native", "guard_failed"), 1),
        (canceled("native", "conflict"), 1),
        (
            key("tandem_conflicts_total", &[("strategy", "two_phase")]),
            1,
        ),
        (key("tandem_conflicts_total", &[("strategy", "native")]), 1),
        (key("tandem_recovery_passes_total", &[("result", "ok")]), 2),
        (
            key("tandem_recovered_total", &[("outcome", "committed")]),
            1,
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(recorded.counters, expected);
    assert_eq!(
        recorded.gauges,
        BTreeMap::from([("tandem_stuck_transactions{}".to_owned(), 0.0)])
    );

    // One duration sample per run, under its strategy and outcome.
    let durations: BTreeMap<String, usize> = recorded
        .histograms
        .iter()
        .filter(|(k, _)| k.starts_with("tandem_transaction_duration_seconds{"))
        .map(|(k, samples)| {
            assert!(
                samples.iter().all(|s| *s >= 0.0 && *s < 60.0),
                "{samples:?}"
            );
            (
                k.replace(
                    "tandem_transaction_duration_seconds",
                    "tandem_transactions_total",
                ),
                samples.len(),
            )
        })
        .collect();
    let runs: BTreeMap<String, usize> = expected
        .iter()
        .filter(|(k, _)| k.starts_with("tandem_transactions_total{"))
        .map(|(k, n)| (k.clone(), *n as usize))
        .collect();
    assert_eq!(durations, runs);

    // The round trips of the committed runs, as their receipts tell them.
    let round_trips = |strategy| {
        recorded
            .histograms
            .get(&key("tandem_round_trips", &[("strategy", strategy)]))
            .cloned()
    };
    assert_eq!(
        round_trips("two_phase"),
        Some(vec![
            f64::from(receipts.two_phase.round_trips),
            f64::from(receipts.crashed.round_trips)
        ])
    );
    assert_eq!(
        round_trips("native"),
        Some(vec![f64::from(receipts.native.round_trips)])
    );
    assert_eq!(
        receipts.two_phase.round_trips, 5,
        "with the commit point at done"
    );
}
