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
//!   [`StoreFactory`].

use std::sync::Arc;

use async_trait::async_trait;

use crate::memory::MemoryStore;
use crate::store::Store;

mod audit;
mod crash;
mod fault;
pub mod scenarios;

pub use audit::{audit, Audit, FieldKey};
pub use crash::{CrashHarness, CrashReport};
pub use fault::{FaultStore, Pause};

/// Makes a fresh store for each run of a scenario.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// A store in which the databases the scenario uses are empty.
    async fn fresh(&self) -> Arc<dyn Store>;
}

/// A factory of new [`MemoryStore`]s on the system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryFactory;

#[async_trait]
impl StoreFactory for MemoryFactory {
    async fn fresh(&self) -> Arc<dyn Store> {
        Arc::new(MemoryStore::new())
    }
}
