//! The transfer on the embedded [`MemoryStore`]: throughput on one core,
//! recovery after a crash, and memory per in-flight transaction.
//!
//! Everything here runs on a current-thread Tokio runtime, so one core does
//! all the work, coordinator and store alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem::store::{Namespace, Store};
use tandem::testing::FaultStore;
use tandem::{
    CommitPoint, Coordinator, DocumentChange, ManualClock, MemoryStore, RecoveryConfig, Strategy,
    Transaction, TxState,
};

use crate::workload::{account_doc, account_id, pair};

/// The database of the embedded benchmarks.
pub const DB: &str = "bench";

/// Accounts in the embedded pool.
pub const POOL: usize = 256;

/// The store operations a transfer makes before the crash that leaves it in
/// flight: create the record (`pending`), apply both accounts. It has
/// committed at its applies; the next operation (moving the record to
/// `applied`) fails, so the record stays `pending` with both markers set,
/// and recovery finds every apply landed and commits it.
pub const OPS_BEFORE_CRASH: u64 = 3;

/// The accounts collection.
pub fn accounts() -> Namespace {
    Namespace::new(DB, "accounts")
}

/// The transfer of one unit from `from` to `to`, as every tandem variant runs it:
/// the debit guarded by `balance >= 1`.
pub fn transfer(ns: &Namespace, from: usize, to: usize) -> Transaction {
    Transaction::new()
        .change(
            DocumentChange::update(ns.clone(), account_id(from))
                .inc("balance", -1_i64)
                .require_gte("balance", 1_i64),
        )
        .change(DocumentChange::update(ns.clone(), account_id(to)).inc("balance", 1_i64))
}

/// Inserts the pool of `pool` accounts into `store`.
pub async fn fill(store: &dyn Store, ns: &Namespace, pool: usize) {
    for i in 0..pool {
        store
            .insert_one(ns, account_doc(i))
            .await
            .expect("inserting an account into an empty store");
    }
}

/// A store with the account pool, and a two-phase coordinator on it returning at `point`.
pub async fn setup(point: CommitPoint) -> (MemoryStore, Coordinator) {
    setup_with(point, Strategy::TwoPhase).await
}

/// A store with the account pool, and a coordinator on it using `strategy`
/// (returning at `point`, for the two-phase strategy).
pub async fn setup_with(point: CommitPoint, strategy: Strategy) -> (MemoryStore, Coordinator) {
    let store = MemoryStore::new();
    fill(&store, &accounts(), POOL).await;
    let coordinator = Coordinator::builder(store.clone())
        .database(DB)
        .commit_point(point)
        .strategy(strategy)
        .build();
    (store, coordinator)
}

/// Runs transfers number `start .. start + n` one after another and returns the
/// time taken, background finishing included.
///
/// After each transfer the task yields once, as a server handling each request
/// in its own task would, so the finishing work that `CommitPoint::Applied`
/// leaves in the background runs as it goes instead of piling up; the time
/// ends once every background task has finished.
pub async fn run_transfers(coordinator: &Coordinator, start: u64, n: u64) -> Duration {
    let ns = accounts();
    let t0 = Instant::now();
    for k in start..start + n {
        let (from, to) = pair(k, POOL);
        coordinator
            .run(transfer(&ns, from, to))
            .await
            .expect("a transfer on the embedded store commits");
        tokio::task::yield_now().await;
    }
    coordinator.drain().await;
    t0.elapsed()
}

/// A current-thread runtime: the embedded benchmarks use one core.
pub fn one_core_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("building a current-thread runtime")
}

/// Transfers per fresh store in [`transfers_per_second`]: the store is rebuilt
/// (untimed) after this many, as garbage collection would keep its records
/// and the tombstones on the accounts bounded.
pub const PER_STORE: u64 = 10_000;

