//! Counters, a gauge and histograms through the
//! [`metrics`](https://docs.rs/metrics/0.24) crate facade (cargo feature
//! `metrics`, off by default).
//!
//! With the feature on, every [`Coordinator::run`](crate::Coordinator::run)
//! and every [`RecoveryWorker::run_once`](crate::RecoveryWorker::run_once)
//! (so every pass of [`run_until`](crate::RecoveryWorker::run_until)) records
//! what it did with the facade's macros, into whatever recorder the
//! application installed (a Prometheus exporter, StatsD, a test recorder).
//! Without a recorder they cost next to nothing; without the feature they are
//! not compiled at all.
//!
//! ```toml
//! [dependencies]
//! tandem-2pc = { version = "0.1", features = ["metrics"] }
//! ```
//!
//! | name | type | labels | meaning |
//! |------|------|--------|---------|
//! | `tandem_transactions_total` | counter | `strategy`, `outcome` | Runs of [`Coordinator::run`](crate::Coordinator::run), by how they ended. |
//! | `tandem_canceled_total` | counter | `strategy`, `cause` | Runs that ended [`TxError::Canceled`], by the kind of the refusal that canceled them. |
//! | `tandem_conflicts_total` | counter | `strategy` | Step attempts that met a conflict ([`StepError::Conflict`](crate::StepError::Conflict)): a document held by another transaction, or changed since it was read. |
//! | `tandem_transaction_duration_seconds` | histogram | `strategy`, `outcome` | How long [`Coordinator::run`](crate::Coordinator::run) took, in seconds. |
//! | `tandem_round_trips` | histogram | `strategy` | [`Receipt::round_trips`] of each committed run. |
//! | `tandem_recovery_passes_total` | counter | `result` | Recovery passes, by whether they ran (`ok`) or failed to read the records (`error`). |
//! | `tandem_recovered_total` | counter | `outcome` | Stuck transactions a recovery pass took on or passed over, by what became of them. |
//! | `tandem_stuck_transactions` | gauge | none | Stuck transactions the latest recovery pass found (at most [`RecoveryConfig::batch`](crate::RecoveryConfig::batch)). |
//!
//! The labels take these values, and no others (never a transaction id, a
//! document id or an owner name, so the number of series stays small):
//!
//! * `strategy`: `two_phase` or `native`, as the transaction ran (what
//!   [`Strategy::Auto`] chose).
//! * `outcome` of a run: `committed` (a [`Receipt`] came back,
//!   in state `applied` or `done`), `canceled`, `interrupted` (outcome
//!   unknown, left to recovery), `superseded`, `duplicate` or `invalid`: the
//!   [`TxError`] variant, in snake case (`no_record`, the variant a
//!   cancel or a look-up answers, is spelled so too; `run` does not return
//!   it).
//! * `cause`: the [`StepError`](crate::StepError) variant in snake case:
//!   `not_found`, `already_exists`, `guard_failed`, `type_mismatch`,
//!   `conflict`, `fenced`, `expired`, `not_yet`, `overwritten`, `too_large`, `too_deep`,
//!   `overflow`, `rejected` or `store`.
//! * `result` of a pass: `ok` or `error`.
//! * `outcome` of a recovered transaction, as in
//!   [`RecoveryReport`]: `committed` (rolled forward
//!   to `done`), `canceled` (rolled back), `removed` (a stale `initial`
//!   record), `waiting` (an apply may still be in flight: a later pass
//!   finishes it), `failed` (left for the next pass, a record this
//!   process cannot drive included: an unknown participant kind or store,
//!   which no pass claims, counts as `failed` on every pass until a
//!   process that can drive it does) or `lost` (another worker changed or
//!   claimed it first).
//!
//! What is counted where:
//!
//! * A transaction counts once in `tandem_transactions_total`, when `run`
//!   returns. One that is `interrupted` counts again, under
//!   `tandem_recovered_total`, when recovery finishes it; so does one whose
//!   worker died before `run` returned.
//! * The sum of `tandem_canceled_total` over `cause` equals
//!   `tandem_transactions_total{outcome="canceled"}` for each strategy.
//! * `tandem_conflicts_total` counts attempts, not transactions: with
//!   [`ConflictPolicy::Wait`](crate::ConflictPolicy::Wait) every retry that
//!   meets the conflict again counts, also for a transaction that then
//!   commits. Recovery's steps count too (as `two_phase`). A native run counts
//!   once when a conflict refuses it.
//! * `tandem_round_trips` gets a sample for committed runs only; the duration
//!   histogram gets one for every run.
//! * `tandem_stuck_transactions` is set by every pass that ran, to the number of
//!   transactions it found past their lease (plus the clock margin): zero
//!   while nothing is stuck. With several recovery workers in one process it
//!   holds the latest pass of any of them.
//! * An operator's [`Coordinator::cancel`](crate::Coordinator::cancel) and
//!   garbage collection are not counted; the background finishing of a
//!   committed transaction is not either (it is committed already).
//!
//! [`describe`] registers a description and unit of each metric with the
//! installed recorder (the `# HELP` lines of a Prometheus exporter).
//!
//! # Example
//!
//! A Prometheus exporter (crate `metrics-exporter-prometheus`), installed
//! before the coordinator runs anything; `handle.render()` is the text a
//! scrape of `/metrics` returns. `PrometheusBuilder::with_http_listener`
//! serves it over HTTP instead (the exporter's default `http-listener` feature).
//!
//! The runnable version is the workspace's `examples/metrics.rs`.
//!
//! ```ignore
//! let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
//! tandem::metrics::describe();
//! // ... run transactions, recovery ...
//! println!("{}", handle.render());
//! ```

