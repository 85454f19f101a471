//! Benchmarks of tandem.
//!
//! * [`server`]: the same transfer (A → B, one unit) done five ways against one
//!   MongoDB-compatible server — the hand-written two-phase commit pattern,
//!   tandem's two-phase strategy (returning at `applied` or at `done`), tandem's
//!   native strategy, the Node library Fawn (driven through [`fawn`]), and a
//!   single-document update as the floor — interleaved in small batches.
//! * [`embedded`]: the same transfer on the embedded [`MemoryStore`](tandem::MemoryStore):
//!   transfers per second on one core, recovery throughput after a crash, and
//!   memory per in-flight transaction.
//! * [`proxy`]: a TCP proxy that delays every request, to run the server
//!   benchmark as if the server were one network round trip away.
//! * [`report`]: the Markdown report of a run, and its one-line summary.
//!
//! `bash scripts/bench.sh` runs it all; `cargo bench -p tandem-bench` runs the
//! criterion micro benchmarks of the embedded store.
#![warn(missing_docs)]

pub mod alloc;
pub mod cpu;
pub mod embedded;
pub mod fawn;
pub mod monitor;
pub mod proxy;
pub mod report;
pub mod server;
pub mod stats;
pub mod workload;