/// Transfers committed per second on one core, over `n` transfers, on a fresh
/// store every `per_store` transfers (each store warmed up by 100 untimed transfers).
pub fn transfers_per_second(point: CommitPoint, n: u64, per_store: u64) -> f64 {
    transfers_per_second_with(point, Strategy::TwoPhase, n, per_store)
}

/// [`transfers_per_second`] with the given strategy.
pub fn transfers_per_second_with(
    point: CommitPoint,
    strategy: Strategy,
    n: u64,
    per_store: u64,
) -> f64 {
    let rt = one_core_runtime();
    rt.block_on(async {
        let mut busy = Duration::ZERO;
        let mut done = 0;
        while done < n {
            let chunk = per_store.max(1).min(n - done);
            let (_store, coordinator) = setup_with(point, strategy).await;
            run_transfers(&coordinator, 0, 100).await;
            busy += run_transfers(&coordinator, 100 + done, chunk).await;
            done += chunk;
        }
        n as f64 / busy.as_secs_f64()
    })
}

/// A store holding transactions left in flight by crashed coordinators.
pub struct InFlight {
    /// The store.
    pub store: MemoryStore,
    /// The store's clock, to be moved past the leases.
    pub clock: Arc<ManualClock>,
    /// A healthy coordinator on the store (for its recovery worker).
    pub coordinator: Coordinator,
    /// How many transactions are in flight.
    pub count: usize,
}

/// Leaves `count` transfers in `pending`: each runs on a coordinator whose store
/// crashes after [`OPS_BEFORE_CRASH`] operations, i.e. after both accounts are
/// applied (the commit point) and before the record moves on. With `prefilled: None` a new store on a
/// manual clock is made and the account pool inserted; the caller may pass an
/// already-filled store and its clock instead.
pub async fn leave_in_flight(
    count: usize,
    prefilled: Option<(MemoryStore, Arc<ManualClock>)>,
) -> InFlight {
    let (store, clock) = match prefilled {
        Some(parts) => parts,
        None => {
            let clock = Arc::new(ManualClock::default());
            let store = MemoryStore::with_clock(clock.clone());
            fill(&store, &accounts(), POOL).await;
            (store, clock)
        }
    };
    let ns = accounts();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    for k in 0..count as u64 {
        let faulty = FaultStore::new(shared.clone()).crash_after(OPS_BEFORE_CRASH);
        let crashed = Coordinator::builder(faulty)
            .database(DB)
            .owner("crashed-worker")
            .build();
        let (from, to) = pair(k, POOL);
        match crashed.run(transfer(&ns, from, to)).await {
            // Committed at its applies; its move to `applied` fails.
            Ok(receipt) if receipt.state == TxState::Applied => {}
            other => panic!("expected a transfer committed at its applies, got {other:?}"),
        }
        crashed.drain().await;
    }
    let coordinator = Coordinator::builder(store.clone()).database(DB).build();
    InFlight {
        store,
        clock,
        coordinator,
        count,
    }
}

/// Moves the clock past every lease and recovers everything in one pass of
/// `RecoveryWorker::run_once` with a batch of `count`. Returns the time the
/// pass took, and checks that every transaction was committed (asked of
/// both accounts, then moved to `applied`, cleared, `done`).
pub async fn recover_all(in_flight: &InFlight) -> Duration {
    in_flight.clock.advance(Duration::from_secs(3600));
    let worker = in_flight.coordinator.recovery(RecoveryConfig {
        batch: in_flight.count,
        ..RecoveryConfig::default()
    });
    let t0 = Instant::now();
    let report = worker.run_once().await.expect("a recovery pass");
    let took = t0.elapsed();
    assert_eq!(
        report.committed, in_flight.count,
        "every in-flight transfer had committed at its applies: {report:?}"
    );
    took
}

/// Transactions recovered per second: `count` left in flight, then one pass.
pub fn recovered_per_second(count: usize) -> f64 {
    let rt = one_core_runtime();
    rt.block_on(async {
        let in_flight = leave_in_flight(count, None).await;
        let took = recover_all(&in_flight).await;
        count as f64 / took.as_secs_f64()
    })
}

