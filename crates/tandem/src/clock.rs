//! Clocks for stores that keep their own time, such as the embedded [`MemoryStore`](crate::MemoryStore).
//!
//! Leases are judged by the store's clock. The MongoDB store asks the server;
//! the memory store asks a [`Clock`], which tests replace by a [`ManualClock`]
//! so that "the lease has expired" is a step of the test, not a sleep.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> bson::DateTime;
}

/// The operating system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> bson::DateTime {
        bson::DateTime::now()
    }
}

/// A clock that only moves when told to: for deterministic tests of leases.
#[derive(Debug)]
pub struct ManualClock {
    millis: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: bson::DateTime) -> Self {
        ManualClock {
            millis: AtomicI64::new(start.timestamp_millis()),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.millis.fetch_add(ms, Ordering::SeqCst);
    }

    /// Moves the clock back by `by`, as an NTP correction or a failover to a
    /// server whose clock is behind would: for tests of what the clock
    /// margin ([`CoordinatorConfig::clock_margin`](crate::CoordinatorConfig::clock_margin))
    /// covers, and what breaks beyond it.
    pub fn rewind(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.millis.fetch_sub(ms, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        // A fixed, readable starting point: 2024-01-01T00:00:00Z.
        ManualClock::new(bson::DateTime::from_millis(1_704_067_200_000))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> bson::DateTime {
        bson::DateTime::from_millis(self.millis.load(Ordering::SeqCst))
    }
}