use crate::config::Strategy;
use crate::coordinator::Receipt;
use crate::error::TxError;
use crate::recovery::RecoveryReport;
use crate::store::StoreError;

/// Counter of [`Coordinator::run`](crate::Coordinator::run) calls, labeled
/// `strategy` and `outcome`.
pub const TRANSACTIONS_TOTAL: &str = "tandem_transactions_total";
/// Counter of canceled runs, labeled `strategy` and `cause`.
pub const CANCELED_TOTAL: &str = "tandem_canceled_total";
/// Counter of step attempts that met a conflict, labeled `strategy`.
pub const CONFLICTS_TOTAL: &str = "tandem_conflicts_total";
/// Histogram of the duration of runs in seconds, labeled `strategy` and `outcome`.
pub const TRANSACTION_DURATION_SECONDS: &str = "tandem_transaction_duration_seconds";
/// Histogram of the round trips of committed runs, labeled `strategy`.
pub const ROUND_TRIPS: &str = "tandem_round_trips";
/// Counter of recovery passes, labeled `result`.
pub const RECOVERY_PASSES_TOTAL: &str = "tandem_recovery_passes_total";
/// Counter of stuck transactions recovery took on, labeled `outcome`.
pub const RECOVERED_TOTAL: &str = "tandem_recovered_total";
/// Gauge of the stuck transactions the latest recovery pass found.
pub const STUCK_TRANSACTIONS: &str = "tandem_stuck_transactions";

/// Registers the description and unit of every metric above with the
/// installed recorder. Call it once, after installing the recorder; the
/// metrics are recorded whether or not it was called. Without the `metrics`
/// feature it does nothing.
pub fn describe() {
    #[cfg(feature = "metrics")]
    describe_all();
}

#[cfg(feature = "metrics")]
fn describe_all() {
    use ::metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        TRANSACTIONS_TOTAL,
        Unit::Count,
        "Transactions run by a tandem coordinator, by strategy and outcome."
    );
    describe_counter!(
        CANCELED_TOTAL,
        Unit::Count,
        "Transactions canceled by a refusal, by strategy and kind of refusal."
    );
    describe_counter!(
        CONFLICTS_TOTAL,
        Unit::Count,
        "Step attempts that found their document held by another transaction or changed since read."
    );
    describe_histogram!(
        TRANSACTION_DURATION_SECONDS,
        Unit::Seconds,
        "Time a tandem coordinator took to run a transaction, by strategy and outcome."
    );
    describe_histogram!(
        ROUND_TRIPS,
        Unit::Count,
        "Sequential round trips to the stores of committed transactions, by strategy."
    );
    describe_counter!(
        RECOVERY_PASSES_TOTAL,
        Unit::Count,
        "Recovery passes, by whether they ran or failed."
    );
    describe_counter!(
        RECOVERED_TOTAL,
        Unit::Count,
        "Stuck transactions a recovery pass took on, by outcome."
    );
    describe_gauge!(
        STUCK_TRANSACTIONS,
        Unit::Count,
        "Transactions past their lease found by the latest recovery pass."
    );
}