/// Bytes the store holds per in-flight transaction: `live_bytes` (from a
/// counting allocator) is read with the pool in place, then after `count`
/// transfers were left in flight; the difference is divided by `count`.
/// It covers the `pending` records and the markers on the accounts.
pub fn bytes_per_in_flight(count: usize, live_bytes: impl Fn() -> isize) -> f64 {
    let rt = one_core_runtime();
    rt.block_on(async {
        let clock = Arc::new(ManualClock::default());
        let store = MemoryStore::with_clock(clock.clone());
        fill(&store, &accounts(), POOL).await;
        let before = live_bytes();
        let in_flight = leave_in_flight(count, Some((store, clock))).await;
        let after = live_bytes();
        assert_eq!(
            in_flight
                .store
                .documents(&Namespace::new(DB, "transactions"))
                .len(),
            count
        );
        (after - before) as f64 / count as f64
    })
}

/// Where the bytes of an in-flight transaction go, from [`memory_breakdown`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryBreakdown {
    /// Bytes the store grew by, per in-flight transaction.
    pub per_in_flight: f64,
    /// The average record's size serialized as BSON.
    pub record_bson: f64,
    /// The average record's size in memory (the bytes a clone of it allocates).
    pub record_in_memory: f64,
    /// Allocations per transfer (`CommitPoint::Done`) on a fresh store.
    pub allocations_per_transfer: f64,
}

/// Measures [`bytes_per_in_flight`] and where the bytes go, with a counting
/// allocator's `live_bytes` and `allocations`.
pub fn memory_breakdown(
    count: usize,
    live_bytes: impl Fn() -> isize,
    allocations: impl Fn() -> usize,
) -> MemoryBreakdown {
    let per_in_flight = bytes_per_in_flight(count, &live_bytes);
    let rt = one_core_runtime();
    rt.block_on(async {
        let in_flight = leave_in_flight(count.min(1_000), None).await;
        let records_ns = Namespace::new(DB, "transactions");
        let before = live_bytes();
        let records = in_flight.store.documents(&records_ns);
        let in_memory = (live_bytes() - before) as f64 / records.len().max(1) as f64;
        let bson: usize = records
            .iter()
            .map(|r| bson::to_vec(r).map_or(0, |v| v.len()))
            .sum();
        let record_bson = bson as f64 / records.len().max(1) as f64;
        drop(records);
        let (_store, coordinator) = setup(CommitPoint::Done).await;
        run_transfers(&coordinator, 0, 100).await;
        let a0 = allocations();
        run_transfers(&coordinator, 100, 1_000).await;
        let allocations_per_transfer = (allocations() - a0) as f64 / 1_000.0;
        MemoryBreakdown {
            per_in_flight,
            record_bson,
            record_in_memory: in_memory,
            allocations_per_transfer,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_commit_on_both_commit_points() {
        for point in [CommitPoint::Applied, CommitPoint::Done] {
            let rt = one_core_runtime();
            rt.block_on(async {
                let (store, coordinator) = setup(point).await;
                run_transfers(&coordinator, 0, 50).await;
                let total: i64 = store
                    .documents(&accounts())
                    .iter()
                    .map(|d| d.get_i64("balance").unwrap())
                    .sum();
                assert_eq!(total, crate::workload::START_BALANCE * POOL as i64);
                let records = store.documents(&Namespace::new(DB, "transactions"));
                assert_eq!(records.len(), 50);
                assert!(records.iter().all(|r| r.get_str("state") == Ok("done")));
            });
        }
    }

    #[test]
    fn crashed_transfers_are_recovered() {
        let rt = one_core_runtime();
        rt.block_on(async {
            let in_flight = leave_in_flight(20, None).await;
            recover_all(&in_flight).await;
            let records = in_flight
                .store
                .documents(&Namespace::new(DB, "transactions"));
            assert!(records.iter().all(|r| r.get_str("state") == Ok("done")));
        });
    }
}
