//! Criterion micro benchmarks of tandem on the embedded store, on one core.
//!
//! * `embedded_transfer/done` and `/applied`: transfers per second (criterion
//!   reports elements/s) with `CommitPoint::Done` and `CommitPoint::Applied`;
//! * `recovery/10000_pending`: 10,000 transfers left in `pending` by crashed
//!   coordinators, recovered by one `RecoveryWorker::run_once` (batch 10,000);
//!   the reported throughput is transactions recovered per second.
//!
//! Run with `cargo bench -p tandem-bench --bench embedded`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use tandem::CommitPoint;
use tandem_bench::embedded::{
    leave_in_flight, one_core_runtime, recover_all, run_transfers, setup,
};

/// Transfers per fresh store: the store is rebuilt (untimed) after this many,
/// as garbage collection would keep its tombstones and records bounded.
const PER_STORE: u64 = 10_000;

fn transfers(c: &mut Criterion) {
    let mut group = c.benchmark_group("embedded_transfer");
    group.throughput(Throughput::Elements(1));
    for (name, point) in [
        ("done", CommitPoint::Done),
        ("applied", CommitPoint::Applied),
    ] {
        group.bench_function(name, |b| {
            let rt = one_core_runtime();
            let mut current = rt.block_on(setup(point));
            let mut used = 0_u64;
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    if used >= PER_STORE {
                        current = rt.block_on(setup(point));
                        used = 0;
                    }
                    let n = left.min(PER_STORE - used);
                    total += rt.block_on(run_transfers(&current.1, used, n));
                    used += n;
                    left -= n;
                }
                total
            });
        });
    }
    group.finish();
}

fn recovery(c: &mut Criterion) {
    // `cargo test --all-targets` runs each benchmark once, without `--bench`:
    // a small count keeps that quick in a debug build.
    let count: usize = if std::env::args().any(|a| a == "--bench") {
        10_000
    } else {
        100
    };
    let mut group = c.benchmark_group("recovery");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(count as u64));
    group.bench_function(format!("{count}_pending"), |b| {
        let rt = one_core_runtime();
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let in_flight = rt.block_on(leave_in_flight(count, None));
                total += rt.block_on(recover_all(&in_flight));
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, transfers, recovery);
criterion_main!(benches);