/// When a run started (nothing without the feature).
pub(crate) struct Timer {
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

impl Timer {
    pub(crate) fn start() -> Timer {
        Timer {
            #[cfg(feature = "metrics")]
            started: std::time::Instant::now(),
        }
    }
}

/// Records the end of a [`Coordinator::run`](crate::Coordinator::run) that ran with `strategy`.
pub(crate) fn transaction(strategy: Strategy, result: &Result<Receipt, TxError>, timer: Timer) {
    #[cfg(feature = "metrics")]
    {
        let label = labels::strategy(strategy);
        let outcome = labels::outcome(result);
        ::metrics::counter!(TRANSACTIONS_TOTAL, "strategy" => label, "outcome" => outcome)
            .increment(1);
        ::metrics::histogram!(TRANSACTION_DURATION_SECONDS, "strategy" => label, "outcome" => outcome)
            .record(timer.started.elapsed());
        match result {
            Ok(receipt) => {
                ::metrics::histogram!(ROUND_TRIPS, "strategy" => label)
                    .record(f64::from(receipt.round_trips));
            }
            Err(TxError::Canceled { cause, .. }) => {
                ::metrics::counter!(CANCELED_TOTAL, "strategy" => label, "cause" => labels::cause(cause))
                    .increment(1);
                // A native run has no steps of its own to count its conflict at.
                if strategy == Strategy::Native
                    && matches!(cause, crate::StepError::Conflict { .. })
                {
                    conflict(Strategy::Native);
                }
            }
            Err(_) => {}
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (strategy, result, timer);
}

/// Records a step attempt that met a conflict.
pub(crate) fn conflict(strategy: Strategy) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(CONFLICTS_TOTAL, "strategy" => labels::strategy(strategy)).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = strategy;
}

/// Records a recovery pass: what it did, or that it failed.
pub(crate) fn recovery_pass(result: &Result<RecoveryReport, StoreError>) {
    #[cfg(feature = "metrics")]
    match result {
        Ok(report) => {
            ::metrics::counter!(RECOVERY_PASSES_TOTAL, "result" => "ok").increment(1);
            let RecoveryReport {
                scanned: _,
                claimed: _,
                committed,
                canceled,
                removed,
                failed,
                waiting,
                lost,
            } = report;
            let outcomes = [
                ("committed", committed),
                ("canceled", canceled),
                ("removed", removed),
                ("waiting", waiting),
                ("failed", failed),
                ("lost", lost),
            ];
            let mut found = 0;
            for (outcome, &n) in outcomes {
                // Every transaction the pass found past its lease ends in one outcome.
                found += n;
                if n > 0 {
                    ::metrics::counter!(RECOVERED_TOTAL, "outcome" => outcome).increment(n as u64);
                }
            }
            ::metrics::gauge!(STUCK_TRANSACTIONS).set(found as f64);
        }
        Err(_) => ::metrics::counter!(RECOVERY_PASSES_TOTAL, "result" => "error").increment(1),
    }
    #[cfg(not(feature = "metrics"))]
    let _ = result;
}

/// The label values: a fixed, small set each.
#[cfg(feature = "metrics")]
mod labels {
    use crate::config::Strategy;
    use crate::coordinator::Receipt;
    use crate::error::{StepError, TxError};

    pub(super) fn strategy(strategy: Strategy) -> &'static str {
        match strategy {
            Strategy::Native => "native",
            // `Auto` is resolved before a run starts.
            Strategy::TwoPhase | Strategy::Auto => "two_phase",
        }
    }

    pub(super) fn outcome(result: &Result<Receipt, TxError>) -> &'static str {
        match result {
            Ok(_) => "committed",
            Err(TxError::Canceled { .. }) => "canceled",
            Err(TxError::Interrupted { .. }) => "interrupted",
            Err(TxError::Superseded { .. }) => "superseded",
            Err(TxError::NoRecord { .. }) => "no_record",
            Err(TxError::Duplicate { .. }) => "duplicate",
            Err(TxError::Invalid(_)) => "invalid",
        }
    }

    pub(super) fn cause(cause: &StepError) -> &'static str {
        match cause {
            StepError::NotFound { .. } => "not_found",
            StepError::AlreadyExists { .. } => "already_exists",
            StepError::GuardFailed { .. } => "guard_failed",
            StepError::TypeMismatch { .. } => "type_mismatch",
            StepError::Conflict { .. } => "conflict",
            StepError::Fenced { .. } => "fenced",
            StepError::Expired { .. } => "expired",
            StepError::NotYet { .. } => "not_yet",
            StepError::Overwritten { .. } => "overwritten",
            StepError::TooLarge { .. } => "too_large",
            StepError::TooDeep { .. } => "too_deep",
            StepError::Overflow { .. } => "overflow",
            StepError::Rejected { .. } => "rejected",
            StepError::Store { .. } => "store",
        }
    }
}
