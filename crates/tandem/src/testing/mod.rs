//! Tools to test transactions, your own participants included.
//!
//! * [`FaultStore`] wraps any [`Store`] and crashes after a given number of
//!   operations, pauses at one, or yields to the scheduler before each, so a
//!   test can stop a coordinator anywhere, stall it, or interleave several.
//! * [`audit`] checks the invariants every run must end with: every record
//!   terminal, no marker or lock left, and each numeric field equal to its
//!   initial value plus the increments of the committed transactions only.
//! * [`CrashHarness`] stops a transaction after every single store operation
//!   in turn, runs recovery, and audits the result.
//! * [`scenarios`] holds the conformance scenarios every store must pass
//!   (a stalled worker, random interleavings), run against any
//!   [`StoreFactory`]; [`safety`] the regression scenarios of the protocol's
//!   safety review (late steps after deletes, garbage collection, bounded
//!   bookkeeping, answers), likewise.
//! * [`store_contract`] holds what every [`Store`] must do, one case per
//!   behaviour the protocol relies on, run on any [`StoreFactory`] (one test
//!   per case with [`store_contract_tests!`](crate::store_contract_tests)).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::ManualClock;
use crate::memory::MemoryStore;
use crate::store::Store;

mod audit;
mod crash;
mod fault;
mod proxy;
pub mod safety;
pub mod scenarios;
pub mod server;
pub mod store_contract;

pub use audit::{audit, Audit, FieldKey};
pub use crash::{CrashHarness, CrashReport};
pub use fault::{FaultStore, LostWrites, Pause, Upsert};
pub use proxy::LosingProxy;

/// The value of the aggregation expression `expr` on `doc` as the
/// [`MemoryStore`] evaluates it inside `$expr` (`None` for a missing value),
/// with `now` as `$$NOW` (`None`: unavailable). For differential tests,
/// which compare it with what a server's aggregation projects for the same
/// expression (a decimal sum's exponent, say, which no filter tells apart).
/// An expression outside the store's subset is refused with
/// [`StoreErrorKind::BadRequest`](crate::store::StoreErrorKind::BadRequest).
pub fn expr_value(
    doc: &bson::Document,
    expr: &bson::Bson,
    now: Option<bson::DateTime>,
) -> Result<Option<bson::Bson>, crate::store::StoreError> {
    crate::query::expr_value(doc, expr, now)
}

/// Makes a fresh store for each run of a scenario, and lets time pass on it.
///
/// Leases and deadlines are judged by the store's clock, so a scenario in
/// which a worker stalls past its lease needs that clock to move: the
/// embedded store's [`ManualClock`] moves at once, a server's clock only by
/// waiting for it.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// A store in which the databases the scenario uses are empty.
    async fn fresh(&self) -> Arc<dyn Store>;

    /// The lease scenarios give workers they let expire: short where time
    /// passes for real, yet long enough for a transaction's applies to land
    /// in it. The default is one second.
    fn lease(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// Returns once `by` has passed on `store`'s clock ([`Store::now`]). The
    /// default asks the store for the time every 10 ms until it has moved on
    /// by `by` (a server's clock cannot be moved, only waited for); it gives
    /// up with a panic if the store's clock has not moved on after `by` plus
    /// a minute of real time.
    async fn pass(&self, store: &dyn Store, by: Duration) {
        let start = store.now().await.expect("the store's clock");
        let target = start.timestamp_millis() + i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let give_up = std::time::Instant::now() + by + Duration::from_secs(60);
        loop {
            let now = store.now().await.expect("the store's clock");
            if now.timestamp_millis() >= target {
                return;
            }
            assert!(
                std::time::Instant::now() < give_up,
                "the store's clock did not move on by {by:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A factory of new [`MemoryStore`]s sharing one [`ManualClock`], which
/// [`pass`](StoreFactory::pass) moves at once.
#[derive(Clone, Debug, Default)]
pub struct MemoryFactory {
    clock: Arc<ManualClock>,
}

impl MemoryFactory {
    /// A factory whose stores share a new manual clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// The stores' clock.
    pub fn clock(&self) -> &Arc<ManualClock> {
        &self.clock
    }
}

#[async_trait]
impl StoreFactory for MemoryFactory {
    async fn fresh(&self) -> Arc<dyn Store> {
        Arc::new(MemoryStore::with_clock(self.clock.clone()))
    }

    fn lease(&self) -> Duration {
        Duration::from_secs(30)
    }

    async fn pass(&self, _store: &dyn Store, by: Duration) {
        self.clock.advance(by);
    }
}
