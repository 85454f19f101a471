//! Memory per in-flight transaction on the embedded store.
//!
//! Leaves 10,000 transfers in `pending` (each coordinator crashes just before
//! the commit point) and prints the bytes the store grew by, per transaction,
//! as counted by a counting global allocator. Not a timing benchmark, so it
//! prints its one number instead of going through criterion.
//!
//! Run with `cargo bench -p tandem-bench --bench memory`.

use tandem_bench::alloc::CountingAlloc;
use tandem_bench::embedded::bytes_per_in_flight;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

const COUNT: usize = 10_000;

fn main() {
    // `cargo bench` passes `--bench` (and any filter); `cargo test --all-targets`
    // passes nothing, and then this only says what it would measure.
    if !std::env::args().any(|a| a == "--bench") {
        println!("memory/in_flight: measured by `cargo bench -p tandem-bench --bench memory`");
        return;
    }
    let bytes = bytes_per_in_flight(COUNT, || ALLOC.live_bytes());
    println!(
        "memory/in_flight: {COUNT} transactions in `pending`, {bytes:.0} bytes per transaction"
    );
}
