//! `tandem-bench-memory [COUNT]`: bytes the embedded store holds per in-flight transaction.
//!
//! Leaves COUNT (default 10,000) transfers in `pending` on a `MemoryStore` and
//! prints `bytes_per_in_flight=N`, measured by a counting global allocator,
//! then where the bytes go (`record_bson=`, `record_in_memory=`) and
//! `allocations_per_transfer=`. A binary of its own, so the other benchmarks
//! do not pay for the counting.

use tandem_bench::alloc::CountingAlloc;
use tandem_bench::embedded::memory_breakdown;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

fn main() {
    let count = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_usize);
    let m = memory_breakdown(count, || ALLOC.live_bytes(), || ALLOC.allocations());
    println!("in_flight={count}");
    println!("bytes_per_in_flight={:.0}", m.per_in_flight);
    println!("record_bson={:.0}", m.record_bson);
    println!("record_in_memory={:.0}", m.record_in_memory);
    println!("allocations_per_transfer={:.0}", m.allocations_per_transfer);
}
