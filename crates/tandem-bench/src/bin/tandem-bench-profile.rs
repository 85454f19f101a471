//! `tandem-bench-profile [done|applied|native|recovery] [N] [PER_STORE]`: a small binary to profile.
//!
//! Runs N transfers on the embedded store on one core (a fresh store every
//! PER_STORE transfers, default: never) with the two-phase strategy returning
//! at `done` or `applied`, or with the native strategy; or recovers N
//! in-flight transfers; and prints the rate. Meant to run under `perf record` or
//! `valgrind --tool=callgrind`.

use std::time::Instant;

use tandem::{CommitPoint, Strategy};
use tandem_bench::embedded::{
    leave_in_flight, one_core_runtime, recover_all, run_transfers, setup_with,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or_else(|| "done".into());
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let per_store: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(n).max(1);
    let rt = one_core_runtime();
    if what == "recovery" {
        let in_flight = rt.block_on(leave_in_flight(n as usize, None));
        let took = rt.block_on(recover_all(&in_flight));
        println!(
            "recovered {n} in {took:?}: {:.0}/s",
            n as f64 / took.as_secs_f64()
        );
        return;
    }
    let point = if what == "applied" {
        CommitPoint::Applied
    } else {
        CommitPoint::Done
    };
    let strategy = if what == "native" {
        Strategy::Native
    } else {
        Strategy::TwoPhase
    };
    let t0 = Instant::now();
    let mut busy = std::time::Duration::ZERO;
    let mut done = 0;
    while done < n {
        let chunk = per_store.min(n - done);
        let (_store, coordinator) = rt.block_on(setup_with(point, strategy));
        busy += rt.block_on(run_transfers(&coordinator, done, chunk));
        done += chunk;
    }
    println!(
        "{what}: {n} transfers in {busy:?} ({:.0}/s; {:?} with set-up)",
        n as f64 / busy.as_secs_f64(),
        t0.elapsed()
    );
}
